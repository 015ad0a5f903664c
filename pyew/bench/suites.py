"""The suites `python -m pyew bench --suites` chooses from, in the order they run.

Cheap suites and the ones the issue's targets read run first; the long map sweep runs last (its
largest size first), so a run that reaches --max-time still has every table but part of the sweep.
"""
from __future__ import annotations

from . import api_suites, map_suites

SUITES = {
    "copy": (map_suites.suite_copy, "copy ceiling: large device-to-device cudaMemcpyAsync"),
    "seeds": (map_suites.suite_seeds, "naive vs template (mul f32/f16), casts f32<->f16 vs torch"),
    "dot": (api_suites.suite_dot, "pyew.dot's methods (float16) vs torch.dot"),
    "upsample": (api_suites.suite_upsample, "upsample_nearest2d 2x fwd/bwd vs torch, 16x32x80x80 and 8x batch"),
    "relu_mask": (api_suites.suite_relu_mask, "relu_mask_backward vs torch threshold_backward, 16x32x112x112 and 8x"),
    "overhead": (api_suites.suite_overhead, "host time per call on 1-element arrays, pyew vs torch vs CuPy"),
    "roundtrip": (api_suites.suite_roundtrip, "sigmoid of 2^26 float32, numpy in/out: pyew, torch, CuPy, numpy"),
    "map": (map_suites.suite_map, "every map op x dtype x size: pyew, naive, torch, CuPy"),
}


def describe() -> str:
    return "\n".join(f"  {name:<10} {doc}" for name, (_, doc) in SUITES.items())
