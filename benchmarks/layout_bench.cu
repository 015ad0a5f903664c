// Misaligned views, strided/broadcast maps and float32 gelu_tanh: checks, accuracy and timings of
// libew/elementwise.cuh's launch_map, libew/broadcast.cuh's launch_map_strided and
// libew/ew_math.cuh's gelu_tanh, in one program.
//
// Build, from the repo root, after `make all` (which generates the device functions in
// build/gen/fn that this program calls, as the generated kernels do):
//
//   nvcc -O3 -std=c++17 -lineinfo -gencode arch=compute_90,code=sm_90 -Ilibew -Ibuild/gen \
//        -o build/layout_bench benchmarks/layout_bench.cu
//
// Run:
//   build/layout_bench           checks, gelu_tanh accuracy (all 2^32 float inputs), timings, and a
//                                summary table last
//   build/layout_bench --check   checks and a strided accuracy sweep on small sizes only (for
//                                compute-sanitizer: `compute-sanitizer build/layout_bench --check`)
//   build/layout_bench --mask    relu_mask and its backward only: their checks, then their timings
//
// (a) Checks. launch_map on views at offsets 0..7 elements (float32, float16, bfloat16; output and
//     input offsets equal and different; sizes from 0 and below one pack to past 2^16; relu, add,
//     a three-input fma and the float32 <-> float16 casts; every launch shape and both forms of the
//     straddling load), and launch_map_strided on random layouts (1 to 8 dims, broadcast dims,
//     negative strides, size-1 and size-0 extents, transposed views) and on the bias layouts, each
//     against a CPU reference, bit for bit. Inputs sit in allocations of exactly their size (so
//     compute-sanitizer sees any read past them); outputs are poisoned first, and the poison
//     around each output view must survive. Two launches past 2^31 elements check the 64-bit
//     index paths against a plain kernel on the GPU.
// (b) Timings: CUDA events around each launch after warm-up, the median of many, on buffers of
//     256 MiB and more (larger than an H100's 50 MB L2): relu, sigmoid and add on views at offsets
//     1..7 against the aligned run; row and channel bias adds against a device-to-device copy of
//     the big operand (bytes read + written); float32 gelu_tanh with the argument formed in double
//     (the previous form, kept here) and in float-float (the library's).
// (c) gelu_tanh float32 against a double-precision reference: all 2^32 bit patterns on the GPU,
//     and a random sample against the CPU's double reference; max error in float ulps, max
//     relative error, and the ratio to the GPU tests' tolerance (1e-6 |ref| + 4 FLT_MIN).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "broadcast.cuh"
#include "elementwise.cuh"
#include "naive.cuh"
#include "relu_mask.cuh"
#include "fn/add.cuh"
#include "fn/add_relu.cuh"
#include "fn/gelu_tanh.cuh"
#include "fn/mul.cuh"
#include "fn/relu.cuh"
#include "fn/sigmoid.cuh"

#define CHECK(...)                                                                                  \
  do {                                                                                              \
    cudaError_t e_ = (__VA_ARGS__);                                                                 \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #__VA_ARGS__, cudaGetErrorName(e_)); \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {

using ew::convert;
using bf16 = __nv_bfloat16;

ew::Launch L{};
bool g_quick = false;
bool g_mask_only = false;   // --mask
std::mt19937_64 g_rng(20261122);

template <typename T> const char* tname();
template <> const char* tname<float>() { return "f32"; }
template <> const char* tname<__half>() { return "f16"; }
template <> const char* tname<bf16>() { return "bf16"; }
template <> const char* tname<double>() { return "f64"; }

template <typename T> inline constexpr bool is16 = std::is_same_v<T, __half> || std::is_same_v<T, bf16>;

// host conversions (cuda_fp16.h / cuda_bf16.h conversions are host functions too)
template <typename T> float hf(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(v);
  else return float(v);
}
template <typename T> T ht(float v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, bf16>) return __float2bfloat16_rn(v);
  else return T(v);
}

// ---- device functors: the generated kernels' Fn (map.cu.mako), spelled out per op ------------------
template <typename T, typename = void>
struct Relu {
  __device__ __forceinline__ T operator()(T x) const {
    return convert<T>(ewf::relu_fn<T>{}(convert<float>(x)));
  }
};
template <typename T>
struct Sigmoid {
  __device__ __forceinline__ T operator()(T x) const {
    return convert<T>(ewf::sigmoid_fn<T>{}(convert<float>(x)));
  }
};
template <typename T, typename = void>
struct Add {
  __device__ __forceinline__ T operator()(T x, T y) const {
    return convert<T>(ewf::add_fn<T>{}(convert<float>(x), convert<float>(y)));
  }
};
template <typename T>
struct Add<T, std::enable_if_t<is16<T>>> {
  __device__ __forceinline__ T operator()(T x, T y) const {
    return convert<T>(ewf::add_fn<T>{}(convert<float>(x), convert<float>(y)));
  }
  __device__ __forceinline__ ew::pair_t<T> apply2(ew::pair_t<T> x, ew::pair_t<T> y) const { return __hadd2(x, y); }
};
template <typename T, typename = void>
struct Mul {
  __device__ __forceinline__ T operator()(T x, T y) const {
    return convert<T>(ewf::mul_fn<T>{}(convert<float>(x), convert<float>(y)));
  }
};
template <typename T>
struct Mul<T, std::enable_if_t<is16<T>>> {
  __device__ __forceinline__ T operator()(T x, T y) const {
    return convert<T>(ewf::mul_fn<T>{}(convert<float>(x), convert<float>(y)));
  }
  __device__ __forceinline__ ew::pair_t<T> apply2(ew::pair_t<T> x, ew::pair_t<T> y) const { return __hmul2(x, y); }
};
template <typename T>
struct AddRelu {
  __device__ __forceinline__ T operator()(T x, T y) const {
    return convert<T>(ewf::add_relu_fn<T>{}(convert<float>(x), convert<float>(y)));
  }
};
template <typename T>
struct Fma3 {   // three inputs: x * y + z in float
  __device__ __forceinline__ T operator()(T x, T y, T z) const {
    return convert<T>(fmaf(convert<float>(x), convert<float>(y), convert<float>(z)));
  }
};
template <typename T>
struct Fill {   // no inputs
  float v;
  __device__ __forceinline__ T operator()() const { return convert<T>(v); }
};
struct ToHalf {   // to_float16 from float32, with the spec's paired form
  __device__ __forceinline__ __half operator()(float x) const { return convert<__half>(x); }
  __device__ __forceinline__ __half2 apply2(float2 x) const { return __float22half2_rn(x); }
};
struct ToFloat {   // to_float32 from float16
  __device__ __forceinline__ float operator()(__half x) const { return convert<float>(x); }
};

// gelu_tanh float32 as the library formed it before: the argument 2u in double.
__device__ __forceinline__ float gelu_tanh_f64_arg(float x) {
  if (x < -800.f) return -0.f;
  const double xd = x;
  const double v = 1.5957691216057308 * fma(0.044715 * xd, xd * xd, xd);
  const float vh = static_cast<float>(v);
  const float dv = isfinite(vh) ? static_cast<float>(v - static_cast<double>(vh)) : 0.f;
  const float s = ew::sigmoid(vh);
  return x * fmaf(s * (1.f - s), dv, s);
}
struct GeluTanhOld {
  __device__ __forceinline__ float operator()(float x) const { return gelu_tanh_f64_arg(x); }
};
struct GeluTanhNew {   // the generated kernel's Fn for gelu_tanh float32
  __device__ __forceinline__ float operator()(float x) const { return ewf::gelu_tanh_fn<float>{}(x); }
};

// host references (bit-exact for these ops: float arithmetic, one rounding to T)
template <typename T> T h_relu(T x) { const float v = hf(x); return ht<T>(v < 0.f ? 0.f : v); }
template <typename T> T h_add(T x, T y) { return ht<T>(hf(x) + hf(y)); }
template <typename T> T h_mul(T x, T y) { return ht<T>(hf(x) * hf(y)); }
template <typename T> T h_add_relu(T x, T y) { const float v = hf(x) + hf(y); return ht<T>(v < 0.f ? 0.f : v); }
template <typename T> T h_fma3(T x, T y, T z) { return ht<T>(std::fmaf(hf(x), hf(y), hf(z))); }

// Launch-shape variants of launch_map: v & 1 picks the straddling load (shuffle or two loads),
// v & 2 the tuning (memory or compute).
template <typename F, typename Out, typename... In>
cudaError_t map_variant(int v, const F& f, int64_t n, Out* out, const In*... in) {
  switch (v & 3) {
    case 0: return ew::launch_map_with<ew::MemoryBoundTuning, true>(L, f, n, out, in...);
    case 1: return ew::launch_map_with<ew::MemoryBoundTuning, false>(L, f, n, out, in...);
    case 2: return ew::launch_map_with<ew::ComputeBoundTuning, true>(L, f, n, out, in...);
    default: return ew::launch_map_with<ew::ComputeBoundTuning, false>(L, f, n, out, in...);
  }
}

