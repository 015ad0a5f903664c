// One-off experiment (2026-11-27): where CUDA's float32 tanf, acoshf, erfcf and powf, and logaddexp's
// float formula, stay within 2 ulp of the correctly rounded result, binade by binade, and what
// forms that use them there (libew/ew_numpy.cuh's double forms elsewhere) cost. Errors against CUDA's
// double functions over every float32 input (hashed pairs for the two-input ones); time at 2^28
// elements and evaluations per second with the data in L2. From the checkout's root:
//   nvcc -O3 -std=c++17 -arch=sm_90 -Ilibew -Ibuild/gen -o /tmp/float32_hybrids \
//     benchmarks/experiments/float32_hybrids.cu && /tmp/float32_hybrids
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cstring>
#include "ew_numpy.cuh"

namespace cand {
__device__ __forceinline__ float lae_float(float a, float b) {
  const float m = fmaxf(a, b), r = m + log1pf(expf(-fabsf(a - b)));
  return a == b ? a + 0.693147182f : (a - b != a - b ? a - b : r);
}
}  // namespace cand

struct Stat {
  unsigned long long best, nan_bad, inf_bad, over1, over15, over2, slow;
  unsigned long long bins[512];
};

// ---- one input ---------------------------------------------------------------------------------
template <int F> __device__ float f1(float x);
template <int F> __device__ double r1(double x);
#define ONE(X)                                                                                       \
  X(0, tanf(x), tan(d), "tanf (CUDA)")                                                               \
  X(1, ew::np::tan<float>(x), tan(d), "tan, library (double)")                                       \
  X(2, (fabsf(x) < 65536.0f ? tanf(x) : ew::np::tan<float>(x)), tan(d), "tan: tanf below 2^16")     \
  X(3, acoshf(x), acosh(d), "acoshf (CUDA)")                                                         \
  X(4, ew::np::arccosh<float>(x), acosh(d), "acosh, library (double)")                               \
  X(5, (x >= 2.0f ? acoshf(x) : ew::np::arccosh<float>(x)), acosh(d), "acosh: acoshf from 2")       \
  X(6, erfcf(x), erfc(d), "erfcf (CUDA)")                                                            \
  X(7, ew::np::erfc<float>(x), erfc(d), "erfc, library (double)")                                    \
  X(8, (x < 9.0f ? erfcf(x) : ew::np::erfc<float>(x)), erfc(d), "erfc: erfcf below 9")
#define DEF1(i, expr, ref, name) \
  template <> __device__ float f1<i>(float x) { return expr; } \
  template <> __device__ double r1<i>(double d) { return ref; }
ONE(DEF1)
#define NAME(i, expr, ref, name) name,
static const char* kNames1[] = {ONE(NAME)};
#define COUNT(i, expr, ref, name) +1
constexpr int kCount1 = 0 ONE(COUNT);

__device__ __forceinline__ double ulps(double got, double ref) {
  int e = ref == 0.0 ? -125 : ilogb(ref) + 1;
  e = e < -125 ? -125 : e;
  return fabs(got - ref) / ldexp(1.0, e - 24);
}
__device__ __forceinline__ void note(Stat* st, float gotf, double ref, unsigned key_lo, int bin,
                                     unsigned long long& best, unsigned long long* c) {
  if (isnan(ref) != isnan(gotf)) { ++c[0]; return; }
  if (isnan(ref)) return;
  const float rf = (float)ref;
  if (isinf(rf)) { if (gotf != rf) ++c[1]; return; }
  const double err = ulps((double)gotf, ref);
  if (err > 1.0) ++c[2];
  if (err > 1.5) ++c[3];
  if (err > 2.0) ++c[4];
  const unsigned long long key = ((unsigned long long)__float_as_uint((float)err) << 32) | key_lo;
  best = key > best ? key : best;
  if (err > 1.5) atomicMax(&st->bins[bin], key);
}
__device__ void flush(Stat* st, unsigned long long best, unsigned long long* c) {
  for (int o = 16; o; o >>= 1) {
    best = max(best, __shfl_xor_sync(~0u, best, o));
    for (int k = 0; k < 5; ++k) c[k] += __shfl_xor_sync(~0u, c[k], o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&st->best, best);
    atomicAdd(&st->nan_bad, c[0]); atomicAdd(&st->inf_bad, c[1]);
    atomicAdd(&st->over1, c[2]); atomicAdd(&st->over15, c[3]); atomicAdd(&st->over2, c[4]);
  }
}

