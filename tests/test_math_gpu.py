"""The helpers of ew_math.cuh through every one-input float map op: float16 and bfloat16 on all
65536 bit patterns (their fast paths must stay within 1 ulp of the correctly rounded value
everywhere, subnormals and the far tails included), and float32 over magnitudes from 1e-6 to 1e4
of both signs, where the tails of exp and erfc are."""
from __future__ import annotations

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt

from .conftest import GPU_SKIP_REASON, needs_gpu
from .reference import assert_matches, evaluate
from .test_map_gpu import _params


def _unary_float_kernels(dtypes):
    if GPU_SKIP_REASON is not None and "libew" in GPU_SKIP_REASON:
        return []
    out = []
    for info in pyew.library.get().manifest["ops"]:
        if info["kind"] != "map" or len(info["inputs"]) != 1:
            continue
        for k in info["kernels"]:
            if k["dtype"] in dtypes:
                out.append(pytest.param(info, k["dtype"], id=f"{info['name']}-{k['dtype']}"))
    return out


def _check(info, dtype, x, got):
    out_dtype = dt.BY_NAME[next(k["out_dtype"] for k in info["kernels"] if k["dtype"] == dtype)]
    ref = evaluate(info["ref"], info["inputs"], [x], _params(info), dt.BY_NAME[dtype])
    assert_matches(got, ref, out_dtype, f"{info['name']} {dtype}", rtol=info.get("rtol"))


@needs_gpu
@pytest.mark.parametrize("info,dtype", _unary_float_kernels(("float16", "bfloat16")))
def test_every_16bit_input(info, dtype):
    x = np.arange(1 << 16, dtype=np.uint16).view(dt.BY_NAME[dtype].np)
    _check(info, dtype, x, getattr(pyew, info["name"])(x, **_params(info)))


@needs_gpu
@pytest.mark.parametrize("info,dtype", _unary_float_kernels(("float32",)))
def test_float32_wide_range(info, dtype, rng):
    mag = 10.0 ** rng.uniform(-6, 4, size=1 << 18)
    x = (mag * rng.choice([-1.0, 1.0], size=mag.size)).astype(np.float32)
    _check(info, dtype, x, getattr(pyew, info["name"])(x, **_params(info)))
