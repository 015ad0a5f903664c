// Numerically careful building blocks for spec expressions. Each avoids the failure modes of the
// textbook formulas (overflow of exp, cancellation in 1 + erf(x), 1 + tanh(x) and exp(x) - 1).
//
// Each helper takes, as its first template argument, R: the type the kernel stores its result in
// (spec expressions pass their R). When R is a 16-bit float (float16, bfloat16: 11 and 8
// significant bits), a few float ulp of error cannot change the rounded result, so the helper
// uses the fast hardware approximations (ex2.approx, rcp.approx) and skips the argument
// corrections; in half precision the accurate library calls, not memory, would bound the kernel.
// (LeetCUDA's activation kernels make the same trade in their f16x8 forms: eight float16 per
// 16-byte pack, fast exp; here the helpers stay within 1 ulp of the rounded result, and the
// packs come from the template in elementwise.cuh.)
// For float and double results (and when R is left out) every helper is accurate to a few ulp
// of its compute type C.
#pragma once
#include "ew_types.cuh"

namespace ew {

template <typename R>
inline constexpr bool narrow_v = std::is_same_v<R, __half> || std::is_same_v<R, __nv_bfloat16>;

// 2^x from the hardware approximation (ex2.approx: about 2 ulp), flush-to-zero form: one
// instruction, where the form that keeps subnormal results takes several and measurably slowed the
// heavy half-precision ops (benchmarks/RESULTS.md). float16 results need no float subnormals
// (float16's smallest subnormal is 2^-24);
// bfloat16 shares float's exponent range, so there 2^x = (2^(x/2))^2: the square of a normal
// number, rounded by an ordinary multiply, is a correct subnormal. exp2_prescaled takes x already
// multiplied by kEx2Scale<R>, so callers fold the halving into their own constants.
template <typename R>
inline constexpr float kEx2Scale = std::is_same_v<R, __half> ? 1.f : 0.5f;

template <typename R>
__device__ __forceinline__ float exp2_prescaled(float xs) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(xs));
  if constexpr (std::is_same_v<R, __half>) return y;
  else return y * y;
}

// 1 / x from rcp.approx (1 ulp), subnormals flushed: callers keep x normal (or infinite or NaN,
// giving 0 or NaN), and 1 / x normal or too small to count.
__device__ __forceinline__ float rcp_fast(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1 / sqrt(x) from rsqrt.approx, subnormals flushed, likewise.
__device__ __forceinline__ float rsqrt_fast(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// min or max of a and b that returns a NaN a, not b (one min.NaN or max.NaN from sm_80 on, where
// fminf and fmaxf would drop it).
template <bool kMax>
__device__ __forceinline__ float minmax_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  if constexpr (kMax) asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  else asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return isnan(a) ? a : (kMax ? fmaxf(a, b) : fminf(a, b));
#endif
}
__device__ __forceinline__ float fmin_nan(float a, float b) { return minmax_nan<false>(a, b); }
__device__ __forceinline__ float fmax_nan(float a, float b) { return minmax_nan<true>(a, b); }

// a / b; for narrow R the fast division (within 2 float ulp for |b| < 2^126).
template <typename R = void, typename C>
__device__ __forceinline__ C div(C a, C b) {
  if constexpr (narrow_v<R> && std::is_same_v<C, float>) return __fdividef(a, b);
  else return a / b;
}

// 1 / x within an ulp for float (rcp.approx and one Newton step, a few instructions fewer than the
// IEEE division and its slow-path check; for normal x with a normal reciprocal); correctly rounded
// for double.
template <typename C>
__device__ __forceinline__ C recip(C x) {
  if constexpr (std::is_same_v<C, float>) {
    const float r = rcp_fast(x);
    return fmaf(r, fmaf(-x, r, 1.f), r);
  } else {
    return C(1) / x;
  }
}

// Logistic sigmoid without overflow: exp only ever sees a non-positive argument.
template <typename R = void, typename C>
__device__ __forceinline__ C sigmoid(C x) {
  if constexpr (narrow_v<R> && std::is_same_v<C, float>) {
    const float e = exp2_prescaled<R>((-1.44269504f * kEx2Scale<R>) * fabsf(x));
    const float r = rcp_fast(1.f + e);
    return x >= 0.f ? r : e * r;
  } else {
    const C e = exp(-fabs(x));                // in (0, 1]; NaN stays NaN
    const C r = recip(C(1) + e);              // of a value in (1, 2]
    return x >= C(0) ? r : e * r;
  }
}

// exp(x); for narrow R from ex2.approx (error ~2 ulp + |x| * 2^-24 from rounding x * log2(e)).
template <typename R = void, typename C>
__device__ __forceinline__ C exp(C x) {
  if constexpr (narrow_v<R> && std::is_same_v<C, float>) return exp2_prescaled<R>((1.44269504f * kEx2Scale<R>) * x);
  else return ::exp(x);
}

// log(1 + y) without cancellation near 0. For narrow R: |y| < 1/16 by its series to y^6
// (truncation < 1e-8 relative), elsewhere log(1 + y) from lg2.approx, whose absolute error of
// ~2^-22 is < 2e-6 relative to |log(1 + y)| >= 0.06. Its flush-to-zero form is exact here: 1 + y
// is never a float subnormal (it is 0 or at least 2^-24).
template <typename R = void, typename C>
__device__ __forceinline__ C log1p(C y) {
  if constexpr (narrow_v<R> && std::is_same_v<C, float>) {
    float p = -1.f / 6.f;
    p = fmaf(p, y, 0.2f);
    p = fmaf(p, y, -0.25f);
    p = fmaf(p, y, 1.f / 3.f);
    p = fmaf(p, y, -0.5f);
    p = fmaf(p * y, y, y);
    float l2;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(l2) : "f"(1.f + y));
    return fabsf(y) < 0.0625f ? p : 0.69314718f * l2;
  } else {
    return ::log1p(y);
  }
}

