"""int32 and int64 add, sub and mul wrap around on overflow exactly as numpy's do (the default spec
computes them through ew::wrap_add/wrap_sub/wrap_mul, in the unsigned type). Needs a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import pyew

pytestmark = pytest.mark.gpu

NUMPY = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def edges(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    root = int(np.sqrt(float(info.max)))
    vals = [info.min, info.min + 1, info.min // 2, info.min // 2 - 1, -root - 1, -root, -3, -2, -1, 0, 1, 2, 3,
            root, root + 1, info.max // 2, info.max // 2 + 1, info.max - 1, info.max]
    return np.array(vals, dtype=dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_wraps_at_the_limits_like_numpy(op, dtype):
    e = edges(dtype)
    x, y = (a.ravel().copy() for a in np.meshgrid(e, e))
    want = NUMPY[op](x, y)                       # numpy arrays wrap silently
    np.testing.assert_array_equal(getattr(pyew, op)(x, y), want)
    # the vectorised path too: many packs, and a misaligned view
    big_x, big_y = np.tile(x, 700), np.tile(y[::-1], 700)
    dx, dy = pyew.asarray(big_x), pyew.asarray(big_y)
    np.testing.assert_array_equal(getattr(pyew, op)(dx, dy).get(), NUMPY[op](big_x, big_y))
    np.testing.assert_array_equal(getattr(pyew, op)(dx[1:], dy[:-1]).get(), NUMPY[op](big_x[1:], big_y[:-1]))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_random_large_values_wrap_like_numpy(op, dtype, rng):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=1 << 16, dtype=dtype, endpoint=True)
    y = rng.integers(info.min, info.max, size=1 << 16, dtype=dtype, endpoint=True)
    np.testing.assert_array_equal(getattr(pyew, op)(x, y), NUMPY[op](x, y))
    # a Python scalar operand at the limit
    np.testing.assert_array_equal(getattr(pyew, op)(x, int(info.max)), NUMPY[op](x, np.array(info.max, dtype)))
