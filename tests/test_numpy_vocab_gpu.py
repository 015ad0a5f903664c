"""numpy's semantics of the default spec's vocabulary where C's differ, spelled out: integer division
by zero and overflow, integer powers, NaN in maximum and fmax, sign of NaN, signed zeros, where's
condition of any dtype, and bool arrays through DLPack and the CUDA Array Interface. (Every op x
dtype is also checked against its numpy reference on random data, special values, views and
every 16-bit input by test_map_gpu.py and test_math_gpu.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import pyew

from . import reference
from .helpers import filled, free_memory_for, poison, random_array

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_is_defined_everywhere(dtype):
    """x // 0, x % 0 and fmod(x, 0) are 0, and the most negative // -1 wraps, as numpy gives them;
    floor division rounds toward -inf and the remainder takes the divisor's sign."""
    t = np.dtype(dtype).type
    lo = np.iinfo(dtype).min
    a = np.array([7, -7, 7, -7, 5, lo, lo, lo, 0, -1], dtype)
    b = np.array([2, 2, -2, -2, 0, -1, 1, 0, 0, -1], dtype)
    with np.errstate(all="ignore"):
        want_div, want_mod, want_fmod = a // b, np.remainder(a, b), np.fmod(a, b)
    np.testing.assert_array_equal(want_div, np.array([3, -4, -4, 3, 0, lo, lo, 0, 0, 1], dtype))
    for dev in (False, True):
        x, y = (pyew.asarray(a), pyew.asarray(b)) if dev else (a, b)
        got = [pyew.floor_divide(x, y), pyew.remainder(x, y), pyew.fmod(x, y)]
        got = [g.get() if dev else g for g in got]
        np.testing.assert_array_equal(got[0], want_div)
        np.testing.assert_array_equal(got[1], want_mod)
        np.testing.assert_array_equal(got[2], want_fmod)
    # a Python number as the divisor, 0 included
    np.testing.assert_array_equal(pyew.floor_divide(pyew.asarray(a), 0).get(), np.zeros_like(a))
    np.testing.assert_array_equal(pyew.remainder(pyew.asarray(a), t(-1)).get(), np.zeros_like(a))


def test_int64_division_of_small_and_large_values(rng):
    """int64 floor_divide, remainder and fmod where both operands fit 32 bits (a 32-bit division),
    where one does not, and at the edges of int32, against numpy's."""
    n = 1 << 16
    small = rng.integers(-(1 << 31), 1 << 31, (2, n))
    large = rng.integers(-(1 << 63), (1 << 63) - 1, (2, n), dtype=np.int64)
    edges = np.array([-(1 << 31), (1 << 31) - 1, 1 << 31, -(1 << 31) - 1, -1, 1, 7, -7], np.int64)
    e = np.stack(np.meshgrid(edges, edges)).reshape(2, -1)
    a, b = (np.concatenate(p).astype(np.int64) for p in zip(small, large, (small[0], large[1]),
                                                            (large[0], small[1]), e))
    b[b == 0] = 3
    x, y = pyew.asarray(a), pyew.asarray(b)
    np.testing.assert_array_equal(pyew.floor_divide(x, y).get(), np.floor_divide(a, b))
    np.testing.assert_array_equal(pyew.remainder(x, y).get(), np.remainder(a, b))
    np.testing.assert_array_equal(pyew.fmod(x, y).get(), np.fmod(a, b))


