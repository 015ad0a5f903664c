// The vectorised elementwise template, after OneFlow's elementwise.cuh
// (oneflow/core/cuda/elementwise.cuh: 16-byte packs, an optional paired Apply2, a grid-stride
// loop), with its limits fixed:
//  * a misaligned view such as x[1:] runs at nearly the aligned speed, not at the widest width
//    all pointers happen to allow: its output is still stored in whole 16-byte packs (see
//    launch_map);
//  * the prologue before the first aligned pack and the tail past the last whole pack are handled
//    by a few threads, never read past the end;
//  * 64-bit indices whenever n could overflow 32 bits, a 32-bit fast path otherwise;
//  * the launch shape is a Tuning (block, packs per trip, grid cap, layout, cache hint), measured
//    on the GPU by benchmarks/template_sweep.cu; the loop covers any grid, capped or not;
//  * n = 0 launches nothing; every entry point returns the launch's cudaError_t.
#pragma once
#include "ew_types.cuh"
#ifndef __CUDACC_RTC__
#include <atomic>
#endif

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
// op_tuning: "compute" when the expression calls a function, or for a one-input op with a dtype of
// its own for its result), chosen from the launch-shape sweep (figures in benchmarks/RESULTS.md):
//  * MemoryBoundTuning, PyTorch's shape: one pack per thread, a block per 256 packs, no grid cap.
//    Copy-like ops run at the copy ceiling with it, above OneFlow's capped grid-stride shape; a
//    heavy op runs well below it: each thread's only load has nothing to overlap with.
//  * ComputeBoundTuning: two packs per thread from a 2 x 128-pack tile, no grid cap: each thread
//    has two loads in flight. A grid capped at 32 waves (OneFlow's loop) cost every op a little on the
//    H100 and the lighter function-calling ops as much on the H200; it helps only the heaviest float32
//    ops on the H200 under its power cap (docs/tuning.md), which stay compute-bound in either shape there.
//    An op with a few fast approximations per element (a sigmoid) runs faster in the memory shape
//    on both GPUs: its spec says `tuning = "memory"`.
using MemoryBoundTuning = Tuning<256, 1, 0, true, 0>;
using ComputeBoundTuning = Tuning<128, 2, 0, true, 0>;
using DefaultTuning = MemoryBoundTuning;

// Block size and grid cap of the special kernels (relu_mask, upsample, scatter, dot).
constexpr int kBlock = 256;
constexpr int kWaves = 32;

#ifndef __CUDACC_RTC__   // host code: NVRTC compiles the kernels alone (pyew/jit.py)
struct Launch {
  cudaStream_t stream;
  int sms;             // multiprocessor count, queried once per device by the caller
  int threads_per_sm;  // resident threads per multiprocessor a launch may use, likewise: the
                       // hardware's maximum, or fewer where the caller measured that faster
};

