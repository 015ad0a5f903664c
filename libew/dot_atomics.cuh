// The dot products the benchmark compares pyew.dot ("fast", dot.cuh) with, built into the
// benchmark library only (build/libew_bench.so). Both keep the fast method's per-thread float
// sums and add each thread's rounded sum with its own 16-bit atomic (float16/bfloat16):
//   half_atomic  a plain 16-bit atomicAdd straight into the result;
//   half2_pack   the FastAtomicAdd helper of fast_atomic.cuh (after PyTorch's fastAtomicAdd) into a
//                half accumulator at the start of the (4-byte aligned) scratch buffer, so every add
//                is a paired half2/bfloat162 atomic {partial, -0}; a one-thread kernel copies the
//                accumulator to the result.
// Their accuracy is that of adding thousands of rounded partial sums in half precision.
#pragma once
#include "dot.cuh"
#include "fast_atomic.cuh"

namespace ew {

template <int N, typename T>
__global__ void __launch_bounds__(kBlock)
dot_half_atomic_kernel(const T* __restrict__ a, const T* __restrict__ b, int64_t n, T* __restrict__ result) {
  bool any;
  const float s = thread_dot<N, T, float>(a, b, n, any);
  if (any) atomicAdd(result, convert<T>(s));
}

template <int N, typename T>
__global__ void __launch_bounds__(kBlock)
dot_half2_pack_kernel(const T* __restrict__ a, const T* __restrict__ b, int64_t n, T* __restrict__ acc) {
  bool any;
  const float s = thread_dot<N, T, float>(a, b, n, any);
  if (any) fast_atomic_add(acc, 0, 2, convert<T>(s));   // acc[0..1] is one aligned pair
}

enum class DotAtomic { kHalf, kHalf2Pack };

// result: one T. work: at least 8 bytes, 8-byte aligned (the half accumulator pair). What the
// atomics add into is zeroed here, on the stream.
template <DotAtomic M, typename T>
cudaError_t launch_dot_atomic(const Launch& l, void* result, void* work, const T* a, const T* b, int64_t n) {
  if (n < 0 || !aligned_to(work, 8)) return cudaErrorInvalidValue;
  constexpr bool plain = M == DotAtomic::kHalf;
  cudaError_t rc = cudaMemsetAsync(plain ? result : work, 0, plain ? sizeof(T) : 8, l.stream);
  if (rc == cudaSuccess)
    rc = dot_packs(l, a, b, n, [&](auto w, int grid) {
      if constexpr (plain)
        dot_half_atomic_kernel<w.value, T><<<grid, kBlock, 0, l.stream>>>(a, b, n, static_cast<T*>(result));
      else
        dot_half2_pack_kernel<w.value, T><<<grid, kBlock, 0, l.stream>>>(a, b, n, static_cast<T*>(work));
    });
  if (rc != cudaSuccess || plain) return rc;
  dot_finalize_kernel<<<1, 1, 0, l.stream>>>(static_cast<T*>(result), static_cast<const T*>(work));
  return cudaGetLastError();
}

}  // namespace ew
