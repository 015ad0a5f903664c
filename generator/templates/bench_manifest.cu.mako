// generated from ${comment(sources)} by generator/ -- do not edit
// The benchmark library's table of its entry points (JSON), read by pyew/bench/benchlib.py.
#include "ew_api.h"

EW_API const char* ew_bench_manifest(void) {
  return R"EW_MANIFEST(${manifest_json})EW_MANIFEST";
}