// The previous launch_map: the widest pack every pointer allows.
template <class Tn, typename F, typename Out, typename... In>
cudaError_t map_narrow(const F& f, int64_t n, Out* out, const In*... in) {
  return ew::with_widest_pack<ew::max_pack<Out, In...>()>(
      [&](auto w) { return ew::launch_pack<Tn, w.value>(L, f, n, out, in...); }, out, in...);
}

// ---- buffers ------------------------------------------------------------------------------------
constexpr unsigned char kPoison = 0xA5;
constexpr int kGuard = 16;   // poisoned elements after each output view

template <typename T>
std::vector<T> random_values(size_t n, float lo = -6.f, float hi = 6.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<T> v(n);
  for (auto& e : v) e = ht<T>(u(g_rng));
  return v;
}

// An input view: an allocation of exactly off + n elements (at least one), the view at +off. The
// `off` elements before the view hold NaN-like junk that must not reach any result.
template <typename T>
struct InView {
  T* base = nullptr;
  int off = 0;
  std::vector<T> host;   // the view's values
  InView(int64_t n, int off_) : off(off_), host(random_values<T>(size_t(n))) {
    const size_t total = std::max<size_t>(1, size_t(off + n));
    CHECK(cudaMalloc(&base, total * sizeof(T)));
    std::vector<T> all(total);
    std::memset(all.data(), 0xff, total * sizeof(T));
    std::copy(host.begin(), host.end(), all.begin() + off);
    CHECK(cudaMemcpy(base, all.data(), total * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~InView() { cudaFree(base); }
  InView(const InView&) = delete;
  const T* ptr() const { return base + off; }
};

// An output view: off poisoned elements, the view, kGuard poisoned elements.
template <typename T>
struct OutView {
  T* base = nullptr;
  int off = 0;
  int64_t n = 0;
  OutView(int64_t n_, int off_) : off(off_), n(n_) {
    CHECK(cudaMalloc(&base, size_t(off + n + kGuard) * sizeof(T)));
    CHECK(cudaMemset(base, kPoison, size_t(off + n + kGuard) * sizeof(T)));
  }
  ~OutView() { cudaFree(base); }
  OutView(const OutView&) = delete;
  T* ptr() { return base + off; }
  // 0 when the view equals want bit for bit and the poison around it is intact
  int64_t verify(const std::vector<T>& want, const char* what) {
    std::vector<T> got(size_t(off + n + kGuard));
    CHECK(cudaMemcpy(got.data(), base, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    const unsigned char* b = reinterpret_cast<const unsigned char*>(got.data());
    for (size_t i = 0; i < size_t(off) * sizeof(T); ++i) bad += b[i] != kPoison;
    for (size_t i = size_t(off + n) * sizeof(T); i < got.size() * sizeof(T); ++i) bad += b[i] != kPoison;
    if (bad) std::printf("FAIL %s: poison around the view overwritten (%lld bytes)\n", what, (long long)bad);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(&got[size_t(off + i)], &want[size_t(i)], sizeof(T)) != 0) {
        if (wrong++ < 3)
          std::printf("FAIL %s: element %lld: got %.9g want %.9g\n", what, (long long)i, double(hf(got[size_t(off + i)])),
                      double(hf(want[size_t(i)])));
      }
    }
    return bad + wrong;
  }
};

struct Tally {
  int64_t cases = 0, failed = 0;
  void add(int64_t bad) { ++cases; failed += bad != 0; }
};
Tally t_map, t_strided, t_api;
int64_t strided_pack_cases = 0, strided_elem_cases = 0;

// ---- (a) launch_map on misaligned views -----------------------------------------------------------
std::vector<int64_t> check_sizes() {
  if (g_quick) return {0, 1, 3, 8, 17, 100, 1029};
  return {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 127, 129, 1000, 4093, 4099, 65541, 300007};
}

template <typename Out, typename In, typename F, typename H>
void check_unary(const char* op, const F& f, H h, int64_t n, int oo, int oi, int v) {
  InView<In> x(n, oi);
  OutView<Out> y(n, oo);
  std::vector<Out> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[size_t(i)] = h(x.host[size_t(i)]);
  CHECK(map_variant(v, f, n, y.ptr(), x.ptr()));
  CHECK(cudaGetLastError());
  char what[160];
  std::snprintf(what, sizeof what, "launch_map %s %s->%s n=%lld out+%d in+%d variant %d", op, tname<In>(), tname<Out>(),
                (long long)n, oo, oi, v);
  t_map.add(y.verify(want, what));
}

template <typename T, typename F, typename H>
void check_binary(const char* op, const F& f, H h, int64_t n, int oo, int oa, int ob, int v) {
  InView<T> a(n, oa), b(n, ob);
  OutView<T> y(n, oo);
  std::vector<T> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[size_t(i)] = h(a.host[size_t(i)], b.host[size_t(i)]);
  CHECK(map_variant(v, f, n, y.ptr(), a.ptr(), b.ptr()));
  CHECK(cudaGetLastError());
  char what[160];
  std::snprintf(what, sizeof what, "launch_map %s %s n=%lld out+%d a+%d b+%d variant %d", op, tname<T>(), (long long)n, oo,
                oa, ob, v);
  t_map.add(y.verify(want, what));
}

template <typename T>
void check_ternary(int64_t n, int oo, int oa, int ob, int oc, int v) {
  InView<T> a(n, oa), b(n, ob), c(n, oc);
  OutView<T> y(n, oo);
  std::vector<T> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[size_t(i)] = h_fma3(a.host[size_t(i)], b.host[size_t(i)], c.host[size_t(i)]);
  CHECK(map_variant(v, Fma3<T>{}, n, y.ptr(), a.ptr(), b.ptr(), c.ptr()));
  char what[160];
  std::snprintf(what, sizeof what, "launch_map fma3 %s n=%lld out+%d +%d +%d +%d variant %d", tname<T>(), (long long)n, oo,
                oa, ob, oc, v);
  t_map.add(y.verify(want, what));
}

template <typename T>
void check_fill(int64_t n, int oo, int v) {
  OutView<T> y(n, oo);
  std::vector<T> want(static_cast<size_t>(n), ht<T>(1.5f));
  CHECK(map_variant(v, Fill<T>{1.5f}, n, y.ptr()));
  char what[120];
  std::snprintf(what, sizeof what, "launch_map fill %s n=%lld out+%d", tname<T>(), (long long)n, oo);
  t_map.add(y.verify(want, what));
}

template <typename T>
void check_map_dtype() {
  const auto sizes = check_sizes();
  const int step = g_quick ? 5 : 1;   // the quick run takes every fifth offset combination
  int v = 0, combo = 0;
  for (int64_t n : sizes)
    for (int oo = 0; oo < 8; ++oo)
      for (int oi = 0; oi < 8; ++oi, ++v)
        if (combo++ % step == 0) check_unary<T, T>("relu", Relu<T>{}, h_relu<T>, n, oo, oi, v);
  const std::vector<int64_t> bsizes = g_quick ? std::vector<int64_t>{0, 3, 17, 1029}
                                              : std::vector<int64_t>{0, 1, 3, 8, 17, 33, 100, 1000, 4099, 65541};
  combo = 0;
  for (int64_t n : bsizes)
    for (int oo = 0; oo < 8; ++oo)
      for (int oa = 0; oa < 8; ++oa)
        for (int ob = 0; ob < 8; ++ob, ++v)
          if (combo++ % (g_quick ? 23 : 1) == 0) check_binary<T>("add", Add<T>{}, h_add<T>, n, oo, oa, ob, v);
  for (int64_t n : {int64_t(0), int64_t(5), int64_t(77), int64_t(4103)})
    for (int k = 0; k < (g_quick ? 6 : 40); ++k, ++v)
      check_ternary<T>(n, int(g_rng() % 8), int(g_rng() % 8), int(g_rng() % 8), int(g_rng() % 8), v);
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1001)})
    for (int oo = 0; oo < 8; ++oo, ++v) check_fill<T>(n, oo, v);
}

void check_map_casts() {
  const auto sizes = check_sizes();
  int v = 0, combo = 0;
  for (int64_t n : sizes)
    for (int oo = 0; oo < 8; ++oo)
      for (int oi = 0; oi < 8; ++oi, ++v) {
        if (combo++ % (g_quick ? 5 : 1) != 0) continue;
        check_unary<__half, float>("cast", ToHalf{}, [](float x) { return __float2half_rn(x); }, n, oo, oi, v);
        check_unary<float, __half>("cast", ToFloat{}, [](__half x) { return __half2float(x); }, n, oo, oi, v);
      }
}

