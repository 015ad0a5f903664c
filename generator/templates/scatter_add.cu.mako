<%
  T = kernel.dtype
  index_ctype = {"i32": "int32_t", "i64": "int64_t"}
%>\
// generated from ${comment(op.source)} by generator/ -- do not edit
// ${kernel.name}: ${comment(op.doc)}  [${T.name}; int32 and int64 indices]
#include "proto/${op.name}.h"
#include "scatter.cuh"
% for e in entries:
<% kind, tok = e.role.split("_") %>\

% if kind == "index":
${abi.head(e)} {
  return static_cast<int>(ew::launch_scatter_add<${T.ctype}, ${index_ctype[tok]}>(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, static_cast<${T.ctype}*>(dst), dst_len,
      static_cast<const ${index_ctype[tok]}*>(index), static_cast<const ${T.ctype}*>(src), n));
}
% else:
// bounds check of the ${tok} indices, run before the scatter; see scatter.cuh
${abi.head(e)} {
  return static_cast<int>(ew::launch_scatter_check<${index_ctype[tok]}>(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, bad,
      static_cast<const ${index_ctype[tok]}*>(index), n, dst_len));
}
% endif
% endfor