template <int F>
__global__ void ulp1_kernel(Stat* st, unsigned long long start, unsigned long long n) {
  unsigned long long best = 0, c[5] = {0, 0, 0, 0, 0};
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
    const unsigned bits = (unsigned)(start + i);
    const float x = __uint_as_float(bits);
    note(st, f1<F>(x), r1<F>((double)x), bits, bits >> 23, best, c);
  }
  flush(st, best, c);
}

// ---- two inputs ------------------------------------------------------------------------------------
template <int F> __device__ float f2(float a, float b);
template <int F> __device__ double r2(double a, double b);
__device__ __forceinline__ double lae_ref(double a, double b) {
  if (a == b) return a + 0.69314718055994530942;
  const double m = fmax(a, b);
  return m + log1p(exp(-fabs(a - b)));
}
#define TWO(X)                                                                                        \
  X(0, powf(a, b), pow(da, db), "powf (CUDA)")                                                        \
  X(1, ew::np::power<float>(a, b), pow(da, db), "power, library (double)")                            \
  X(2, ([&] { const float r = powf(a, b); return fabsf(r) >= 1.17549435e-38f && fabsf(r) < 3.4e38f ? r : ew::np::power<float>(a, b); }()), pow(da, db), "power: powf where normal") \
  X(3, cand::lae_float(a, b), lae_ref(da, db), "logaddexp in float")                                  \
  X(4, ew::np::logaddexp<float>(a, b), lae_ref(da, db), "logaddexp, library (double)")
#define DEF2(i, expr, ref, name) \
  template <> __device__ float f2<i>(float a, float b) { return expr; } \
  template <> __device__ double r2<i>(double da, double db) { return ref; }
TWO(DEF2)
static const char* kNames2[] = {TWO(NAME)};
constexpr int kCount2 = 0 TWO(COUNT);

__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull; z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ float uni(unsigned long long z, int shift, float lo, float hi) {
  return lo + (hi - lo) * (float)((z >> shift) & 0xffffff) * (1.0f / 16777216.0f);
}
// modes: 0 random bits; 1 a in 2^[-12, 12) (random sign), b in [-24, 24); 2 a = 1 +- 2^[-24, -4),
// b = +-2^[4, 26); 3 integer b in [-64, 64], a in 2^[-3, 3) of either sign; 4 a and b in (-8, 8)
// (logaddexp's cancellation); 5 a and b = +-[0.1, 4) (the bench's data)
__device__ void pair(unsigned long long z, int mode, float& a, float& b) {
  a = __uint_as_float((unsigned)z); b = __uint_as_float((unsigned)(z >> 32));
  const float sa = (z >> 63) ? -1.0f : 1.0f, sb = ((z >> 62) & 1) ? -1.0f : 1.0f;
  if (mode == 1) { a = sa * exp2f(uni(z, 0, -12.0f, 12.0f)); b = uni(z, 24, -24.0f, 24.0f); }
  if (mode == 2) { a = 1.0f + sa * exp2f(uni(z, 0, -24.0f, -4.0f)); b = sb * exp2f(uni(z, 24, 4.0f, 26.0f)); }
  if (mode == 3) { a = sa * exp2f(uni(z, 0, -3.0f, 3.0f)); b = (float)((int)((z >> 24) % 129) - 64); }
  if (mode == 4) { a = uni(z, 0, -8.0f, 8.0f); b = uni(z, 24, -8.0f, 8.0f); }
  if (mode == 5) { a = sa * uni(z, 0, 0.1f, 4.0f); b = sb * uni(z, 24, 0.1f, 4.0f); }
}
template <int F>
__global__ void ulp2_kernel(Stat* st, unsigned long long start, unsigned long long n, int mode, int bin_by_first) {
  unsigned long long best = 0, c[5] = {0, 0, 0, 0, 0};
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
    float a, b;
    pair(mix(start + i + ((unsigned long long)mode << 40)), mode, a, b);
    const double ref = r2<F>((double)a, (double)b);
    const float bf = bin_by_first ? fmaxf(a, b) : (float)ref;
    note(st, f2<F>(a, b), ref, (unsigned)i, __float_as_uint(bf) >> 23, best, c);
  }
  flush(st, best, c);
}