// 64-bit index paths: n past 2^31, checked against launch_naive on the GPU.
__global__ void count_mismatch(const uint16_t* a, const uint16_t* b, int64_t n, unsigned long long* bad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (a[i] != b[i]) atomicAdd(bad, 1ull);
}
__global__ void fill_random_half(__half* p, int64_t n, uint32_t salt) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ uint32_t(i >> 32) * 40503u ^ salt;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    p[i] = __float2half(12.f * (float(h >> 8) * (1.f / 16777216.f)) - 6.f);
  }
}
// out[i] = x[i] + b[i % w] with 64-bit indices: the reference of the big row-bias layout
__global__ void row_bias_ref(__half* out, const __half* x, const __half* b, int64_t n, int64_t w) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half(__half2float(x[i]) + __half2float(b[i % w]));
}

void check_64bit() {
  const int64_t n = (int64_t(1) << 31) + 77;
  const int64_t w = 4096, rows = (int64_t(1) << 31) / w + 1, nb = rows * w;   // the row-bias case below
  const int64_t cap = std::max(n, nb) + 8;
  __half *x, *y, *r, *b;
  unsigned long long* bad;
  CHECK(cudaMalloc(&x, size_t(cap) * 2));
  CHECK(cudaMalloc(&y, size_t(cap) * 2));
  CHECK(cudaMalloc(&r, size_t(cap) * 2));
  CHECK(cudaMalloc(&b, 4096 * 2));
  CHECK(cudaMalloc(&bad, 8));
  fill_random_half<<<4096, 256>>>(x, cap, 99);
  fill_random_half<<<16, 256>>>(b, 4096, 7);
  auto compare = [&](const char* what) {
    CHECK(cudaMemset(bad, 0, 8));
    count_mismatch<<<4096, 256>>>(reinterpret_cast<uint16_t*>(y), reinterpret_cast<uint16_t*>(r), n, bad);
    unsigned long long nb = 0;
    CHECK(cudaMemcpy(&nb, bad, 8, cudaMemcpyDeviceToHost));
    if (nb) std::printf("FAIL %s: %llu mismatches\n", what, nb);
    return int64_t(nb);
  };
  // aligned and straddling forms of relu (output aligned, input at +3)
  CHECK(ew::launch_naive(nullptr, Relu<__half>{}, n, r, x + 3));
  CHECK(cudaMemset(y, kPoison, size_t(n) * 2));
  CHECK(ew::launch_map<ew::MemoryBoundTuning>(L, Relu<__half>{}, n, y, x + 3));
  t_map.add(compare("launch_map relu f16 n=2^31+77 in+3 (64-bit)"));
  CHECK(ew::launch_naive(nullptr, Relu<__half>{}, n, r, x));
  CHECK(cudaMemset(y, kPoison, size_t(n) * 2));
  CHECK(ew::launch_map<ew::ComputeBoundTuning>(L, Relu<__half>{}, n, y, x));
  t_map.add(compare("launch_map relu f16 n=2^31+77 aligned (64-bit)"));
  // strided packs path with 64-bit indices: row bias (2^31/4096 + 1 rows, 4096 columns)
  const int64_t layout[] = {2, rows, w, w, 1, 0, 1};
  row_bias_ref<<<4096, 256>>>(r, x, b, nb, w);
  CHECK(cudaMemset(y, kPoison, size_t(nb) * 2));
  CHECK(ew::launch_map_strided<ew::MemoryBoundTuning>(L, Add<__half>{}, nb, layout, y, x, b));
  CHECK(cudaDeviceSynchronize());
  {
    CHECK(cudaMemset(bad, 0, 8));
    count_mismatch<<<4096, 256>>>(reinterpret_cast<uint16_t*>(y), reinterpret_cast<uint16_t*>(r), nb, bad);
    unsigned long long m = 0;
    CHECK(cudaMemcpy(&m, bad, 8, cudaMemcpyDeviceToHost));
    if (m) std::printf("FAIL launch_map_strided row bias f16 %lldx%lld (64-bit): %llu mismatches\n", (long long)rows,
                       (long long)w, m);
    t_strided.add(int64_t(m));
  }
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(r));
  CHECK(cudaFree(b));
  CHECK(cudaFree(bad));
}

// ---- (a) relu_mask and its backward on misaligned views ---------------------------------------
Tally t_mask;

