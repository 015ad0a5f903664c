// numpy's semantics for the elementwise vocabulary of the default spec (libew/ops.toml: negative ...
// clip), as ew::np::<name>: where C's functions or operators differ from numpy's ufuncs (integer
// division by zero, floor division and remainder of negative numbers, NaN in maximum, sign of NaN,
// wrapping integer arithmetic), these give numpy's results, without undefined behaviour for any
// input. Spec expressions call them with the compute type C (float for float32 and the 16-bit
// types, double for float64, the integer type, bool); those that take R, the type the result is
// stored in, use it to pick the precision (see via_double_v).
//
// Device code only, and only what ew_math.cuh already uses (no standard headers of its own): the
// run-time formula compiler (pyew/jit.py) compiles these headers with NVRTC.
#pragma once
#include "ew_math.cuh"

namespace ew {
namespace np {

template <typename T>
inline constexpr bool is_float_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

// float32 results of the functions whose float versions exceed 2 ulp take forms of their own: CUDA
// documents tanf 4 ulp, sinhf, atanhf 3, acoshf 4, atan2f 3, erfcf 4, powf 4 (CUDA C++ Programming
// Guide, Mathematical Functions), and over every float32 input CUDA 13.0's tanf, sinhf, coshf
// (documented at 2), acoshf and atanhf reach 3.1, 2.9, 2.3, 2.1 and 3.2 ulp (benchmarks/RESULTS.md,
// Accuracy). sinh, cosh, arctanh, tan and arccosh are evaluated in float (within 2 ulp; arccosh 1),
// erfc partly in double (within 2), and the others in double and rounded once, within 1 ulp of the
// correctly rounded result, except where powf's result is a normal float (see power). asinf, acosf
// (documented at 2 ulp) and asinhf (documented at 3, at most 1.74 over every input) are used as
// they are; the slow test test_float32_functions_over_every_input checks these and the float forms
// against double on every float32 input.
// For 16-bit results the float function is used: a few float ulp are below 2^-10 of a float16 ulp,
// so the one rounding to 11 (or 8) bits stays within 1 ulp. float64 uses the double function.
template <typename R, typename C>
inline constexpr bool via_double_v = std::is_same_v<C, float> && !narrow_v<R>;

#define EW_NP_VIA_DOUBLE_2(name, fn)                                                                 \
  template <typename R = void, typename C>                                                          \
  __device__ __forceinline__ C name(C a, C b) {                                                     \
    if constexpr (via_double_v<R, C>)                                                               \
      return static_cast<float>(::fn(static_cast<double>(a), static_cast<double>(b)));              \
    else return ::fn(a, b);                                                                         \
  }
EW_NP_VIA_DOUBLE_2(hypot, hypot)
#undef EW_NP_VIA_DOUBLE_2

// The pieces of power and logaddexp below: double precision where a float result needs it (about
// 2^-39), and no further. atanh(s) for |s| < 0.18 by its series (the next term is below 2^-39 of
// the result); 2^k as a double from its bits (|k| < 1000); 1 / d, for a positive normal d, from the
// GPU's double reciprocal estimate (about 2^-20) and Newton steps, each doubling the bits that
// are right (two by default). These and exp_for_float avoid conversions
// (float to double and back, double to int, rint): those run at a quarter of the double FMA rate
// on sm_90, and were most of these functions' cost.

// The coefficients of the double-precision paths here live in constant memory, where a DFMA reads
// them as an operand: a double literal costs two uniform moves at each use (sm_90 has no 64-bit
// immediates), and those moves alone filled a third of these functions' instruction slots.
[[maybe_unused]] static __constant__ double kAtanhTerms[6] = {1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11, 1.0 / 13};
[[maybe_unused]] static __constant__ double kExpTerms[8] = {1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040,
                                                            1.0 / 720,     1.0 / 120,    1.0 / 24,    1.0 / 6};
[[maybe_unused]] static __constant__ double kLogs[2] = {0.69314718055994530942, 1.4426950408889634};

__device__ __forceinline__ double atanh_series(double s) {
  const double s2 = s * s;
  double p = kAtanhTerms[5];
#pragma unroll
  for (int i = 4; i >= 0; --i) p = ::fma(p, s2, kAtanhTerms[i]);
  return ::fma(s * s2, p, s);
}

__device__ __forceinline__ double pow2(int k) { return __hiloint2double((k + 1023) << 20, 0); }

template <int kSteps = 2>
__device__ __forceinline__ double recip(double d) {
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(d));
#pragma unroll
  for (int i = 0; i < kSteps; ++i) r = ::fma(r, ::fma(-d, r, 1.0), r);
  return r;
}


// e^t for |t| <= 700: t = j ln2 + r, |r| <= ln2 / 2, e^r by its Taylor series to r^10 (about
// 2^-42), 2^j from its bits.
__device__ __forceinline__ double exp_in_range(double t) {
  constexpr double kRound = 6755399441055744.0;     // 1.5 * 2^52: adding it leaves round(t / ln2) in the low word
  const double shifted = ::fma(t, kLogs[1], kRound);
  const int j = __double2loint(shifted);
  const double r = ::fma(-(shifted - kRound), kLogs[0], t);
  double p = kExpTerms[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) p = ::fma(p, r, kExpTerms[i]);
  p = ::fma(p, r, 0.5);
  p = ::fma(p, r, 1.0);
  p = ::fma(p, r, 1.0);
  return p * pow2(j);
}

// e^t for a float result: beyond +-150 that is 0 or infinity, and t is clamped there (by compares,
// cheaper than fmin and fmax, which order NaN; a NaN t gives NaN).
__device__ __forceinline__ double exp_for_float(double t) {
  t = t < -150.0 ? -150.0 : t;
  return exp_in_range(t > 150.0 ? 150.0 : t);
}

// float32 arccosh in float, within 1 ulp of the correctly rounded result on every float32 input
// (the slow test_float32_functions_over_every_input checks it). acosh x = log y, y = x + sqrt(x^2 -
// 1) carried as yh + yl: below 2^12, x^2 - 1 is exact as p - 1 + pe (p = x^2 rounded, pe its fma
// error; p - 1 is exact below 2^24), its square root comes from rsqrt.approx and one correction
// that keeps the residual, and the sum with x is a fast two-sum. From 2^12 on y = 2x to 2^-26, taken
// as x and one more ln2. log y = k ln2 + log1p(f) + yl / yh with y = 2^k m, m in [2/3, 4/3), f = m - 1
// exact, log1p f = f - f^2 / 2 + f^3 P(f), P of degree 7 fitted over |f| <= 1/3
// (benchmarks/experiments/fit_float32_forms.py at 18d595e);
// 1 / yh is x - sqrt(x^2 - 1), no reciprocal needed; k ln2 is split so that k ln2_hi + f is one
// exact two-sum with its error carried.
__device__ __forceinline__ float arccosh_in_float(float x) {
  const float inf = __int_as_float(0x7f800000);
  const bool big = x >= 4096.0f;
  const float p = __fmul_rn(x, x), pe = ::fmaf(x, x, -p), qh = p - 1.0f;      // p rounded, not fused into qh
  const float r0 = rsqrt_fast(qh), s = __fmul_rn(qh, r0);     // not fused into x + s: the two-sum needs s itself
  const float sl = (::fmaf(-s, s, qh) + pe) * (0.5f * r0);
  const float sum = x + s;
  const float yh = big ? x : sum;
  const float corr = big ? 0.0f : (((x - sum) + s) + sl) * ((x - s) - sl);     // yl / yh = yl (x - sqrt(x^2 - 1))
  const int iy = __float_as_int(yh), e = (iy - 0x3f2aaaab) & static_cast<int>(0xff800000);
  const float f = __int_as_float(iy - e) - 1.0f;
  const float k = __int_as_float((e >> 23) + (big ? 0x4B400001 : 0x4B400000)) - 12582912.0f;
  const float z = f * f;
  float q = -0.13191736f;
  q = ::fmaf(q, f, 0.1401382f);
  q = ::fmaf(q, f, -0.12116163f);
  q = ::fmaf(q, f, 0.13999087f);
  q = ::fmaf(q, f, -0.16685282f);
  q = ::fmaf(q, f, 0.20010896f);
  q = ::fmaf(q, f, -0.24999696f);
  q = ::fmaf(q, f, 0.33333206f);
  const float kh = k * 0.693145751953125f, h = kh + f, he = (kh - h) + f;      // kh exact
  const float r = h + (::fmaf(f * z, q, ::fmaf(-0.5f, z, corr)) + ::fmaf(k, 1.42860682e-06f, he));
  if (!(x > 1.0f)) return x == 1.0f ? 0.0f : __int_as_float(0x7fc00000);     // 1, below 1, or NaN
  return x == inf ? x : r;
}

// float32 sinh, cosh and arctanh in float, within 2 ulp of the correctly rounded result on every
// float32 input (the slow test_float32_functions_over_every_input measures them; their double
// forms, within 1 ulp, held the H200 under its copy rate: docs/tuning.md). e^a = e1 2^j with j =
// round(a / ln2), r = a - j ln2 in two parts (the first product exact) and e1 = 1 + expm1_reduced(r):
// r + r^2 Q(r), Q of degree 5 fitted to (e^r - 1 - r) / r^2 on |r| <= ln2 / 2.
__device__ __forceinline__ float expm1_reduced(float r) {
  float q = 1.98495196e-04f;
  q = ::fmaf(q, r, 1.39335880e-03f);
  q = ::fmaf(q, r, 8.33337288e-03f);
  q = ::fmaf(q, r, 4.16664667e-02f);
  q = ::fmaf(q, r, 1.66666672e-01f);
  q = ::fmaf(q, r, 0.5f);
  return ::fmaf(r * r, q, r);
}
// round(a inv) as j and as a float, for |a inv| < 2^22: adding 1.5 * 2^23 leaves it in the low bits.
__device__ __forceinline__ float nearest_integer(float a, float inv, int& j) {
  constexpr float kRound = 12582912.0f;
  const float shifted = ::fmaf(a, inv, kRound);
  j = __float_as_int(shifted) - 0x4B400000;
  return shifted - kRound;
}
__device__ __forceinline__ float exp_scaled(float a, int& j) {
  const float jf = nearest_integer(a, 1.44269504f, j);     // round(a / ln2)
  float r = ::fmaf(-jf, 0.693145751953125f, a);
  r = ::fmaf(-jf, 1.42860682e-06f, r);
  return 1.0f + expm1_reduced(r);
}

// e^a / 2 for 0 <= a (clamped at 89.5, past which cosh and sinh overflow; NaN stays NaN), as e1
// 2^(j-2) 2 so that 2^(j-2) stays a normal float up to j = 129 (j is garbage for a NaN a, whose
// product is NaN whatever the power); and 1 / (2 e^a), whose rcp.approx
// (1 ulp; flushed to 0 only where e^a / 2 is past 2^126 and the term no longer counts).
__device__ __forceinline__ float half_exp(float a, float& half_recip) {
  a = a > 89.5f ? 89.5f : a;
  int j;
  const float e1 = exp_scaled(a, j);       // sets j, so j is read in a statement after it, not beside it
  const float h = e1 * __uint_as_float(static_cast<unsigned>(j + 125) << 23) * 2.0f;
  half_recip = 0.25f * rcp_fast(h);
  return h;
}

// cosh = e^|x| / 2 + 1 / (2 e^|x|), where nothing cancels.
__device__ __forceinline__ float cosh_in_float(float x) {
  float r;
  const float h = half_exp(::fabsf(x), r);
  return h + r;
}

// sinh: below 1 its Taylor series to x^11 (the next term under 2^-32 of it); from 1 on e^|x| / 2 -
// 1 / (2 e^|x|), which cancels at most 1.16-fold there. Both are computed and one is selected: a
// branch made most warps of mixed inputs run both anyway, and cost more than the select.
__device__ __forceinline__ float sinh_in_float(float x) {
  const float a = ::fabsf(x);
  const float s = a * a;
  float p = 2.50521084e-08f;
  p = ::fmaf(p, s, 2.75573192e-06f);
  p = ::fmaf(p, s, 1.98412698e-04f);
  p = ::fmaf(p, s, 8.33333333e-03f);
  p = ::fmaf(p, s, 1.66666667e-01f);
  const float series = ::fmaf(a * s, p, a);
  float half_recip;
  const float h = half_exp(a, half_recip);
  return ::copysignf(a < 1.0f ? series : h - half_recip, x);
}

// arctanh: log1p(u) / 2 with u = 2a / d, d = 1 - a rounded (exact from 1/2 up), 2a exact, u from
// rcp.approx, and the residual c (u + c = 2a / d to a few float ulp squared) carried past log1p as
// c / (1 + u) = c d / (1 + a), where 1 / (1 + a) within an eighth (1 - a / 2) is enough for a term
// under an ulp. Below 1/2, d's own rounding is not carried: most of the error there (within 2 ulp
// on every float32 input; carrying it too, docs/tuning.md, cost more than it gained). One path for
// every |x| < 1, selected from the special cases rather than branched around them: the bench's
// data is mostly |x| > 1, and a warp that branched ran both.
__device__ __forceinline__ float arctanh_in_float(float x) {
  const float a = ::fabsf(x);
  const float d = 1.0f - a, twice = 2.0f * a, q = rcp_fast(d), u = twice * q;
  const float c = q * ::fmaf(-u, d, twice);
  const float r = 0.5f * (::log1pf(u) + c * d * ::fmaf(-0.5f, a, 1.0f));
  const float edge = a == 1.0f ? ::copysignf(__int_as_float(0x7f800000), x) : __int_as_float(0x7fc00000);
  return a < 1.0f ? ::copysignf(r, x) : edge;
}

// float32 tan in float, within 2 ulp of the correctly rounded result on every float32 input (the
// slow test_float32_functions_over_every_input checks it; benchmarks/RESULTS.md, Accuracy; its
// double form held the H200 under its copy rate: docs/tuning.md). |x| = j pi/2 + r with
// pi/2 in three floats: the first step exact, the second product split exactly by an fma and
// added by a two-sum, so r = rh + rl to far more bits than a float; tan r = r + r^3 P(r^2), P of
// degree 6 fitted to (tan r - r) / r^3 on |r| <= 1.02 pi/4, plus rl (1 + tan^2 r); an odd j gives
// -1 / tan r, from rcp.approx and one correction that takes the low part in. From 2^20 on, and for
// infinities and NaN, double tan.
__device__ __forceinline__ float tan_in_float(float x) {
  const float a = ::fabsf(x);
  if (!(a < 1048576.0f)) return static_cast<float>(::tan(static_cast<double>(x)));
  int j;
  const float jf = nearest_integer(a, 0.636619772f, j);   // round(a 2 / pi)
  const float r1 = ::fmaf(-jf, 1.57079637f, a);                         // exact
  // __fmul_rn: a product the compiler must not fuse into the subtraction after it (the two-sum
  // needs it rounded)
  const float p2 = __fmul_rn(jf, -4.37113883e-08f), p2e = ::fmaf(jf, -4.37113883e-08f, -p2);
  const float s = r1 - p2, back = s - r1;
  const float lo = ::fmaf(-jf, -1.71512451e-15f, ((r1 - (s - back)) + (-p2 - back)) - p2e);
  const float rh = s, rl = lo;                        // r = rh + rl: rl need not be under half an ulp of rh
  const float z = rh * rh;
  float p = 0.004600397311151028f;
  p = ::fmaf(p, z, -0.0003613945737015456f);
  p = ::fmaf(p, z, 0.011188282631337643f);
  p = ::fmaf(p, z, 0.02114769071340561f);
  p = ::fmaf(p, z, 0.0540856271982193f);
  p = ::fmaf(p, z, 0.13332439959049225f);
  p = ::fmaf(p, z, 0.3333335518836975f);
  const float v = rh * z, t0 = ::fmaf(v, p, rh);
  const float corr = ::fmaf(v, p, rl * ::fmaf(t0, t0, 1.0f));
  const float th = rh + corr, tl = corr - (th - rh);      // tan r = th + tl; th alone is it rounded
  const float q = rcp_fast(th);
  const float e = ::fmaf(-q, tl, ::fmaf(-q, th, 1.0f));
  const float t = j & 1 ? -::fmaf(q, e, q) : th;
  return __float_as_int(x) < 0 ? -t : t;
}

// float32 arctan2 in double: t = min(|x|, |y|) / max(|x|, |y|), and above tan(pi/8) atan t = pi/4 +
// atan((min - max) / (min + max)) (both exact in double: one reciprocal either way); atan u =
// u + u^3 P(u^2), P of degree 7 fitted over |u| <= tan(pi/8) to within 1.1e-13 of atan u
// (scripts/float32_via_double_error.py); then the octant: pi/2 - a where |y| > |x|, pi - a where
// x < 0, the sign of y, none of which cancels. Zeros, infinities and NaN go to double atan2.
[[maybe_unused]] static __constant__ double kAtanTerms[11] = {
    0.032997042355398236, -0.06029738501214722, 0.07605377181269755,  -0.0908416987365812,
    0.11110823829759511,  -0.14285708228950386, 0.1999999995113703,   -0.33333333333268433,
    0.78539816339744831,  1.5707963267948966,   3.1415926535897931};     // then pi/4, pi/2, pi
__device__ __forceinline__ float arctan2_via_series(float y, float x) {
  const float ax = ::fabsf(x), ay = ::fabsf(y), inf = __int_as_float(0x7f800000);
  if (!(ax > 0.0f && ay > 0.0f && ax < inf && ay < inf))
    return static_cast<float>(::atan2(static_cast<double>(y), static_cast<double>(x)));
  const double mn = ::fminf(ax, ay), mx = ::fmaxf(ax, ay);
  const bool wide = mn > 0.41421356f * static_cast<float>(mx);
  const double u = (wide ? mn - mx : mn) * recip(wide ? mn + mx : mx);
  const double s = u * u;
  double p = kAtanTerms[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) p = ::fma(p, s, kAtanTerms[i]);
  double a = ::fma(u * s, p, u) + (wide ? kAtanTerms[8] : 0.0);
  a = ay > ax ? kAtanTerms[9] - a : a;
  a = x < 0.0f ? kAtanTerms[10] - a : a;
  return ::copysignf(static_cast<float>(a), y);
}

// x^y as exp(y log x) in double, for float32 results: log x = k ln2 + 2 atanh((m - 1) / (m + 1))
// with x = 2^k m, m in [0.707, 1.414), to about 2^-39; y log x then errs by at
// most 2^-32 wherever the result is a finite, nonzero float (|y log x| < 104), a 2^-8 of a float
// ulp after exp_for_float. A negative x takes |x| and the sign of an odd integer y; a non-integer y
// gives NaN. Zeros, infinities, NaN and subnormal x go to double pow (C's special cases).
// Out of line: inlined, this rarely taken form slowed the powf path that nearly every element takes
// (docs/tuning.md).
inline __device__ __noinline__ float power_via_log(float x, float y) {
  const float ax = ::fabsf(x);
  if (!(ax >= 1.17549435e-38f && ax < __int_as_float(0x7f800000) && ::fabsf(y) < __int_as_float(0x7f800000)))
    return static_cast<float>(::pow(static_cast<double>(x), static_cast<double>(y)));
  bool negate = false;
  if (x < 0.0f) {
    if (y != ::truncf(y)) return __int_as_float(0x7fc00000);
    negate = ::fabsf(y) < 16777216.0f && (static_cast<int>(y) & 1);     // from 2^24 on, every float is even
  }
  const int k = ((__float_as_int(ax * 0.70710678f) >> 23) & 0xff) - 126;
  const double m = static_cast<double>(ax) * pow2(-k);
  const double lg = ::fma(static_cast<double>(k), kLogs[0], 2.0 * atanh_series((m - 1.0) * recip(m + 1.0)));
  const float r = static_cast<float>(exp_for_float(static_cast<double>(y) * lg));
  return negate ? -r : r;
}

// erfc(x) for float32 results: erfc(|x|) = e^(-x^2) erfcx(|x|). erfcx in double, where a float
// t = (|x| - 3) / (|x| + 3) would carry its rounding into the result up to 1.6-fold: a polynomial
// of degree 10 in t, fitted over [0, 10.0546875] to within 2^-29 of it (benchmarks/experiments/
// fit_float32_forms.py at 18d595e), rounded to float once. e^(-x^2)
// in float, as 2^j (1 + u): x^2 = sq + sl exactly (an fma), j = round(-sq / ln2), rho = -sq - j ln2
// - sl with the first product exact, u = expm1_reduced(rho); the result
// (erfcx + erfcx u) 2^j rounds once before its scaling (2^(j+64) 2^-64, so that a subnormal result
// is rounded where it lands). From 10.0546875 on the float result is 0 (|x| is clamped there and
// the result selected, without a branch); a negative x gives 2 - erfc(|x|), which cancels nothing
// (erfc(|x|) <= 1).
[[maybe_unused]] static __constant__ double kErfcxTerms[11] = {
    5.585439305184729e-05,  2.8735731625853002e-05, -0.0005946363411201208, 0.0007157963754601407,
    0.004268926839563484,   -0.024394239276896344,  0.0716658544043349,     -0.15011578167801223,
    0.24560379814995748,    -0.3262335638238121,    0.17900115125937477};
__device__ __forceinline__ float erfc_for_float(float x) {
  const float top = 10.0546875f;
  const float a = ::fminf(::fabsf(x), top);
  const double ad = a;
  const double t = (ad - 3.0) * recip<1>(ad + 3.0);
  double p = kErfcxTerms[0];
#pragma unroll
  for (int i = 1; i < 11; ++i) p = ::fma(p, t, kErfcxTerms[i]);
  const float ex = static_cast<float>(p);
  const float sq = a * a, sl = ::fmaf(a, a, -sq);
  int j;
  const float jf = nearest_integer(-sq, 1.44269504f, j);  // round(-sq / ln2)
  const float rho = ::fmaf(-jf, 0.693145751953125f, -sq) - ::fmaf(jf, 1.42860682e-06f, sl);
  const float u = expm1_reduced(rho);
  const float v = ::fmaf(ex, u, ex) * __int_as_float((j + 191) << 23) * 5.42101086e-20f;     // 2^(j+64) 2^-64
  const float r = x < 0.0f ? 2.0f - v : v;
  return ::fabsf(x) < top ? r : (x != x ? x : (x < 0.0f ? 2.0f : 0.0f));
}

// The ops above at float32 through their own forms, at every other type through C's function.
#define EW_NP_FLOAT32_VIA(name, float32_form, fn)                                                   \
  template <typename R = void, typename C>                                                          \
  __device__ __forceinline__ C name(C x) {                                                          \
    if constexpr (via_double_v<R, C>) return float32_form(x);                                       \
    else return ::fn(x);                                                                            \
  }
EW_NP_FLOAT32_VIA(erfc, erfc_for_float, erfc)
EW_NP_FLOAT32_VIA(sinh, sinh_in_float, sinh)
EW_NP_FLOAT32_VIA(cosh, cosh_in_float, cosh)
EW_NP_FLOAT32_VIA(tan, tan_in_float, tan)
EW_NP_FLOAT32_VIA(arctanh, arctanh_in_float, atanh)
EW_NP_FLOAT32_VIA(arccosh, arccosh_in_float, acosh)
#undef EW_NP_FLOAT32_VIA

// arctan and cbrt at float64 through C's double function out of line, at every other type through
// C's function inline. Inlined, the four copies of double atan in a map kernel's trip made ptxas
// spill registers, and cbrt's stayed short of the copy ceiling; out of line, both reach it. The
// other double functions (asin, acos, asinh, log1p, sinh, atanh, acosh) ran slower out of line
// (docs/tuning.md).
#define EW_NP_FLOAT64_OUT_OF_LINE(name, fn)                                                         \
  inline __device__ __noinline__ double fn##_out_of_line(double x) { return ::fn(x); }              \
  template <typename R = void, typename C>                                                          \
  __device__ __forceinline__ C name(C x) {                                                          \
    if constexpr (std::is_same_v<C, double>) return fn##_out_of_line(x);                            \
    else return ::fn(x);                                                                            \
  }
EW_NP_FLOAT64_OUT_OF_LINE(arctan, atan)
EW_NP_FLOAT64_OUT_OF_LINE(cbrt, cbrt)
#undef EW_NP_FLOAT64_OUT_OF_LINE

template <typename R = void, typename C>
__device__ __forceinline__ C arctan2(C y, C x) {
  if constexpr (via_double_v<R, C>) return arctan2_via_series(y, x);
  else return ::atan2(y, x);
}

// ---- classification, from the bits: exact for every input, and integers and bools are finite ----

template <typename T>
__device__ __forceinline__ bool is_nan(T x) {
  if constexpr (std::is_same_v<T, float>) return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u;
  else if constexpr (std::is_same_v<T, double>)
    return (static_cast<unsigned long long>(__double_as_longlong(x)) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  else return false;
}

template <typename T>
__device__ __forceinline__ bool is_inf(T x) {
  if constexpr (std::is_same_v<T, float>) return (__float_as_uint(x) & 0x7fffffffu) == 0x7f800000u;
  else if constexpr (std::is_same_v<T, double>)
    return (static_cast<unsigned long long>(__double_as_longlong(x)) & 0x7fffffffffffffffull) == 0x7ff0000000000000ull;
  else return false;
}

template <typename T>
__device__ __forceinline__ bool is_finite(T x) {
  if constexpr (std::is_same_v<T, float>) return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
  else if constexpr (std::is_same_v<T, double>)
    return (static_cast<unsigned long long>(__double_as_longlong(x)) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
  else return true;
}

// The sign bit, also of -0 and of NaN.
template <typename T>
__device__ __forceinline__ bool sign_bit(T x) {
  if constexpr (std::is_same_v<T, float>) return (__float_as_uint(x) >> 31) != 0u;
  else return __double_as_longlong(x) < 0;
}

// ---- one input ----------------------------------------------------------------------------------

// Integer arithmetic wraps (INT_MIN stays INT_MIN), as numpy's does.
template <typename T>
__device__ __forceinline__ T negative(T x) {
  if constexpr (std::is_integral_v<T>) return wrap_sub(T(0), x);
  else return -x;
}

template <typename T>
__device__ __forceinline__ T absolute(T x) {
  if constexpr (std::is_same_v<T, bool>) return x;
  else if constexpr (std::is_integral_v<T>) return x < T(0) ? wrap_sub(T(0), x) : x;
  else return ::fabs(x);
}

// -1, 0 or +1; NaN stays NaN and -0 gives +0, as numpy's sign.
template <typename T>
__device__ __forceinline__ T sign(T x) {
  if constexpr (is_float_v<T>) return x > T(0) ? T(1) : (x < T(0) ? T(-1) : (x == T(0) ? T(0) : x));
  else return static_cast<T>(int(x > T(0)) - int(x < T(0)));
}

// 1 / x. Integers: 1 / x rounded toward zero (1 and -1 are their own reciprocals, |x| > 1 gives 0, as
// in numpy) and 0 for x = 0, where numpy converts an infinite quotient to an integer (INT_MIN on
// x86, with a warning): here it is 0, as integer division by zero is.
template <typename T>
__device__ __forceinline__ T reciprocal(T x) {
  if constexpr (is_float_v<T>) return T(1) / x;
  else return (x == T(1) || x == T(-1)) ? x : T(0);
}

// floor, ceil and trunc of an integer or a bool: itself (numpy's integer loops).
#define EW_NP_ROUNDING(name)                                                                         \
  template <typename T>                                                                             \
  __device__ __forceinline__ T name(T x) {                                                          \
    if constexpr (is_float_v<T>) return ::name(x);                                                  \
    else return x;                                                                                  \
  }
EW_NP_ROUNDING(floor)
EW_NP_ROUNDING(ceil)
EW_NP_ROUNDING(trunc)
#undef EW_NP_ROUNDING

// ~x on integers; logical not on bools (~ of a C++ bool would be an int, -1 or -2).
template <typename T>
__device__ __forceinline__ T invert(T x) {
  if constexpr (std::is_same_v<T, bool>) return !x;
  else return static_cast<T>(~x);
}

// ---- two inputs ---------------------------------------------------------------------------------

// numpy's shifts: a count outside [0, bits) shifts every bit out (0, or -1 for a negative x shifted
// right) where C leaves it undefined; the left shift goes through the unsigned type, since
// shifting a negative value left is undefined in C++ before C++20.
template <typename T>
__device__ __forceinline__ T left_shift(T x, T n) {
  using U = std::make_unsigned_t<T>;
  return static_cast<U>(n) < sizeof(T) * 8 ? static_cast<T>(static_cast<U>(x) << static_cast<U>(n)) : T(0);
}

template <typename T>
__device__ __forceinline__ T right_shift(T x, T n) {
  using U = std::make_unsigned_t<T>;
  return static_cast<U>(n) < sizeof(T) * 8 ? static_cast<T>(x >> static_cast<U>(n)) : (x < T(0) ? T(-1) : T(0));
}

// maximum and minimum propagate NaN (either input's); of equal values (+0 and -0) they return b.
template <typename T>
__device__ __forceinline__ T maximum(T a, T b) {
  if constexpr (is_float_v<T>) return (a > b || a != a) ? a : b;
  else return a > b ? a : b;
}
template <typename T>
__device__ __forceinline__ T minimum(T a, T b) {
  if constexpr (is_float_v<T>) return (a < b || a != a) ? a : b;
  else return a < b ? a : b;
}

// fmax and fmin ignore a NaN (NaN only when both are); of equal values they return a.
template <typename T>
__device__ __forceinline__ T fmax(T a, T b) {
  if constexpr (is_float_v<T>) return (a >= b || b != b) ? a : b;
  else return a >= b ? a : b;
}
template <typename T>
__device__ __forceinline__ T fmin(T a, T b) {
  if constexpr (is_float_v<T>) return (a <= b || b != b) ? a : b;
  else return a <= b ? a : b;
}

// numpy's clip: min(max(x, lo), hi) with NaN in any input giving NaN, and hi where lo > hi.
template <typename T>
__device__ __forceinline__ T clip(T x, T lo, T hi) {
  return minimum(maximum(x, lo), hi);
}

// A cast to a narrow int (To: int8_t .. uint16_t, whose range [Lo, Hi] is given): ints wrap around
// (two's complement, as numpy's astype), floats go toward zero and saturate at the range, NaN to 0,
// where numpy leaves those undefined, as the casts to int32 and int64 do.
template <typename To, long long Lo, long long Hi, typename T>
__device__ __forceinline__ To narrow_int(T x) {
  if constexpr (is_float_v<T>) {
    return x == x ? static_cast<To>(x < T(Lo) ? T(Lo) : (x > T(Hi) ? T(Hi) : x)) : To(0);
  } else {
    return static_cast<To>(x);
  }
}

// C's a / b and a % b of integers (b not 0, and not -1 where a may be the most negative), through
// 32-bit division where both signed 64-bit operands fit 32 bits: a 64-bit division is a long
// software routine on the GPU, a 32-bit one a few instructions.
template <typename T>
__device__ __forceinline__ T div_c(T a, T b) {
  if constexpr (sizeof(T) == 8 && T(-1) < T(0)) {
    if (a == T(int32_t(a)) && b == T(int32_t(b))) return T(int32_t(a) / int32_t(b));
  }
  return static_cast<T>(a / b);
}

template <typename T>
__device__ __forceinline__ T rem_c(T a, T b) {
  if constexpr (sizeof(T) == 8 && T(-1) < T(0)) {
    if (a == T(int32_t(a)) && b == T(int32_t(b))) return T(int32_t(a) % int32_t(b));
  }
  return static_cast<T>(a % b);
}

// Floor division and its remainder, as Python and numpy define them: the quotient rounded toward
// -inf, the remainder with the divisor's sign. Integers: x // 0 and x % 0 are 0 (numpy warns and
// gives 0), INT_MIN // -1 wraps to INT_MIN; nothing here divides by 0 or overflows.
template <typename T>
__device__ __forceinline__ T floor_divide_int(T a, T b) {
  if (b == T(0)) return T(0);
  if (b == T(-1)) return wrap_sub(T(0), a);
  const T q = div_c(a, b);
  const T r = static_cast<T>(a - q * b);      // C's remainder: |q b| <= |a|, so this cannot overflow
  return (r != T(0) && ((a < T(0)) != (b < T(0)))) ? static_cast<T>(q - T(1)) : q;
}

template <typename T>
__device__ __forceinline__ T remainder_int(T a, T b) {
  if (b == T(0) || b == T(-1)) return T(0);
  const T r = rem_c(a, b);
  return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? static_cast<T>(r + b) : r;
}

// C's fmod and its truncated quotient, exact, without the library's loop, where the quotient is
// small: with q = a / b rounded and |q| < 2^(digits - 2), trunc(q) is the true quotient or one past
// it (the division errs by less than one), and a - trunc(q) b, formed by one fma, is exact either
// way (a multiple of b's ulp below |b|, or a - b by Sterbenz's lemma where |a| < |b|), so one step
// back gives both. False for zero and infinite divisors, infinite or NaN operands and larger
// quotients, which go to the library's fmod.
template <typename T>
__device__ __forceinline__ bool fmod_small(T a, T b, T q, T& quo, T& rem) {
  constexpr T kLimit = sizeof(T) == 4 ? T(4194304.0f) : T(2251799813685248.0);   // 2^22, 2^51
  if (!(::fabs(q) < kLimit) || !::isfinite(b)) return false;
  quo = ::trunc(q);
  rem = ::fma(-quo, b, a);
  if (rem != T(0) && ::signbit(rem) != ::signbit(a)) {
    rem += ::copysign(b, a);
    quo -= ::copysign(T(1), quo);
  }
  return true;
}

template <typename T>
__device__ __forceinline__ T fmod_exact(T a, T b) {
  T quo, rem;
  if (!fmod_small(a, b, a / b, quo, rem)) return ::fmod(a, b);
  return rem == T(0) ? ::copysign(T(0), a) : rem;
}

// numpy's npy_divmod for floats (npy_math_internal.h): the quotient from fmod, snapped to an
// integer, with the signs of zeros and the infinities numpy gives (x // inf is 0 or -1, x % inf is
// x or inf with inf's sign). A zero divisor gives a / b and fmod's NaN, as numpy's floor_divide and
// remainder do. Where fmod_small applies, its quotient is the integer numpy's (a - fmod) / b snaps
// to (that division errs by less than a half there), so it stands in for it.
template <typename T>
struct DivMod {
  T div, mod;
};
template <typename T>
__device__ __forceinline__ DivMod<T> divmod_float(T a, T b) {
  const T q = a / b;
  T div, mod;
  if (!fmod_small(a, b, q, div, mod)) {
    mod = ::fmod(a, b);
    if (b == T(0)) return {q, mod};
    div = (a - mod) / b;
  }
  if (mod != T(0)) {
    if ((b < T(0)) != (mod < T(0))) {
      mod += b;
      div -= T(1);
    }
  } else {
    mod = ::copysign(T(0), b);
  }
  T floordiv;
  if (div != T(0)) {
    floordiv = ::floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
  } else {
    floordiv = ::copysign(T(0), q);
  }
  return {floordiv, mod};
}

template <typename T>
__device__ __forceinline__ T floor_divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) return floor_divide_int(a, b);
  else return divmod_float(a, b).div;
}

template <typename T>
__device__ __forceinline__ T remainder(T a, T b) {
  if constexpr (std::is_integral_v<T>) return remainder_int(a, b);
  else return divmod_float(a, b).mod;
}

// C's fmod: the remainder with the dividend's sign. Integers: x fmod 0 is 0 (as numpy), x fmod -1
// is 0 (INT_MIN % -1 would overflow).
template <typename T>
__device__ __forceinline__ T fmod(T a, T b) {
  if constexpr (std::is_integral_v<T>) return (b == T(0) || b == T(-1)) ? T(0) : rem_c(a, b);
  else return fmod_exact(a, b);
}

// a^b. Floats: C's pow (numpy's); float32 results from powf where normal, else power_via_log. Integers:
// exact, wrapping on overflow as numpy's repeated squaring does. numpy raises for a negative
// exponent; here it gives the true value rounded toward zero, as integer division does: 1 for
// a = 1, -1 or 1 for a = -1 (odd or even b), 0 for |a| > 1, and 0 for a = 0 (an infinite value).
template <typename R = void, typename T>
__device__ __forceinline__ T power(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b < T(0)) return a == T(1) ? T(1) : (a == T(-1) ? ((b & T(1)) ? T(-1) : T(1)) : T(0));
    using U = std::make_unsigned_t<std::common_type_t<T, int>>;
    U r = 1, base = static_cast<U>(a);
    for (U e = static_cast<U>(b); e != 0; e >>= 1) {
      if (e & 1u) r *= base;
      base *= base;
    }
    return static_cast<T>(r);
  } else if constexpr (via_double_v<R, T>) {
    // powf is documented at 4 ulp, but over hashed pairs (extreme results, bases near 1 with large
    // exponents, integer exponents) it stayed within 2 wherever its result is a normal float, and
    // it is faster than power_via_log (benchmarks/RESULTS.md, Accuracy and numpy's vocabulary).
    // Below 2^-125 it returns 0 or the smallest normal where the result is subnormal, and in the
    // top binade its error could round past the largest float to inf or back from it: those take
    // the double form. NaN compares false and keeps powf's (C's) NaN.
    const float r = ::powf(a, b), m = ::fabsf(r);
    return m < 2.35098870e-38f || m >= 1.70141183e38f ? power_via_log(a, b) : r;
  } else {
    return ::pow(a, b);
  }
}

