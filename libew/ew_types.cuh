// Element types, conversions and packs shared by every libew kernel.
#pragma once
#include "ew_std.cuh"
#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>
#endif
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace ew {

// Conversions between storage and compute types. half/bfloat16 from double go directly, not
// through float, so f64 -> f16 is rounded once; bfloat16 from int32 and int64 likewise, as one
// above 2^24 rounded to float first would be rounded twice.
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
    else if constexpr (std::is_same_v<From, long long> || std::is_same_v<From, long>) return __ll2bfloat16_rn(v);
    else if constexpr (std::is_same_v<From, int>) return __int2bfloat16_rn(v);
    else if constexpr (std::is_same_v<From, unsigned long long> || std::is_same_v<From, unsigned long>)
      return __ull2bfloat16_rn(v);
    else if constexpr (std::is_same_v<From, unsigned>) return __uint2bfloat16_rn(v);
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
  constexpr size_t biggest = cmax(sizeof(Ts)...);
  return static_cast<int>(16 / biggest);
}

__host__ __device__ inline bool aligned_to(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

// ---- pack-width dispatch, shared by every kernel family ------------------------------------------
// A kernel is compiled for a few pack widths N (powers of two, N * sizeof(T) <= 16 bytes); at run
// time the entry point picks one from the pointers' addresses and calls the kernel's launcher for
// it. The launcher is a generic lambda taking std::integral_constant<int, N>, so N stays a
// compile-time constant inside it:
//
//   return with_widest_pack<max_pack<T>()>([&](auto w) { return launch_n<w.value>(...); }, y, x);
//
// Pointers may be null (an absent operand): null is aligned to everything.

template <int N>
using pack_c = std::integral_constant<int, N>;

// The widest N (a power of two, at most Max) for which every pointer p is aligned to
// N * sizeof(*p) bytes; 1 when some pointer is not even aligned to its own element size.
template <int Max, typename... T>
inline int widest_pack(const T*... p) {
  static_assert(Max >= 1 && (Max & (Max - 1)) == 0, "pack widths are powers of two");
  int n = Max;
  while (n > 1 && !(aligned_to(p, size_t(n) * sizeof(T)) && ...)) n /= 2;
  return n;
}

// Calls f(pack_c<N>{}) for the largest power of two N <= Max with N <= pack (pack >= 1); one
// instantiation of f per width, the widest first.
template <int Max, typename F>
inline decltype(auto) dispatch_pack(int pack, F&& f) {
  if constexpr (Max <= 1) {
    return f(pack_c<1>{});
  } else {
    if (pack >= Max) return f(pack_c<Max>{});
    return dispatch_pack<Max / 2>(pack, static_cast<F&&>(f));
  }
}

// The two together: f at the widest pack every pointer allows.
template <int Max, typename F, typename... T>
inline decltype(auto) with_widest_pack(F&& f, const T*... p) {
  return dispatch_pack<Max>(widest_pack<Max>(p...), static_cast<F&&>(f));
}

// Position of p inside its aligned N-element pack, in elements (p aligned to sizeof(T)).
template <int N, typename T>
inline int pack_offset(const T* p) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(p) / sizeof(T)) % N);
}

}  // namespace ew