// The poisoned mask words past the last one must survive too.
int64_t verify_mask(const uint32_t* dev, int64_t words, const std::vector<uint32_t>& want, const char* what) {
  std::vector<uint32_t> got(static_cast<size_t>(words + kGuard));
  CHECK(cudaMemcpy(got.data(), dev, got.size() * 4, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int64_t w = 0; w < words; ++w)
    if (got[size_t(w)] != want[size_t(w)] && bad++ < 3)
      std::printf("FAIL %s: mask word %lld: got %08x want %08x\n", what, (long long)w, got[size_t(w)], want[size_t(w)]);
  for (int64_t w = words; w < words + kGuard; ++w)
    if (got[size_t(w)] != 0xA5A5A5A5u && bad++ < 3) std::printf("FAIL %s: mask poison overwritten\n", what);
  return bad;
}

template <typename T>
void check_relu_mask_case(int64_t n, int ox, int oa, int oy) {   // oa < 0: no addend
  InView<T> x(n, ox);
  std::unique_ptr<InView<T>> a(oa >= 0 ? new InView<T>(n, oa) : nullptr);
  OutView<T> y(n, oy);
  const int64_t words = (n + 31) / 32;
  uint32_t* mask;
  CHECK(cudaMalloc(&mask, size_t(words + kGuard) * 4));
  CHECK(cudaMemset(mask, kPoison, size_t(words + kGuard) * 4));
  std::vector<T> want(static_cast<size_t>(n));
  std::vector<uint32_t> want_mask(static_cast<size_t>(words), 0u);
  for (int64_t i = 0; i < n; ++i) {
    float v = hf(x.host[size_t(i)]);
    if (a) v += hf(a->host[size_t(i)]);
    const bool bit = v > 0.f;
    want[size_t(i)] = (bit || v != v) ? ht<T>(v) : ht<T>(0.f);
    want_mask[size_t(i / 32)] |= uint32_t(bit) << (i % 32);
  }
  CHECK(ew::launch_relu_mask<T, float>(L, n, y.ptr(), mask, x.ptr(), a ? a->ptr() : nullptr));
  CHECK(cudaGetLastError());
  char what[160];
  std::snprintf(what, sizeof what, "relu_mask %s n=%lld x+%d addend%+d y+%d", tname<T>(), (long long)n, ox, oa, oy);
  t_mask.add(y.verify(want, what) + verify_mask(mask, words, want_mask, what));
  CHECK(cudaFree(mask));
}

template <typename T>
void check_mask_backward_case(int64_t n, int od, int ox) {
  InView<T> dy(n, od);
  OutView<T> dx(n, ox);
  const int64_t words = (n + 31) / 32;
  std::vector<uint32_t> m(static_cast<size_t>(std::max<int64_t>(words, 1)));
  for (auto& w : m) w = uint32_t(g_rng());
  if (n % 32) m[size_t(words - 1)] &= (1u << (n % 32)) - 1;
  uint32_t* mask;
  CHECK(cudaMalloc(&mask, m.size() * 4));
  CHECK(cudaMemcpy(mask, m.data(), m.size() * 4, cudaMemcpyHostToDevice));
  std::vector<T> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[size_t(i)] = ((m[size_t(i / 32)] >> (i % 32)) & 1u) ? dy.host[size_t(i)] : ht<T>(0.f);
  CHECK(ew::launch_mask_backward<T>(L, n, dx.ptr(), dy.ptr(), mask));
  char what[160];
  std::snprintf(what, sizeof what, "relu_mask_backward %s n=%lld dy+%d dx+%d", tname<T>(), (long long)n, od, ox);
  t_mask.add(dx.verify(want, what));
  CHECK(cudaFree(mask));
}

template <typename T>
void check_relu_mask_dtype() {
  const std::vector<int64_t> sizes = g_quick ? std::vector<int64_t>{0, 33, 257, 4099}
                                             : std::vector<int64_t>{0, 1, 7, 31, 32, 33, 255, 256, 257, 1000, 4099,
                                                                    65553, 300007};
  for (int64_t n : sizes)
    for (int ox = 0; ox < 8; ++ox) {
      if (g_quick && ox % 3 != 1) continue;
      for (int oa : {-1, ox, (ox + 3) % 8})
        for (int oy : {0, ox}) check_relu_mask_case<T>(n, ox, oa, oy);
      for (int odx : {0, ox}) check_mask_backward_case<T>(n, ox, odx);
    }
}

// ---- (a) launch_map_strided --------------------------------------------------------------------
struct Layout {
  int ndim = 1;
  int64_t shape[8] = {};
  std::vector<std::array<int64_t, 8>> strides;   // per input
  int64_t n() const {
    int64_t p = 1;
    for (int d = 0; d < ndim; ++d) p *= shape[d];
    return p;
  }
  std::vector<int64_t> flat() const {
    std::vector<int64_t> v{ndim};
    for (int d = 0; d < ndim; ++d) v.push_back(shape[d]);
    for (const auto& s : strides)
      for (int d = 0; d < ndim; ++d) v.push_back(s[size_t(d)]);
    return v;
  }
};

// A strided input: an allocation spanning every offset the layout forms (exactly), the element
// of coordinates (0, ..., 0) at `zero`.
template <typename T>
struct StridedIn {
  T* base = nullptr;
  int64_t zero = 0;
  std::vector<T> host;   // the whole allocation
  StridedIn(const Layout& lay, const std::array<int64_t, 8>& s, int lead) {
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < lay.ndim; ++d) {
      if (lay.shape[d] == 0) { lo = hi = 0; break; }
      const int64_t e = (lay.shape[d] - 1) * s[size_t(d)];
      (e < 0 ? lo : hi) += e;
    }
    zero = lead - lo;
    const size_t total = size_t(zero + hi + 1);
    host = random_values<T>(total);
    CHECK(cudaMalloc(&base, total * sizeof(T)));
    CHECK(cudaMemcpy(base, host.data(), total * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~StridedIn() { cudaFree(base); }
  StridedIn(const StridedIn&) = delete;
  const T* ptr() const { return base + zero; }
};

// The conditions of launch_map_strided's packs kernel, restated (to count which path each case took).
bool expect_packs(const Layout& lay, int pack, const std::vector<const void*>& ptrs, size_t esize, const void* out) {
  const int in = lay.ndim - 1;
  if (lay.shape[in] % pack != 0 || !ew::aligned_to(out, pack * esize)) return false;
  for (size_t k = 0; k < lay.strides.size(); ++k) {
    const int64_t s = lay.strides[k][size_t(in)];
    if (s == 0) continue;
    if (s != 1 || !ew::aligned_to(ptrs[k], pack * esize)) return false;
    for (int d = 0; d < in; ++d)
      if (lay.shape[d] > 1 && lay.strides[k][size_t(d)] % pack != 0) return false;
  }
  return true;
}

template <typename T>
void check_strided_case(const Layout& lay, int out_off, int lead, const char* what) {
  const int64_t n = lay.n();
  const int K = int(lay.strides.size());
  std::vector<std::unique_ptr<StridedIn<T>>> ins;
  for (int k = 0; k < K; ++k) ins.emplace_back(new StridedIn<T>(lay, lay.strides[size_t(k)], lead));
  OutView<T> y(n, out_off);
  // CPU reference
  std::vector<T> want(static_cast<size_t>(n));
  std::vector<int64_t> off(static_cast<size_t>(K));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i;
    std::fill(off.begin(), off.end(), 0);
    for (int d = lay.ndim - 1; d >= 0; --d) {
      const int64_t c = rem % lay.shape[d];
      rem /= lay.shape[d];
      for (int k = 0; k < K; ++k) off[size_t(k)] += c * lay.strides[size_t(k)][size_t(d)];
    }
    auto v = [&](int k) { return ins[size_t(k)]->host[size_t(ins[size_t(k)]->zero + off[size_t(k)])]; };
    T r{};
    if (K == 0) r = ht<T>(2.5f);
    else if (K == 1) r = h_relu(v(0));
    else if (K == 2) r = h_add(v(0), v(1));
    else r = h_fma3(v(0), v(1), v(2));
    want[size_t(i)] = r;
  }
  const std::vector<int64_t> flat = lay.flat();
  cudaError_t rc;
  const int tuning = int(g_rng() % 2);
  auto run = [&](auto tn) {
    using Tn = decltype(tn);
    if (K == 0) return ew::launch_map_strided<Tn>(L, Fill<T>{2.5f}, n, flat.data(), y.ptr());
    if (K == 1) return ew::launch_map_strided<Tn>(L, Relu<T>{}, n, flat.data(), y.ptr(), ins[0]->ptr());
    if (K == 2) return ew::launch_map_strided<Tn>(L, Add<T>{}, n, flat.data(), y.ptr(), ins[0]->ptr(), ins[1]->ptr());
    return ew::launch_map_strided<Tn>(L, Fma3<T>{}, n, flat.data(), y.ptr(), ins[0]->ptr(), ins[1]->ptr(),
                                      ins[2]->ptr());
  };
  rc = tuning ? run(ew::ComputeBoundTuning{}) : run(ew::MemoryBoundTuning{});
  CHECK(rc);
  CHECK(cudaGetLastError());
  std::vector<const void*> ptrs;
  for (auto& p : ins) ptrs.push_back(p->ptr());
  if (n > 0) (expect_packs(lay, ew::max_pack<T>(), ptrs, sizeof(T), y.ptr()) ? strided_pack_cases : strided_elem_cases)++;
  std::string desc = std::string("launch_map_strided ") + what + " " + tname<T>() + " shape (";
  for (int d = 0; d < lay.ndim; ++d) desc += std::to_string(lay.shape[d]) + (d + 1 < lay.ndim ? "," : ")");
  for (int k = 0; k < K; ++k) {
    desc += " s" + std::to_string(k) + "(";
    for (int d = 0; d < lay.ndim; ++d) desc += std::to_string(lay.strides[size_t(k)][size_t(d)]) + (d + 1 < lay.ndim ? "," : ")");
  }
  t_strided.add(y.verify(want, desc.c_str()));
}

// A random layout: 1..8 dims, extents mostly small (some 1, rarely 0), each input a view of its
// own buffer in a random dimension order, with padding, broadcast (stride 0) and reversed
// (negative stride) dims.
Layout random_layout(int inputs) {
  Layout lay;
  lay.ndim = 1 + int(g_rng() % 8);
  const int64_t choices[] = {1, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 33, 64};
  int64_t total = 1;
  for (int d = 0; d < lay.ndim; ++d) {
    int64_t e = choices[g_rng() % std::size(choices)];
    if (total * e > 200000) e = 1;
    if (g_rng() % 60 == 0) e = 0;
    lay.shape[d] = e;
    total *= std::max<int64_t>(e, 1);
  }
  for (int k = 0; k < inputs; ++k) {
    std::array<int64_t, 8> s{};
    int order[8];
    for (int d = 0; d < lay.ndim; ++d) order[d] = d;
    if (g_rng() % 3 == 0) std::shuffle(order, order + lay.ndim, g_rng);
    else std::reverse(order, order + lay.ndim);   // C order: innermost first
    int64_t acc = 1 + int64_t(g_rng() % 4 == 0);  // sometimes every other element
    for (int j = 0; j < lay.ndim; ++j) {
      const int d = order[j];
      if (g_rng() % 4 == 0) { s[size_t(d)] = 0; continue; }   // broadcast
      s[size_t(d)] = (g_rng() % 5 == 0) ? -acc : acc;
      acc *= std::max<int64_t>(lay.shape[d], 1) + int64_t(g_rng() % 3 == 0);
    }
    lay.strides.push_back(s);
  }
  return lay;
}

template <typename T>
void check_strided_dtype() {
  constexpr int P = ew::max_pack<T>();
  // the common layouts, on the packs kernel
  for (int64_t m : {1, 3, 64}) {
    for (int64_t w : {int64_t(P), int64_t(4 * P), int64_t(96 * P)}) {
      Layout row;   // row bias: x (m, w) + b (w)
      row.ndim = 2; row.shape[0] = m; row.shape[1] = w;
      row.strides = {{w, 1}, {0, 1}};
      check_strided_case<T>(row, 0, 0, "row bias");
      Layout col;   // column bias: x (m, w) + b (m, 1)
      col.ndim = 2; col.shape[0] = m; col.shape[1] = w;
      col.strides = {{w, 1}, {1, 0}};
      check_strided_case<T>(col, 0, 0, "column bias");
      Layout outer;   // outer product a (m, 1) * b (1, w)
      outer.ndim = 2; outer.shape[0] = m; outer.shape[1] = w;
      outer.strides = {{1, 0}, {0, 1}};
      check_strided_case<T>(outer, 0, 0, "outer");
    }
  }
  for (int64_t a : {1, 2, 5})
    for (int64_t c : {1, 3, 8})
      for (int64_t hw : {int64_t(P), int64_t(7 * P), int64_t(64 * P)}) {
        Layout ch;   // channel bias: x (a, c, hw) + b (c, 1, 1)
        ch.ndim = 3; ch.shape[0] = a; ch.shape[1] = c; ch.shape[2] = hw;
        ch.strides = {{c * hw, hw, 1}, {0, 1, 0}};
        check_strided_case<T>(ch, 0, 0, "channel bias");
      }
  for (int64_t n : {int64_t(P), int64_t(1000 * P), int64_t(3), int64_t(1001)}) {
    Layout sc;   // scalar: x (n) + s ()
    sc.ndim = 1; sc.shape[0] = n;
    sc.strides = {{1}, {0}};
    check_strided_case<T>(sc, 0, 0, "scalar");
    check_strided_case<T>(sc, 1, 0, "scalar, output at +1");   // elements kernel
    check_strided_case<T>(sc, 0, 1, "scalar, x at +1");
  }
  // a reversed view (negative inner stride) and a transposed one
  {
    Layout rev;
    rev.ndim = 2; rev.shape[0] = 33; rev.shape[1] = 40;
    rev.strides = {{40, -1}, {0, 1}};
    check_strided_case<T>(rev, 0, 0, "reversed rows");
    Layout tr;
    tr.ndim = 2; tr.shape[0] = 40; tr.shape[1] = 33;
    tr.strides = {{1, 40}, {33, 1}};
    check_strided_case<T>(tr, 0, 0, "transposed");
  }
  // random layouts, 0..3 inputs
  const int count = g_quick ? 40 : 600;
  for (int i = 0; i < count; ++i) {
    const int k = int(g_rng() % 4);
    const Layout lay = random_layout(k);
    check_strided_case<T>(lay, int(g_rng() % 3 == 0 ? g_rng() % 8 : 0), int(g_rng() % 8), "random");
  }
}

// The contract's error returns.
void check_strided_api() {
  float* p = nullptr;
  CHECK(cudaMalloc(&p, 64 * sizeof(float)));
  const Relu<float> f{};
  const int64_t bad_ndim0[] = {0};
  const int64_t bad_ndim9[] = {9, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const int64_t shape4[] = {1, 4, 1};
  const int64_t neg[] = {1, -4, 1};
  const int64_t empty[] = {2, 3, 0, 1, 1};
  auto expect = [&](cudaError_t got, cudaError_t want, const char* what) {
    if (got != want) std::printf("FAIL api %s: %s, expected %s\n", what, cudaGetErrorName(got), cudaGetErrorName(want));
    t_api.add(got != want);
  };
  expect(ew::launch_map_strided<ew::MemoryBoundTuning>(L, f, 1, bad_ndim0, p, p), cudaErrorInvalidValue, "ndim 0");
  expect(ew::launch_map_strided<ew::MemoryBoundTuning>(L, f, 1, bad_ndim9, p, p), cudaErrorInvalidValue, "ndim 9");
  expect(ew::launch_map_strided<ew::MemoryBoundTuning>(L, f, 5, shape4, p, p), cudaErrorInvalidValue, "n != product");
  expect(ew::launch_map_strided<ew::MemoryBoundTuning>(L, f, 4, neg, p, p), cudaErrorInvalidValue, "negative extent");
  expect(ew::launch_map_strided<ew::MemoryBoundTuning>(L, f, -4, shape4, p, p), cudaErrorInvalidValue, "negative n");
  expect(ew::launch_map_strided<ew::MemoryBoundTuning>(L, f, 0, empty, p, p), cudaSuccess, "n = 0");
  expect(ew::launch_map_strided<ew::MemoryBoundTuning>(L, f, 4, nullptr, p, p), cudaErrorInvalidValue, "null layout");
  expect(ew::launch_map<ew::MemoryBoundTuning>(L, f, 4, p, reinterpret_cast<const float*>(reinterpret_cast<char*>(p) + 2)),
         cudaErrorMisalignedAddress, "launch_map input not aligned to its element");
  CHECK(cudaFree(p));
}

// ---- (c) gelu_tanh float32 accuracy -------------------------------------------------------------
__host__ __device__ inline double ref_sigmoid(double x) {
  const double e = exp(-fabs(x));
  const double r = 1.0 / (1.0 + e);
  return x >= 0 ? r : e * r;
}
// the spec's reference: np.where(x < -800, -0.0, x * sigmoid(1.5957691216057308 * (x + 0.044715 * x**3)))
__host__ __device__ inline double ref_gelu_tanh(double x) {
  if (x < -800) return -0.0;
  return x * ref_sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x));
}

struct ErrStats {
  unsigned long long ratio_key;   // (float bits of err / tolerance) << 32 | input bits, max
  unsigned long long ulp_key;     // (float bits of err in float ulps) << 32 | input bits, max
  unsigned long long rel_key;     // (float bits of err / |ref|, |ref| >= FLT_MIN) << 32 | input bits
  unsigned long long bad;         // beyond the tolerance, or NaN/inf mismatches
};

__device__ __host__ inline float ulp_of(double r) {
  const double a = fabs(r);
  if (a < 1.1754943508222875e-38) return 1.4012984643e-45f;
  int e;
  frexp(a, &e);   // a = m 2^e, m in [0.5, 1)
  return float(ldexp(1.0, e - 24));
}

// per-thread maxima, folded into the global ones once per thread (same-address atomics per
// element would serialise the sweep)
__device__ void account(ErrStats& st, float x, float o, double r) {
  const uint32_t xb = __float_as_uint(x);
  if (isnan(r) || isinf(r)) {
    if (!(isnan(r) ? isnan(o) : double(o) == r)) ++st.bad;
    return;
  }
  if (!isfinite(o)) { ++st.bad; return; }
  const double err = fabs(double(o) - r);
  const double tol = 1e-6 * fabs(r) + 4 * 1.1754943508222875e-38;
  if (!(err <= tol)) ++st.bad;
  const unsigned long long kr = (unsigned long long)__float_as_uint(float(err / tol)) << 32 | xb;
  const unsigned long long ku = (unsigned long long)__float_as_uint(float(err / ulp_of(r))) << 32 | xb;
  st.ratio_key = kr > st.ratio_key ? kr : st.ratio_key;
  st.ulp_key = ku > st.ulp_key ? ku : st.ulp_key;
  if (fabs(r) >= 1.1754943508222875e-38) {
    const unsigned long long kl = (unsigned long long)__float_as_uint(float(err / fabs(r))) << 32 | xb;
    st.rel_key = kl > st.rel_key ? kl : st.rel_key;
  }
}

__device__ void fold(ErrStats* g, const ErrStats& st) {
  atomicMax(&g->ratio_key, st.ratio_key);
  atomicMax(&g->ulp_key, st.ulp_key);
  atomicMax(&g->rel_key, st.rel_key);
  if (st.bad) atomicAdd(&g->bad, st.bad);
}

// every `stride`-th float bit pattern (stride 1: all 2^32), NaN inputs skipped
__global__ void gelu_sweep(uint32_t stride, ErrStats* st_new, ErrStats* st_old) {
  const uint64_t count = ((uint64_t(1) << 32) + stride - 1) / stride;
  ErrStats a{}, b{};
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += uint64_t(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(uint32_t(i * stride));
    if (isnan(x)) continue;
    const double r = ref_gelu_tanh(double(x));
    account(a, x, GeluTanhNew{}(x), r);
    account(b, x, GeluTanhOld{}(x), r);
  }
  fold(st_new, a);
  fold(st_old, b);
}

struct GeluAccuracy {
  double ratio_new, ratio_old, ulp_new, ulp_old, rel_new, rel_old;
  float x_ratio_new, x_ulp_new;
  unsigned long long bad_new, bad_old;
  double host_ratio_new;   // the CPU's double reference, on a random sample
  int64_t host_bad_new, host_samples;
};

GeluAccuracy gelu_accuracy() {
  GeluAccuracy a{};
  ErrStats* st;
  CHECK(cudaMalloc(&st, 2 * sizeof(ErrStats)));
  CHECK(cudaMemset(st, 0, 2 * sizeof(ErrStats)));
  gelu_sweep<<<L.sms * 16, 256>>>(g_quick ? 4099u : 1u, st, st + 1);
  CHECK(cudaGetLastError());
  ErrStats h[2];
  CHECK(cudaMemcpy(h, st, sizeof h, cudaMemcpyDeviceToHost));
  auto hi = [](unsigned long long k) { uint32_t b = uint32_t(k >> 32); float f; std::memcpy(&f, &b, 4); return double(f); };
  auto lo = [](unsigned long long k) { uint32_t b = uint32_t(k); float f; std::memcpy(&f, &b, 4); return f; };
  a.ratio_new = hi(h[0].ratio_key); a.ratio_old = hi(h[1].ratio_key);
  a.ulp_new = hi(h[0].ulp_key); a.ulp_old = hi(h[1].ulp_key);
  a.rel_new = hi(h[0].rel_key); a.rel_old = hi(h[1].rel_key);
  a.x_ratio_new = lo(h[0].ratio_key); a.x_ulp_new = lo(h[0].ulp_key);
  a.bad_new = h[0].bad; a.bad_old = h[1].bad;
  CHECK(cudaFree(st));
  // the same function on the GPU against the CPU's double reference, on magnitudes 1e-6..1e4 of
  // both signs (the GPU tests' sweep) and on [-12, 12]
  const int64_t m = g_quick ? (1 << 14) : (1 << 22);
  std::vector<float> xs(static_cast<size_t>(m)), ys(static_cast<size_t>(m));
  std::uniform_real_distribution<double> lg(-6, 4), lin(-12, 12);
  for (int64_t i = 0; i < m; ++i) {
    const double mag = std::pow(10.0, lg(g_rng));
    xs[size_t(i)] = float(i % 3 == 2 ? lin(g_rng) : (i & 1 ? mag : -mag));
  }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, size_t(m) * 4));
  CHECK(cudaMalloc(&dy, size_t(m) * 4));
  CHECK(cudaMemcpy(dx, xs.data(), size_t(m) * 4, cudaMemcpyHostToDevice));
  CHECK(ew::launch_map<ew::ComputeBoundTuning>(L, GeluTanhNew{}, m, dy, dx));
  CHECK(cudaMemcpy(ys.data(), dy, size_t(m) * 4, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < m; ++i) {
    const double r = ref_gelu_tanh(double(xs[size_t(i)]));
    const double tol = 1e-6 * std::fabs(r) + 4 * 1.1754943508222875e-38;
    const double ratio = std::fabs(double(ys[size_t(i)]) - r) / tol;
    a.host_ratio_new = std::max(a.host_ratio_new, ratio);
    a.host_bad_new += !(ratio <= 1);
  }
  a.host_samples = m;
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  return a;
}