// The current device's per-multiprocessor limits, queried once per device (the values never
// change, so a race only stores the same numbers twice).
struct SmLimits {
  int threads;          // max resident threads
  int smem;             // shared memory per multiprocessor, bytes
  int smem_reserved;    // shared memory the system reserves per block
};
constexpr int kMaxDevices = 64;
inline bool sm_limits(SmLimits& out) {
  static std::atomic<int> cached[kMaxDevices][4];   // threads, smem, reserved, ready
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
  std::atomic<int>* c = cached[dev];
  if (c[3].load(std::memory_order_acquire) == 0) {
    int v[3];
    if (cudaDeviceGetAttribute(&v[0], cudaDevAttrMaxThreadsPerMultiProcessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v[1], cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v[2], cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess)
      return false;
    for (int k = 0; k < 3; ++k) c[k].store(v[k], std::memory_order_relaxed);
    c[3].store(1, std::memory_order_release);
  }
  out = {c[0].load(std::memory_order_relaxed), c[1].load(std::memory_order_relaxed),
         c[2].load(std::memory_order_relaxed)};
  return true;
}

// Dynamic shared memory (unused by the kernel) that lets at most l.threads_per_sm / block blocks
// reside on a multiprocessor, where the caller asks for fewer threads than the hardware holds;
// 0 otherwise. A streaming kernel at full occupancy can keep more reads in flight than the DRAM
// serves best: on some GPUs the contiguous map kernels run faster with fewer (docs/tuning.md,
// "Occupancy caps"); the broadcast kernels, whose index math has more latency to hide,
// ran slower there and keep full occupancy. Capped at the 48 KiB a launch gets without opting in,
// so very low budgets cap less.
inline int resident_cap_smem(const Launch& l, int block) {
  SmLimits s;
  if (l.threads_per_sm <= 0 || !sm_limits(s) || l.threads_per_sm >= s.threads) return 0;
  const int blocks = max_of(1, l.threads_per_sm / block);
  if (blocks >= s.threads / block) return 0;
  const int smem = s.smem / blocks / 1024 * 1024 - s.smem_reserved;   // blocks of it fit, blocks + 1 do not
  return clamp_to(smem, 0, 48 * 1024 - s.smem_reserved);
}

// Blocks of `block` threads for `work` units of which each thread takes `per_thread` per trip,
// capped at `waves` waves of resident blocks (0: no cap).
inline int grid_size(int64_t work, int per_thread, const Launch& l, int block = kBlock,
                     int waves = kWaves) {
  const int64_t per_block = int64_t(block) * per_thread;
  const int64_t wanted = max_of<int64_t>(1, (work + per_block - 1) / per_block);
  const int64_t cap = waves == 0 ? int64_t(INT32_MAX)
                                 : max_of<int64_t>(1, int64_t(l.sms) * (l.threads_per_sm / block) * waves);
  return static_cast<int>(min_of(wanted, cap));
}

#endif  // __CUDACC_RTC__

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

template <int Hint, typename V>
__device__ __forceinline__ V load_vec(const V* src) {
  if constexpr (Hint >= 2) return __ldcs(src);   // evict-first: streamed data is not read again
  else return __ldg(src);                        // read-only path
}

template <typename T, int N, int Hint = 0>
__device__ __forceinline__ Pack<T, N> load_pack(const T* base, int64_t pack_index) {
  using V = typename VecOf<sizeof(Pack<T, N>)>::type;
  union { V v; Pack<T, N> p; } u;
  u.v = load_vec<Hint>(reinterpret_cast<const V*>(base) + pack_index);
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

// ---- packs that straddle aligned words ------------------------------------------------------------
// An input whose element 0 sits s elements (0 < s < N) past an aligned pack boundary, while the
// output is aligned: pack k of the input (elements kN .. kN+N-1) lies across the aligned words
// k and k+1 of base = in - s. Each thread reads those two aligned words (16 bytes each at the
// widest pack) and funnel-shifts the pack out of them; s is the same for every pack of a launch, so
// the shift costs a few ALU instructions and no divergence.
//
// Bounds: word k holds element kN and word k+1 holds element kN + N - s, so every word read holds
// at least one element of the pack it serves. Word 0 also holds the s elements before in[0]:
// reading the rest of an aligned 16-byte word that holds a valid element is safe on the GPU
// (memory is mapped and protected in pages, and allocations start 256-byte aligned, so the word lies
// inside the allocation of the element it holds). At the far end the last pack's word k+1 may run
// past the allocation's requested size; that one word is assembled element by element from its s
// valid elements, so nothing past the last element is read (compute-sanitizer stays quiet too).
//
// kShfl: word k+1 of lane l is word k of lane l + 1 when the warp's packs are consecutive, so it
// comes through a warp shuffle and only lane 31 (and the lane of the last pack) loads its own; the
// memory system then sees each word requested once. Without kShfl every thread loads both words:
// each word is requested twice, and the second request of a word still in flight goes on to L2.
// Either way all loads of a trip are in flight before the first shuffle waits (load_raw, then
// shift_raw): a lane-31 load sent after the shuffle would add a second memory latency per trip.

template <typename V>
__device__ __forceinline__ V shfl_down_1(V v) {
  constexpr int W = sizeof(V) / 4;
  union { V v; uint32_t w[W]; } u;
  u.v = v;
#pragma unroll
  for (int j = 0; j < W; ++j) u.w[j] = __shfl_down_sync(0xffffffffu, u.w[j], 1);
  return u.v;
}

// Bytes [b, b + sizeof(V)) of the little-endian run lo:hi, 0 <= b < sizeof(V), b a multiple of 2
// (or any b for 4-byte words). Word selection by the uniform b / 4 compiles to selects. kWords: b is
// known to be a multiple of 4, so whole words are selected and no funnel shift is issued (the
// intrinsic is inline assembly, which the compiler cannot drop for a constant shift of 0).
template <bool kWords = false, typename V>
__device__ __forceinline__ V funnel(V lo, V hi, int b) {
  constexpr int W = sizeof(V) / 4;
  static_assert(W >= 1 && sizeof(V) % 4 == 0, "funnel works on whole 32-bit words");
  union { V v; uint32_t w[W]; } ul, uh, r;
  ul.v = lo;
  uh.v = hi;
  uint32_t w[2 * W];
#pragma unroll
  for (int j = 0; j < W; ++j) {
    w[j] = ul.w[j];
    w[W + j] = uh.w[j];
  }
  const int q = b >> 2, bits = (b & 3) * 8;
  uint32_t a[W + 1];
#pragma unroll
  for (int j = 0; j <= W; ++j) {
    uint32_t v = w[j];
#pragma unroll
    for (int c = 1; c < W; ++c)
      if (q == c) v = w[j + c];
    a[j] = v;
  }
#pragma unroll
  for (int j = 0; j < W; ++j) {
    if constexpr (kWords) r.w[j] = a[j];
    else r.w[j] = __funnelshift_r(a[j], a[j + 1], bits);
  }
  return r.v;
}

// Straddling packs are read in two phases, so that every load of a trip is in flight before any
// result is waited for (a shuffle waits for its source word): load_raw sends this lane's loads of
// word k (and of word k+1 where it needs its own), then shift_raw shuffles and funnel-shifts.
// The raw words sit in 16-byte slots whatever the pack size, so one array holds every input's.
template <int U>
struct RawWords {
  uint4 lo[U], hi[U];
};

template <typename V>
__device__ __forceinline__ uint4 to_slot(V v) {
  union { uint4 s; V v; } u{};
  u.v = v;
  return u.s;
}
template <typename V>
__device__ __forceinline__ V from_slot(uint4 s) {
  union { uint4 s; V v; } u;
  u.s = s;
  return u.v;
}

// Whether this lane reads word k+1 itself (rather than from its neighbour's word k).
template <bool kShfl, typename Index>
__device__ __forceinline__ bool reads_own_next(Index k, Index n_packs, int lane) {
  return !kShfl || lane == 31 || k + 1 >= n_packs;
}

// Phase 1: U packs of an input whose element 0 sits s elements past an aligned boundary (s = 0:
// plain aligned loads); packs past n_packs are not read. n_packs is the main loop's count of
// whole packs.
template <int N, int U, int Hint, bool kShfl, typename T, typename Index>
__device__ __forceinline__ RawWords<U> load_raw(const T* in, int s, Index i, Index step, Index n_packs, int lane) {
  using V = typename VecOf<sizeof(Pack<T, N>)>::type;
  RawWords<U> r;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const Index k = i + u * step;
    const bool valid = k < n_packs;
    r.lo[u] = r.hi[u] = uint4{0, 0, 0, 0};
    // (packs narrower than a 32-bit word are never shifted: their callers pass s = 0)
    if (sizeof(V) % 4 != 0 || s == 0) {
      if (valid) r.lo[u] = to_slot(load_vec<Hint>(reinterpret_cast<const V*>(in) + k));
      continue;
    }
    const V* base = reinterpret_cast<const V*>(in - s);
    if (valid) r.lo[u] = to_slot(load_vec<Hint>(base + k));
    if (valid && reads_own_next<kShfl>(k, n_packs, lane)) {
      if (k + 1 < n_packs) {
        r.hi[u] = to_slot(load_vec<Hint>(base + k + 1));
      } else {
        // the last pack: word k+1 from its s valid elements only
        union { V v; T e[N]; } last;
        last.v = V{};
        const T* p = in + (k + 1) * N - s;
#pragma unroll
        for (int t = 0; t < N - 1; ++t)
          if (t < s) last.e[t] = p[t];
        r.hi[u] = to_slot(last.v);
      }
    }
  }
  return r;
}

// Phase 2: the packs. With kShfl every lane of the warp must call it (s is uniform, so either all
// lanes shuffle or none). kWords: s * sizeof(T) is a multiple of 4 (see funnel).
template <int N, int U, bool kShfl, typename T, bool kWords = false, typename Index>
__device__ __forceinline__ Packs<T, N, U> shift_raw(const RawWords<U>& r, int s, Index i, Index step, Index n_packs,
                                                    int lane) {
  using V = typename VecOf<sizeof(Pack<T, N>)>::type;
  Packs<T, N, U> out;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    union { V v; Pack<T, N> p; } w;
    if constexpr (sizeof(V) % 4 != 0) {
      w.v = from_slot<V>(r.lo[u]);
    } else {
      if (s == 0) {
        w.v = from_slot<V>(r.lo[u]);
      } else {
        const V lo = from_slot<V>(r.lo[u]);
        V hi = from_slot<V>(r.hi[u]);
        if constexpr (kShfl) {
          const V next = shfl_down_1(lo);
          if (!reads_own_next<kShfl>(i + u * step, n_packs, lane)) hi = next;
        }
        w.v = funnel<kWords>(lo, hi, s * int(sizeof(T)));
      }
    }
    out.p[u] = w.p;
  }
  return out;
}

