<%
  T = kernel.dtype
  e = entries[0]
  x = op.inputs[0]
  addend = f"static_cast<const {T.ctype}*>({op.inputs[1]})" if len(op.inputs) > 1 else "nullptr"
%>\
// generated from ${comment(op.source)} by generator/ -- do not edit
// ${kernel.name}: ${comment(op.doc)}  [${T.name}, y and a 1-bit-per-element mask]
#include "proto/${op.name}.h"
#include "relu_mask.cuh"

${abi.head(e)} {
  return static_cast<int>(ew::launch_relu_mask<${T.ctype}, ${T.compute}>(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, n, static_cast<${T.ctype}*>(y),
      static_cast<uint32_t*>(mask), static_cast<const ${T.ctype}*>(${x}), ${addend}));
}
