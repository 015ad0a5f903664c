// ReLU and Add-ReLU that also write a packed bitmask, and the backward that reads the mask instead
// of y, after the BN-ReLU bitmask kernel (fused batch-norm + ReLU forwards that keep a 1-bit-per-
// element ReLU mask for their backward): the backward then moves 1 bit per element instead of a
// whole element.
//
// Mask layout: bit i % 32 of uint32 word i / 32 is element i; bits past n in the last word are 0.
//
// The forward works in warp-sized chunks: each lane loads one pack of N elements, so a warp covers
// 32 * N elements = N mask words per trip. The warp-stride loop's condition depends only on the
// chunk index, so every lane takes every trip and the warp shuffles and ballots that build the mask
// words use the full mask: the range is in effect rounded up to whole chunks, lanes past n give 0
// bits. (A __ballot_sync(__activemask(), ...) inside a grid-stride loop over n, as in the
// original, builds wrong words when the loop leaves a warp partly active, and __activemask()
// guarantees nothing about convergence.)
#pragma once
#include "elementwise.cuh"

namespace ew {

constexpr unsigned kFullWarp = 0xffffffffu;

// relu of x (or of x + addend) in the compute type C. NaN is not > 0: its bit is 0 and y is NaN,
// as numpy's maximum gives; y is +0 for every other non-positive value.
template <typename T, typename C, bool kAdd>
struct ReluBit {
  __device__ __forceinline__ T operator()(T x, T a, bool& bit) const {
    C s = convert<C>(x);
    if constexpr (kAdd) s = s + convert<C>(a);
    bit = s > C(0);
    return (bit || s != s) ? convert<T>(s) : convert<T>(C(0));
  }
};

template <int N, typename T, typename C, bool kAdd>
__global__ void __launch_bounds__(kBlock)
relu_mask_kernel(int64_t n, T* __restrict__ y, uint32_t* __restrict__ mask, const T* __restrict__ x,
                 const T* __restrict__ addend, int sx, int sa) {
  static_assert(32 % N == 0, "a lane's bits must lie inside one mask word");
  constexpr int kChunk = 32 * N;
  const ReluBit<T, C, kAdd> f;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (kBlock / 32);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t words = (n + 31) / 32;
  const int64_t n_packs = n / N;
  for (int64_t c = (int64_t(blockIdx.x) * kBlock + threadIdx.x) / 32; c < chunks; c += warps) {
    const int64_t first = c * kChunk + int64_t(lane) * N;   // this lane's N elements
    uint32_t bits = 0;                                       // bit j: element first + j
    if ((c + 1) * kChunk <= n) {
      // a whole chunk: one vector load per input (straddling packs of a misaligned input through
      // warp shuffles, see load_raw; the branch is uniform over the warp), one vector store
      const int64_t k = first / N, zero = 0;
      const RawWords<1> rx = load_raw<N, 1, 0, true>(x, sx, k, zero, n_packs, lane);
      RawWords<1> ra = rx;
      if constexpr (kAdd) ra = load_raw<N, 1, 0, true>(addend, sa, k, zero, n_packs, lane);
      const Pack<T, N> xv = shift_raw<N, 1, true, T>(rx, sx, k, zero, n_packs, lane).p[0];
      Pack<T, N> av = xv;
      if constexpr (kAdd) av = shift_raw<N, 1, true, T>(ra, sa, k, zero, n_packs, lane).p[0];
      Pack<T, N> yv;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        bool b;
        yv.v[j] = f(xv.v[j], av.v[j], b);
        bits |= uint32_t(b) << j;
      }
      store_pack<T, N>(y, first / N, yv);
    } else {
      // the last chunk, cut by n: element by element, nothing at or past n is read or written
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const int64_t i = first + j;
        if (i < n) {
          bool b;
          y[i] = f(x[i], kAdd ? addend[i] : x[i], b);
          bits |= uint32_t(b) << j;
        }
      }
    }
    // Word k of this chunk covers its elements 32k .. 32k+31: the N bits of each of lanes
    // G k .. G k + G - 1 (G = 32 / N), side by side.
    constexpr int G = 32 / N;
    if constexpr (N >= 4) {
      // log2(G) shift-and-or steps down the warp gather a word into lane G k; lanes 0, G, 2G, ...
      // store the N words side by side (a coalesced store)
      uint32_t word = bits;
#pragma unroll
      for (int d = 1; d < G; d *= 2) word |= __shfl_down_sync(kFullWarp, word, d) << (d * N);
      const int64_t w = c * N + lane / G;
      if (lane % G == 0 && w < words) mask[w] = word;
    } else {
      // narrow packs (a misaligned y): one shuffle and one ballot per word are fewer steps. Lane
      // l votes the bit of element 32k + l, which lane (32k + l) / N holds as bit (32k + l) % N.
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int e = 32 * k + lane;
        const uint32_t held = __shfl_sync(kFullWarp, bits, e / N);
        const uint32_t word = __ballot_sync(kFullWarp, (held >> (e % N)) & 1u);
        const int64_t w = c * N + k;
        if (lane == k && w < words) mask[w] = word;
      }
    }
  }
}