_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_float_division_where_the_quotient_rounds_across_an_integer(dtype, rng):
    """floor_divide, remainder and fmod where a / b lies within a few ulp of an integer (rounded,
    it can land one past the true quotient), on quotients around 2^22 (float32) and 2^51 (float64),
    where the fast form hands over to the library's fmod, and on random pairs of every magnitude:
    bit for bit numpy's (16-bit types as numpy's loops compute them: in float32, rounded once)."""
    info = pyew.dtypes.BY_NAME[dtype]
    digits = {"float32": 24, "float64": 53, "float16": 11, "bfloat16": 8}[dtype]
    n = 1 << 18
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-12, 12, n))).astype(info.np)
    k = np.floor(np.exp2(rng.uniform(0, digits + 1, n))) * rng.choice([-1.0, 1.0], n)
    k[: n // 8] = np.exp2(digits - 2) + rng.integers(-8, 8, n // 8)        # around the hand-over
    with np.errstate(all="ignore"):
        a = (k * b.astype(np.float64)).astype(info.np)
    bits = a.view(_UINT[info.itemsize]).copy()
    step = rng.integers(-2, 3, n).astype(np.int64)                            # a few ulp either way
    ok = np.isfinite(a.astype(np.float64)) & (a.astype(np.float64) != 0)
    bits[ok] = (bits[ok].astype(np.int64) + step[ok]).astype(bits.dtype)
    a = bits.view(info.np)
    wild = rng.integers(0, 1 << (8 * info.itemsize - 1), (2, n // 4)).astype(_UINT[info.itemsize])
    wild[:, ::2] |= _UINT[info.itemsize](1) << _UINT[info.itemsize](8 * info.itemsize - 1)   # both signs
    a = np.concatenate([a, wild[0].view(info.np)])
    b = np.concatenate([b, wild[1].view(info.np)])
    wide = np.float64 if dtype == "float64" else np.float32
    for name in ("floor_divide", "remainder", "fmod"):
        with np.errstate(all="ignore"):
            want = getattr(np, name)(a.astype(wide), b.astype(wide)).astype(info.np)
        got = getattr(pyew, name)(pyew.asarray(a), pyew.asarray(b)).get()
        g, w = got.astype(np.float64), want.astype(np.float64)
        same = (got.view(_UINT[info.itemsize]) == want.view(_UINT[info.itemsize])) | (np.isnan(g) & np.isnan(w))
        bad = np.flatnonzero(~same)[:5]
        assert same.all(), (f"{name} {dtype}: {(~same).sum()} differ, e.g. {a[bad]} {b[bad]} -> {got[bad]}, "
                            f"numpy {want[bad]}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_division_of_every_dividend(dtype, rng):
    """floor_divide, remainder and fmod of 16-bit values: every dividend (all 65,536 bit patterns) by
    random divisors of every magnitude and sign and by the edge ones (zeros, infinities, NaN, the
    smallest subnormal, the largest value, and for bfloat16 subnormal divisors and divisors about
    2^-126 and 2^126, where a float's reciprocal leaves the normal range): quotients from below
    2^-40 to past 2^40, across the hand-over at 2^22 from fmod's fast form to the library's, bit for
    bit numpy's (in float32, rounded once)."""
    info = pyew.dtypes.BY_NAME[dtype]
    edges = {"float16": [0x0000, 0x0001, 0x0400, 0x3C00, 0x4200, 0x7BFF, 0x7C00, 0x7E00],
             "bfloat16": [0x0000, 0x0001, 0x0020, 0x0040, 0x007F, 0x0080, 0x0081, 0x3F80, 0x4040, 0x7E7F, 0x7E80,
                          0x7F7F, 0x7F80, 0x7FC0]}
    edge = np.array(edges[dtype], np.uint16)
    divisors = np.concatenate([rng.integers(0, 1 << 16, 192).astype(np.uint16), edge, edge | np.uint16(0x8000)])
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    a = np.tile(every, len(divisors)).view(info.np)
    b = np.repeat(divisors, len(every)).view(info.np)
    x, y = pyew.asarray(a), pyew.asarray(b)
    for name in ("floor_divide", "remainder", "fmod"):
        with np.errstate(all="ignore"):
            want = getattr(np, name)(a.astype(np.float32), b.astype(np.float32)).astype(info.np)
        out = pyew.asarray(np.full(a.shape, 0x5A5A, np.uint16).view(info.np))       # poisoned first
        getattr(pyew, name)(x, y, out=out)
        got = out.get()
        same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got.astype(np.float32)) &
                                                                  np.isnan(want.astype(np.float32)))
        bad = np.flatnonzero(~same)[:5]
        assert same.all(), (f"{name} {dtype}: {(~same).sum()} differ, e.g. {a[bad]} {b[bad]} -> {got[bad]}, "
                            f"numpy {want[bad]}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_formula_remainders_of_float_intermediates(dtype, rng):
    """A 16-bit formula's fmod and remainder take float intermediates, not 16-bit values: divisors
    y + v of up to 24 significant bits and dividends a few ulp from integer multiples of them (where
    a quotient one off leaves a - k b past a float's precision), bit for bit numpy's in float32,
    rounded once."""
    info = pyew.dtypes.BY_NAME[dtype]
    n = 1 << 18
    y = (rng.uniform(1, 2, n) * rng.choice([-1.0, 1.0], n)).astype(info.np)
    v = (rng.uniform(1, 2, n) * np.exp2(-rng.integers(9, 15, n))).astype(info.np)
    s = y.astype(np.float32) + v.astype(np.float32)                      # as the formula's float add rounds it
    k = rng.integers(1, 1 << 9, n) * rng.choice([-1.0, 1.0], n)
    x = (k * s.astype(np.float64)).astype(info.np)
    bits = x.view(np.uint16).astype(np.int64) + rng.integers(-2, 3, n)
    x = bits.astype(np.uint16).view(info.np)
    for text, ref in (("fmod(x, y + v)", np.fmod), ("remainder(x, y + v)", np.remainder)):
        with np.errstate(all="ignore"):
            want = ref(x.astype(np.float32), s).astype(info.np)
        got = pyew.evaluate(text, local_dict={"x": x, "y": y, "v": v})
        same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got.astype(np.float32)) &
                                                                  np.isnan(want.astype(np.float32)))
        bad = np.flatnonzero(~same)[:5]
        assert same.all(), (f"{text} {dtype}: {(~same).sum()} differ, e.g. {x[bad]} {s[bad]} -> {got[bad]}, "
                            f"numpy {want[bad]}")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_powers(dtype):
    """Wrapping like numpy's; a negative exponent (numpy raises) gives 1 / x^|y| rounded toward zero."""
    a = np.array([2, -2, 3, 0, 1, -1, -1, 2, 0, 5, -7], dtype)
    b = np.array([10, 3, 40, 0, -5, -3, -4, -1, -2, 0, 63], dtype)
    got = pyew.power(a, b)
    pos = b >= 0
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got[pos], a[pos] ** b[pos])
    np.testing.assert_array_equal(got[~pos], np.array([1, -1, 1, 0, 0], dtype))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_shifts_by_any_count(dtype, rng):
    """left_shift and right_shift as numpy's: counts outside [0, bits) (negative ones too) shift
    every bit out, 0 or -1 for a negative value shifted right, where C leaves them undefined;
    every value against every count (a broadcast), as ops, operators and in a formula, into poisoned outs."""
    info = np.iinfo(dtype)
    x = np.concatenate([[0, 1, -1, 5, -5, info.max, info.min, 123456789 % info.max],
                        rng.integers(info.min, info.max, 56, dtype=dtype, endpoint=True)]).astype(dtype)
    n = np.array([info.min, -65, -64, -1, 0, 1, 2, info.bits - 2, info.bits - 1, info.bits, info.bits + 1, 63, 64,
                  65, 1000, info.max], dtype)
    xs, ns = x[:, None], n[None, :]
    dx, dn = pyew.asarray(np.ascontiguousarray(np.broadcast_to(xs, (x.size, n.size)))), pyew.asarray(n)
    for name, want in (("left_shift", np.left_shift(xs, ns)), ("right_shift", np.right_shift(xs, ns))):
        out = poison(pyew.empty(want.shape, dtype))
        getattr(pyew, name)(dx, dn, out=out)
        np.testing.assert_array_equal(out.get(), want, err_msg=name)
        np.testing.assert_array_equal(getattr(pyew, name)(xs, ns), want, err_msg=f"{name} numpy")
        sym = "<<" if name == "left_shift" else ">>"
        np.testing.assert_array_equal(pyew.evaluate(f"(a {sym} b) ^ 0", dict(a=xs, b=ns)), want, err_msg=sym)
        np.testing.assert_array_equal((dx << dn if sym == "<<" else dx >> dn).get(), want, err_msg=sym)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_nan_and_signed_zeros(dtype):
    nan, inf = np.nan, np.inf
    with np.errstate(all="ignore"):
        x = np.array([nan, 1.0, nan, -0.0, 0.0, -inf, 2.0], np.float64).astype(pyew.dtypes.BY_NAME[dtype].np)
        y = np.array([1.0, nan, nan, 0.0, -0.0, inf, -3.0], np.float64).astype(x.dtype)
    d = [pyew.asarray(x), pyew.asarray(y)]
    np.testing.assert_array_equal(np.isnan(pyew.maximum(*d).get()), [True, True, True, False, False, False, False])
    np.testing.assert_array_equal(np.isnan(pyew.fmax(*d).get()), [False, False, True, False, False, False, False])
    np.testing.assert_array_equal(pyew.fmin(*d).get()[:2].astype(np.float64), [1.0, 1.0])
    s = pyew.sign(d[0]).get().astype(np.float64)
    assert np.isnan(s[0]) and s[1] == 1 and s[3] == 0 and not np.signbit(s[3]) and s[5] == -1
    # signed zeros as numpy gives them
    z = np.array([-0.0, 0.0, -0.5, -1e-3], np.float64).astype(x.dtype)
    for name in ("negative", "positive", "absolute", "floor", "ceil", "trunc", "rint", "sqrt", "cbrt", "sin", "tan",
                 "arctan", "arcsin", "sinh", "tanh", "arcsinh", "arctanh", "expm1", "log1p", "erf", "square"):
        got = getattr(pyew, name)(pyew.asarray(z)).get()
        with np.errstate(all="ignore"):
            ref = reference.erf if name == "erf" else getattr(np, name)      # numpy has no erf
            want = np.asarray(ref(z.astype(np.float64))).astype(x.dtype)
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        np.testing.assert_array_equal(np.signbit(g64)[w64 == 0], np.signbit(w64)[w64 == 0], err_msg=name)
    a = np.array([-0.0, 0.0, 5.0, -5.0, 0.0, -6.0], np.float64).astype(x.dtype)
    b = np.array([3.0, -3.0, -5.0, 5.0, -1.0, 3.0], np.float64).astype(x.dtype)
    for name in ("remainder", "floor_divide", "fmod", "copysign", "arctan2", "power"):
        got = getattr(pyew, name)(pyew.asarray(a), pyew.asarray(b)).get().astype(np.float64)
        with np.errstate(all="ignore"):
            want = getattr(np, name)(a.astype(np.float64), b.astype(np.float64))
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(got)[zero], np.signbit(want)[zero], err_msg=name)
    # relu, add_relu and relu_mask agree with np.maximum(x, 0) at -0: +0 (float16's maximum keeps -0)
    # (32 elements: whole packs, so add_relu's paired 16-bit form runs, not only the scalar tail)
    zs = np.tile(np.array([-0.0, 0.0, -1.0, nan], np.float64), 8).astype(x.dtype)
    dz = pyew.asarray(zs)
    for got in (pyew.relu(dz).get(), pyew.add_relu(dz, pyew.asarray(np.zeros(32, x.dtype) * -1)).get(),
                pyew.relu_mask(dz)[0].get()):
        g = got.astype(np.float64).reshape(8, 4)
        assert not np.signbit(g[:, :3]).any() and (g[:, :3] == 0).all() and np.isnan(g[:, 3]).all()
    np.testing.assert_array_equal(pyew.logical_and(d[0], d[1]).get(),                         # NaN is true
                                  np.logical_and(x.astype(np.float64), y.astype(np.float64)))
    c = pyew.clip(pyew.asarray(x), np.asarray(-1.0, x.dtype), y).get()
    np.testing.assert_array_equal(np.isnan(c.astype(np.float64)), np.isnan(np.clip(x.astype(np.float64), -1.0,
                                                                                    y.astype(np.float64))))
    # where x equals a bound, clip gives the bound, as numpy's loop for array bounds does (its loop
    # for scalar bounds keeps x: clip(-0.0, 0.0, 1.0) is -0.0 there)
    cx, clo, chi = (np.array(v, np.float64).astype(x.dtype) for v in
                    ([-0.0, 0.0, 0.0, -0.0, 2.0], [0.0, -0.0, -1.0, -1.0, 1.0], [1.0, 1.0, -0.0, 0.0, 0.0]))
    got = pyew.clip(*(pyew.asarray(v) for v in (cx, clo, chi))).get().astype(np.float64)
    want = np.clip(*(v.astype(np.float64) for v in (cx, clo, chi)))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_where_takes_any_condition_and_broadcasts(rng):
    """A condition of any dtype is converted to bool (nonzero and NaN are true); it broadcasts like
    the values; misaligned bool views and tails, into a poisoned out=."""
    n = 4099
    x = random_array(rng, n, "float16")
    y = random_array(rng, n, "float16")
    for cond_dtype in ("bool", "float32", "int64", "bfloat16", "float64"):
        c = random_array(rng, n, cond_dtype)
        if cond_dtype != "bool":
            c[::5] = 0
        want = np.where(c.astype(np.float64) != 0, x, y)
        for off in (0, 1, 3, 7):
            cp = pyew.asarray(np.concatenate([c[:off], c]))[off:]
            out = poison(pyew.empty(n, "float16"))
            assert pyew.where(cp, pyew.asarray(x), pyew.asarray(y), out=out) is out
            np.testing.assert_array_equal(out.get(), want, err_msg=f"{cond_dtype} condition at +{off}")
    m = random_array(rng, 64 * 33, "float32").reshape(64, 33)
    row = random_array(rng, 33, "bool")
    np.testing.assert_array_equal(pyew.where(pyew.asarray(row), pyew.asarray(m), 0.0).get(), np.where(row, m, 0.0))
    np.testing.assert_array_equal(pyew.where(row[:, None][:1], 1, m), np.where(row[:, None][:1], 1, m))
    assert pyew.where(np.zeros(0, bool), np.zeros(0), 1.0).shape == (0,)