// ---- timing -------------------------------------------------------------------------------------------
template <int F>
__global__ void map1(const float4* __restrict__ x, float4* __restrict__ y, size_t n4) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
    float4 v = x[i];
    v.x = f1<F>(v.x); v.y = f1<F>(v.y); v.z = f1<F>(v.z); v.w = f1<F>(v.w);
    y[i] = v;
  }
}
template <int F>
__global__ void map2(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ y, size_t n4) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
    float4 u = a[i], v = b[i];
    u.x = f2<F>(u.x, v.x); u.y = f2<F>(u.y, v.y); u.z = f2<F>(u.z, v.z); u.w = f2<F>(u.w, v.w);
    y[i] = u;
  }
}
template <int F>
__global__ void tput1(const float* __restrict__ x, float* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i], acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) { acc += f1<F>(v); v *= 1.00000012f; }
    y[i] = acc;
  }
}
template <int F>
__global__ void tput2(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float u = a[i], v = b[i], acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) { acc += f2<F>(u, v); v *= 1.00000012f; }
    y[i] = acc;
  }
}
__global__ void copy_kernel(const float4* __restrict__ x, float4* __restrict__ y, size_t n4) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) y[i] = x[i];
}
template <class L>
float median_ms(L launch, int reps) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<float> t;
  for (int i = 0; i < 3; ++i) launch();
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a); launch(); cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int sms;
void report(Stat* st, const char* what, bool input_bits) {
  float ev; unsigned eb = (unsigned)(st->best >> 32); memcpy(&ev, &eb, 4);
  float xv; unsigned xb = (unsigned)st->best; memcpy(&xv, &xb, 4);
  printf("    %s: max %.3f ulp", what, ev);
  if (input_bits) printf(" at %.9g", xv);
  printf("; >1: %llu, >1.5: %llu, >2: %llu; nan_bad %llu inf_bad %llu\n", st->over1, st->over15, st->over2, st->nan_bad, st->inf_bad);
  int shown = 0;
  for (int k = 0; k < 512 && shown < 40; ++k) if (st->bins[k]) {
    float e2; unsigned b2 = (unsigned)(st->bins[k] >> 32); memcpy(&e2, &b2, 4);
    float x2; unsigned c2 = (unsigned)st->bins[k]; memcpy(&x2, &c2, 4);
    printf("      bin %c2^%d: %.3f", k >= 256 ? '-' : '+', (k & 255) - 127, e2);
    if (input_bits) printf(" at %.9g", x2);
    printf("\n");
    ++shown;
  }
}

template <int F>
void run1(float4* big, float4* out, size_t n4, float4** l2, float4* l2o, size_t l24, float copy_ms) {
  Stat* st; cudaMallocManaged(&st, sizeof(Stat)); memset(st, 0, sizeof(Stat));
  for (unsigned long long s = 0; s < (1ull << 32); s += (1ull << 30)) ulp1_kernel<F><<<sms * 16, 256>>>(st, s, 1ull << 30);
  cudaDeviceSynchronize();
  const float ms = median_ms([&] { map1<F><<<sms * 8, 256>>>(big, out, n4); }, 15);
  float t[2];
  for (int k = 0; k < 2; ++k) t[k] = median_ms([&] { tput1<F><<<sms * 8, 256>>>((const float*)l2[k], (float*)l2o, l24 * 4); }, 41);
  printf("%-28s 2^28 bench data: %.3f ms (%.1f%% of copy) | G evals/s: bench data %.0f, [1,4) %.0f\n", kNames1[F], ms,
         100.0 * copy_ms / ms, l24 * 32 / t[0] / 1e6, l24 * 32 / t[1] / 1e6);
  report(st, "every input", true);
  cudaFree(st);
  cudaError_t e = cudaGetLastError();
  if (e) printf("  CUDA error %s\n", cudaGetErrorString(e));
}
template <int F>
void run2(float4* a, float4* b, float4* out, size_t n4, float** l2, float* l2o, size_t ln, float copy3_ms, int bin_by_first) {
  const float ms = median_ms([&] { map2<F><<<sms * 8, 256>>>(a, b, out, n4); }, 15);
  const float t = median_ms([&] { tput2<F><<<sms * 8, 256>>>(l2[0], l2[1], l2o, ln); }, 41);
  printf("%-28s 2^28 bench data: %.3f ms (%.1f%% of copy) | G evals/s: bench data %.0f; bins by %s\n", kNames2[F], ms,
         100.0 * copy3_ms / ms, ln * 8 / t / 1e6, bin_by_first ? "max(a, b)" : "the result");
  static const char* kModes[] = {"random bits", "a 2^[-12,12), b [-24,24)", "a = 1 +- 2^[-24,-4), b +-2^[4,26)",
                                 "integer b [-64,64]", "a, b in (-8,8)", "bench data +-[0.1,4)"};
  Stat* st; cudaMallocManaged(&st, sizeof(Stat));
  for (int mode = 0; mode < 6; ++mode) {
    memset(st, 0, sizeof(Stat));
    for (unsigned long long s = 0; s < (1ull << 32); s += (1ull << 30)) ulp2_kernel<F><<<sms * 16, 256>>>(st, s, 1ull << 30, mode, bin_by_first);
    cudaDeviceSynchronize();
    report(st, kModes[mode], false);
  }
  cudaFree(st);
  cudaError_t e = cudaGetLastError();
  if (e) printf("  CUDA error %s\n", cudaGetErrorString(e));
}