// exp(x) - 1 without cancellation near 0.
template <typename R = void, typename C>
__device__ __forceinline__ C expm1(C x) {
  if constexpr (narrow_v<R> && std::is_same_v<C, float>) {
    // |x| < 1/2: Taylor to x^7 (truncation < 3e-7 relative); elsewhere exp(x) - 1 loses at most
    // a factor e^(1/2) / (1 - e^(-1/2)) < 5 of exp's ~2 ulp.
    float p = 1.f / 5040.f;
    p = fmaf(p, x, 1.f / 720.f);
    p = fmaf(p, x, 1.f / 120.f);
    p = fmaf(p, x, 1.f / 24.f);
    p = fmaf(p, x, 1.f / 6.f);
    p = fmaf(p, x, 0.5f);
    p = copysignf(fmaf(p * x, x, x), x);      // x + x^2 p is +0 at x = -0; e^x - 1 has x's sign
    return fabsf(x) < 0.5f ? p : exp<R>(x) - 1.f;
  } else {
    return ::expm1(x);
  }
}

// Float operations rounded on their own: the compiler never fuses them into an FMA. The error-free
// steps below (the normal tail's exponent split, gelu_tanh's argument) depend on it: contracting
// vh + rest into fma(sh, x, rest), say, counts the product's rounding error twice.
__host__ __device__ __forceinline__ float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ __forceinline__ float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ __forceinline__ float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Phi(-a) = erfc(a/sqrt2)/2 for 0 <= a <= 18 (NaN stays NaN), for float results, with float
// operations only: t * exp(P(t) - a^2/2) / 2, t = 1 / (1 + z/2), z = a/sqrt2 (Numerical Recipes'
// erfcc: relative error below 1.1e-7 over the whole range, checked against math.erfc). The
// relative error of exp(v) is the absolute error of v, and a^2/2 reaches 162 (a = 18), where a
// float's half ulp is 8e-6: so a^2 = hi + lo exactly, and -hi/2 log2(e) is split into an integer n
// (rounded in the low bits of k) and a remainder formed with the product's rounding error kept
// (fma), which with P(t) - lo/2 goes through one ex2.approx of an argument below 2.5 in
// magnitude. 2^(n-1), n - 1 in [-235, -1], is applied as 2^(n-1+118), a normal power of two
// built from k's bits in one integer operation, then the constant 2^-118, so that a subnormal
// result is rounded once. t comes from rcp.approx alone (1 ulp; a Newton step would take the
// bound below from 7.7e-7 to 6.2e-7 for two more operations per element, which the H200 under its
// power cap measurably pays). The float32 emulation of every step, with rcp and ex2 pushed 1 and 2
// ulp either way, stays below 7.7e-7 of the float64 result (scripts/normal_tail_error.py; the
// tests allow 1e-6).
constexpr double kLog2e = 1.4426950408889634;
constexpr float kHalfLog2eHi = static_cast<float>(0.5 * kLog2e);
constexpr float kHalfLog2eLo = static_cast<float>(0.5 * kLog2e - static_cast<double>(kHalfLog2eHi));

