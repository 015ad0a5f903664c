// The vectorised elementwise template, after OneFlow's elementwise.cuh
// (oneflow/core/cuda/elementwise.cuh: 16-byte packs, an optional paired Apply2, a grid-stride
// loop), with its limits fixed:
//  * pack width is chosen at run time from the alignment of every pointer (a misaligned view such
//    as x[1:] gets the widest width all pointers allow, not a silent fallback to scalar);
//  * the tail past the last whole pack is handled by the first threads, never read past the end;
//  * 64-bit indices whenever n could overflow 32 bits, a 32-bit fast path otherwise;
//  * the launch shape is a Tuning (block, packs per trip, grid cap, layout, cache hint), measured
//    on the GPU by benchmarks/template_sweep.cu; the loop covers any grid, capped or not;
//  * n = 0 launches nothing; every entry point returns the launch's cudaError_t.
#pragma once
#include <algorithm>
#include "ew_types.cuh"

namespace ew {

// How the map kernel covers the array. Generated kernels use MemoryBoundTuning or
// ComputeBoundTuning (below); benchmarks/template_sweep.cu instantiates others on the GPU to
// measure them (the choice and its figures are in benchmarks/RESULTS.md).
//   Block   threads per block
//   Unroll  packs per thread per trip, all loaded before any is used
//   Waves   grid cap, in waves of resident blocks per SM; 0 = no cap (one trip per thread)
//   Tile    a trip's packs are Block apart inside the block's tile (true, PyTorch's layout), or
//           one grid-stride apart (false, OneFlow's)
//   Hint    0: read-only loads (ld.global.nc), plain stores; 1: streaming (evict-first) stores;
//           2: streaming loads and stores
template <int Block, int Unroll, int Waves, bool Tile, int Hint>
struct Tuning {
  static constexpr int kBlock = Block;
  static constexpr int kUnroll = Unroll;
  static constexpr int kWaves = Waves;
  static constexpr bool kTile = Tile;
  static constexpr int kHint = Hint;
};
// The two shapes the generator picks from, per op (the spec's `tuning`, or generator/spec.py's
// op_tuning: "compute" when the expression calls a function), chosen from the launch-shape sweep
// (figures in benchmarks/RESULTS.md):
//  * MemoryBoundTuning, PyTorch's shape: one pack per thread, a block per 256 packs, no grid cap.
//    Copy-like ops run at the copy ceiling with it, above OneFlow's capped grid-stride shape; a
//    heavy op runs well below it: each thread's only load has nothing to overlap with.
//  * ComputeBoundTuning: two packs per thread per trip from a 2 x 128-pack tile, grid capped at 32
//    waves: the best worst case of the sweep's heavy ops, with copy-like ops close to the other
//    shape.
using MemoryBoundTuning = Tuning<256, 1, 0, true, 0>;
using ComputeBoundTuning = Tuning<128, 2, 32, true, 0>;
using DefaultTuning = MemoryBoundTuning;

// Block size and grid cap of the special kernels (relu_mask, upsample, scatter, dot).
constexpr int kBlock = 256;
constexpr int kWaves = 32;

struct Launch {
  cudaStream_t stream;
  int sms;             // multiprocessor count, queried once per device by the caller
  int threads_per_sm;  // max resident threads per multiprocessor, likewise
};

// Blocks of `block` threads for `work` units of which each thread takes `per_thread` per trip,
// capped at `waves` waves of resident blocks (0: no cap).
inline int grid_size(int64_t work, int per_thread, const Launch& l, int block = kBlock,
                     int waves = kWaves) {
  const int64_t per_block = int64_t(block) * per_thread;
  const int64_t wanted = std::max<int64_t>(1, (work + per_block - 1) / per_block);
  const int64_t cap = waves == 0 ? int64_t(INT32_MAX)
                                 : std::max<int64_t>(1, int64_t(l.sms) * (l.threads_per_sm / block) * waves);
  return static_cast<int>(std::min(wanted, cap));
}

template <typename F, typename = void> struct has_apply2 : std::false_type {};
template <typename F>
struct has_apply2<F, std::void_t<decltype(&F::apply2)>> : std::true_type {};

// One pack through the functor; when the functor has a paired form (half2, bfloat162, ...), it
// takes two elements at a time.
template <int N, typename F, typename Out, typename... In>
__device__ __forceinline__ void apply_pack(const F& f, Pack<Out, N>& out, const Pack<In, N>&... in) {
  if constexpr (N % 2 == 0 && has_apply2<F>::value) {
#pragma unroll
    for (int j = 0; j < N; j += 2) {
      reinterpret_cast<pair_t<Out>*>(out.v)[j / 2] =
          f.apply2(reinterpret_cast<const pair_t<In>*>(in.v)[j / 2]...);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out.v[j] = f(in.v[j]...);
  }
}

// Same-size unsigned type for a pack, so loads and stores are single vector instructions and can
// carry cache hints.
template <int Bytes> struct VecOf;
template <> struct VecOf<16> { using type = uint4; };
template <> struct VecOf<8> { using type = uint2; };
template <> struct VecOf<4> { using type = unsigned int; };
template <> struct VecOf<2> { using type = unsigned short; };
template <> struct VecOf<1> { using type = unsigned char; };

template <typename T, int N, int Hint = 0>
__device__ __forceinline__ Pack<T, N> load_pack(const T* base, int64_t pack_index) {
  using V = typename VecOf<sizeof(Pack<T, N>)>::type;
  union { V v; Pack<T, N> p; } u;
  const V* src = reinterpret_cast<const V*>(base) + pack_index;
  if constexpr (Hint >= 2) u.v = __ldcs(src);   // evict-first: streamed data is not read again
  else u.v = __ldg(src);                        // read-only path
  return u.p;
}

template <typename T, int N, int Hint = 0>
__device__ __forceinline__ void store_pack(T* base, int64_t pack_index, const Pack<T, N>& p) {
  using V = typename VecOf<sizeof(Pack<T, N>)>::type;
  union { V v; Pack<T, N> p; } u;
  u.p = p;
  V* dst = reinterpret_cast<V*>(base) + pack_index;
  if constexpr (Hint >= 1) __stcs(dst, u.v);
  else *dst = u.v;
}

template <typename T, int N, int U>
struct Packs { Pack<T, N> p[U]; };

template <int N, int U, int Hint, typename T, typename Index>
__device__ __forceinline__ Packs<T, N, U> load_packs(const T* base, Index i, Index step) {
  Packs<T, N, U> r;
#pragma unroll
  for (int u = 0; u < U; ++u) r.p[u] = load_pack<T, N, Hint>(base, i + u * step);
  return r;
}

// One trip: the packs of every input were loaded (as this function's arguments) before any is
// used.
template <int N, int U, int Hint, typename F, typename Out, typename Index, typename... In>
__device__ __forceinline__ void compute_store(const F& f, Out* out, Index i, Index step,
                                              const Packs<In, N, U>&... loaded) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    Pack<Out, N> o;
    apply_pack<N>(f, o, loaded.p[u]...);
    store_pack<Out, N, Hint>(out, i + u * step, o);
  }
}

