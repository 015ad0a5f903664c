// generated from ${comment(op.source)} by generator/ -- do not edit
// The device function of op '${op.name}' (its doc stays in its kernels' source: ops that call it
// include this header, and a new doc should not recompile them).
// C is the compute type (float for float32/float16/bfloat16, double for float64, the integer type
// for integer dtypes, bool for bool; an input of a fixed dtype takes that dtype's compute type); R
// is the type the kernel stores the result in (e.g. __half), which the helpers of ew_math.cuh take
// to pick the cheapest formula accurate to it. Other ops are callable by name: each is a local
// function object bound to the same R. An op whose output is bool returns bool.
#pragma once
#include "ew_math.cuh"
#include "ew_numpy.cuh"
% for dep in deps:
#include "fn/${dep.name}.cuh"
% endfor

namespace ewf {

template <typename R>
struct ${op.name}_fn {
  template <typename C>
  __device__ __forceinline__ ${returns} operator()(${signature}) const {
% for dep in direct:
    constexpr ::ewf::${dep.name}_fn<R> ${dep.name}{};
% endfor
    return (${op.expr});  ${mark}
  }
};

}  // namespace ewf