// One pack k, both phases (relu_mask's kernels).
template <int N, int Hint, bool kShfl, typename T, typename Index>
__device__ __forceinline__ Pack<T, N> load_shifted(const T* in, int s, Index k, Index n_packs, int lane) {
  return shift_raw<N, 1, kShfl, T>(load_raw<N, 1, Hint, kShfl>(in, s, k, Index(0), n_packs, lane), s, k, Index(0),
                                   n_packs, lane).p[0];
}

template <int N, int U, int Hint, typename F, typename Out, typename Index, typename... In>
__device__ __forceinline__ void compute_store_masked(const F& f, Out* out, Index i, Index step, Index n_packs,
                                                     const Packs<In, N, U>&... loaded) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const Index k = i + u * step;
    if (k < n_packs) {
      Pack<Out, N> o;
      apply_pack<N>(f, o, loaded.p[u]...);
      store_pack<Out, N, Hint>(out, k, o);
    }
  }
}

// ---- launches that overlap the previous kernel's end ----------------------------------------------
// Programmatic dependent launch (compute capability 9.0 and later): a map kernel queued right
// behind another kernel on its stream may be launched before that kernel has finished, so the
// launch's own latency overlaps the previous grid instead of following it. Correctness rests on
// every block of such a kernel calling grid_dependency_wait() before it touches memory:
// griddepcontrol.wait returns once the previous grid has completed and its writes are visible (at
// once when there is no such dependency). The kernels do not signal their dependents early
// (griddepcontrol.launch_dependents): that slowed the one-input kernels of misaligned views even
// when nothing waited on them, and gained nothing (docs/tuning.md, "PDL and back-to-back calls").

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

