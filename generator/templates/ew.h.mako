/* generated from ${comment(sources)} by generator/ -- do not edit */
/* Every extern "C" entry point of libew.so. Each returns a cudaError_t value (0 = success).
   Pointers are device pointers; `stream` is a cudaStream_t; `sms` and `threads_per_sm` are the
   device's multiprocessor count and max resident threads per multiprocessor. This header is for
   users; each generated source includes only its op's prototypes (proto/<op>.h, rendered from
   the same declarations), which the compiler checks its definitions against. */
#ifndef EW_GENERATED_H
#define EW_GENERATED_H
#include "ew_api.h"

% for f in abi.RUNTIME:
${abi.declaration(f)}
% endfor
% for k in kernels:
%   for e in k.entries():
${abi.declaration(e)}  /* ${k.op.name} ${k.dtype.name}${'' if e.role == 'forward' else ' ' + e.role} */
${abi.packed_head(e)};
%   endfor
% endfor

#endif
