// The strided/broadcast form of the map kernel: numpy broadcasting without materialising any
// operand. The output is C-contiguous; each input is read through its own strides, in elements,
// over the output's shape (0 on a broadcast dimension, negative for a reversed view).
//
//   template <class Tn, typename F, typename Out, typename... In>
//   cudaError_t launch_map_strided(const Launch& l, const F& f, int64_t n, const int64_t* layout,
//                                  Out* out, const In*... in);
//
// `layout` is a host pointer to int64 values: ndim, shape[0..ndim), then for each input in order
// its strides[0..ndim) in elements (each input pointer points at the element of coordinates
// (0, ..., 0), as numpy's data pointer does). 1 <= ndim <= 8, n = the product of the shape; n = 0
// launches nothing; a bad layout (ndim out of range, a negative extent, n not the product) returns
// cudaErrorInvalidValue, a pointer not aligned to its element type cudaErrorMisalignedAddress. The
// caller collapses dimensions first (drops size-1 dimensions, merges dimensions contiguous for
// every operand), so typical layouts are short: a row bias (M, N) with strides x (N, 1),
// b (0, 1); a channel bias (A, C, HW) with x (C*HW, HW, 1), b (0, 1, 0); a scalar (n,) with
// stride 0; an outer product (M, N) with a (1, 0), b (0, 1). The layout is copied into a by-value
// kernel parameter.
//
// Two kernels, each with the Tuning of the map kernel (block, packs per trip, grid cap, layout,
// cache hint) and 32-bit index math whenever n and every offset fit, 64-bit otherwise:
//  * packs (the common broadcasts): every input's innermost stride is 0 or 1, the innermost extent
//    is a multiple of the pack N (16 bytes of the widest operand), and the output and the stride-1
//    inputs are aligned for the pack at every row start (base aligned, outer strides multiples of
//    N). Each thread takes whole 16-byte output packs: stride-1 inputs load packs, stride-0 inputs
//    load one element and splat it. The pack index is decomposed once per pack, by precomputed
//    fast divisors (one multiply-high and a shift per dimension).
//  * elements (anything else): one output element at a time, coalesced over the output, with the
//    full decomposition of its index into each input's offset.
#pragma once
#include "elementwise.cuh"

namespace ew {

constexpr int kMaxDims = 8;

// Division by a run-time constant d (1 <= d <= 2^31) of numerators n < 2^31 (Granlund and
// Montgomery's round-up method, as in PyTorch's IntDivider): q = (umulhi(n, m) + n) >> shift with
// 2^shift >= d and m = floor(2^32 (2^shift - d) / d) + 1; umulhi(n, m) + n < 2^32 for such n.
struct FastDiv {
  uint32_t m = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t d) {
    while (shift < 31 && (uint64_t(1) << shift) < d) ++shift;
    m = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(n, m);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t(n) * m) >> 32);
#endif
    return (hi + n) >> shift;
  }
};

// The kernels' view of the layout, dimensions innermost first (dim 0 is the contiguous one).
// In the packs kernel dim 0 counts packs, not elements (extent / N), and its stride kinds sit in
// inner_one (bit k set: input k's innermost stride is 1; clear: 0).
template <int K>
struct StridedArgs {
  int ndim;
  uint32_t inner_one;
  int64_t size[kMaxDims];
  FastDiv div[kMaxDims];
  int64_t stride[K > 0 ? K : 1][kMaxDims];
};

// Coordinate of index i along each dim (innermost first), accumulated into each input's offset:
// off[k] += coord[r] * stride[k][r] * (r == 0 ? inner_scale : 1).
template <int K, typename Index>
__device__ __forceinline__ void strided_offsets(const StridedArgs<K>& a, Index i, Index inner_scale,
                                                Index (&off)[K > 0 ? K : 1]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
  Index rem = i;
#pragma unroll
  for (int r = 0; r < kMaxDims; ++r) {
    if (r >= a.ndim) break;
    Index c;
    if (r == a.ndim - 1) {
      c = rem;                                   // the outermost dim needs no division
    } else {
      Index q;
      if constexpr (sizeof(Index) == 4) q = static_cast<Index>(a.div[r].div(static_cast<uint32_t>(rem)));
      else q = rem / static_cast<Index>(a.size[r]);
      c = rem - q * static_cast<Index>(a.size[r]);
      rem = q;
    }
    if (r == 0) c *= inner_scale;
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] += c * static_cast<Index>(a.stride[k][r]);
  }
}