def test_comparisons_with_numbers_and_bool_arithmetic(rng):
    x = random_array(rng, 10_007, "float16")
    d = pyew.asarray(x)
    for op, np_op in (("greater", np.greater), ("less_equal", np.less_equal), ("equal", np.equal)):
        got = getattr(pyew, op)(d, 0.5)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got.get(), np_op(x, np.float16(0.5)))
    b = pyew.greater(d, 0.0)
    n = pyew.logical_not(b)
    np.testing.assert_array_equal(pyew.add(b, n).get(), np.ones(x.size, bool))          # or
    np.testing.assert_array_equal(pyew.mul(b, n).get(), np.zeros(x.size, bool))         # and
    np.testing.assert_array_equal(pyew.invert(b).get(), ~(x > 0))
    i = pyew.add(b, np.int32(1))                                                         # bool + int32: int32
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i.get(), (x > 0) + np.int32(1))
    h = pyew.mul(True, d)                                                                # True with float16: float16
    assert h.dtype == np.float16


def test_bool_arrays_through_dlpack_and_the_cuda_array_interface(rng, torch_cuda):
    torch = torch_cuda
    t = torch.rand(1000, device="cuda") > 0.5
    d = pyew.asarray(t)                              # DLPack, kDLBool
    assert d.dtype == np.bool_
    np.testing.assert_array_equal(d.get(), t.cpu().numpy())
    r = pyew.logical_not(t)
    back = torch.from_dlpack(r)
    assert back.dtype == torch.bool
    np.testing.assert_array_equal(back.cpu().numpy(), ~t.cpu().numpy())
    cai = r.__cuda_array_interface__
    assert cai["typestr"] == "|b1"
    w = pyew.where(t, torch.ones(1000, device="cuda"), 0.0)
    np.testing.assert_array_equal(w.get(), t.cpu().numpy().astype(np.float32))


