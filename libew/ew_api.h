// The C ABI of libew.so: visibility of entry points and the ABI version pyew checks at load.
#pragma once
#include <stdint.h>

// Bump when any entry point's argument list or meaning changes; pyew refuses another version.
#define EW_ABI_VERSION 3

#ifdef __cplusplus
#define EW_API extern "C" __attribute__((visibility("default")))
#else
#define EW_API __attribute__((visibility("default")))
#endif

// One argument of an entry point's packed twin, `int <symbol>_packed(const ew_arg* args)`: the
// entry's arguments in order, each in the member of its kind. Callers that cannot spell each
// entry's C signature (pyew's Python extension) call the twin instead.
typedef union ew_arg {
  const void* p;   // out, in, stream, layout
  int64_t i;       // i64, and i32 (in range)
  uint64_t u;      // u64
  double f;        // f64
} ew_arg;
