// Dot product of two vectors ("fast", pyew.dot): each thread accumulates its elements in Acc
// (float; double for float64), the block sums its threads with warp shuffles, and one thread per
// block does ONE atomicAdd into an Acc scratch word; a one-thread kernel then rounds it to the
// result dtype. (dot_atomics.cuh holds the per-thread-atomic variants the benchmark compares it
// with; they are built into the benchmark library only.)
//
// Loads are packs of up to 16 bytes, as wide as both inputs' addresses allow; the tail past the
// last whole pack goes one element per thread to the first threads. The grid is one wave of
// resident blocks; each thread loops over the vectors.
#pragma once
#include "elementwise.cuh"

namespace ew {

template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block; the result is valid in thread 0. Every thread of the block must call it.
template <typename Acc>
__device__ __forceinline__ Acc block_sum(Acc v) {
  __shared__ Acc partial[kBlock / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < kBlock / 32 ? partial[lane] : Acc(0));
  return v;
}

// This thread's share of sum(a[i] * b[i]) in Acc; `any` says whether it had any element.
template <int N, typename T, typename Acc>
__device__ __forceinline__ Acc thread_dot(const T* __restrict__ a, const T* __restrict__ b, int64_t n, bool& any) {
  const int64_t n_packs = n / N;
  const int64_t stride = int64_t(gridDim.x) * kBlock;
  const int64_t first = int64_t(blockIdx.x) * kBlock + threadIdx.x;
  Acc acc = Acc(0);
  for (int64_t p = first; p < n_packs; p += stride) {
    const Pack<T, N> pa = load_pack<T, N>(a, p);
    const Pack<T, N> pb = load_pack<T, N>(b, p);
#pragma unroll
    for (int j = 0; j < N; ++j) acc += convert<Acc>(pa.v[j]) * convert<Acc>(pb.v[j]);
  }
  const int64_t tail = n - n_packs * N;
  if (first < tail) {
    const int64_t i = n_packs * N + first;
    acc += convert<Acc>(a[i]) * convert<Acc>(b[i]);
  }
  any = first < n_packs || first < tail;
  return acc;
}

template <int N, typename T, typename Acc>
__global__ void __launch_bounds__(kBlock)
dot_fast_kernel(const T* __restrict__ a, const T* __restrict__ b, int64_t n, Acc* __restrict__ sum) {
  bool any;
  const Acc s = block_sum(thread_dot<N, T, Acc>(a, b, n, any));
  if (threadIdx.x == 0) atomicAdd(sum, s);
}

template <typename T, typename S>
__global__ void dot_finalize_kernel(T* result, const S* sum) {
  *result = convert<T>(*sum);
}

inline int dot_grid(int64_t packs, const Launch& l) {
  const int64_t wave = max_of<int64_t>(1, int64_t(l.sms) * max_of(1, l.threads_per_sm / kBlock));
  return static_cast<int>(max_of<int64_t>(1, min_of((packs + kBlock - 1) / kBlock, wave)));
}

// launch(w, grid) for the widest pack width w both inputs allow (nothing for n = 0).
template <typename T, typename F>
cudaError_t dot_packs(const Launch& l, const T* a, const T* b, int64_t n, F&& launch) {
  if (n > 0) with_widest_pack<max_pack<T>()>([&](auto w) { launch(w, dot_grid(n / w.value + 1, l)); }, a, b);
  return cudaGetLastError();
}

// result: one T. work: at least 8 bytes, 8-byte aligned (the Acc sum); zeroed here, on the
// stream, so the entry point is self-contained.
template <typename T, typename Acc>
cudaError_t launch_dot(const Launch& l, void* result, void* work, const T* a, const T* b, int64_t n) {
  if (n < 0 || !aligned_to(work, 8)) return cudaErrorInvalidValue;
  static_assert(sizeof(Acc) <= 8, "the scratch holds one Acc");
  cudaError_t rc = cudaMemsetAsync(work, 0, 8, l.stream);
  if (rc == cudaSuccess)
    rc = dot_packs(l, a, b, n, [&](auto w, int grid) {
      dot_fast_kernel<w.value, T, Acc><<<grid, kBlock, 0, l.stream>>>(a, b, n, static_cast<Acc*>(work));
    });
  if (rc != cudaSuccess) return rc;
  dot_finalize_kernel<<<1, 1, 0, l.stream>>>(static_cast<T*>(result), static_cast<const Acc*>(work));
  return cudaGetLastError();
}

}  // namespace ew