#ifndef __CUDACC_RTC__
// Whether `kernel`'s code for the current device holds those instructions: compiled for compute
// capability 9.0 or later. (A GPU running code JIT-compiled from an older PTX target would not
// wait, so it is launched the ordinary way.) cache: one slot per device, for this kernel alone.
inline bool overlap_allowed(const void* kernel, std::atomic<int>* cache) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    cudaFuncAttributes a{};
    const bool ok = cudaFuncGetAttributes(&a, kernel) == cudaSuccess;
    if (!ok) cudaGetLastError();
    v = ok && a.ptxVersion >= 90 ? 1 : 2;
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

// `kernel` with its parameters' addresses in `params`, allowed to overlap the kernel before it on
// `stream` when `overlap` (programmatic dependent launch; its code must begin with
// grid_dependency_wait()). Also the launch of fused formulas' kernels (jit.cu).
inline cudaError_t launch_params(const void* kernel, int grid, int block, int smem, bool overlap, cudaStream_t stream,
                                 void** params) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(block));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = overlap ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelExC(&cfg, kernel, params);
  const cudaError_t last = cudaGetLastError();     // clears the launch's error, as after <<< >>>
  return e != cudaSuccess ? e : last;
}

// `kernel`, which must begin with grid_dependency_wait(), on l.stream with `args` (each of exactly
// its parameter's type), allowed to overlap the kernel before it where its code allows that.
// `cache` is overlap_allowed's, static beside the launch. The kernel is passed as an address:
// nvcc's host code spells a pointer to a specialization of a kernel template without its
// parameters' __restrict__, which the host compiler then rejects.
template <typename... Args>
cudaError_t launch_overlapping(const void* kernel, std::atomic<int>* cache, int grid, int block, int smem,
                               const Launch& l, Args... args) {
  void* params[] = {const_cast<void*>(static_cast<const void*>(&args))...};
  return launch_params(kernel, grid, block, smem, overlap_allowed(kernel, cache), l.stream, params);
}
#endif  // __CUDACC_RTC__

