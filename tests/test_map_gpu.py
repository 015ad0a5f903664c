"""GPU tests generated from the loaded library's op table: every map op x dtype against its
spec's numpy reference (float64) on fresh random data."""
from __future__ import annotations

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt

from .conftest import GPU_SKIP_REASON, needs_gpu, poison, random_array
from .reference import assert_matches, evaluate


def _map_kernels():
    if GPU_SKIP_REASON is not None and "libew" in GPU_SKIP_REASON:
        return []
    out = []
    for info in pyew.library.get().manifest["ops"]:
        if info["kind"] == "map":
            for k in info["kernels"]:
                out.append(pytest.param(info, k["dtype"], id=f"{info['name']}-{k['dtype']}"))
    return out


MAP_KERNELS = _map_kernels()
SIZES = (0, 1, 7, 4097, 2**20 + 3)
# Params used in tests: the default where there is one, else a value that exercises the op.
TEST_PARAM = {"float": 1.75, "int": 3}


def _params(info):
    return {p["name"]: (p["default"] if p["default"] is not None else TEST_PARAM[p["type"]]) for p in info["params"]}


def _inputs(info, dtype, n, rng):
    arrays = [random_array(rng, n, dtype) for _ in info["inputs"]]
    if info["name"] == "div":   # keep divisors away from zero so the check is about division
        arrays[1] = np.where(np.abs(arrays[1].astype(np.float64)) < 0.25, 0.5, arrays[1]).astype(arrays[1].dtype)
    return arrays


def _check(info, dtype, arrays, got, what):
    params = _params(info)
    out_dtype = dt.BY_NAME[next(k["out_dtype"] for k in info["kernels"] if k["dtype"] == dtype)]
    ref = evaluate(info["ref"], info["inputs"], arrays, params, dt.BY_NAME[dtype])
    assert_matches(got, ref, out_dtype, f"{info['name']} {dtype} {what}", rtol=info.get("rtol"))


@needs_gpu
@pytest.mark.parametrize("info,dtype", MAP_KERNELS)
def test_numpy_roundtrip(info, dtype, rng):
    fn = getattr(pyew, info["name"])
    for n in SIZES:
        arrays = _inputs(info, dtype, n, rng)
        got = fn(*arrays, **_params(info))
        assert isinstance(got, np.ndarray) and got.shape == (n,)
        _check(info, dtype, arrays, got, f"n={n}")


@needs_gpu
@pytest.mark.parametrize("info,dtype", MAP_KERNELS)
def test_device_misaligned_views(info, dtype, rng):
    """Views at element offsets 1..3 of their buffers, each input and out differently misaligned,
    so the kernel must pick a narrower pack or go scalar, and still handle the tail."""
    fn = getattr(pyew, info["name"])
    n = 4096 + 13
    out_dtype = next(k["out_dtype"] for k in info["kernels"] if k["dtype"] == dtype)
    for shift in range(3):
        arrays = _inputs(info, dtype, n, rng)
        dev = []
        for j, a in enumerate(arrays):
            off = (j + shift) % 4
            pad = np.concatenate([a[:off], a]) if off else a
            dev.append(pyew.asarray(pad)[off:])
        off = (shift + 2) % 4
        out = poison(pyew.empty(n + off, out_dtype))[off:]
        res = fn(*dev, out=out, **_params(info))
        assert res is out
        _check(info, dtype, arrays, out.get(), f"views shift={shift}")


@needs_gpu
@pytest.mark.parametrize("info,dtype", MAP_KERNELS)
def test_special_values(info, dtype, rng):
    """NaN, +-inf, signed zeros and the overflow-prone points, combined with random data."""
    info_dt = dt.BY_NAME[dtype]
    if info_dt.kind == "int":
        special = np.array([0, 1, -1, 2**31 - 1, -2**31], dtype=np.int64)
        special = special.astype(info_dt.np) if dtype == "int64" else np.array([0, 1, -1, 7, -7], info_dt.np)
    else:
        vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 4.05, -4.05, 11.0, -11.0, 20.0, -20.0, 65504.0,
                -65504.0, 1e-3, -1e-3, 3.0, -3.0, 0.5, -0.5, 100.0, -100.0, 1e30, -1e30]
        with np.errstate(over="ignore"):
            special = np.array(vals, np.float64).astype(info_dt.np)
    fn = getattr(pyew, info["name"])
    k = len(special)
    arrays = []
    for j, _ in enumerate(info["inputs"]):
        a = random_array(rng, 3 * k, dtype)
        a[j * k % (2 * k): j * k % (2 * k) + k] = np.roll(special, j)
        arrays.append(a)
    got = fn(*arrays, **_params(info))
    _check(info, dtype, arrays, got, "special values")
    if info["name"] in ("gelu", "sigmoid", "silu", "gelu_tanh") and info_dt.kind == "float":
        finite_in = np.isfinite(arrays[0].astype(np.float64))
        assert np.all(np.isfinite(got.astype(np.float64))[finite_in]), "finite input gave inf/NaN"


@needs_gpu
@pytest.mark.parametrize("info,dtype", MAP_KERNELS)
def test_out_inplace_and_stream(info, dtype, rng):
    fn = getattr(pyew, info["name"])
    n = 10007
    arrays = _inputs(info, dtype, n, rng)
    out_dtype = next(k["out_dtype"] for k in info["kernels"] if k["dtype"] == dtype)
    # numpy out=
    host_out = np.full(n, 7, dt.BY_NAME[out_dtype].np)
    assert fn(*arrays, out=host_out, **_params(info)) is host_out
    _check(info, dtype, arrays, host_out, "numpy out=")
    # in place on the device, on a non-default stream
    s = pyew.Stream()
    dev = [pyew.asarray(a, stream=s) for a in arrays]
    if out_dtype == dtype:
        res = fn(*dev, out=dev[0], stream=s, **_params(info))
        assert res is dev[0]
    else:
        res = fn(*dev, stream=s, **_params(info))
    s.synchronize()
    _check(info, dtype, arrays, res.get(stream=s), "in place on a stream")
    # the current stream of a `with` block
    with pyew.Stream() as s2:
        res2 = fn(*[pyew.asarray(a) for a in arrays], **_params(info))
        assert pyew.current_stream() is s2
    s2.synchronize()
    _check(info, dtype, arrays, res2.get(), "with Stream()")


@needs_gpu
@pytest.mark.parametrize("info,dtype", [p for p in MAP_KERNELS if len(p.values[0]["inputs"]) == 2])
def test_scalar_operands(info, dtype, rng):
    fn = getattr(pyew, info["name"])
    x = _inputs(info, dtype, 1000, rng)[0]
    s = 3 if dt.BY_NAME[dtype].kind == "int" else 2.5
    got = fn(x, s, **_params(info))
    _check(info, dtype, [x, np.full_like(x, s)], got, "array op scalar")
    got = fn(pyew.asarray(x), np.asarray(s, dt.BY_NAME[dtype].np), **_params(info)).get()
    _check(info, dtype, [x, np.full_like(x, s)], got, "device op 0-d array")