// ---- (b) timings ---------------------------------------------------------------------------------
cudaEvent_t e0, e1;

float median_ms(const std::function<cudaError_t()>& launch, int warm = 5, int runs = 31) {
  std::vector<float> t;
  for (int r = 0; r < warm + runs; ++r) {
    CHECK(cudaEventRecord(e0));
    CHECK(launch());
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= warm) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

__global__ void fill_uniform_bits(uint32_t* p, int64_t words, uint32_t salt, int elem_bytes) {
  // uniform [-6, 6) values of the element type, written as raw words
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ salt;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    const float v0 = 12.f * (float(h >> 8) * (1.f / 16777216.f)) - 6.f;
    const float v1 = 12.f * (float(h & 0xffffu) * (1.f / 65536.f)) - 6.f;
    if (elem_bytes == 4) p[i] = __float_as_uint(v0);
    else if (elem_bytes == 2) p[i] = uint32_t(__half_as_ushort(__float2half(v0))) | uint32_t(__half_as_ushort(__float2half(v1))) << 16;
    else {
      const __nv_bfloat16 a = __float2bfloat16(v0), b = __float2bfloat16(v1);
      p[i] = uint32_t(*reinterpret_cast<const uint16_t*>(&a)) | uint32_t(*reinterpret_cast<const uint16_t*>(&b)) << 16;
    }
  }
}

