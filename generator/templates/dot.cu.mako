<%
  T = kernel.dtype
  launch = {"fast": f"launch_dot<{T.ctype}, {T.compute}>",
            "half_atomic": f"launch_dot_atomic<ew::DotAtomic::kHalf, {T.ctype}>",
            "half2_pack": f"launch_dot_atomic<ew::DotAtomic::kHalf2Pack, {T.ctype}>"}
%>\
// generated from ${comment(op.source)} by generator/ -- do not edit
// ${kernel.name}: ${comment(op.doc)}  [${T.name}, accumulating in ${T.compute}; methods: ${', '.join(e.role for e in entries)}]
#include "proto/${op.name}.h"
#include "${'dot.cuh' if all(e.role == 'fast' for e in entries) else 'dot_atomics.cuh'}"
% for e in entries:

${abi.head(e)} {
  return static_cast<int>(ew::${launch[e.role]}(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, result, work,
      static_cast<const ${T.ctype}*>(a), static_cast<const ${T.ctype}*>(b), n));
}
% endfor
