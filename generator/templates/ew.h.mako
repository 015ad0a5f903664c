/* generated from ${sources} by generator/ -- do not edit */
/* Every extern "C" entry point of libew.so. Each returns a cudaError_t value (0 = success).
   Pointers are device pointers; `stream` is a cudaStream_t; `sms` and `threads_per_sm` are the
   device's multiprocessor count and max resident threads per multiprocessor. */
#ifndef EW_GENERATED_H
#define EW_GENERATED_H
#include "ew_api.h"

EW_API int ew_abi_version(void);
EW_API const char* ew_manifest(void);
EW_API const char* ew_error_name(int code);
EW_API int ew_fill(void* out, int64_t n, int itemsize, uint64_t bits, void* stream, int sms, int threads_per_sm);
EW_API int ew_event_synchronize(void* event);
EW_API int ew_stream_synchronize(void* stream);
% for k in kernels:
%   for e in k.entries():
EW_API int ${e.symbol}(${prototype(e)});  /* ${k.op.name} ${k.dtype.name}${'' if e.role == 'forward' else ' ' + e.role} */
%   endfor
% endfor

#endif