// ---- the map kernels ----------------------------------------------------------------------------
// Both kernels see the array as [-head, 0) (the prologue: elements before the output's first
// aligned pack), [0, n_packs * N) (whole packs, the output aligned) and the tail [n_packs * N, n).
// Prologue and tail (fewer than N elements each) go one element per thread of block 0: the tail to
// its first threads, the prologue to its last.

template <int B, int N, typename Index, typename F, typename Out, typename... In>
__device__ __forceinline__ void map_edges(const F& f, Index n, int head, Out* out, const In*... in) {
  static_assert(B >= 2 * 16, "prologue and tail threads must not overlap");
  if (blockIdx.x != 0) return;
  const Index tail_start = n / N * N;
  if (Index(threadIdx.x) < n - tail_start) {
    const Index k = tail_start + threadIdx.x;
    out[k] = f(in[k]...);
  }
  if (int(threadIdx.x) >= B - head) {
    const Index k = Index(threadIdx.x) - B;   // in [-head, 0)
    out[k] = f(in[k]...);
  }
}

// Every operand aligned for N-element packs (after the prologue).
template <class Tn, int N, typename Index, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(Tn::kBlock)
map_kernel(F f, Index n, int head, Out* __restrict__ out, const In* __restrict__... in) {
  constexpr int B = Tn::kBlock, U = Tn::kUnroll, H = Tn::kHint;
  grid_dependency_wait();
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
  map_edges<B, N>(f, n, head, out, in...);
}

// Input k's element 0 sits shift[k] elements past an aligned pack boundary (the output is aligned).
template <int K>
struct Shifts {
  int s[K > 0 ? K : 1];
};

template <class Tn, int N, bool kShfl, bool kWords, typename Index, typename F, typename Out, typename... In,
          size_t... I>
__device__ __forceinline__ void map_shifted_body(const F& f, Index n, int head, const Shifts<sizeof...(In)>& sh,
                                                 std::index_sequence<I...>, Out* __restrict__ out,
                                                 const In* __restrict__... in) {
  constexpr int B = Tn::kBlock, U = Tn::kUnroll, H = Tn::kHint;
  static_assert(B % 32 == 0, "warps must be whole");
  const Index n_packs = n / N;
  const Index threads = Index(gridDim.x) * B;
  const Index step = Tn::kTile ? Index(B) : threads;
  const int lane = threadIdx.x & 31;
  Index i = Index(blockIdx.x) * (Tn::kTile ? B * U : B) + threadIdx.x;
  // Trips are uniform over the warp (its lanes hold consecutive packs, and the shuffles need every
  // lane): a trip runs while the warp's first pack exists; lanes past the end are masked off.
  for (; i - lane < n_packs; i += U * threads) {
    RawWords<U> raw[sizeof...(In)];
    ((raw[I] = load_raw<N, U, H, kShfl>(in, sh.s[I], i, step, n_packs, lane)), ...);
    compute_store_masked<N, U, H>(f, out, i, step, n_packs,
                                  shift_raw<N, U, kShfl, In, kWords>(raw[I], sh.s[I], i, step, n_packs, lane)...);
  }
  map_edges<B, N>(f, n, head, out, in...);
}

// S > 0: the one input's shift fixed at compile time (sh unused), so the word selection folds into
// register moves, and a shift of whole 32-bit words needs no funnel shift at all.
template <class Tn, int N, bool kShfl, int S, typename Index, typename F, typename Out, typename... In>
__global__ void __launch_bounds__(Tn::kBlock)
map_shifted_kernel(F f, Index n, int head, Shifts<sizeof...(In)> sh, Out* __restrict__ out,
                   const In* __restrict__... in) {
  static_assert(S == 0 || sizeof...(In) == 1, "a fixed shift is for one input");
  grid_dependency_wait();
  if constexpr (S > 0)
    map_shifted_body<Tn, N, kShfl, ((S * sizeof(In)) % 4 == 0 && ...)>(f, n, head, Shifts<1>{{S}},
                                                                        std::index_sequence_for<In...>{}, out, in...);
  else
    map_shifted_body<Tn, N, kShfl, false>(f, n, head, sh, std::index_sequence_for<In...>{}, out, in...);
}

#ifndef __CUDACC_RTC__

// ---- the launch plan ---------------------------------------------------------------------------
// Which kernel a map call takes is decided from the operands' element sizes and addresses alone, by
// plan_map below: the library's entry points (launch_map_with) and the kernels pyew compiles at
// run time for fused formulas (ew_jit_map in jit.cu) both follow it, so a formula takes the
// same aligned, misaligned-view and narrow-pack paths, with the same launch shapes, as an op.