void* dev_random(size_t bytes, int elem_bytes, uint32_t salt) {
  void* p;
  CHECK(cudaMalloc(&p, bytes));
  fill_uniform_bits<<<4096, 256>>>(static_cast<uint32_t*>(p), int64_t(bytes / 4), salt, elem_bytes);
  CHECK(cudaGetLastError());
  return p;
}

double copy_ceiling_gbs(size_t bytes) {   // device-to-device copy: bytes read + written
  void *a, *b;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemset(a, 1, bytes));
  const float ms = median_ms([&] { return cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

struct MisRow {
  std::string op, dtype;
  double aligned_gbs = 0;
  double same[8] = {}, diff[8] = {}, diff_pair[8] = {}, narrow[8] = {}, mixed[8] = {};   // GB/s per offset
};
std::vector<MisRow> mis_rows;

// relu / sigmoid / add on views at +k: "same" all operands at +k, "diff" output aligned and the
// inputs at +k (through the shuffle and the two-load forms), "narrow" the previous launch_map
// (widest pack all pointers allow) on the diff layout, "mixed" (add) output aligned, a at +k,
// b aligned.
template <typename T>
void time_misaligned() {
  const int64_t n = int64_t(256) << 20 >> (sizeof(T) == 4 ? 2 : 1);   // 256 MiB per operand
  const size_t bytes = size_t(n + 64) * sizeof(T);
  T* x = static_cast<T*>(dev_random(bytes, sizeof(T) == 4 ? 4 : (std::is_same_v<T, __half> ? 2 : 3), 11));
  T* z = static_cast<T*>(dev_random(bytes, sizeof(T) == 4 ? 4 : (std::is_same_v<T, __half> ? 2 : 3), 12));
  T* y;
  CHECK(cudaMalloc(&y, bytes));
  const int64_t m = n - 8;   // every view fits at any offset 0..7
  auto unary = [&](const char* op, auto f, bool compute) {
    MisRow row;
    row.op = op;
    row.dtype = tname<T>();
    const double moved = 2.0 * double(m) * sizeof(T);
    auto gbs = [&](float ms) { return moved / (ms * 1e-3) / 1e9; };
    auto run = [&](bool shfl, int oo, int oi) {
      return [=]() {
        if (compute) return shfl ? ew::launch_map_with<ew::ComputeBoundTuning, true>(L, f, m, y + oo, x + oi)
                                 : ew::launch_map_with<ew::ComputeBoundTuning, false>(L, f, m, y + oo, x + oi);
        return shfl ? ew::launch_map_with<ew::MemoryBoundTuning, true>(L, f, m, y + oo, x + oi)
                    : ew::launch_map_with<ew::MemoryBoundTuning, false>(L, f, m, y + oo, x + oi);
      };
    };
    row.aligned_gbs = gbs(median_ms(run(true, 0, 0)));
    for (int k = 1; k < 8; ++k) {
      row.same[k] = gbs(median_ms(run(true, k, k)));
      row.diff[k] = gbs(median_ms(run(true, 0, k)));
      row.diff_pair[k] = gbs(median_ms(run(false, 0, k)));
      row.narrow[k] = gbs(median_ms([&] {
        return compute ? map_narrow<ew::ComputeBoundTuning>(f, m, y, x + k) : map_narrow<ew::MemoryBoundTuning>(f, m, y, x + k);
      }));
    }
    mis_rows.push_back(row);
  };
  unary("relu", Relu<T>{}, false);
  unary("sigmoid", Sigmoid<T>{}, true);
  {
    MisRow row;
    row.op = "add";
    row.dtype = tname<T>();
    const Add<T> f{};
    const double moved = 3.0 * double(m) * sizeof(T);
    auto gbs = [&](float ms) { return moved / (ms * 1e-3) / 1e9; };
    using Tn = ew::MemoryBoundTuning;
    row.aligned_gbs = gbs(median_ms([&] { return ew::launch_map<Tn>(L, f, m, y, x, z); }));
    for (int k = 1; k < 8; ++k) {
      row.same[k] = gbs(median_ms([&] { return ew::launch_map_with<Tn, true>(L, f, m, y + k, x + k, z + k); }));
      row.diff[k] = gbs(median_ms([&] { return ew::launch_map_with<Tn, true>(L, f, m, y, x + k, z + k); }));
      row.diff_pair[k] = gbs(median_ms([&] { return ew::launch_map_with<Tn, false>(L, f, m, y, x + k, z + k); }));
      row.mixed[k] = gbs(median_ms([&] { return ew::launch_map_with<Tn, true>(L, f, m, y, x + k, z); }));
      row.narrow[k] = gbs(median_ms([&] { return map_narrow<Tn>(f, m, y, x + k, z + k); }));
    }
    mis_rows.push_back(row);
  }
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(z));
}

struct BiasRow {
  std::string layout, op, dtype;
  double gbs, copy_gbs;
};
std::vector<BiasRow> bias_rows;

// Row bias (65536 x 4096) + (4096) and channel bias (64 x 256 x 128 x 128) + (256 x 1 x 1), both
// 2^28 elements; plus, for scale, the channel layout with an odd row (elements kernel).
template <typename T>
void time_bias() {
  const int64_t n = int64_t(1) << 28;
  const int eb = sizeof(T) == 4 ? 4 : (std::is_same_v<T, __half> ? 2 : 3);
  T* x = static_cast<T*>(dev_random(size_t(n) * sizeof(T), eb, 21));
  T* b = static_cast<T*>(dev_random(65536 * sizeof(T), eb, 22));
  T* y;
  CHECK(cudaMalloc(&y, size_t(n) * sizeof(T)));
  const double copy = copy_ceiling_gbs(size_t(n) * sizeof(T));
  const int64_t row[] = {2, 65536, 4096, 4096, 1, 0, 1};
  const int64_t chan[] = {3, 64, 256, 16384, 256 * 16384, 16384, 1, 0, 1, 0};
  const int64_t odd_n = int64_t(64) * 256 * 16383;
  const int64_t odd[] = {3, 64, 256, 16383, 256 * 16383, 16383, 1, 0, 1, 0};
  auto one = [&](const char* lay_name, const int64_t* lay, int64_t count, const char* op, auto f, bool compute = false) {
    // add, mul and add_relu are "memory" ops; the compute shape only for comparison
    const float ms = median_ms([&] {
      return compute ? ew::launch_map_strided<ew::ComputeBoundTuning>(L, f, count, lay, y, x, b)
                     : ew::launch_map_strided<ew::MemoryBoundTuning>(L, f, count, lay, y, x, b);
    });
    bias_rows.push_back({std::string(lay_name) + (compute ? " [compute shape]" : ""), op, tname<T>(),
                         2.0 * double(count) * sizeof(T) / (ms * 1e-3) / 1e9, copy});
  };
  one("row 65536x4096 + 4096", row, n, "add", Add<T>{});
  one("row 65536x4096 + 4096", row, n, "mul", Mul<T>{});
  one("row 65536x4096 + 4096", row, n, "add_relu", AddRelu<T>{});
  one("channel 64x256x128x128 + 256x1x1", chan, n, "add", Add<T>{});
  one("channel 64x256x128x128 + 256x1x1", chan, n, "mul", Mul<T>{});
  one("channel 64x256x128x128 + 256x1x1", chan, n, "add_relu", AddRelu<T>{});
  one("row 65536x4096 + 4096", row, n, "add", Add<T>{}, true);
  one("channel 64x256x128x128 + 256x1x1", chan, n, "add", Add<T>{}, true);
  one("channel 64x256x16383 + 256x1 (elements kernel)", odd, odd_n, "add", Add<T>{});
  CHECK(cudaFree(x));
  CHECK(cudaFree(b));
  CHECK(cudaFree(y));
}

struct MaskRow {
  std::string what, dtype;
  double aligned, shifted, both;   // GB/s: aligned; input(s) at +1 with the output aligned; all at +1
};
std::vector<MaskRow> mask_rows;

// relu_mask forward (x, y and the mask) and backward (dy, dx and the mask) at 256 MiB per operand.
template <typename T>
void time_relu_mask() {
  const int64_t n = int64_t(256) << 20 >> (sizeof(T) == 4 ? 2 : 1);
  const int eb = sizeof(T) == 4 ? 4 : (std::is_same_v<T, __half> ? 2 : 3);
  T* x = static_cast<T*>(dev_random(size_t(n + 64) * sizeof(T), eb, 41));
  T* y;
  uint32_t* mask;
  CHECK(cudaMalloc(&y, size_t(n + 64) * sizeof(T)));
  CHECK(cudaMalloc(&mask, size_t(n / 32 + 64) * 4));
  const int64_t m = n - 8;
  const double moved = 2.0 * double(m) * sizeof(T) + double(m) / 8;
  auto gbs = [&](float ms) { return moved / (ms * 1e-3) / 1e9; };
  MaskRow f{"relu_mask forward", tname<T>(), 0, 0, 0};
  f.aligned = gbs(median_ms([&] { return ew::launch_relu_mask<T, float>(L, m, y, mask, x, nullptr); }));
  f.shifted = gbs(median_ms([&] { return ew::launch_relu_mask<T, float>(L, m, y, mask, x + 1, nullptr); }));
  f.both = gbs(median_ms([&] { return ew::launch_relu_mask<T, float>(L, m, y + 1, mask, x + 1, nullptr); }));
  mask_rows.push_back(f);
  MaskRow b{"relu_mask backward", tname<T>(), 0, 0, 0};
  b.aligned = gbs(median_ms([&] { return ew::launch_mask_backward<T>(L, m, y, x, mask); }));
  b.shifted = gbs(median_ms([&] { return ew::launch_mask_backward<T>(L, m, y, x + 1, mask); }));
  b.both = gbs(median_ms([&] { return ew::launch_mask_backward<T>(L, m, y + 1, x + 1, mask); }));
  mask_rows.push_back(b);
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(mask));
}

