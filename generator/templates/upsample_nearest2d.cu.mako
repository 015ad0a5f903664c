<%
  T = kernel.dtype
  fwd = next(e for e in entries if e.role == "forward")
  bwd = next(e for e in entries if e.role == "backward")
%>\
// generated from ${comment(op.source)} by generator/ -- do not edit
// ${kernel.name}: ${comment(op.doc)}  [${T.name}, NCHW, accumulating in ${T.compute}]
#include "proto/${op.name}.h"
#include "upsample.cuh"

${abi.head(fwd)} {
  return static_cast<int>(ew::launch_upsample_forward<${T.ctype}, ${T.compute}>(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, static_cast<${T.ctype}*>(y),
      static_cast<const ${T.ctype}*>(x), nc, h, w, oh, ow));
}

${abi.head(bwd)} {
  return static_cast<int>(ew::launch_upsample_backward<${T.ctype}, ${T.compute}>(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, static_cast<${T.ctype}*>(dx),
      static_cast<const ${T.ctype}*>(dy), nc, h, w, oh, ow));
}