template <int... F>
void all1(std::integer_sequence<int, F...>, float4* a, float4* b, size_t n4, float4** l2, float4* l2o, size_t l24, float c) {
  (run1<F>(a, b, n4, l2, l2o, l24, c), ...);
}
template <int... F>
void all2(std::integer_sequence<int, F...>, float4* a, float4* c, float4* b, size_t n4, float** l2, float* l2o, size_t ln, float c3) {
  (run2<F>(a, c, b, n4, l2, l2o, ln, c3, F >= 3), ...);
}

int main() {
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t n = 1ull << 28, n4 = n / 4, l2n = 1ull << 22, l24 = l2n / 4;
  std::vector<float> h(n);
  uint64_t s = 12345;
  auto rnd = [&] { s = s * 6364136223846793005ull + 1442695040888963407ull; return (float)((s >> 40) * (1.0 / (1ull << 24))); };
  for (size_t i = 0; i < (1 << 20); ++i) { float v = rnd() * 3.9f + 0.1f; h[i] = (rnd() < 0.5f) ? -v : v; }
  for (size_t i = 1 << 20; i < n; ++i) h[i] = h[i & ((1 << 20) - 1)];
  float4 *a, *b, *c, *l2[2], *l2o;
  cudaMalloc(&a, n * 4); cudaMalloc(&b, n * 4); cudaMalloc(&c, n * 4);
  cudaMemcpy(a, h.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(c, h.data() + 12345, (n - 12345) * 4, cudaMemcpyHostToDevice);
  std::vector<float> d1(l2n);
  for (size_t i = 0; i < l2n; ++i) d1[i] = 1.0f + rnd() * 3.0f;
  for (int k = 0; k < 2; ++k) cudaMalloc(&l2[k], l2n * 4);
  cudaMalloc(&l2o, l2n * 4);
  cudaMemcpy(l2[0], h.data(), l2n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(l2[1], d1.data(), l2n * 4, cudaMemcpyHostToDevice);
  const float copy_ms = median_ms([&] { copy_kernel<<<sms * 8, 256>>>(a, b, n4); }, 15);
  cudaDeviceProp p; cudaGetDeviceProperties(&p, 0);
  printf("%s, %d SMs; copy 2^28 float32: %.3f ms (%.0f GB/s)\n", p.name, sms, copy_ms, 2.0 * n * 4 / copy_ms / 1e6);
  all1(std::make_integer_sequence<int, kCount1>{}, a, b, n4, l2, l2o, l24, copy_ms);
  float* l2b[2] = {(float*)l2[0], (float*)l2[0] + 777};
  all2(std::make_integer_sequence<int, kCount2>{}, a, c, b, n4, l2b, (float*)l2o, l24 * 4 - 1024, 1.5f * copy_ms);
  return 0;
}