template <class Tn, int N, typename Index, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(Tn::kBlock)
map_kernel(F f, Index n, Out* __restrict__ out, const In* __restrict__... in) {
  constexpr int B = Tn::kBlock, U = Tn::kUnroll, H = Tn::kHint;
  const Index n_packs = n / N;
  const Index threads = Index(gridDim.x) * B;
  // A trip covers U * threads consecutive packs; this thread's U packs are i + u * step.
  const Index step = Tn::kTile ? Index(B) : threads;
  Index i = Index(blockIdx.x) * (Tn::kTile ? B * U : B) + threadIdx.x;
  for (; i + (U - 1) * step < n_packs; i += U * threads) {
    compute_store<N, U, H>(f, out, i, step, load_packs<N, U, H>(in, i, step)...);
  }
  // The last, partial trip: those of this thread's packs that exist.
#pragma unroll
  for (int u = 0; u + 1 < U; ++u) {
    const Index k = i + u * step;
    if (k < n_packs) compute_store<N, 1, H>(f, out, k, step, load_packs<N, 1, H>(in, k, step)...);
  }
  // Tail: fewer than N elements after the last whole pack, one per thread of block 0.
  const Index tail = n - n_packs * N;
  if (blockIdx.x == 0 && Index(threadIdx.x) < tail) {
    const Index k = n_packs * N + threadIdx.x;
    out[k] = f(in[k]...);
  }
}

template <class Tn, int N, typename F, typename Out, typename... In>
cudaError_t launch_pack(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  const int64_t n_packs = n / N;
  const int grid = grid_size(n_packs, Tn::kUnroll, l, Tn::kBlock, Tn::kWaves);
  // 32-bit indices when no index the kernel forms (up to n_packs + U * threads) can overflow.
  const int64_t reach = n_packs + int64_t(Tn::kUnroll + 1) * grid * Tn::kBlock + N;
  if (n <= INT32_MAX && reach <= INT32_MAX) {
    map_kernel<Tn, N, int32_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, static_cast<int32_t>(n), out, in...);
  } else {
    map_kernel<Tn, N, int64_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, n, out, in...);
  }
  return cudaGetLastError();
}

// Entry for generated code: picks the widest pack every pointer's alignment allows.
template <class Tn = DefaultTuning, typename F, typename Out, typename... In>
cudaError_t launch_map(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return with_widest_pack<max_pack<Out, In...>()>(
      [&](auto w) { return launch_pack<Tn, w.value>(l, f, n, out, in...); }, out, in...);
}

}  // namespace ew