template <int N, typename T, typename C, bool kAdd>
cudaError_t launch_relu_mask_n(const Launch& l, int64_t n, T* y, uint32_t* mask, const T* x, const T* a,
                               int sx = 0, int sa = 0) {
  const int64_t chunks = (n + 32 * N - 1) / (32 * N);
  const int grid = grid_size(chunks * 32, 1, l);   // one lane per pack
  relu_mask_kernel<N, T, C, kAdd><<<grid, kBlock, 0, l.stream>>>(n, y, mask, x, a, sx, sa);
  return cudaGetLastError();
}

// Entry for generated code: 16-byte packs whenever y is aligned for them, whatever the inputs'
// offsets (a misaligned x or addend is read as aligned words shifted into place); when y itself is
// misaligned, the widest pack that y, x and addend all allow.
template <typename T, typename C>
cudaError_t launch_relu_mask(const Launch& l, int64_t n, T* y, uint32_t* mask, const T* x, const T* addend) {
  if (n < 0 || !aligned_to(mask, sizeof(uint32_t))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  constexpr int N = max_pack<T>();
  if (aligned_to(y, N * sizeof(T)) && aligned_to(x, sizeof(T)) && aligned_to(addend, sizeof(T))) {
    if (addend != nullptr)
      return launch_relu_mask_n<N, T, C, true>(l, n, y, mask, x, addend, pack_offset<N>(x), pack_offset<N>(addend));
    return launch_relu_mask_n<N, T, C, false>(l, n, y, mask, x, x, pack_offset<N>(x), pack_offset<N>(x));
  }
  return with_widest_pack<max_pack<T>()>([&](auto w) {
    if (addend != nullptr) return launch_relu_mask_n<w.value, T, C, true>(l, n, y, mask, x, addend);
    return launch_relu_mask_n<w.value, T, C, false>(l, n, y, mask, x, x);
  }, y, x, addend);
}

// ---- backward: dx = bit ? dy : +0 ----------------------------------------------------------------
// A select, not dy * bit: where the bit is 0, dx is +0 even when dy is NaN or inf.

template <int N, typename T>
__global__ void __launch_bounds__(kBlock)
mask_backward_kernel(int64_t n, T* __restrict__ dx, const T* __restrict__ dy, const uint32_t* __restrict__ mask,
                     int sdy) {
  static_assert(32 % N == 0, "a pack must lie inside one mask word");
  const T zero = convert<T>(0.0f);
  const int64_t n_packs = n / N;
  const int64_t stride = int64_t(gridDim.x) * kBlock;
  const int64_t first = int64_t(blockIdx.x) * kBlock + threadIdx.x;
  for (int64_t p = first; p < n_packs; p += stride) {
    const Pack<T, N> g = load_shifted<N, 0, false>(dy, sdy, p, n_packs, 0);   // dy may straddle
    const int64_t e = p * N;                          // a multiple of N, so one word holds the pack
    const uint32_t bits = __ldg(mask + e / 32) >> (e % 32);
    Pack<T, N> o;
#pragma unroll
    for (int j = 0; j < N; ++j) o.v[j] = ((bits >> j) & 1u) ? g.v[j] : zero;
    store_pack<T, N>(dx, p, o);
  }
  // tail: fewer than N elements after the last whole pack, one per thread of the first block
  const int64_t tail = n - n_packs * N;
  if (first < tail) {
    const int64_t i = n_packs * N + first;
    dx[i] = ((__ldg(mask + i / 32) >> (i % 32)) & 1u) ? dy[i] : zero;
  }
}

template <int N, typename T>
cudaError_t launch_mask_backward_n(const Launch& l, int64_t n, T* dx, const T* dy, const uint32_t* mask,
                                   int sdy = 0) {
  // No grid cap: one pack per thread, as MemoryBoundTuning (a select is copy-like work).
  const int grid = grid_size(n / N + 1, 1, l, kBlock, 0);
  mask_backward_kernel<N, T><<<grid, kBlock, 0, l.stream>>>(n, dx, dy, mask, sdy);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_mask_backward(const Launch& l, int64_t n, T* dx, const T* dy, const uint32_t* mask) {
  if (n < 0 || !aligned_to(mask, sizeof(uint32_t))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  constexpr int N = max_pack<T>();
  // 16-byte packs whenever dx is aligned for them (a misaligned dy is read as shifted words)
  if (aligned_to(dx, N * sizeof(T)) && aligned_to(dy, sizeof(T)))
    return launch_mask_backward_n<N>(l, n, dx, dy, mask, pack_offset<N>(dy));
  return with_widest_pack<N>(
      [&](auto w) { return launch_mask_backward_n<w.value>(l, n, dx, dy, mask); }, dx, dy);
}

}  // namespace ew