// Launch shapes for inputs whose offsets differ from the output's, as measured fastest for each
// (docs/tuning.md, "Misaligned views"):
//  * the straddling-load kernel on 16-byte packs: for one input in blocks of at most 128 threads
//    (in 256-thread blocks it ran below the aligned kernel), for two or more in the op's own
//    blocks (in 128-thread blocks they ran slower on both GPUs measured);
//  * for one input of a 4-byte type (float32 and int32 ops), a kernel per offset: at 2 elements
//    8-byte packs, two per thread, with no shifting at all; at 1 and 3 the straddling-load kernel
//    with the offset fixed at compile time, which leaves a heavy op like sigmoid with the aligned
//    kernel's instruction count. (With two inputs the 8-byte packs' extra loads cost more than the
//    shifts they save; 16-bit types gained nothing from them.)
//  * for one input of a 16-bit type at an even offset (whole 32-bit words away), the straddling-load
//    kernel with the offset fixed at compile time: the words are selected in registers, with no
//    funnel shifts; odd offsets keep one kernel with the offset read at run time.
constexpr int retiled_block(int block) { return block < 128 ? block : 128; }
template <class Tn, int Unroll>
using RetiledTuning = Tuning<retiled_block(Tn::kBlock), Unroll, Tn::kWaves, Tn::kTile, Tn::kHint>;
template <class Tn, int K>
using ShiftedTuning = std::conditional_t<(K > 1), Tn, RetiledTuning<Tn, Tn::kUnroll>>;
template <class Tn>
using HalfPackTuning = RetiledTuning<Tn, 2>;

// How the straddling loads of a launch with K inputs get each pack's second word (see
// load_shifted): through a warp shuffle with two or more inputs, by each lane's own load with one.
// With one input the second load per pack cost less than the shuffles: as measured, its views
// gain on an H100 and are level on an H200, while two inputs lose on the H200 that way
// (docs/tuning.md, "Misaligned views").
constexpr bool shift_by_shuffle(int k) { return k > 1; }
template <int K>
constexpr bool kShiftByShuffle = shift_by_shuffle(K);

// A Tuning as values, for the plan.
struct TuningValues {
  int block, unroll, waves, tile, hint;
};
template <class Tn>
constexpr TuningValues tuning_values() { return {Tn::kBlock, Tn::kUnroll, Tn::kWaves, Tn::kTile, Tn::kHint}; }

enum MapVariant : int {
  kMapPacks = 0,       // every operand at the same offset: a peeled prologue, then aligned N-element packs
  kMapHalfPacks = 1,   // one 4-byte input two elements from the output's offset: 8-byte packs
  kMapShifted = 2,     // straddling loads, the shift fixed at compile time (fixed_shift > 0) or read at run time
  kMapNarrow = 3,      // operands that allow no whole-word packs: the widest pack all pointers allow
};

struct MapPlan {
  int variant;       // MapVariant
  int pack;          // elements per pack
  int fixed_shift;   // kMapShifted: the one input's shift when fixed at compile time, else 0
  int head;          // elements peeled before the output's first aligned pack
  TuningValues tn;   // the variant's launch shape
};