@pytest.mark.slow
def test_basic_launch_past_2_29_and_2_31(rng):
    """The basic launch (libew/map_basic.cuh): a contiguous call past 2^29 elements runs as launches
    of 2^29, each with the view's shifts (a bool view 3 elements into its buffer), checked at the
    head, across each launch's edge and 2^31, and at the tail; a broadcast whose offsets pass 2^31
    takes the 64-bit elements kernel."""
    n = 2**31 + 3 * 8192 + 77           # each chunk below inside the array, apart from the others
    free_memory_for(2 * n)
    x = filled(n + 3, "bool", True)
    edges = (0, 2**29 - 4096, 2**30 - 4096, 2**31 - 4096, n - 8192)
    chunks = {c: random_array(rng, 8192, "bool") for c in edges}
    assert all(c + 8192 <= n for c in edges)      # the copies below stay inside x
    for c, h in chunks.items():
        pyew.runtime.copy_htod(x.ptr + c + 3, h.ctypes.data, h.nbytes, pyew.runtime.DEFAULT_STREAM.cu)
    y = poison(pyew.empty(n, "bool"))
    pyew.logical_not(x[3:], out=y)
    for c, h in chunks.items():
        np.testing.assert_array_equal(y[c:c + h.size].get(), ~h, err_msg=f"logical_not at {c}")
    assert not np.any(y[2**30 + 4096:2**30 + 8192].get())
    del x, y
    rows, w = 2**31 // 4096 + 1, 4096
    free_memory_for(3 * rows * w)
    xs = filled(rows * w, "float16", 0.5).reshape(rows, w)
    b = random_array(rng, w, "float16")
    out = pyew.greater(xs, pyew.asarray(b))
    for r in (0, 2**31 // w - 1, 2**31 // w, rows - 1):
        np.testing.assert_array_equal(out[r].get(), np.float16(0.5) > b, err_msg=f"row {r}")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["arcsin", "arccos", "arcsinh", "tan", "sinh", "cosh", "arccosh", "arctanh", "erfc"])
