// scatter_add: dst[index[k]] += src[k] for every k, duplicates allowed (they accumulate through
// atomics, in no fixed order). float16/bfloat16 go through the FastAtomicAdd helper; float and
// double through the hardware atomic. Negative indices count from the end, as in numpy.
//
// The bounds check is a separate kernel, run (and read back by the caller) before the scatter, so
// an out-of-range index raises with dst untouched: it records the smallest position k whose index
// is outside [-dst_len, dst_len) with an atomicMin into a 64-bit word that starts at all ones.
// The scatter itself skips such indices too, so calling it unchecked cannot write out of bounds.
#pragma once
#include "elementwise.cuh"
#include "fast_atomic.cuh"

namespace ew {

template <typename I>
__global__ void __launch_bounds__(kBlock)
scatter_check_kernel(unsigned long long* __restrict__ bad, const I* __restrict__ index, int64_t n, int64_t dst_len) {
  const int64_t stride = int64_t(gridDim.x) * kBlock;
  for (int64_t k = int64_t(blockIdx.x) * kBlock + threadIdx.x; k < n; k += stride) {
    const int64_t i = index[k];
    if (i < -dst_len || i >= dst_len) atomicMin(bad, static_cast<unsigned long long>(k));
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(kBlock)
scatter_add_kernel(T* __restrict__ dst, int64_t dst_len, const I* __restrict__ index, const T* __restrict__ src,
                   int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * kBlock;
  for (int64_t k = int64_t(blockIdx.x) * kBlock + threadIdx.x; k < n; k += stride) {
    int64_t i = index[k];
    if (i < 0) i += dst_len;
    if (i >= 0 && i < dst_len) fast_atomic_add(dst, i, dst_len, src[k]);
  }
}

// bad: one 8-byte word; set to all ones here, then lowered to the first bad position if any.
template <typename I>
cudaError_t launch_scatter_check(const Launch& l, void* bad, const I* index, int64_t n, int64_t dst_len) {
  if (n < 0 || dst_len < 0 || !aligned_to(bad, 8)) return cudaErrorInvalidValue;
  cudaError_t rc = cudaMemsetAsync(bad, 0xff, 8, l.stream);
  if (rc != cudaSuccess || n == 0) return rc;
  scatter_check_kernel<I><<<grid_size(n, 1, l), kBlock, 0, l.stream>>>(
      static_cast<unsigned long long*>(bad), index, n, dst_len);
  return cudaGetLastError();
}

template <typename T, typename I>
cudaError_t launch_scatter_add(const Launch& l, T* dst, int64_t dst_len, const I* index, const T* src, int64_t n) {
  if (n < 0 || dst_len < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  scatter_add_kernel<T, I><<<grid_size(n, 1, l), kBlock, 0, l.stream>>>(dst, dst_len, index, src, n);
  return cudaGetLastError();
}

}  // namespace ew