// Pack u of input I: a pack load (innermost stride 1, aligned) or one element splat (stride 0).
template <int N, int U, int Hint, size_t I, typename T, typename Index, int KK>
__device__ __forceinline__ Packs<T, N, U> load_bcast_packs(const T* in, uint32_t inner_one,
                                                           const Index (&off)[U][KK], const bool (&ok)[U]) {
  using V = typename VecOf<sizeof(Pack<T, N>)>::type;
  Packs<T, N, U> r;
  const bool packed = (inner_one >> I) & 1u;   // uniform over the grid
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (!ok[u]) continue;
    const T* p = in + off[u][I];
    if (packed) {
      union { V v; Pack<T, N> p; } w;
      w.v = load_vec<Hint>(reinterpret_cast<const V*>(p));
      r.p[u] = w.p;
    } else {
      const T e = *p;   // a broadcast element: one scalar load (cached), splat
#pragma unroll
      for (int j = 0; j < N; ++j) r.p[u].v[j] = e;
    }
  }
  return r;
}

template <class Tn, int N, typename Index, typename F, typename Out, typename... In, size_t... I>
__device__ __forceinline__ void bcast_pack_body(const F& f, Index n_packs, const StridedArgs<sizeof...(In)>& a,
                                                std::index_sequence<I...>, Out* __restrict__ out,
                                                const In* __restrict__... in) {
  constexpr int B = Tn::kBlock, U = Tn::kUnroll, H = Tn::kHint, K = sizeof...(In);
  const Index threads = Index(gridDim.x) * B;
  const Index step = Tn::kTile ? Index(B) : threads;
  for (Index i = Index(blockIdx.x) * (Tn::kTile ? B * U : B) + threadIdx.x; i < n_packs; i += U * threads) {
    Index off[U][K > 0 ? K : 1];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const Index k = i + u * step;
      ok[u] = k < n_packs;
      // a lane past the end takes i's offsets (never read): k's could overflow Index
      strided_offsets<K>(a, ok[u] ? k : i, Index(N), off[u]);
    }
    compute_store_masked<N, U, H>(f, out, i, step, n_packs,
                                  load_bcast_packs<N, U, H, I>(in, a.inner_one, off, ok)...);
  }
}

template <class Tn, int N, typename Index, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(Tn::kBlock)
bcast_pack_kernel(F f, Index n_packs, StridedArgs<sizeof...(In)> a, Out* __restrict__ out,
                  const In* __restrict__... in) {
  bcast_pack_body<Tn, N>(f, n_packs, a, std::index_sequence_for<In...>{}, out, in...);
}

template <class Tn, typename Index, typename F, typename Out, typename... In, size_t... I>
__device__ __forceinline__ void strided_elem_body(const F& f, Index n, const StridedArgs<sizeof...(In)>& a,
                                                  std::index_sequence<I...>, Out* __restrict__ out,
                                                  const In* __restrict__... in) {
  constexpr int B = Tn::kBlock, U = Tn::kUnroll, K = sizeof...(In);
  const Index threads = Index(gridDim.x) * B;
  const Index step = Tn::kTile ? Index(B) : threads;
  for (Index i = Index(blockIdx.x) * (Tn::kTile ? B * U : B) + threadIdx.x; i < n; i += U * threads) {
    Index off[U][K > 0 ? K : 1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const Index k = i + u * step;
      strided_offsets<K>(a, k < n ? k : i, Index(1), off[u]);     // as bcast_pack_body: i stays in range
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const Index k = i + u * step;
      if (k < n) out[k] = f(in[off[u][I]]...);
    }
  }
}

template <class Tn, typename Index, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(Tn::kBlock)
strided_elem_kernel(F f, Index n, StridedArgs<sizeof...(In)> a, Out* __restrict__ out, const In* __restrict__... in) {
  strided_elem_body<Tn>(f, n, a, std::index_sequence_for<In...>{}, out, in...);
}

#ifndef __CUDACC_RTC__

// Host side: the layout checked, the kernel's argument built and the kernel picked, by
// plan_strided (shared with the fused formulas' kernels: ew_jit_map in jit.cu); then the launch.
template <int K>
struct StridedPlan {
  StridedArgs<K> a;
  bool packs;      // the packs kernel (else one element per thread)
  bool small;      // every offset an input forms fits 32 bits
  int64_t work;    // packs or elements the kernel covers
};

