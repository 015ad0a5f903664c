// generated from ${comment(op.source)} by generator/ -- do not edit
// Op '${op.name}' (${', '.join(k.dtype.name for k in op.kernels())}): its kernels' sources compiled
// as one translation unit, so that the libew headers are compiled once per op, not once per dtype.
// Each source is included inside a namespace of its own, where its file-local names (ew_map_fn)
// cannot clash with another dtype's; the headers it includes are included first, here, so that
// inside the namespace they are already seen. (The entry points keep their C names: a function
// with C linkage is the same function in any namespace.)
% for line in includes:
${line}
% endfor
% for k in op.kernels():

namespace ew_unit_${k.dtype.token} {
#include "${k.name}.cu"
}  // namespace ew_unit_${k.dtype.token}
% endfor

// Each entry point's packed twin (libew/ew_api.h): the same call, its arguments in one array.
% for k in op.kernels():
%   for e in k.entries():

${abi.packed_head(e)} {
  ${abi.packed_call(e)}
}
%   endfor
% endfor
