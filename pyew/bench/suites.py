"""The suites in run and report order: cheap ones and those most targets read first, the map sweep last
(largest size first), so a run cut by --max-time has every table but part of the sweep."""
from __future__ import annotations

from . import suite_api, suite_fusion, suite_layouts, suite_map, suite_numpy

_DECLARED = {s.name: s for m in (suite_map, suite_api, suite_layouts, suite_numpy, suite_fusion) for s in m.SUITES}
SUITES = {name: _DECLARED[name] for name in ("copy", "template", "dot", "upsample", "relu_mask", "layouts", "overhead",
                                             "interop", "firstcall", "fusion", "numpy", "map")}

