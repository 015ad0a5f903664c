// generated from ${comment(sources)} by generator/ -- do not edit
// Each entry point's packed twin (libew/ew_api.h): the same call, its arguments in one array.
#include "ew.h"
% for k in kernels:
%   for e in k.entries():

${abi.packed_head(e)} {
  ${abi.packed_call(e)}
}
%   endfor
% endfor