// The plan of a map call over n > 0 elements: k inputs of in_size[i] bytes at addresses in[i],
// the output of out_size bytes at out, in the op's launch shape tn. shifts[i] receives input i's
// offset, in elements, from the output's aligned packs (kMapShifted reads them).
inline MapPlan plan_map(const TuningValues& tn, int k, int out_size, const int* in_size,
                       uintptr_t out, const uintptr_t* in, int64_t n, int* shifts) {
  int biggest = out_size;
  for (int i = 0; i < k; ++i) biggest = in_size[i] > biggest ? in_size[i] : biggest;
  const int N = 16 / biggest;
  const int64_t out_off = int64_t(out / uintptr_t(out_size) % uintptr_t(N));
  const int head = static_cast<int>(n < (N - out_off) % N ? n : (N - out_off) % N);
  bool same = true;
  bool words = k > 0;
  bool all4 = out_size == 4, all2 = out_size == 2;
  for (int i = 0; i < k; ++i) {
    shifts[i] = static_cast<int>((in[i] / uintptr_t(in_size[i]) + uintptr_t(head)) % uintptr_t(N));
    same = same && shifts[i] == 0;
    words = words && (N * in_size[i]) % 4 == 0;
    all4 = all4 && in_size[i] == 4;
    all2 = all2 && in_size[i] == 2;
  }
  const TuningValues shifted = k > 1 ? tn : TuningValues{retiled_block(tn.block), tn.unroll, tn.waves, tn.tile, tn.hint};
  if (same) return {kMapPacks, N, 0, head, tn};
  if (k == 1 && all4) {   // shift 1, 2 or 3
    if (shifts[0] == 2) return {kMapHalfPacks, 2, 0, head, {retiled_block(tn.block), 2, tn.waves, tn.tile, tn.hint}};
    return {kMapShifted, N, shifts[0], head, shifted};
  }
  if (k == 1 && all2) {   // even shifts fixed
    const int s = shifts[0];
    return {kMapShifted, N, s % 2 == 0 ? s : 0, head, shifted};
  }
  // Straddling packs need whole 32-bit words per pack (always so for 16-bit and wider types).
  if (words) return {kMapShifted, N, 0, head, shifted};
  int w = N;
  const auto fits = [&](uintptr_t p, int size) { return p % (uintptr_t(w) * uintptr_t(size)) == 0; };
  for (; w > 1; w /= 2) {
    bool ok = fits(out, out_size);
    for (int i = 0; i < k; ++i) ok = ok && fits(in[i], in_size[i]);
    if (ok) break;
  }
  return {kMapNarrow, w, 0, 0, tn};
}

// 32-bit indices when no index the kernel forms (up to n_packs + U * threads, and the tail) can
// overflow.
inline bool map_fits_i32(int64_t n, int pack, int unroll, int block, int grid) {
  const int64_t reach = n / pack + int64_t(unroll + 1) * grid * block + pack;
  return n <= INT32_MAX && reach <= INT32_MAX;
}
template <class Tn, int N>
inline bool map_fits_i32(int64_t n, int grid) {
  return map_fits_i32(n, N, Tn::kUnroll, Tn::kBlock, grid);
}

// ---- launchers ----------------------------------------------------------------------------------

// Grid and dynamic shared memory of a map kernel over n elements in packs of `pack`.
inline int map_grid(const TuningValues& tn, int pack, int64_t n, const Launch& l) {
  return grid_size(n / pack, tn.unroll, l, tn.block, tn.waves);
}

// n elements from out[0] (whole packs, then the tail) plus `head` elements before it; every
// pointer aligned for N-element packs.
template <class Tn, int N, typename F, typename Out, typename... In>
cudaError_t launch_pack_peeled(const Launch& l, const F& f, int64_t n, int head, Out* out, const In*... in) {
  const int grid = map_grid(tuning_values<Tn>(), N, n, l);
  const int smem = resident_cap_smem(l, Tn::kBlock);
  static std::atomic<int> cache[2][kMaxDevices];
  if (map_fits_i32<Tn, N>(n, grid))
    return launch_overlapping(reinterpret_cast<const void*>(&map_kernel<Tn, N, int32_t, F, Out, In...>), cache[0],
                              grid, Tn::kBlock, smem, l, f, static_cast<int32_t>(n), head, out, in...);
  return launch_overlapping(reinterpret_cast<const void*>(&map_kernel<Tn, N, int64_t, F, Out, In...>), cache[1],
                            grid, Tn::kBlock, smem, l, f, static_cast<int64_t>(n), head, out, in...);
}

template <class Tn, int N, typename F, typename Out, typename... In>
cudaError_t launch_pack(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  return launch_pack_peeled<Tn, N>(l, f, n, 0, out, in...);
}

// As launch_pack_peeled, with out aligned and input k starting sh.s[k] elements past a boundary
// (S > 0: one input, sh.s[0] == S, see map_shifted_kernel).
template <class Tn, int N, bool kShfl, int S = 0, typename F, typename Out, typename... In>
cudaError_t launch_shifted(const Launch& l, const F& f, int64_t n, int head, const Shifts<sizeof...(In)>& sh,
                           Out* out, const In*... in) {
  using Ts = ShiftedTuning<Tn, sizeof...(In)>;
  const int grid = map_grid(tuning_values<Ts>(), N, n, l);
  const int smem = resident_cap_smem(l, Ts::kBlock);
  static std::atomic<int> cache[2][kMaxDevices];
  if (map_fits_i32<Ts, N>(n, grid))
    return launch_overlapping(reinterpret_cast<const void*>(&map_shifted_kernel<Ts, N, kShfl, S, int32_t, F, Out, In...>),
                              cache[0], grid, Ts::kBlock, smem, l, f, static_cast<int32_t>(n), head, sh, out, in...);
  return launch_overlapping(reinterpret_cast<const void*>(&map_shifted_kernel<Ts, N, kShfl, S, int64_t, F, Out, In...>),
                            cache[1], grid, Ts::kBlock, smem, l, f, static_cast<int64_t>(n), head, sh, out, in...);
}