// n elements of the layout [ndim, shape..., each input's element strides...] (see call.layout in
// pyew), the output at out (out_size bytes an element), input k at in[k] (size[k] bytes), in
// packs of N elements where the layout allows them. cudaSuccess, or the error for a bad layout.
template <int K>
cudaError_t plan_strided(StridedPlan<K>& p, int N, int64_t n, const int64_t* layout, const void* out, int out_size,
                         const void* const* in, const int* size) {
  if (layout == nullptr || n < 0) return cudaErrorInvalidValue;
  const int64_t ndim = layout[0];
  if (ndim < 1 || ndim > kMaxDims) return cudaErrorInvalidValue;
  const int64_t* shape = layout + 1;
  int64_t count = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    if (shape[d] < 0) return cudaErrorInvalidValue;
    if (shape[d] == 0) count = 0;
    else if (count != 0 && __builtin_mul_overflow(count, shape[d], &count)) return cudaErrorInvalidValue;
  }
  if (count != n) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!aligned_to(out, out_size)) return cudaErrorMisalignedAddress;
  for (int k = 0; k < K; ++k)
    if (!aligned_to(in[k], size[k])) return cudaErrorMisalignedAddress;

  StridedArgs<K>& a = p.a;
  a = StridedArgs<K>{};
  a.ndim = static_cast<int>(ndim);
  for (int r = 0; r < ndim; ++r) {
    const int64_t d = ndim - 1 - r;               // innermost first
    a.size[r] = shape[d];
    for (int k = 0; k < K; ++k) a.stride[k][r] = layout[1 + ndim + k * ndim + d];
  }
  // 32-bit offsets when every input's reach (the largest |offset| it forms) fits; the index
  // itself is checked per kernel by the caller.
  p.small = true;
  for (int k = 0; k < K; ++k) {
    int64_t reach = 0;
    for (int r = 0; r < ndim && p.small; ++r) {
      const int64_t s = a.stride[k][r] < 0 ? -a.stride[k][r] : a.stride[k][r];
      int64_t term;
      if (s < 0 || __builtin_mul_overflow(a.size[r] - 1, s, &term) || __builtin_add_overflow(reach, term, &reach) ||
          reach > INT32_MAX)
        p.small = false;
    }
  }

  // The packs kernel's conditions.
  bool packs = a.size[0] % N == 0 && aligned_to(out, size_t(N) * out_size);
  for (int k = 0; k < K && packs; ++k) {
    const int64_t inner = a.stride[k][0];
    if (inner == 1) {
      a.inner_one |= 1u << k;
      packs = aligned_to(in[k], size_t(N) * size[k]);
      for (int r = 1; r < ndim; ++r)
        if (a.size[r] > 1 && a.stride[k][r] % N != 0) packs = false;
    } else if (inner != 0) {
      packs = false;
    }
  }
  p.packs = packs;
  if (packs) {
    a.size[0] /= N;
    p.work = n / N;
  } else {
    a.inner_one = 0;
    p.work = n;
  }
  for (int r = 0; r < ndim; ++r) a.div[r] = FastDiv(static_cast<uint32_t>(min_of<int64_t>(a.size[r], INT32_MAX)));
  return cudaSuccess;
}

// plan_strided over typed operands: their pointers and element sizes taken from the arguments.
template <int K, typename Out, typename... In>
cudaError_t plan_strided_of(StridedPlan<K>& p, int N, int64_t n, const int64_t* layout, const Out* out,
                            const In*... in) {
  const void* ptrs[K > 0 ? K : 1] = {static_cast<const void*>(in)...};
  const int sizes[K > 0 ? K : 1] = {int(sizeof(In))...};
  return plan_strided<K>(p, N, n, layout, out, int(sizeof(Out)), ptrs, sizes);
}

template <class Tn = DefaultTuning, typename F, typename Out, typename... In>
cudaError_t launch_map_strided(const Launch& l, const F& f, int64_t n, const int64_t* layout, Out* out,
                               const In*... in) {
  constexpr int N = max_pack<Out, In...>();
  StridedPlan<sizeof...(In)> p;
  const cudaError_t e = plan_strided_of(p, N, n, layout, out, in...);
  if (e != cudaSuccess || n == 0) return e;
  const int grid = grid_size(p.work, Tn::kUnroll, l, Tn::kBlock, Tn::kWaves);
  const bool i32 = p.small && map_fits_i32<Tn, 1>(p.work, grid);
  if (p.packs) {
    if (i32) bcast_pack_kernel<Tn, N, int32_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, int32_t(p.work), p.a, out, in...);
    else bcast_pack_kernel<Tn, N, int64_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, p.work, p.a, out, in...);
  } else {
    if (i32) strided_elem_kernel<Tn, int32_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, int32_t(p.work), p.a, out, in...);
    else strided_elem_kernel<Tn, int64_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, p.work, p.a, out, in...);
  }
  return cudaGetLastError();
}

#endif  // __CUDACC_RTC__

}  // namespace ew
