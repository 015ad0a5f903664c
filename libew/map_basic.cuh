// The basic launch of the map kernels (a spec's `launch = "basic"`): the kernels of launch_map
// (elementwise.cuh) and launch_map_strided (broadcast.cuh) less the ones that only pay for hot
// ops, with the same results and the same aligned speed.
//
// launch_map compiles, for a one-input op, a straddling-load kernel per view offset with the offset
// fixed at compile time, and 8-byte packs for a 4-byte input two elements off, each a little faster
// on misaligned views of heavy ops; and every kernel twice, with 32- and with 64-bit indices. Here:
//  * contiguous: the aligned kernel and the straddling-load kernel that reads the offsets at run
//    time, 32-bit indices only: past 2^29 elements the call runs as consecutive launches of 2^29
//    elements (a multiple of every pack, so each has the first one's alignment and shifts; small
//    enough that every index a kernel forms, up to three times its packs, fits 32 bits). The
//    narrow packs (the widest pack all pointers allow) are compiled only for operand types that
//    cannot form whole 32-bit words per pack (a 1-byte bool next to 8-byte doubles).
//  * strided: the packs kernel with 32-bit indices; anything else one element per thread, with
//    32-bit indices where they fit and 64-bit ones otherwise.
// Five kernels per op and dtype where launch_map and launch_map_strided have eight or more: the
// compile time and code size this saves are in benchmarks/RESULTS.md ("Building the library").
#pragma once
#include "broadcast.cuh"

namespace ew {

constexpr int64_t kBasicChunk = int64_t(1) << 29;

template <class Tn, int N, typename F, typename Out, typename... In>
cudaError_t launch_basic_packs(const Launch& l, const F& f, int64_t n, int head, Out* out, const In*... in) {
  const int grid = map_grid(tuning_values<Tn>(), N, n, l);
  static std::atomic<int> cache[kMaxDevices];
  return launch_overlapping(reinterpret_cast<const void*>(&map_kernel<Tn, N, int32_t, F, Out, In...>), cache, grid,
                            Tn::kBlock, resident_cap_smem(l, Tn::kBlock), l, f, static_cast<int32_t>(n), head, out,
                            in...);
}

template <class Tn, int N, typename F, typename Out, typename... In>
cudaError_t launch_basic_shifted(const Launch& l, const F& f, int64_t n, int head, const Shifts<sizeof...(In)>& sh,
                                 Out* out, const In*... in) {
  using Ts = ShiftedTuning<Tn, sizeof...(In)>;
  constexpr bool kShfl = kShiftByShuffle<sizeof...(In)>;
  const int grid = map_grid(tuning_values<Ts>(), N, n, l);
  static std::atomic<int> cache[kMaxDevices];
  return launch_overlapping(reinterpret_cast<const void*>(&map_shifted_kernel<Ts, N, kShfl, 0, int32_t, F, Out, In...>),
                            cache, grid, Ts::kBlock, resident_cap_smem(l, Ts::kBlock), l, f, static_cast<int32_t>(n),
                            head, sh, out, in...);
}

// At most kBasicChunk elements, every pointer aligned to its element type.
template <class Tn, typename F, typename Out, typename... In>
cudaError_t launch_basic_chunk(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  constexpr int N = max_pack<Out, In...>();
  constexpr int K = sizeof...(In);
  constexpr bool kWords = K > 0 && ((N * sizeof(In) % 4 == 0) && ...);
  const int sizes[K > 0 ? K : 1] = {int(sizeof(In))...};
  const uintptr_t ptrs[K > 0 ? K : 1] = {reinterpret_cast<uintptr_t>(in)...};
  Shifts<K> sh{};
  const MapPlan p = plan_map(tuning_values<Tn>(), K, int(sizeof(Out)), sizes, reinterpret_cast<uintptr_t>(out),
                             ptrs, n, sh.s);
  const int h = p.head;
  if (p.variant == kMapPacks) return launch_basic_packs<Tn, N>(l, f, n - h, h, out + h, (in + h)...);
  if constexpr (kWords) {
    // kMapHalfPacks and kMapShifted alike: the straddling loads, the shifts read at run time
    return launch_basic_shifted<Tn, N>(l, f, n - h, h, sh, out + h, (in + h)...);
  } else {
    return dispatch_pack<N>(p.variant == kMapNarrow ? p.pack : 1,
                            [&](auto w) { return launch_basic_packs<Tn, w.value>(l, f, n, 0, out, in...); });
  }
}

template <class Tn = DefaultTuning, typename F, typename Out, typename... In>
cudaError_t launch_map_basic(const Launch& l, const F& f, int64_t n, Out* out, const In*... in) {
  static_assert(kBasicChunk % 16 == 0, "a chunk keeps every pack's alignment");
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!(aligned_to(out, sizeof(Out)) && (aligned_to(in, sizeof(In)) && ...))) return cudaErrorMisalignedAddress;
  for (int64_t at = 0; at < n; at += kBasicChunk) {
    const int64_t m = n - at < kBasicChunk ? n - at : kBasicChunk;
    const cudaError_t e = launch_basic_chunk<Tn>(l, f, m, out + at, (in + at)...);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <class Tn = DefaultTuning, typename F, typename Out, typename... In>
cudaError_t launch_map_strided_basic(const Launch& l, const F& f, int64_t n, const int64_t* layout, Out* out,
                                     const In*... in) {
  constexpr int N = max_pack<Out, In...>();
  StridedPlan<sizeof...(In)> p;
  cudaError_t e = plan_strided_of(p, N, n, layout, out, in...);
  if (e != cudaSuccess || n == 0) return e;
  int grid = grid_size(p.work, Tn::kUnroll, l, Tn::kBlock, Tn::kWaves);
  if (p.small && map_fits_i32<Tn, 1>(p.work, grid)) {
    if (p.packs)
      bcast_pack_kernel<Tn, N, int32_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, int32_t(p.work), p.a, out, in...);
    else
      strided_elem_kernel<Tn, int32_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, int32_t(p.work), p.a, out, in...);
    return cudaGetLastError();
  }
  // Past 32-bit offsets: one element per thread (the element layout is the plan of 1-element packs,
  // whose inner_one the elements kernel does not read).
  if (p.packs) {
    e = plan_strided_of(p, 1, n, layout, out, in...);
    if (e != cudaSuccess) return e;
    grid = grid_size(p.work, Tn::kUnroll, l, Tn::kBlock, Tn::kWaves);
  }
  strided_elem_kernel<Tn, int64_t><<<grid, Tn::kBlock, 0, l.stream>>>(f, p.work, p.a, out, in...);
  return cudaGetLastError();
}

}  // namespace ew