__device__ __forceinline__ float lower_normal_tail_accurate(float a) {
  const float t = rcp_fast(fmaf(0.35355339f, a, 1.f));
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  const float hi = mul_rn(a, a);
  const float lo = fmaf(a, a, -hi);                        // a^2 = hi + lo exactly
  constexpr float kRound = 12582912.f;                     // 1.5 * 2^23: k's ulp is 1
  const float k = fmaf(-kHalfLog2eHi, hi, kRound);         // kRound + round(-hi log2(e) / 2)
  const float n = sub_rn(k, kRound);
  float f = fmaf(-kHalfLog2eHi, hi, -n);                   // exact product, one rounding
  f = fmaf(-kHalfLog2eLo, hi, f);
  f = fmaf(fmaf(-0.5f, lo, p), static_cast<float>(kLog2e), f);
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(f));
  // 2^(n - 1 + 118): k's low bits hold n (kRound's are n = 0), and a shift puts n + 244 in the
  // exponent field. (A NaN a gives a NaN e, and the product is NaN whatever the power.)
  const float p2 = __uint_as_float((__float_as_uint(k) - (__float_as_uint(kRound) - 244u)) << 23);
  return mul_rn(mul_rn(t, e), p2) * 0x1p-118f;
}

// Phi(-a) = erfc(a/sqrt2)/2 for a >= 0 (or +inf), for 16-bit results: the same form in base 2,
// t * 2^(-a^2 log2(e)/2 + Q(t)), with Q of degree 5 fitted (weighted least squares, Lawson
// iterations) to log2(erfc(z) / 2t) + z^2 log2(e) for a in [0, 14]: relative error below 8e-6,
// and about 1e-5 with float rounding, against float16's and bfloat16's half ulp of 2.4e-4 and
// 2e-3. Beyond a = 14 the result is below bfloat16's smallest subnormal.
template <typename R>
__device__ __forceinline__ float lower_normal_tail_fast(float a) {
  const float t = rcp_fast(fmaf(0.35355339f, a, 1.f));   // 1 / (1 + z/2), z = a/sqrt2
  constexpr float k = kEx2Scale<R>;
  float q = 0.33010083f * k;
  q = fmaf(q, t, -1.02322018f * k);
  q = fmaf(q, t, 0.68462741f * k);
  q = fmaf(q, t, 0.36704564f * k);
  q = fmaf(q, t, 1.46869147f * k);
  q = fmaf(q, t, -2.82723427f * k);
  return t * exp2_prescaled<R>(fmaf((-0.72134752f * k) * a, a, q));
}

// Standard normal CDF Phi(x) = erfc(-x/sqrt2)/2, with relative accuracy in the lower tail, where
// 1 + erf(x/sqrt2) would cancel. Phi(x) = erfc(|x|/sqrt2)/2 for x < 0 and 1 - that for x > 0.
template <typename R = void>
__device__ __forceinline__ double normal_cdf(double x) {
  return 0.5 * erfc(-x * 0.70710678118654752440);
}

// Phi(-a) for 0 <= a <= 18 (or NaN) in float: the fast form for 16-bit results.
template <typename R>
__device__ __forceinline__ float lower_normal_tail(float a) {
  if constexpr (narrow_v<R>) return lower_normal_tail_fast<R>(a);
  else return lower_normal_tail_accurate(a);
}

template <typename R = void>
__device__ __forceinline__ float normal_cdf(float x) {
  // Past |x| = 18, Phi is 0 or 1 in float; clamping keeps x = +-inf finite (NaN stays NaN).
  const float h = lower_normal_tail<R>(fmin_nan(fabsf(x), 18.f));   // Phi(-|x|)
  return x < 0.f ? h : 1.f - h;
}

