// generated from ${comment(sources)} by generator/ -- do not edit
// The library's own op table (the JSON manifest) and ABI version, read by pyew at load.
#include "ew_api.h"

${abi.declaration(abi.RUNTIME[0])}
${abi.declaration(abi.RUNTIME[1])}

${abi.head(abi.RUNTIME[0])} { return EW_ABI_VERSION; }

${abi.head(abi.RUNTIME[1])} {
  return R"EW_MANIFEST(${manifest_json})EW_MANIFEST";
}