// log(exp(a) + exp(b)) without overflow, numpy's npy_logaddexp: equal inputs give a + log(2) (so
// inf and inf give inf), NaN propagates (through a - b). Without branches: a warp whose lanes took
// either side of numpy's `a > b` paid for both sides' exp and log1p.
template <typename T>
__device__ __forceinline__ T logaddexp_of(T a, T b) {
  const T r = (a > b ? a : b) + ::log1p(::exp(-::fabs(a - b)));
  return a == b ? a + T(0.693147180559945309417232121458176568) : r;
}

// float32 results: m + log1p(e), m = max(a, b), e = e^-|a - b| from exp_for_float, and log1p(e) =
// 2 atanh(e / (2 + e)) for e < 0.4, else log 2 + 2 atanh((e - 1) / (e + 3)), both by atanh_series,
// so about 2^-39 of log1p(e). That error matters only where m < 0 cancels most of log1p(e); where
// the sum falls below 1e-4 (there 2^-39 of log1p(e) nears a float ulp of the sum), numpy's formula
// runs in double instead: rarely, and at both forms' cost only in such a warp.
__device__ __forceinline__ float logaddexp_for_float(float fa, float fb) {
  const double a = fa, b = fb, d = a - b;
  const double e = exp_for_float(-::fabs(d));
  const bool apart = e < 0.4;
  const double m = a > b ? a : b;
  double r = m + (apart ? 0.0 : kLogs[0]) + 2.0 * atanh_series((apart ? e : e - 1.0) * recip(apart ? 2.0 + e : e + 3.0));
  if (m < 0.0 && ::fabs(r) < 1e-4) r = logaddexp_of(a, b);
  if (d != d) r = d;                                     // NaN, but inf - inf of equal infinities
  return static_cast<float>(fa == fb ? a + kLogs[0] : r);
}

template <typename R = void, typename T>
__device__ __forceinline__ T logaddexp(T a, T b) {
  if constexpr (via_double_v<R, T>) return logaddexp_for_float(a, b);
  else return logaddexp_of(a, b);
}

}  // namespace np
}  // namespace ew