// GELU with the exact normal CDF, x Phi(x). Below -40 Phi(x) is 0 in every type, and the factor x
// is clamped there, so that x = -inf gives -40 * 0 = -0, not NaN.
template <typename R = void>
__device__ __forceinline__ double gelu(double x) {
  return fmax(x, -40.0) * normal_cdf(x);
}
// For float: with a = |x| and h = Phi(-a), x Phi(x) is x h for x < 0 and x (1 - h) = x - a h for
// x > 0, so both are fma(-a, h, max(x, -0)): one rounding, no select. a is clamped at 18 (Phi(-18)
// is 0 in float), which keeps +-inf * 0 out of the fma; NaN stays NaN through h. -0 gives -0.
template <typename R = void>
__device__ __forceinline__ float gelu(float x) {
  const float a = fmin_nan(fabsf(x), 18.f);
  return fmaf(-a, lower_normal_tail<R>(a), fmaxf(x, -0.f));
}

// GELU, tanh form: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
// The sigmoid form has no cancellation for x < 0; in the tail its relative error is the absolute
// error of 2u (sigmoid(v) ~ e^v there), and |2u| reaches ~88 before the result underflows, where
// a float's half ulp is 4e-6: rounding 2u to float alone would cost ~|2u| ulp of the result.
// Narrow results need no care. For float results exp(-|2u|) = 2^-w, w = |x| (a + b x^2), is
// formed with the argument's rounding errors kept: g = a + b x^2 as an unevaluated sum gh + gl of
// two floats (x^2 and b x^2 split exactly with fmaf, a + b x^2 by Fast2Sum: both terms are
// positive), then w is split into an integer n and a remainder n - |x| gh - |x| gl, formed with
// fmaf so that the product's rounding error is kept, which goes through one ex2.approx. 2^-n, n in
// [0, 206], is applied as 2^(100-n), a normal power of two built from k's bits in one integer
// operation, and the constant 2^-100 (folded into the sigmoid's reciprocal: an exact scaling),
// so that a subnormal result is rounded once. Past |x| = 12 the exponent is below -200 and the tail
// is 0 in float. The float32 emulation of every step, with ex2.approx and rcp.approx pushed 2 and
// 1 ulp either way, stays below 5.1e-7 of the float64 result (scripts/gelu_tanh_error.py; the
// tests allow 1e-6).

// a = 2 sqrt(2/pi) log2(e) and b = 0.044715 a, each split into a float and the float rest.
constexpr double kGeluA = 1.5957691216057308 * kLog2e;
constexpr double kGeluB = kGeluA * 0.044715;
constexpr float kGeluAh = static_cast<float>(kGeluA);
constexpr float kGeluAl = static_cast<float>(kGeluA - static_cast<double>(kGeluAh));
constexpr float kGeluBh = static_cast<float>(kGeluB);
constexpr float kGeluBl = static_cast<float>(kGeluB - static_cast<double>(kGeluBh));

// exp(-|2u|) * 2^100 for float ax = |x| <= 12, in [0, 2^100]; NaN stays NaN.
__device__ __forceinline__ float gelu_tanh_exp_scaled(float ax) {
  const float p = mul_rn(ax, ax);
  const float pe = fmaf(ax, ax, -p);                               // x^2 = p + pe exactly
  const float th = mul_rn(kGeluBh, p);
  const float tl = fmaf(kGeluBh, p, -th);                          // bh p = th + tl exactly
  const float gh = add_rn(kGeluAh, th);                            // Fast2Sum: ah + th = gh + ge
  const float ge = sub_rn(fminf(kGeluAh, th), sub_rn(gh, fmaxf(kGeluAh, th)));
  const float gl = fmaf(kGeluBh, pe, fmaf(kGeluBl, p, add_rn(tl, add_rn(ge, kGeluAl))));
  constexpr float kRound = 12582912.f;                             // 1.5 * 2^23: k's ulp is 1
  const float k = fmaf(ax, gh, kRound);                            // kRound + round(|x| gh)
  const float n = sub_rn(k, kRound);
  float f = fmaf(-ax, gh, n);                                      // exact product, one rounding
  f = fmaf(-ax, gl, f);
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(f));
  // 2^(100 - n): k's low bits hold n, and 227 - n is the biased exponent, in [21, 227].
  const float p2 = __uint_as_float(((__float_as_uint(kRound) + 227u) - __float_as_uint(k)) << 23);
  return mul_rn(e, p2);
}

