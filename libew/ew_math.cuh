// Numerically careful building blocks for spec expressions. Each takes the compute type (float or
// double) and avoids the failure modes of the textbook formulas: overflow of exp, cancellation in
// 1 + erf(x) and 1 + tanh(x) for negative x.
#pragma once
#include <cuda_runtime.h>
#include "ew_types.cuh"

namespace ew {

// Logistic sigmoid without overflow: exp only ever sees a non-positive argument.
template <typename C>
__device__ __forceinline__ C sigmoid(C x) {
  const C e = exp(-fabs(x));          // in (0, 1]; NaN stays NaN
  const C r = C(1) / (C(1) + e);
  return x >= C(0) ? r : e * r;
}

// Standard normal CDF, Phi(x) = erfc(-x/sqrt2)/2. erfc keeps relative accuracy in the lower tail
// where 1 + erf would cancel. In float, the rounding of -x/sqrt2 alone would cost up to ~2 x^2 ulp
// there, so the rounding error of the argument is folded back in with one Taylor term.
__device__ __forceinline__ double normal_cdf(double x) {
  return 0.5 * erfc(-x * 0.70710678118654752440);
}
__device__ __forceinline__ float normal_cdf(float x) {
  constexpr float kHi = 0.707106769084930419921875f;     // float(1/sqrt2)
  constexpr float kLo = 1.2101617485882343e-08f;         // 1/sqrt2 - kHi
  const float z = -x * kHi;
  const float dz = fmaf(-x, kHi, -z) - x * kLo;          // exact(-x/sqrt2) - z, to first order
  const float e = erfcf(z);
  // d erfc(z)/dz = -2/sqrt(pi) exp(-z^2). The term only matters in the lower tail of Phi (z > 0);
  // skipping it elsewhere also keeps z = +-inf from turning dz into NaN.
  const float corr = (z > 0.f && z <= 3.0e38f) ? dz * 1.1283791670955126f * __expf(-z * z) : 0.f;
  return 0.5f * (e - corr);
}

// GELU, tanh form: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
// The sigmoid form has no cancellation for x < 0; in the tail its relative error is the absolute
// error of 2u, so for float 2u is formed in double and its float rounding error dv is put back
// with sigmoid' = s (1 - s). Cheap (four double ops), and a few ulp instead of ~|2u| ulp.
__device__ __forceinline__ double gelu_tanh(double x) {
  if (x < -800.0) return -0.0;
  return x * sigmoid(1.5957691216057308 * fma(0.044715 * x, x * x, x));
}
__device__ __forceinline__ float gelu_tanh(float x) {
  if (x < -800.f) return -0.f;
  const double xd = x;
  const double v = 1.5957691216057308 * fma(0.044715 * xd, xd * xd, xd);
  const float vh = static_cast<float>(v);
  const float dv = isfinite(vh) ? static_cast<float>(v - static_cast<double>(vh)) : 0.f;
  const float s = sigmoid(vh);
  return x * fmaf(s * (1.f - s), dv, s);
}

}  // namespace ew