void print_mask_rows() {
  std::printf("\n## relu_mask: GB/s (x, y and the mask bits; backward dy, dx and the mask)\n\n");
  std::printf("| kernel | dtype | aligned | input at +1, output aligned | all at +1 (narrow packs) |\n|---|---|---|---|---|\n");
  for (const auto& r : mask_rows)
    std::printf("| %s | %s | %.0f | %.0f (%.1f%%) | %.0f (%.1f%%) |\n", r.what.c_str(), r.dtype.c_str(), r.aligned, r.shifted,
                100 * r.shifted / r.aligned, r.both, 100 * r.both / r.aligned);
}

// Launch shapes for float32 gelu_tanh (new form) and relu at 2^28, after the sustained run below:
// the generator's two shapes and a few others.
struct ShapeRow {
  std::string shape;
  double gelu_gbs, relu_gbs;
};
std::vector<ShapeRow> shape_rows;

template <class Tn>
void time_shape(const char* name, float* y, const float* x, int64_t n) {
  const double moved = 8.0 * double(n);
  const float tg = median_ms([&] { return ew::launch_map<Tn>(L, GeluTanhNew{}, n, y, x); });
  const float tr = median_ms([&] { return ew::launch_map<Tn>(L, Relu<float>{}, n, y, x); });
  shape_rows.push_back({name, moved / (tg * 1e-3) / 1e9, moved / (tr * 1e-3) / 1e9});
}

struct GeluSpeed {
  double old_gbs, new_gbs, copy_gbs;
};

