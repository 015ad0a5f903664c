"""The suites `python -m pyew bench --suites` chooses from, in the order they run.

Cheap suites and the ones most targets read run first; the numpy suite (long at its large sizes)
runs before the map sweep and leaves it time; the map sweep runs last (its largest size first), so
a run that reaches --max-time still has every table but part of the sweep.
"""
from __future__ import annotations

from . import api_suites, host_suites, layout_suite, map_suites, numpy_suite

SUITES = {
    "copy": (map_suites.suite_copy, "copy ceiling: large device-to-device cudaMemcpyAsync"),
    "template": (map_suites.suite_template,
                 "OneFlow's comparison: naive vs template (mul f32/f16), casts f32<->f16 vs torch"),
    "dot": (api_suites.suite_dot, "pyew.dot's methods (float16) vs torch.dot"),
    "upsample": (api_suites.suite_upsample, "upsample_nearest2d 2x fwd/bwd vs torch, 16x32x80x80 and 8x batch"),
    "relu_mask": (api_suites.suite_relu_mask, "relu_mask_backward vs torch threshold_backward, 16x32x112x112 and 8x"),
    "layouts": (layout_suite.suite_layouts,
                "row and channel bias add/mul/add_relu and views offset 1..7 elements, vs torch (f32/f16/bf16)"),
    "overhead": (api_suites.suite_overhead, "host time per call on 1-element arrays, pyew vs torch vs CuPy"),
    "interop": (host_suites.suite_interop,
                "pyew.add on DeviceArray vs torch vs CuPy operands (host µs per call); bfloat16 DLPack check"),
    "firstcall": (host_suites.suite_firstcall,
                  "first vs second call of a few ops in a fresh process (CUDA lazy module loading)"),
    "numpy": (numpy_suite.suite_numpy,
              "numpy in/out wall clock: every default op f32/f16 at 2^20..2^28 vs numpy, numexpr, torch, "
              "CuPy; pinned bandwidth and floor; stage vs register; crossover; 16-element calls"),
    "map": (map_suites.suite_map, "every map op x dtype x size: pyew, naive, torch, CuPy (--sustained: ABAB runs)"),
}


def describe() -> str:
    return "\n".join(f"  {name:<10} {doc}" for name, (_, doc) in SUITES.items())
