"""dot and scatter_add (FastAtomicAdd) on the GPU against float64 numpy
references: exact results on data whose sums are exact in every dtype (catches a lost or doubled
element), error bounds on random data, n = 0, misaligned views, NaN/inf, out=, stream=, many
grid-stride trips, bounds errors that leave dst untouched, and the helper's guard at both ends."""
from __future__ import annotations

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt

from .helpers import poison, random_array
from .special_ref import bits_of, view_at

pytestmark = pytest.mark.gpu
FLOATS = ["float32", "float64", "float16", "bfloat16"]
HALF = ["float16", "bfloat16"]
EPS = {"float32": 2.0**-24, "float64": 2.0**-53, "float16": 2.0**-11, "bfloat16": 2.0**-8}
TINY = {"float32": 2.0**-149, "float64": 2.0**-1074, "float16": 2.0**-24, "bfloat16": 2.0**-133}
SIZES = [0, 1, 7, 33, 1000, 4097, 2**20 + 3]


def np_dtype(name):
    return dt.BY_NAME[name].np


def small_ints(rng, n, dtype, lo=-3, hi=4):
    return rng.integers(lo, hi, size=n).astype(np_dtype(dtype))


# ---- dot ---------------------------------------------------------------------------------------

def dot_exact(a, b):
    return float(np.dot(a.astype(np.float64), b.astype(np.float64)))


