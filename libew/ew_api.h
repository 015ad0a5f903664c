// The C ABI of libew.so: visibility of entry points and the ABI version pyew checks at load.
#pragma once
#include <stdint.h>

// Bump when any entry point's argument list or meaning changes; pyew refuses another version.
#define EW_ABI_VERSION 2

#ifdef __cplusplus
#define EW_API extern "C" __attribute__((visibility("default")))
#else
#define EW_API __attribute__((visibility("default")))
#endif
