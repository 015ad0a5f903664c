// Kernels compiled at run time for fused formulas (pyew/jit.py): their code loaded, and their
// launches planned exactly as the library's own map entries plan theirs (plan_map for contiguous
// operands, plan_strided for broadcasts and strided views), so a formula runs the same kernels of
// elementwise.cuh and broadcast.cuh, in the same launch shapes, as an op of the spec.
//
// pyew compiles one kernel per plan it meets (a kernel "slot"): ew_jit_map returns kJitMissing
// with the slot's template arguments when the slot is still empty; pyew compiles that
// instantiation with NVRTC, loads it with ew_jit_load into the slot and calls again.
#include "ew_api.h"
#include "broadcast.cuh"

namespace {

constexpr int kJitMissing = -1;
constexpr int kMaxJitInputs = 12;
// Slots: map variants (packs, half packs, shifted by 0..7, narrow packs of 1..16) and the two
// strided kernels, each with 32- and 64-bit indices.
constexpr int kSlotPacks = 0, kSlotHalfPacks = 1, kSlotShifted = 2, kSlotNarrow = 10, kSlotBcastPacks = 15,
              kSlotStridedElem = 16, kJitSlots = 2 * 17;

// What pyew needs to compile a missing slot: [slot, kernel template (0 map_kernel, 1 map_shifted_kernel,
// 2 bcast_pack_kernel, 3 strided_elem_kernel), block, unroll, waves, tile, hint, pack, shuffle, fixed shift,
// 64-bit index].
void describe(int64_t* need, int slot, int kernel, const ew::TuningValues& tn, int pack, int shuffle, int shift,
              bool i64) {
  const int64_t d[] = {slot, kernel, tn.block, tn.unroll, tn.waves, tn.tile, tn.hint, pack, shuffle, shift, i64};
  for (int j = 0; j < 11; ++j) need[j] = d[j];
}

int log2i(int v) {
  int r = 0;
  while (v > 1) v >>= 1, ++r;
  return r;
}

cudaError_t launch(void* kernel, int grid, int block, int smem, bool overlap, cudaStream_t stream, void** params) {
  return ew::launch_params(kernel, grid, block, smem, overlap, stream, params);
}

template <int K>
int strided(void* const* kernels, const ew::TuningValues& tn, void* fn, int64_t n, const int64_t* layout, void* out,
            const void* const* in, int out_size, const int* in_size, int64_t* need, const ew::Launch& l) {
  int biggest = out_size;
  for (int i = 0; i < K; ++i) biggest = in_size[i] > biggest ? in_size[i] : biggest;
  const int N = 16 / biggest;
  ew::StridedPlan<K> p;
  cudaError_t e = ew::plan_strided<K>(p, N, n, layout, out, out_size, in, in_size);
  if (e != cudaSuccess || n == 0) return e;
  const int grid = ew::grid_size(p.work, tn.unroll, l, tn.block, tn.waves);
  const bool i64 = !(p.small && ew::map_fits_i32(p.work, 1, tn.unroll, tn.block, grid));
  const int slot = 2 * (p.packs ? kSlotBcastPacks : kSlotStridedElem) + i64;
  if (kernels[slot] == nullptr) {
    describe(need, slot, p.packs ? 2 : 3, tn, N, 0, 0, i64);
    return kJitMissing;
  }
  int32_t n32 = static_cast<int32_t>(p.work);
  int64_t n64 = p.work;
  void* params[3 + 1 + kMaxJitInputs] = {fn, i64 ? static_cast<void*>(&n64) : static_cast<void*>(&n32), &p.a, &out};
  for (int i = 0; i < K; ++i) params[4 + i] = const_cast<void**>(in + i);
  return launch(kernels[slot], grid, tn.block, 0, false, l.stream, params);
}

template <int... K>
int strided_k(std::integer_sequence<int, K...>, int k, void* const* kernels, const ew::TuningValues& tn, void* fn,
              int64_t n, const int64_t* layout, void* out, const void* const* in, int out_size, const int* in_size,
              int64_t* need, const ew::Launch& l) {
  int rc = cudaErrorInvalidValue;
  ((k == K + 1 ? (rc = strided<K + 1>(kernels, tn, fn, n, layout, out, in, out_size, in_size, need, l), 0) : 0), ...);
  return rc;
}

}  // namespace

// The kernel `name` of the code image (a cubin), loaded into this process: *kernel receives a
// cudaKernel_t, valid on every GPU the image has code for, for the rest of the process.
EW_API int ew_jit_load(const void* image, const char* name, void** kernel) {
  cudaLibrary_t lib;
  cudaError_t e = cudaLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e != cudaSuccess) return e;
  cudaKernel_t k;
  e = cudaLibraryGetKernel(&k, lib, name);
  if (e != cudaSuccess) {
    cudaLibraryUnload(lib);
    return e;
  }
  *kernel = reinterpret_cast<void*>(k);
  return cudaSuccess;
}