def check_fast(got, a, b, dtype, what):
    """Within the dtype's rounding of the exact dot, plus the float32 (float64) summation error:
    each product goes through at most (its thread's share + 8 tree levels + one atomic per block)
    additions, each off by at most eps of the sum of |products| so far."""
    got = np.asarray(got)
    assert got.dtype == np_dtype(dtype), what
    exact = dot_exact(a, b)
    acc_eps = EPS["float64" if dtype == "float64" else "float32"]
    dev = pyew.runtime.device()
    blocks = dev.sms * max(1, dev.threads_per_sm // 256)
    depth = a.size // (blocks * 256) + 16 + 8 + blocks
    bound = depth * acc_eps * float(np.abs(a.astype(np.float64) * b.astype(np.float64)).sum())
    bound += EPS[dtype] * abs(exact) + TINY[dtype]
    assert abs(float(got) - exact) <= bound, f"{what}: got {float(got)!r}, exact {exact!r}, bound {bound}"


@pytest.mark.parametrize("dtype", FLOATS)
def test_dot_fast_exact_on_small_integers(dtype, rng):
    """Products and partial sums are integers below 2^24 (2^53): float32 sums them exactly, so the
    result is exactly the rounded exact dot; a lost or doubled element would show."""
    for n in SIZES:
        a, b = small_ints(rng, n, dtype), small_ints(rng, n, dtype)
        got = pyew.dot(a, b)
        assert isinstance(got, np.generic) and got.dtype == a.dtype          # numpy's scalar, as np.dot
        want = np.asarray(dot_exact(a, b)).astype(a.dtype)
        assert got.astype(np.float64) == want.astype(np.float64), f"n={n}: {got} != {want}"


@pytest.mark.parametrize("dtype", FLOATS)
def test_dot_fast_random(dtype, rng):
    for n in SIZES:
        a = random_array(rng, n, dtype, -1, 1)
        b = random_array(rng, n, dtype, -1, 1)
        check_fast(pyew.dot(a, b), a, b, dtype, f"n={n}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_dot_misaligned_views_out_stream(dtype, rng):
    n = 10_000 + 7
    for off_a, off_b in ((1, 0), (1, 1), (2, 3), (3, 2)):
        a, b = small_ints(rng, n, dtype), small_ints(rng, n, dtype)
        out = poison(pyew.empty(3, dtype))[1:2]
        s = pyew.Stream()
        r = pyew.dot(view_at(a, off_a), view_at(b, off_b), out=out, stream=s)
        assert r is out
        want = np.asarray(dot_exact(a, b)).astype(a.dtype)
        assert r.get(stream=s)[0] == want, f"offsets {off_a},{off_b}"
    d = pyew.dot(pyew.asarray(a), b)           # device and host operands: a device result
    assert isinstance(d, pyew.DeviceArray) and d.shape == () and d.get() == want
    host = np.empty((), a.dtype)
    assert pyew.dot(a, b, out=host) is host and host == want


@pytest.mark.parametrize("dtype", FLOATS)
def test_dot_nan_inf_and_empty(dtype, rng):
    a, b = random_array(rng, 100, dtype), random_array(rng, 100, dtype)
    a[17] = np.nan
    assert np.isnan(float(pyew.dot(a, b)))
    a[17] = np.inf
    b[17] = 1
    assert float(pyew.dot(a, b)) == np.inf
    z = np.zeros(0, np_dtype(dtype))
    assert float(pyew.dot(z, z)) == 0.0
    assert float(pyew.dot(pyew.asarray(z), pyew.asarray(z)).get()) == 0.0


@pytest.mark.parametrize("dtype", FLOATS)
def test_dot_many_loop_trips(dtype, rng, small_grid):
    n = 500_003           # one block on a 1-SM grid: each thread loops hundreds of times
    a, b = small_ints(rng, n, dtype, -2, 3), small_ints(rng, n, dtype, -2, 3)
    assert float(pyew.dot(a, b)) == float(np.asarray(dot_exact(a, b)).astype(a.dtype))


# ---- scatter_add -------------------------------------------------------------------------------

def scatter_bound(dst, index, src, dtype):
    """Per element: every add into it rounds the running value once (eps of its magnitude)."""
    L = dst.size
    idx = np.where(index < 0, index + L, index)
    mag = np.abs(dst.astype(np.float64))
    np.add.at(mag, idx, np.abs(src.astype(np.float64)))
    count = np.zeros(L)
    np.add.at(count, idx, 1)
    return count * EPS[dtype] * mag


def scatter_ref(dst, index, src):
    out = dst.astype(np.float64)
    np.add.at(out, index, src.astype(np.float64))
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("itype", ["int32", "int64"])
def test_scatter_exact_on_small_integers(dtype, itype, rng):
    for L, n in ((1, 1), (2, 50), (3, 7), (257, 6000), (1000, 1), (4099, 100_000)):
        dst = small_ints(rng, L, dtype, -4, 5)
        index = rng.integers(-L, L, size=n).astype(itype)
        src = small_ints(rng, n, dtype, -2, 3)
        want = scatter_ref(dst, index, src)
        got = pyew.scatter_add(dst, index, src)          # numpy dst: updated in place
        assert got is dst
        np.testing.assert_array_equal(dst.astype(np.float64), want, err_msg=f"L={L} n={n}")
        d = pyew.asarray(small_ints(rng, L, dtype, -4, 5))
        want = scatter_ref(d.get(), index, src)
        assert pyew.scatter_add(d, pyew.asarray(index), pyew.asarray(src)) is d
        np.testing.assert_array_equal(d.get().astype(np.float64), want, err_msg=f"device L={L} n={n}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_scatter_random_within_bound(dtype, rng):
    L, n = 3001, 200_000
    dst = random_array(rng, L, dtype)
    index = rng.integers(-L, L, size=n)
    src = random_array(rng, n, dtype, -1, 1)
    bound = scatter_bound(dst, index, src, dtype)
    want = scatter_ref(dst, index, src)
    got = pyew.scatter_add(pyew.asarray(dst), index, src).get().astype(np.float64)
    bad = np.flatnonzero(np.abs(got - want) > bound)
    assert bad.size == 0, f"{bad.size} beyond the bound, first {bad[0]}: {got[bad[0]]} vs {want[bad[0]]}"


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("offset", [1, 2])
@pytest.mark.parametrize("length", [1, 2, 7, 8])
def test_fast_atomic_add_stays_inside_dst(dtype, offset, length, rng):
    """dst is a view in the middle of a buffer, starting at an odd or an even element; the first
    element (offset 0) and the last one get most adds. The neighbours outside dst hold a NaN with
    a payload: an add of -0 through a paired atomic would turn it into the canonical NaN, so they
    must keep their bits."""
    guard = {"float16": 0x7E01, "bfloat16": 0x7FC1}[dtype]
    whole = np.zeros(offset + length + 2, np.uint16)
    whole[:offset] = guard
    whole[offset + length:] = guard
    buf = pyew.asarray(whole.view(np_dtype(dtype)))
    dst = buf[offset:offset + length]
    n = 20_000
    index = np.where(rng.random(n) < 0.5, 0, length - 1) if length > 1 else np.zeros(n, np.int64)
    index[:100] = rng.integers(-length, length, size=100)
    # ones at every 128th position, zeros elsewhere: at most 157 per element, exact in both dtypes
    src = np.where(np.arange(n) % 128 == 0, 1.0, 0.0).astype(np_dtype(dtype))
    want = scatter_ref(np.zeros(length, src.dtype), index, src)
    pyew.scatter_add(dst, index, src)
    after = buf.get().view(np.uint16)
    assert (after[:offset] == guard).all() and (after[offset + length:] == guard).all(), \
        "FastAtomicAdd touched memory outside dst"
    np.testing.assert_array_equal(dst.get().astype(np.float64), want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_scatter_bad_index_leaves_dst_untouched(dtype, rng):
    L = 100
    init = random_array(rng, L, dtype)
    for bad_value in (L, -L - 1, 2**40):
        for itype in ("int32", "int64"):
            if itype == "int32" and bad_value > 2**31:
                continue
            index = rng.integers(-L, L, size=5000).astype(itype)
            index[4321] = bad_value
            src = random_array(rng, 5000, dtype)
            d = pyew.asarray(init)
            with pytest.raises(IndexError,
                               match=rf"index\[4321\] = {bad_value} is out of bounds for dst of length 100"):
                pyew.scatter_add(d, pyew.asarray(index), pyew.asarray(src))     # checked by the kernel
            np.testing.assert_array_equal(bits_of(d.get()), bits_of(init))
            host = init.copy()
            with pytest.raises(IndexError, match=r"index\[4321\]"):
                pyew.scatter_add(host, index, src)                               # checked on the host
            np.testing.assert_array_equal(bits_of(host), bits_of(init))
    index = np.array([3, 99, -100, 0], np.int64)                              # the extremes are fine
    pyew.scatter_add(pyew.asarray(init), pyew.asarray(index), np.ones(4, init.dtype))


def test_scatter_first_bad_position_is_reported(rng):
    index = np.zeros(300_000, np.int64)
    index[[150_000, 7, 299_999]] = 10
    with pytest.raises(IndexError, match=r"index\[7\] = 10"):
        pyew.scatter_add(pyew.zeros(10, "float32"), pyew.asarray(index), pyew.zeros(300_000, "float32"))


def test_scatter_src_over_dst_is_read_first_and_bad_casts_fail_first():
    """src over dst's own memory read as it was, as np.add.at reads it; a src the
    library cannot convert is refused before any GPU work, dst unchanged."""
    a = np.array([1, 2, 4, 8], np.float32)
    d = pyew.asarray(a)
    pyew.scatter_add(d, np.array([1, 2, 3], np.int64), d[:3])
    want = a.copy()
    np.add.at(want, [1, 2, 3], a[:3].copy())
    np.testing.assert_array_equal(d.get(), want)
    f = pyew.asarray(np.array([0, 1, 2, 3], np.float32))           # duplicates accumulate
    idx = pyew.asarray(np.array([1, 2, 3, 3], np.int32))
    pyew.scatter_add(f, idx, pyew.asarray(np.array([5, 6, 7, 1], np.float32)))
    np.testing.assert_array_equal(f.get(), [0, 6, 8, 11])
    with pytest.raises(TypeError, match="no cast from uint32 to float32.*astype"):
        pyew.scatter_add(d, np.array([0], np.int64), pyew.asarray(np.array([1], np.uint32)))
    np.testing.assert_array_equal(d.get(), want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_scatter_numpy_views_stream_and_empty(dtype, rng):
    base = small_ints(rng, 40, dtype)
    dst = base[::2]                                      # non-contiguous, writeable: still in place
    index = np.array([0, 19, -1, 5, 5], np.int32)
    src = small_ints(rng, 5, dtype)
    want = scatter_ref(dst, index, src)
    with pyew.Stream() as s:
        assert pyew.scatter_add(dst, index, src, stream=s) is dst
    np.testing.assert_array_equal(base[::2].astype(np.float64), want)
    d = pyew.asarray(base)
    assert pyew.scatter_add(d, np.zeros(0, np.int64), np.zeros(0, base.dtype)) is d
    dv = view_at(base, 1)                                # a misaligned device dst
    want = scatter_ref(base, index, src)
    pyew.scatter_add(dv, pyew.asarray(index), src)
    np.testing.assert_array_equal(dv.get().astype(np.float64), want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_scatter_many_loop_trips(dtype, rng, small_grid):
    L, n = 513, 300_001
    index = rng.integers(-L, L, size=n)
    src = np.zeros(n, np_dtype(dtype))                  # zeros but for a sparse set of ones
    src[::97] = 1
    dst = np.zeros(L, src.dtype)
    want = scatter_ref(dst, index, src)
    pyew.scatter_add(dst, index, src)
    np.testing.assert_array_equal(dst.astype(np.float64), want)