def test_float32_functions_over_every_input(name, torch_cuda):
    """Every float32 input (2^32 bit patterns, NaNs included) against the double function on the
    GPU: within the op's ulp bound of the correctly rounded result, NaN exactly where it is NaN.
    arcsin, arccos and arcsinh use CUDA's float functions, whose documented bounds are not all 2 ulp;
    sinh, cosh, arctanh, tan and arccosh have float forms of their own, erfc one partly in double."""
    torch = torch_cuda
    op = pyew.library.get().manifest.op(name)
    ref_fn = {"arcsin": torch.asin, "arccos": torch.acos, "arcsinh": torch.asinh, "tan": torch.tan,
              "sinh": torch.sinh, "cosh": torch.cosh, "arccosh": torch.acosh, "arctanh": torch.atanh,
              "erfc": torch.special.erfc}[name]
    fn = getattr(pyew, name)
    step, worst, worst_x = 1 << 28, 0.0, None
    for start in range(0, 1 << 32, step):
        bits = torch.arange(start, start + step, dtype=torch.int64, device="cuda") - (1 << 31)
        x = bits.to(torch.int32).view(torch.float32)
        got = torch.from_dlpack(fn(x)).double()
        r = ref_fn(x.double())
        nan = torch.isnan(r)
        assert torch.equal(nan, torch.isnan(got)), f"{name}: NaN where the double function has none, or the reverse"
        rf = r.float().double()                       # the correctly rounded result (inf past float32's range)
        inf = torch.isinf(rf)
        assert torch.equal(got[inf], rf[inf]), f"{name}: wrong at the float32 range's ends"
        fin = ~(nan | inf)
        if not fin.any():                             # a chunk past the range, or all NaN
            continue
        rr = r[fin]
        e = torch.where(rr == 0, -125, torch.frexp(rr).exponent).clamp(min=-125) - 24    # ulp: 2^(ilogb(r) - 23)
        err = (got[fin] - rr).abs() / torch.exp2(e.double())
        assert not torch.isnan(err).any(), f"{name}: NaN where the double function is finite"
        i = int(err.argmax())
        if float(err[i]) > worst:
            worst, worst_x = float(err[i]), float(x[fin][i])
    assert worst <= op.ulp, f"{name}: {worst:.3f} ulp at x = {worst_x!r} (bound {op.ulp})"


def test_integers_to_bfloat16_round_once():
    """An int32 above 2^24 rounded to float first would be rounded twice: 2^24 + 2^16 + 1 is just
    above the midpoint between two bfloat16 values, and exactly on it once rounded to float."""
    import ml_dtypes
    v = np.array([16842753, -16842753, 3, 1 << 30, (1 << 24) + (1 << 16)], np.int32)
    want = np.array([16908288, -16908288, 3, 1 << 30, 16777216], np.float64).astype(ml_dtypes.bfloat16)
    for dtype in ("int32", "int64"):
        got = pyew.to_bfloat16(v.astype(dtype))
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=dtype)
    # above 2^53 an int64 rounded to float64 first would be rounded twice too
    big = [(1 << 62) + (1 << 54) + 1, -((1 << 62) + (1 << 54) + 1), (1 << 62) + (1 << 54), (1 << 62) + (3 << 54)]
    exact = [(1 << 62) + (1 << 55), -((1 << 62) + (1 << 55)), 1 << 62, (1 << 62) + (1 << 56)]
    got = pyew.to_bfloat16(np.array(big, np.int64))
    np.testing.assert_array_equal(got.astype(np.float64), np.array(exact, np.float64))
