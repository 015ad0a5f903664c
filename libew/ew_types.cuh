// Element types, conversions and packs shared by every libew kernel.
#pragma once
#include <cstdint>
#include <algorithm>
#include <type_traits>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace ew {

// Conversions between storage and compute types. half/bfloat16 from double go directly, not
// through float, so f64 -> f16 is rounded once.
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __half>) {
    return static_cast<To>(__half2float(v));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return static_cast<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    if constexpr (std::is_same_v<From, double>) return __double2half(v);
    else return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    if constexpr (std::is_same_v<From, double>) return __double2bfloat16(v);
    else return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// A run of N elements moved as one aligned access (16 bytes at most).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T> struct PairOf { using type = void; };
template <> struct PairOf<float> { using type = float2; };
template <> struct PairOf<double> { using type = double2; };
template <> struct PairOf<__half> { using type = __half2; };
template <> struct PairOf<__nv_bfloat16> { using type = __nv_bfloat162; };
template <typename T> using pair_t = typename PairOf<T>::type;

// Non-deduced parameter type: op functions take params as C without fixing C from them.
template <typename T> struct identity { using type = T; };
template <typename T>
using id_t = typename identity<T>::type;

// Largest elements-per-pack such that every type's pack stays within 16 bytes.
template <typename... Ts>
constexpr int max_pack() {
  constexpr size_t biggest = std::max({sizeof(Ts)...});
  return static_cast<int>(16 / biggest);
}

__host__ __device__ inline bool aligned_to(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

}  // namespace ew
