<%
  T = kernel.dtype
  methods = {"fast": "kFast", "half_atomic": "kHalfAtomic", "half2_pack": "kHalf2Pack"}
%>\
// generated from ${comment(op.source)} by generator/ -- do not edit
// ${kernel.name}: ${comment(op.doc)}  [${T.name}, accumulating in ${T.compute}; methods: ${', '.join(e.role for e in entries)}]
#include "ew.h"
#include "dot.cuh"
% for e in entries:

${abi.head(e)} {
  return static_cast<int>(ew::launch_dot<ew::DotMethod::${methods[e.role]}, ${T.ctype}, ${T.compute}>(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, result, work,
      static_cast<const ${T.ctype}*>(a), static_cast<const ${T.ctype}*>(b), n));
}
% endfor
