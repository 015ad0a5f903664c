<%
  T = kernel.dtype
  e = entries[0]
%>\
// generated from ${comment(op.source)} by generator/ -- do not edit
// ${kernel.name}: ${comment(op.doc)}  [${T.name}, dx = mask bit ? dy : +0]
#include "proto/${op.name}.h"
#include "relu_mask.cuh"

${abi.head(e)} {
  return static_cast<int>(ew::launch_mask_backward<${T.ctype}>(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, n, static_cast<${T.ctype}*>(dx),
      static_cast<const ${T.ctype}*>(dy), static_cast<const uint32_t*>(mask)));
}
