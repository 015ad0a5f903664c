// generated from ${op.source} by generator/ -- do not edit
// The device function of op '${op.name}': ${op.doc}
// C is the compute type (float for float32/float16/bfloat16, double for float64, the integer type
// for integer dtypes). Other ops' functions are callable by name.
#pragma once
#include "ew_math.cuh"
% for dep in deps:
#include "fn/${dep.name}.cuh"
% endfor

namespace ewf {

template <typename C>
__device__ __forceinline__ C ${op.name}(${signature}) {
  return (${op.expr});
}

}  // namespace ewf
