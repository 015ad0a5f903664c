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

// float32 results of the functions whose float versions exceed 2 ulp are evaluated in double and
// rounded once, within 1 ulp of the correctly rounded result: CUDA documents tanf 4 ulp, sinhf,
// atanhf 3, acoshf 4, atan2f 3, erfcf 4, powf 4 (CUDA C++ Programming Guide, Mathematical
// Functions), and over every float32 input CUDA 13.0's tanf, sinhf, coshf (documented at 2),
// acoshf and atanhf reach 3.1, 2.9, 2.3, 2.1 and 3.2 ulp (benchmarks/RESULTS.md, Accuracy). asinf, acosf (documented at 2 ulp) and
// asinhf (documented at 3, at most 1.74 over every input) are used as they are; the slow test
// test_float32_functions_over_every_input checks all three against double on every float32 input.
// For 16-bit results the float function is used: a few float ulp are below 2^-10 of a float16 ulp,
// so the one rounding to 11 (or 8) bits stays within 1 ulp. float64 uses the double function.
template <typename R, typename C>
inline constexpr bool via_double_v = std::is_same_v<C, float> && !narrow_v<R>;

#define EW_NP_VIA_DOUBLE_1(name, fn)                                                                 \
  template <typename R = void, typename C>                                                          \
  __device__ __forceinline__ C name(C x) {                                                          \
    if constexpr (via_double_v<R, C>) return static_cast<float>(::fn(static_cast<double>(x)));       \
    else return ::fn(x);                                                                            \
  }
#define EW_NP_VIA_DOUBLE_2(name, fn)                                                                 \
  template <typename R = void, typename C>                                                          \
  __device__ __forceinline__ C name(C a, C b) {                                                     \
    if constexpr (via_double_v<R, C>)                                                               \
      return static_cast<float>(::fn(static_cast<double>(a), static_cast<double>(b)));              \
    else return ::fn(a, b);                                                                         \
  }
EW_NP_VIA_DOUBLE_1(tan, tan)
EW_NP_VIA_DOUBLE_1(sinh, sinh)
EW_NP_VIA_DOUBLE_1(cosh, cosh)
EW_NP_VIA_DOUBLE_1(arccosh, acosh)
EW_NP_VIA_DOUBLE_1(arctanh, atanh)
EW_NP_VIA_DOUBLE_1(erfc, erfc)
EW_NP_VIA_DOUBLE_2(arctan2, atan2)
EW_NP_VIA_DOUBLE_2(hypot, hypot)
#undef EW_NP_VIA_DOUBLE_1
#undef EW_NP_VIA_DOUBLE_2

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

// Floor division and its remainder, as Python and numpy define them: the quotient rounded toward
// -inf, the remainder with the divisor's sign. Integers: x // 0 and x % 0 are 0 (numpy warns and
// gives 0), INT_MIN // -1 wraps to INT_MIN; nothing here divides by 0 or overflows.
template <typename T>
__device__ __forceinline__ T floor_divide_int(T a, T b) {
  if (b == T(0)) return T(0);
  if (b == T(-1)) return wrap_sub(T(0), a);
  const T q = static_cast<T>(a / b);
  return (static_cast<T>(a % b) != T(0) && ((a < T(0)) != (b < T(0)))) ? static_cast<T>(q - T(1)) : q;
}

template <typename T>
__device__ __forceinline__ T remainder_int(T a, T b) {
  if (b == T(0) || b == T(-1)) return T(0);
  const T r = static_cast<T>(a % b);
  return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? static_cast<T>(r + b) : r;
}

// numpy's npy_divmod for floats (npy_math_internal.h): the quotient from fmod, snapped to an
// integer, with the signs of zeros and the infinities numpy gives (x // inf is 0 or -1, x % inf is
// x or inf with inf's sign). A zero divisor gives a / b and fmod's NaN, as numpy's floor_divide and
// remainder do.
template <typename T>
struct DivMod {
  T div, mod;
};
template <typename T>
__device__ __forceinline__ DivMod<T> divmod_float(T a, T b) {
  T mod = ::fmod(a, b);
  if (b == T(0)) return {a / b, mod};
  T div = (a - mod) / b;
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
    floordiv = ::copysign(T(0), a / b);
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
  if constexpr (std::is_integral_v<T>) return (b == T(0) || b == T(-1)) ? T(0) : static_cast<T>(a % b);
  else return ::fmod(a, b);
}

// a^b. Floats: C's pow (numpy's), in double for float32 results (see via_double_v). Integers:
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
    return static_cast<float>(::pow(static_cast<double>(a), static_cast<double>(b)));
  } else {
    return ::pow(a, b);
  }
}

// log(exp(a) + exp(b)) without overflow, numpy's npy_logaddexp: equal inputs give a + log(2) (so
// inf and inf give inf), NaN propagates (through a - b). float32 results in double (one rounding
// of the sum). Without branches: a warp whose lanes took either side of numpy's `a > b` paid for
// both sides' exp and log1p.
template <typename T>
__device__ __forceinline__ T logaddexp_of(T a, T b) {
  const T r = (a > b ? a : b) + ::log1p(::exp(-::fabs(a - b)));
  return a == b ? a + T(0.693147180559945309417232121458176568) : r;
}
template <typename R = void, typename T>
__device__ __forceinline__ T logaddexp(T a, T b) {
  if constexpr (via_double_v<R, T>) return static_cast<float>(logaddexp_of(static_cast<double>(a), static_cast<double>(b)));
  else return logaddexp_of(a, b);
}

}  // namespace np
}  // namespace ew