// A fused formula over n elements: out = f(in[0], ..., in[k-1]), element sizes out_size and
// in_size[i]. layout: null for operands of the output's shape, each contiguous (plan_map), else
// the strided layout of ew_<op>_strided entries (plan_strided). fn points at the formula's functor
// (its parameters). tuning: 0 the memory-bound launch shape, 1 the compute-bound one. overlap:
// the kernels may start before the previous kernel on the stream ends (programmatic dependent
// launch; their code was compiled for compute capability 9.0 or later). kernels: the formula's
// kJitSlots slots. Returns a cudaError_t value, or kJitMissing with need[0..10] describing the
// kernel to compile (see describe).
EW_API int ew_jit_map(void* const* kernels, int tuning, void* fn, int64_t n, void* out, const void* const* in, int k,
                      int out_size, const int* in_size, const int64_t* layout, int overlap, int64_t* need,
                      void* stream, int sms, int threads_per_sm) {
  if (n < 0 || k < 1 || k > kMaxJitInputs || out_size < 1 || out_size > 16) return cudaErrorInvalidValue;
  const ew::Launch l{static_cast<cudaStream_t>(stream), sms, threads_per_sm};
  const ew::TuningValues tn = tuning == 1 ? ew::tuning_values<ew::ComputeBoundTuning>()
                                          : ew::tuning_values<ew::MemoryBoundTuning>();
  if (layout != nullptr)
    return strided_k(std::make_integer_sequence<int, kMaxJitInputs>{}, k, kernels, tn, fn, n, layout, out, in,
                     out_size, in_size, need, l);
  if (n == 0) return cudaSuccess;
  if (!ew::aligned_to(out, out_size)) return cudaErrorMisalignedAddress;
  uintptr_t ptrs[kMaxJitInputs];
  for (int i = 0; i < k; ++i) {
    if (!ew::aligned_to(in[i], in_size[i])) return cudaErrorMisalignedAddress;
    ptrs[i] = reinterpret_cast<uintptr_t>(in[i]);
  }
  int shifts[kMaxJitInputs] = {};
  const ew::MapPlan p = ew::plan_map(tn, k, out_size, in_size, reinterpret_cast<uintptr_t>(out), ptrs, n, shifts);
  const int64_t m = n - p.head;
  const int grid = ew::map_grid(p.tn, p.pack, m, l);
  const bool i64 = !ew::map_fits_i32(m, p.pack, p.tn.unroll, p.tn.block, grid);
  int base = kSlotPacks, kernel = 0, shuffle = 0;
  switch (p.variant) {
    case ew::kMapPacks: base = kSlotPacks; break;
    case ew::kMapHalfPacks: base = kSlotHalfPacks; break;
    case ew::kMapShifted:
      base = kSlotShifted + p.fixed_shift;
      kernel = 1;
      shuffle = ew::shift_by_shuffle(k);
      break;
    case ew::kMapNarrow: base = kSlotNarrow + log2i(p.pack); break;
  }
  const int slot = 2 * base + i64;
  if (kernels[slot] == nullptr) {
    describe(need, slot, kernel, p.tn, p.pack, shuffle, p.fixed_shift, i64);
    return kJitMissing;
  }
  int32_t n32 = static_cast<int32_t>(m);
  int64_t n64 = m;
  int head = p.head;
  char* o = static_cast<char*>(out) + int64_t(p.head) * out_size;
  const void* ins[kMaxJitInputs];
  void* params[5 + kMaxJitInputs];
  int np = 0;
  params[np++] = fn;
  params[np++] = i64 ? static_cast<void*>(&n64) : static_cast<void*>(&n32);
  params[np++] = &head;
  if (kernel == 1) params[np++] = shifts;
  params[np++] = &o;
  for (int i = 0; i < k; ++i) {
    ins[i] = static_cast<const char*>(in[i]) + int64_t(p.head) * in_size[i];
    params[np++] = &ins[i];
  }
  return launch(kernels[slot], grid, p.tn.block, ew::resident_cap_smem(l, p.tn.block), overlap != 0, l.stream,
                params);
}

EW_API int ew_jit_slots(void) { return kJitSlots; }

// ew_jit_map with its arguments in an array, for pyew's C extension (see ew_arg in ew_api.h).
EW_API int ew_jit_map_packed(const ew_arg* a) {
  return ew_jit_map(static_cast<void* const*>(a[0].p), static_cast<int>(a[1].i), const_cast<void*>(a[2].p), a[3].i,
                    const_cast<void*>(a[4].p), static_cast<const void* const*>(a[5].p), static_cast<int>(a[6].i),
                    static_cast<int>(a[7].i), static_cast<const int*>(a[8].p), static_cast<const int64_t*>(a[9].p),
                    static_cast<int>(a[10].i), static_cast<int64_t*>(const_cast<void*>(a[11].p)),
                    const_cast<void*>(a[12].p), static_cast<int>(a[13].i), static_cast<int>(a[14].i));
}