// Below x = -800 the result is -0 in every type; the factor x is clamped there so that x = -inf
// gives -800 * 0, not -inf * 0 = NaN (NaN x still gives NaN through the sigmoid).
template <typename R = void>
__device__ __forceinline__ double gelu_tanh(double x) {
  return fmax(x, -800.0) * sigmoid(1.5957691216057308 * fma(0.044715 * x, x * x, x));
}
// For float results, with s = sigmoid(-|2u|) = e / (1 + e): x s for x < 0 and x (1 - s) = x - |x| s
// for x > 0, both fma(-|x|, s, max(x, -0)), as in gelu. |x| is clamped at 12, where s is 0 in
// float, which keeps +-inf * 0 out of the fma.
template <typename R = void>
__device__ __forceinline__ float gelu_tanh(float x) {
  if constexpr (narrow_v<R>) {
    return fmaxf(x, -800.f) * sigmoid<R>(1.5957691216057308f * fmaf(0.044715f * x, x * x, x));
  } else {
    const float ax = fmin_nan(fabsf(x), 12.f);
    const float es = gelu_tanh_exp_scaled(ax);                 // e 2^100, e = exp(-|2u|) in [0, 1]
    const float r = rcp_fast(fmaf(es, 0x1p-100f, 1.f)) * 0x1p-100f;   // 2^-100 / (1 + e)
    return fmaf(-ax, mul_rn(es, r), fmaxf(x, -0.f));
  }
}

// Hard swish, x relu6(x + 3) / 6, without a division. For 16-bit results: x sat(x/6 + 1/2), the
// sum from one fma and clamped to [0, 1] by the saturating form (which also sends NaN to 0), the
// factor x taken as 0 from -3 down with NaN kept, so that -inf gives 0 * 0 and every x <= -3 gives
// +0 as the exact form does (x itself would give -0). Its error is
// cancellation near x = -3: the fma's absolute error below 2^-24 over x/6 + 1/2 >= 2^-9/6
// (float16's spacing there; bfloat16's is wider) is under 1e-4 relative, a fifth of float16's half
// ulp. For float results, where that cancellation would be far from 1e-6, x (x + 3) times the
// rounded 1/6: four roundings, below 2.5e-7 relative (x + 3 is exact near -3).
template <typename R = void, typename C>
__device__ __forceinline__ C hardswish(C x) {
  if constexpr (narrow_v<R> && std::is_same_v<C, float>) {
    return (x <= -3.f ? 0.f : x) * __saturatef(fmaf(x, 1.f / 6.f, 0.5f));
  } else if constexpr (std::is_same_v<C, float>) {
    return x <= -3.f ? 0.f : (x >= 3.f ? x : x * (x + 3.f) * (1.f / 6.f));
  } else {
    return x <= C(-3) ? C(0) : (x >= C(3) ? x : x * (x + C(3)) / C(6));
  }
}

// Integer add, subtract and multiply that wrap around like numpy's (two's complement), where the
// plain operators would overflow into undefined behaviour for signed types: the arithmetic is done
// in the unsigned type of the same width. For floating-point types they are the plain operators.
template <typename T>
__device__ __forceinline__ T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<std::common_type_t<T, int>>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
__device__ __forceinline__ T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<std::common_type_t<T, int>>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}

template <typename T>
__device__ __forceinline__ T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<std::common_type_t<T, int>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// relu on two 16-bit values at once (__half2, __nv_bfloat162), bit for bit the scalar form
// v <= 0 ? 0 : v: NaN passes through, a negative or zero lane becomes +0. For paired spec forms.
template <typename P>
__device__ __forceinline__ P relu2(P v) {
  const unsigned negative = __hle2_mask(v, P{});   // 0xffff in each lane at or below +0 (-0 too)
  unsigned bits;
  memcpy(&bits, &v, sizeof bits);
  bits &= ~negative;
  memcpy(&v, &bits, sizeof bits);
  return v;
}

}  // namespace ew
