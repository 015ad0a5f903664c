// The vectorised grid-stride elementwise template (after OneFlow's elementwise.cuh), with its
// limits fixed:
//  * pack width is chosen at run time from the alignment of every pointer (a misaligned view such
//    as x[1:] gets the widest width all pointers allow, not a silent fallback to scalar);
//  * the tail past the last whole pack is handled by the first threads, never read past the end;
//  * 64-bit indices whenever n could overflow 32 bits, a 32-bit fast path otherwise;
//  * each thread keeps two packs in flight per loop trip to hide memory latency;
//  * n = 0 launches nothing; every entry point returns the launch's cudaError_t.
#pragma once
#include <algorithm>
#include "ew_types.cuh"

namespace ew {

constexpr int kBlock = 256;
#ifndef EW_WAVES
#define EW_WAVES 32
#endif
#ifndef EW_UNROLL
#define EW_UNROLL 2
#endif
constexpr int kWaves = EW_WAVES;    // resident blocks per SM x waves caps the grid
constexpr int kUnroll = EW_UNROLL;  // packs in flight per thread per loop trip

struct Launch {
  cudaStream_t stream;
  int sms;             // multiprocessor count, queried once per device by the caller
  int threads_per_sm;  // max resident threads per multiprocessor, likewise
};

// Blocks for `work` units (packs) of which each thread takes `per_thread` per trip.
inline int grid_size(int64_t work, int per_thread, const Launch& l) {
  const int64_t per_block = int64_t(kBlock) * per_thread;
  const int64_t wanted = std::max<int64_t>(1, (work + per_block - 1) / per_block);
  const int64_t cap = std::max<int64_t>(1, int64_t(l.sms) * (l.threads_per_sm / kBlock) * kWaves);
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

#ifndef EW_STREAMING
#define EW_STREAMING 0
#endif

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* base, int64_t pack_index) {
  using V = typename VecOf<sizeof(Pack<T, N>)>::type;
  union { V v; Pack<T, N> p; } u;
  const V* src = reinterpret_cast<const V*>(base) + pack_index;
#if EW_STREAMING
  u.v = __ldcs(src);   // evict-first: streamed data will not be read again
#else
  u.v = __ldg(src);    // read-only path
#endif
  return u.p;
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T* base, int64_t pack_index, const Pack<T, N>& p) {
  using V = typename VecOf<sizeof(Pack<T, N>)>::type;
  union { V v; Pack<T, N> p; } u;
  u.p = p;
#if EW_STREAMING
  __stcs(reinterpret_cast<V*>(base) + pack_index, u.v);
#else
  reinterpret_cast<V*>(base)[pack_index] = u.v;
#endif
}

template <typename T, int N, int U>
struct Packs { Pack<T, N> p[U]; };

template <int N, int U, typename T, typename Index>
__device__ __forceinline__ Packs<T, N, U> load_packs(const T* base, Index i, Index stride) {
  Packs<T, N, U> r;
#pragma unroll
  for (int u = 0; u < U; ++u) r.p[u] = load_pack<T, N>(base, i + u * stride);
  return r;
}

// One loop trip: the packs of every input were loaded (as this function's arguments) before any
// is used.
template <int N, int U, typename F, typename Out, typename Index, typename... In>
__device__ __forceinline__ void compute_store(const F& f, Out* out, Index i, Index stride,
                                              const Packs<In, N, U>&... loaded) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    Pack<Out, N> o;
    apply_pack<N>(f, o, loaded.p[u]...);
    store_pack<Out, N>(out, i + u * stride, o);
  }
}

template <int N, typename Index, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kBlock)
map_kernel(F f, Index n, Out* __restrict__ out, const In* __restrict__... in) {
  const Index n_packs = n / N;
  const Index stride = Index(gridDim.x) * kBlock;
  const Index first = Index(blockIdx.x) * kBlock + threadIdx.x;
  Index i = first;
  for (; i + (kUnroll - 1) * stride < n_packs; i += kUnroll * stride) {
    compute_store<N, kUnroll>(f, out, i, stride, load_packs<N, kUnroll>(in, i, stride)...);
  }
  for (; i < n_packs; i += stride) {
    compute_store<N, 1>(f, out, i, stride, load_packs<N, 1>(in, i, stride)...);
  }
  // Tail: fewer than N elements after the last whole pack, one per thread of the first block.
  const Index tail = n - n_packs * N;
  if (first < tail) {
    const Index k = n_packs * N + first;
    out[k] = f(in[k]...);
  }
}

template <int N, typename F, typename Out, typename... In>
cudaError_t launch_pack(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  const int64_t n_packs = n / N;
  const int grid = grid_size(n_packs, kUnroll, l);
  // 32-bit indices when no index the loop forms (up to n_packs + kUnroll * stride) can overflow.
  const int64_t reach = n_packs + int64_t(kUnroll + 1) * grid * kBlock + N;
  if (n <= INT32_MAX && reach <= INT32_MAX) {
    map_kernel<N, int32_t><<<grid, kBlock, 0, l.stream>>>(f, static_cast<int32_t>(n), out, in...);
  } else {
    map_kernel<N, int64_t><<<grid, kBlock, 0, l.stream>>>(f, n, out, in...);
  }
  return cudaGetLastError();
}

// Entry for generated code: picks the widest pack every pointer's alignment allows.
template <typename F, typename Out, typename... In>
cudaError_t launch_map(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  constexpr int kMax = max_pack<Out, In...>();
  int pack = kMax;
  while (pack > 1 && !(aligned_to(out, pack * sizeof(Out)) && (aligned_to(in, pack * sizeof(In)) && ...)))
    pack /= 2;
  if constexpr (kMax >= 16) { if (pack == 16) return launch_pack<16>(l, f, n, out, in...); }
  if constexpr (kMax >= 8) { if (pack == 8) return launch_pack<8>(l, f, n, out, in...); }
  if constexpr (kMax >= 4) { if (pack == 4) return launch_pack<4>(l, f, n, out, in...); }
  if constexpr (kMax >= 2) { if (pack == 2) return launch_pack<2>(l, f, n, out, in...); }
  return launch_pack<1>(l, f, n, out, in...);
}

}  // namespace ew
