/* generated from ${comment(op.source)} by generator/ -- do not edit */
/* The extern "C" entry points of op '${op.name}' and their packed twins: the declarations its
   kernels' sources are checked against. Each generated source includes only its own op's header,
   so adding or changing an op recompiles that op alone; build/ew.h declares every op's, for
   users of the library. */
#pragma once
#include "ew_api.h"

% for k in op.kernels():
%   for e in k.entries():
${abi.declaration(e)}  /* ${k.dtype.name}${'' if e.role == 'forward' else ' ' + e.role} */
${abi.packed_head(e)};
%   endfor
% endfor