// launch_map with the straddling-load variant spelled out (benchmarks compare the two): the
// kernel plan_map names, instantiated for these types.
template <class Tn, bool kShfl, typename F, typename Out, typename... In>
cudaError_t launch_map_with(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!(aligned_to(out, sizeof(Out)) && (aligned_to(in, sizeof(In)) && ...))) return cudaErrorMisalignedAddress;
  constexpr int N = max_pack<Out, In...>();
  constexpr int K = sizeof...(In);
  const int sizes[K > 0 ? K : 1] = {int(sizeof(In))...};
  const uintptr_t ptrs[K > 0 ? K : 1] = {reinterpret_cast<uintptr_t>(in)...};
  Shifts<K> sh{};
  const MapPlan p = plan_map(tuning_values<Tn>(), K, int(sizeof(Out)), sizes, reinterpret_cast<uintptr_t>(out),
                             ptrs, n, sh.s);
  const int64_t m = n - p.head;
  const int h = p.head;
  switch (p.variant) {
    case kMapPacks:
      return launch_pack_peeled<Tn, N>(l, f, m, h, out + h, (in + h)...);
    case kMapHalfPacks:
      if constexpr (K == 1 && sizeof(Out) == 4 && ((sizeof(In) == 4) && ...))
        return launch_pack_peeled<HalfPackTuning<Tn>, 2>(l, f, m, h, out + h, (in + h)...);
      break;
    case kMapShifted:
      if constexpr (K == 1 && sizeof(Out) == 4 && ((sizeof(In) == 4) && ...)) {
        if (p.fixed_shift == 1) return launch_shifted<Tn, N, kShfl, 1>(l, f, m, h, sh, out + h, (in + h)...);
        if (p.fixed_shift == 3) return launch_shifted<Tn, N, kShfl, 3>(l, f, m, h, sh, out + h, (in + h)...);
      } else if constexpr (K == 1 && sizeof(Out) == 2 && ((sizeof(In) == 2) && ...)) {
        if (p.fixed_shift == 2) return launch_shifted<Tn, N, kShfl, 2>(l, f, m, h, sh, out + h, (in + h)...);
        if (p.fixed_shift == 4) return launch_shifted<Tn, N, kShfl, 4>(l, f, m, h, sh, out + h, (in + h)...);
        if (p.fixed_shift == 6) return launch_shifted<Tn, N, kShfl, 6>(l, f, m, h, sh, out + h, (in + h)...);
        return launch_shifted<Tn, N, kShfl>(l, f, m, h, sh, out + h, (in + h)...);
      } else if constexpr (K > 0 && ((N * sizeof(In) % 4 == 0) && ...)) {
        return launch_shifted<Tn, N, kShfl>(l, f, m, h, sh, out + h, (in + h)...);
      }
      break;
    case kMapNarrow:   // only where no straddling-load kernel can take the inputs (see plan_map)
      if constexpr (!(K > 0 && ((N * sizeof(In) % 4 == 0) && ...)))
        return dispatch_pack<N>(p.pack, [&](auto w) { return launch_pack<Tn, w.value>(l, f, n, out, in...); });
      break;
  }
  return cudaErrorNotSupported;   // a plan these types cannot take: plan_map and the cases above disagree
}

// Entry for generated code: whole N-element packs (16 bytes for the widest operand) wherever the
// views sit. When every operand has the same offset from a pack boundary (in elements, modulo N),
// a short prologue is peeled and the rest runs aligned; otherwise the output is still stored in
// aligned packs, and each input is read as aligned 16-byte words shifted into place, or for one
// 4-byte input two elements from the output's offset, in 8-byte packs (see RetiledTuning).
template <class Tn = DefaultTuning, typename F, typename Out, typename... In>
cudaError_t launch_map(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  return launch_map_with<Tn, kShiftByShuffle<sizeof...(In)>>(l, f, n, out, in...);
}

#endif  // __CUDACC_RTC__

}  // namespace ew
