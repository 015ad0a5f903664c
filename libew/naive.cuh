// The naive elementwise kernel: one element per thread, grid = ceil(n / 256), plain scalar
// loads and stores, no grid-stride loop, no vector packs, no cache hints. It exists only as the
// benchmark's baseline (ew_naive_<op>_<dtype>, in the benchmark library libew_bench.so), generated
// from the same spec expression as the tuned template of elementwise.cuh, so the two differ only
// in how they move memory.
#pragma once
#include "ew_types.cuh"

namespace ew {

constexpr int kNaiveBlock = 256;

template <typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kNaiveBlock)
naive_kernel(F f, int64_t n, Out* out, const In*... in) {
  // 64-bit index: blockIdx.x * 256 overflows 32 bits from n = 2^31 on.
  const int64_t i = int64_t(blockIdx.x) * kNaiveBlock + threadIdx.x;
  if (i < n) out[i] = f(in[i]...);
}

template <typename F, typename Out, typename... In>
cudaError_t launch_naive(cudaStream_t stream, const F& f, int64_t n, Out* out, const In*... in) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const int64_t blocks = (n + kNaiveBlock - 1) / kNaiveBlock;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;   // past gridDim.x's limit (n > 2^39)
  naive_kernel<<<static_cast<unsigned>(blocks), kNaiveBlock, 0, stream>>>(f, n, out, in...);
  return cudaGetLastError();
}

}  // namespace ew
