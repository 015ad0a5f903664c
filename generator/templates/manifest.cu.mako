// generated from ${sources} by generator/ -- do not edit
// The library's own op table (the JSON manifest) and ABI version, read by pyew at load.
#include "ew_api.h"

EW_API int ew_abi_version(void) { return EW_ABI_VERSION; }

EW_API const char* ew_manifest(void) {
  return R"EW_MANIFEST(${manifest_json})EW_MANIFEST";
}