// gelu_tanh float32 at 2^28 elements with its generated tuning ("compute"), old and new forms
// alternating after 2 s of sustained launches, so both run at the clock the GPU settles to under
// load.
GeluSpeed time_gelu() {
  const int64_t n = int64_t(1) << 28;
  float* x = static_cast<float*>(dev_random(size_t(n) * 4, 4, 31));
  float* y;
  CHECK(cudaMalloc(&y, size_t(n) * 4));
  GeluSpeed s{};
  s.copy_gbs = copy_ceiling_gbs(size_t(n) * 4);
  using Tn = ew::ComputeBoundTuning;
  CHECK(cudaEventRecord(e0));
  for (int r = 0;; ++r) {   // about 2 s of back-to-back launches
    CHECK(ew::launch_map<Tn>(L, GeluTanhOld{}, n, y, x));
    CHECK(ew::launch_map<Tn>(L, GeluTanhNew{}, n, y, x));
    if (r % 50 == 49) {
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (ms > 2000) break;
    }
  }
  std::vector<float> to, tn;
  for (int r = 0; r < 61; ++r) {
    to.push_back(median_ms([&] { return ew::launch_map<Tn>(L, GeluTanhOld{}, n, y, x); }, 0, 1));
    tn.push_back(median_ms([&] { return ew::launch_map<Tn>(L, GeluTanhNew{}, n, y, x); }, 0, 1));
  }
  std::sort(to.begin(), to.end());
  std::sort(tn.begin(), tn.end());
  s.old_gbs = 8.0 * double(n) / (to[to.size() / 2] * 1e-3) / 1e9;
  s.new_gbs = 8.0 * double(n) / (tn[tn.size() / 2] * 1e-3) / 1e9;
  time_shape<ew::ComputeBoundTuning>("compute: tile b128 u2 w32 (gelu_tanh's)", y, x, n);
  time_shape<ew::MemoryBoundTuning>("memory: tile b256 u1 uncapped (relu's)", y, x, n);
  time_shape<ew::Tuning<128, 1, 0, true, 0>>("tile b128 u1 uncapped", y, x, n);
  time_shape<ew::Tuning<128, 2, 0, true, 0>>("tile b128 u2 uncapped", y, x, n);
  time_shape<ew::Tuning<256, 2, 0, true, 0>>("tile b256 u2 uncapped", y, x, n);
  time_shape<ew::Tuning<128, 4, 0, true, 0>>("tile b128 u4 uncapped", y, x, n);
  time_shape<ew::Tuning<256, 2, 32, false, 0>>("stride b256 u2 w32", y, x, n);
  time_shape<ew::Tuning<128, 2, 32, true, 1>>("tile b128 u2 w32 st.cs", y, x, n);
  time_shape<ew::Tuning<512, 1, 0, true, 0>>("tile b512 u1 uncapped", y, x, n);
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check") == 0) g_quick = true;
    else if (std::strcmp(argv[i], "--mask") == 0) g_mask_only = true;
    else { std::fprintf(stderr, "usage: %s [--check | --mask]\n", argv[0]); return 2; }
  }
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  L = ew::Launch{nullptr, prop.multiProcessorCount, prop.maxThreadsPerMultiProcessor};
  std::printf("# %s, %d SMs, L2 %d MiB%s\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
              g_quick ? "; --check: checks on small sizes only" : "");
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  if (g_mask_only) {
    check_relu_mask_dtype<float>();
    check_relu_mask_dtype<__half>();
    check_relu_mask_dtype<bf16>();
    CHECK(cudaDeviceSynchronize());
    std::printf("checks: relu_mask/backward %lld cases, %lld failed\n", (long long)t_mask.cases, (long long)t_mask.failed);
    time_relu_mask<float>();
    time_relu_mask<__half>();
    time_relu_mask<bf16>();
    print_mask_rows();
    return t_mask.failed == 0 ? 0 : 1;
  }

  // (a) correctness
  check_strided_api();
  check_map_dtype<float>();
  check_map_dtype<__half>();
  check_map_dtype<bf16>();
  check_map_casts();
  check_relu_mask_dtype<float>();
  check_relu_mask_dtype<__half>();
  check_relu_mask_dtype<bf16>();
  check_strided_dtype<float>();
  check_strided_dtype<__half>();
  check_strided_dtype<bf16>();
  check_strided_dtype<double>();
  if (!g_quick) check_64bit();
  CHECK(cudaDeviceSynchronize());
  std::printf("checks: relu_mask/backward %lld cases, %lld failed\n", (long long)t_mask.cases, (long long)t_mask.failed);
  std::printf("checks: launch_map %lld cases, %lld failed; launch_map_strided %lld cases (%lld packs kernel, %lld elements "
              "kernel), %lld failed; api %lld cases, %lld failed\n",
              (long long)t_map.cases, (long long)t_map.failed, (long long)t_strided.cases, (long long)strided_pack_cases,
              (long long)strided_elem_cases, (long long)t_strided.failed, (long long)t_api.cases, (long long)t_api.failed);
  std::fflush(stdout);

  // (c) accuracy
  const GeluAccuracy acc = gelu_accuracy();
  std::printf("gelu_tanh f32 accuracy over %s float inputs: new (float-float): max %.3g ulp (x = %.9g), max rel %.3g, "
              "max err/tolerance %.3f (x = %.9g), %llu beyond tolerance; old (double argument): max %.3g ulp, max rel "
              "%.3g, max err/tolerance %.3f, %llu beyond; CPU double reference on %lld samples: new max err/tolerance "
              "%.3f, %lld beyond\n",
              g_quick ? "every 4099th of the 2^32" : "all 2^32", acc.ulp_new, acc.x_ulp_new, acc.rel_new, acc.ratio_new,
              acc.x_ratio_new, acc.bad_new, acc.ulp_old, acc.rel_old, acc.ratio_old, acc.bad_old, (long long)acc.host_samples,
              acc.host_ratio_new, (long long)acc.host_bad_new);
  std::fflush(stdout);
  const bool ok = t_mask.failed == 0 && t_map.failed == 0 && t_strided.failed == 0 && t_api.failed == 0 && acc.bad_new == 0 && acc.host_bad_new == 0;
  if (g_quick) {
    std::printf("%s\n", ok ? "ALL CHECKS PASSED" : "CHECKS FAILED");
    return ok ? 0 : 1;
  }

  // (b) timings
  time_misaligned<float>();
  time_misaligned<__half>();
  time_misaligned<bf16>();
  time_bias<float>();
  time_bias<__half>();
  time_bias<bf16>();
  time_relu_mask<float>();
  time_relu_mask<__half>();
  time_relu_mask<bf16>();
  const GeluSpeed gs = time_gelu();

  // full tables
  std::printf("\n## Misaligned views: GB/s (bytes of every operand), offsets in elements\n\n");
  std::printf("| op | dtype | aligned | mode | +1 | +2 | +3 | +4 | +5 | +6 | +7 | min %% of aligned |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : mis_rows) {
    auto line = [&](const char* mode, const double* v) {
      double mn = 1e9;
      std::printf("| %s | %s | %.0f | %s |", r.op.c_str(), r.dtype.c_str(), r.aligned_gbs, mode);
      for (int k = 1; k < 8; ++k) {
        std::printf(" %.0f |", v[k]);
        mn = std::min(mn, 100.0 * v[k] / r.aligned_gbs);
      }
      std::printf(" %.1f |\n", mn);
    };
    line("same offset (prologue)", r.same);
    line("inputs +k, out aligned (shuffle)", r.diff);
    line("inputs +k, out aligned (two loads)", r.diff_pair);
    if (r.op == "add") line("a +k, b and out aligned", r.mixed);
    line("inputs +k: previous narrow pack", r.narrow);
  }
  std::printf("\n## Bias adds (launch_map_strided): GB/s counting the big input and the output\n\n");
  std::printf("| layout | op | dtype | GB/s | copy GB/s | %% of copy |\n|---|---|---|---|---|---|\n");
  for (const auto& r : bias_rows)
    std::printf("| %s | %s | %s | %.0f | %.0f | %.1f |\n", r.layout.c_str(), r.op.c_str(), r.dtype.c_str(), r.gbs, r.copy_gbs,
                100.0 * r.gbs / r.copy_gbs);

  print_mask_rows();
  std::printf("\n## Launch shapes, float32 at 2^28 (GB/s; %% of the copy ceiling %.0f)\n\n| shape | gelu_tanh (new) | relu |\n|---|---|---|\n", gs.copy_gbs);
  for (const auto& r : shape_rows)
    std::printf("| %s | %.0f (%.1f%%) | %.0f (%.1f%%) |\n", r.shape.c_str(), r.gelu_gbs, 100 * r.gelu_gbs / gs.copy_gbs, r.relu_gbs,
                100 * r.relu_gbs / gs.copy_gbs);

  // summary, last
  std::printf("\n## Summary\n\n| what | figure |\n|---|---|\n");
  std::printf("| checks | relu_mask %lld/%lld, launch_map %lld/%lld, launch_map_strided %lld/%lld (%lld packs, %lld elements), api %lld/%lld passed |\n",
              (long long)(t_mask.cases - t_mask.failed), (long long)t_mask.cases,
              (long long)(t_map.cases - t_map.failed), (long long)t_map.cases, (long long)(t_strided.cases - t_strided.failed),
              (long long)t_strided.cases, (long long)strided_pack_cases, (long long)strided_elem_cases,
              (long long)(t_api.cases - t_api.failed), (long long)t_api.cases);
  for (const auto& r : mis_rows) {
    double ms = 1e9, md = 1e9, mp = 1e9, mn = 1e9;
    for (int k = 1; k < 8; ++k) {
      ms = std::min(ms, r.same[k] / r.aligned_gbs);
      md = std::min(md, r.diff[k] / r.aligned_gbs);
      mp = std::min(mp, r.diff_pair[k] / r.aligned_gbs);
      mn = std::min(mn, r.narrow[k] / r.aligned_gbs);
    }
    std::printf("| %s %s views +1..+7, min %% of aligned (%.0f GB/s) | same %.1f, diff %.1f (two loads %.1f; previous %.1f) |\n",
                r.op.c_str(), r.dtype.c_str(), r.aligned_gbs, 100 * ms, 100 * md, 100 * mp, 100 * mn);
  }
  for (const auto& r : bias_rows)
    if (r.layout.find("elements") == std::string::npos && r.layout.find("compute") == std::string::npos)
      std::printf("| %s %s %s | %.1f%% of copy |\n", r.layout.substr(0, r.layout.find(' ')).c_str(), r.op.c_str(),
                  r.dtype.c_str(), 100.0 * r.gbs / r.copy_gbs);
  std::printf("| gelu_tanh f32 2^28, sustained | old (double arg) %.0f GB/s = %.1f%%, new (float-float) %.0f GB/s = %.1f%% of copy %.0f |\n",
              gs.old_gbs, 100 * gs.old_gbs / gs.copy_gbs, gs.new_gbs, 100 * gs.new_gbs / gs.copy_gbs, gs.copy_gbs);
  for (const auto& r : mask_rows)
    std::printf("| %s %s, input at +1 | %.1f%% of aligned (%.0f GB/s) |\n", r.what.c_str(), r.dtype.c_str(),
                100 * r.shifted / r.aligned, r.aligned);
  for (const auto& r : shape_rows)
    if (r.shape.rfind("compute", 0) == 0 || r.shape.rfind("memory", 0) == 0)
      std::printf("| gelu_tanh f32 new, %s | %.1f%% of copy |\n", r.shape.c_str(), 100 * r.gelu_gbs / gs.copy_gbs);
  std::printf("| gelu_tanh f32 accuracy, all floats | new %.2f ulp, err/tol %.3f, %llu bad; old %.2f ulp, err/tol %.3f |\n", acc.ulp_new,
              acc.ratio_new, acc.bad_new, acc.ulp_old, acc.ratio_old);
  std::printf("%s\n", ok ? "ALL CHECKS PASSED" : "CHECKS FAILED");
  return ok ? 0 : 1;
}
