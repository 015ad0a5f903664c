"""The helpers of ew_math.cuh and ew_numpy.cuh through every one-input float map op: float16 and
bfloat16 on all 65536 bit patterns (their fast paths must stay within 1 ulp of the correctly rounded
value everywhere, subnormals and the far tails included), float32 over magnitudes from 1e-6 to 1e4
of both signs, where the tails of exp and erfc are, and on random bit patterns (every exponent,
subnormals, infinities and NaNs), one and two inputs, within each op's `ulp`."""
from __future__ import annotations

import numpy as np
import pytest

import pyew

from .helpers import map_kernels, params_of
from .reference import assert_matches, evaluate, zeros_checked

pytestmark = pytest.mark.gpu


def _unary(dtypes):
    return map_kernels(lambda op, k: len(op.inputs) == 1 and k.dtype.name in dtypes)


def _check(op, k, x, got):
    ref = evaluate(op.ref, op.inputs, [x], params_of(op), k.dtype)
    assert_matches(got, ref, k.out_dtype, f"{op.name} {k.dtype.name}", rtol=op.rtol, ulp=op.ulp,
                   zeros=zeros_checked(op.name))


@pytest.mark.parametrize("op,k", _unary(("float16", "bfloat16")))
def test_every_16bit_input(op, k):
    x = np.arange(1 << 16, dtype=np.uint16).view(k.dtype.np)
    got = getattr(pyew, op.name)(x, **params_of(op))
    if op.name == "signbit" and k.dtype.name == "float16":
        # as its spec says: the GPU's float16-to-float conversion drops a NaN's sign
        with np.errstate(invalid="ignore"):
            nan = np.isnan(x.astype(np.float32))
        assert not got[nan].any()
        x, got = x[~nan], got[~nan]
    _check(op, k, x, got)


@pytest.mark.parametrize("op,k", _unary(("float32",)))
def test_float32_wide_range(op, k, rng):
    mag = 10.0 ** rng.uniform(-6, 4, size=1 << 18)
    x = (mag * rng.choice([-1.0, 1.0], size=mag.size)).astype(np.float32)
    _check(op, k, x, getattr(pyew, op.name)(x, **params_of(op)))


@pytest.mark.parametrize("op,k", _unary(("float32",)))
def test_float32_dense_grid(op, k):
    """[-20, 20] in steps of 2^-12: where the tails' exponent splits change their integer part and
    where their clamps (gelu_tanh at 12, gelu at 18) begin."""
    x = np.arange(-20, 20, 2.0 ** -12).astype(np.float32)
    _check(op, k, x, getattr(pyew, op.name)(x, **params_of(op)))



@pytest.mark.parametrize("op,k", _unary(("float32",)))
def test_float32_random_bit_patterns(op, k, rng):
    x = rng.integers(0, 1 << 32, size=1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
    _check(op, k, x, getattr(pyew, op.name)(x, **params_of(op)))


@pytest.mark.parametrize("op,k", map_kernels(lambda op, k: len(op.inputs) == 2 and k.dtype.name == "float32"
                                             and all(d is k.dtype for d in k.in_dtypes)))
def test_float32_two_inputs_on_random_bit_patterns(op, k, rng):
    """Pairs of random float32 patterns, and pairs of magnitudes 1e-6 .. 1e4 (where power, hypot,
    arctan2, logaddexp and the remainders have most of their range)."""
    bits = [rng.integers(0, 1 << 32, size=1 << 17, dtype=np.uint64).astype(np.uint32).view(np.float32)
            for _ in range(2)]
    mags = [(10.0 ** rng.uniform(-6, 4, 1 << 17) * rng.choice([-1.0, 1.0], 1 << 17)).astype(np.float32)
            for _ in range(2)]
    for x, y in (bits, mags):
        got = getattr(pyew, op.name)(x, y, **params_of(op))
        ref = evaluate(op.ref, op.inputs, [x, y], params_of(op), k.dtype)
        assert_matches(got, ref, k.out_dtype, f"{op.name} float32", rtol=op.rtol, ulp=op.ulp)


def test_float32_power_of_negative_bases_and_near_one(rng):
    """float32 power's own paths: negative bases with integer exponents (the sign of odd ones,
    from 2^24 on every float even), non-integer exponents of negative bases (NaN), bases near 1
    with large exponents (where log x must be accurate relative to itself), results that
    overflow and underflow into subnormals, results in the top binade and near the smallest normal
    float (where powf hands over to the double form); subnormal, zero, infinite and NaN operands."""
    n = 1 << 16
    cases = [(rng.uniform(-10, 10, n), rng.integers(-40, 41, n).astype(np.float64)),
             (rng.uniform(-10, 10, n), rng.uniform(-40, 40, n)),
             (1 + rng.uniform(-1e-3, 1e-3, n), rng.uniform(-3e4, 3e4, n)),
             (-rng.uniform(1.0, 1.001, n), np.trunc(rng.uniform(-2e7, 2e7, n))),
             (rng.uniform(0.5, 2, n), rng.uniform(-300, 300, n))]
    for lo, hi in ((126.5, 128.2), (-127.0, -124.0)):            # log2 of the result
        y = rng.uniform(1.01, 40, n) * rng.choice([-1.0, 1.0], n)   # bases stay finite floats
        cases.append((np.exp2(rng.uniform(lo, hi, n) / y), y))
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.0, -1.0, 2.0], np.float32)
    sx, sy = np.meshgrid(special, np.concatenate([special, [3.0, -3.0, 0.5, 2.0]]).astype(np.float32))
    cases.append((sx.ravel(), sy.ravel()))
    (op, k), = [p.values for p in map_kernels(lambda o, k: o.name == "power" and k.dtype.name == "float32")]
    for x, y in cases:
        x, y = x.astype(np.float32), y.astype(np.float32)
        got = pyew.power(x, y)
        assert_matches(got, evaluate(op.ref, op.inputs, [x, y], {}, k.dtype), k.out_dtype, "power float32",
                       rtol=op.rtol, ulp=op.ulp)


def test_float32_logaddexp_where_the_sum_cancels_and_erfc_where_it_ends(rng):
    """float32 logaddexp's own paths: pairs whose result cancels towards 0 (e^a + e^b near 1, where
    the exact form takes over), equal and nearly equal inputs, pairs far apart, infinities and NaN;
    erfc around 10.1, where its polynomial ends and float results turn to 0 through the
    subnormals, and through the subnormal and tiny inputs."""
    n = 1 << 16
    a = rng.uniform(-0.9, 0.1, n)
    near_one = np.log1p(-np.exp(np.minimum(a, -1e-6))) + rng.normal(0, 1e-5, n)
    cases = [(a, near_one), (a, a + rng.normal(0, 1e-6, n)), (rng.normal(0, 3, n), rng.normal(0, 3, n)),
             (rng.uniform(-200, 200, n), rng.uniform(-200, 200, n))]
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.0, -1.0, -0.6931472, 88.0, -104.0],
                       np.float32)
    sx, sy = np.meshgrid(special, special)
    cases.append((sx.ravel(), sy.ravel()))
    (op, k), = [p.values for p in map_kernels(lambda o, k: o.name == "logaddexp" and k.dtype.name == "float32")]
    for x, y in cases:
        x, y = x.astype(np.float32), y.astype(np.float32)
        got, ref = pyew.logaddexp(x, y), evaluate(op.ref, op.inputs, [x, y], {}, k.dtype)
        # Below 2^-23 the float64 reference itself errs by up to a few 1e-16 (numpy's formula
        # cancels there too), a float32 ulp or more: there within 1 ulp plus that error.
        with np.errstate(invalid="ignore"):
            tiny = np.abs(ref) < 2.0 ** -23
        assert tiny.sum() < x.size // 8
        ulp = np.spacing(np.abs(ref[tiny]).astype(np.float32)).astype(np.float64)
        off = np.abs(got[tiny].astype(np.float64) - ref[tiny])
        assert np.all(off <= ulp + 2.0 ** -50), f"logaddexp float32 near 0: worst {np.max(off / ulp):.2f} ulp"
        assert_matches(got[~tiny], ref[~tiny], k.out_dtype, "logaddexp float32", rtol=op.rtol, ulp=op.ulp)
    (op, k), = [p.values for p in map_kernels(lambda o, k: o.name == "erfc" and k.dtype.name == "float32")]
    x = np.concatenate([np.arange(9.9, 10.3, 2.0 ** -16), -np.arange(3.8, 4.2, 2.0 ** -16), [1e-40, -1e-40, 1e-30],
                        rng.uniform(-6, 11, n)]).astype(np.float32)
    _check(op, k, x, pyew.erfc(x))


def test_float32_arctan2_at_its_octant_boundaries(rng):
    """float32 arctan2's own paths: |y| near |x|, near tan(pi/8) |x| and its reciprocal (where the
    reduction changes form), tiny y against negative x (results near pi), every sign combination;
    zeros of both signs, infinities and NaN (C's special cases)."""
    n = 1 << 16
    x = rng.uniform(-10, 10, n)
    edge = rng.choice([1.0, -1.0, 0.41421356237309503, -0.41421356237309503, 2.414213562373095, 1e-30], n)
    y = x * edge * (1 + rng.normal(0, 1e-6, n))
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.0, -1.0], np.float32)
    sy, sx = np.meshgrid(special, special)
    (op, k), = [p.values for p in map_kernels(lambda o, k: o.name == "arctan2" and k.dtype.name == "float32")]
    for a, b in ((y, x), (sy.ravel(), sx.ravel())):
        a, b = a.astype(np.float32), b.astype(np.float32)
        assert_matches(pyew.arctan2(a, b), evaluate(op.ref, op.inputs, [a, b], {}, k.dtype), k.out_dtype,
                       "arctan2 float32", rtol=op.rtol, ulp=op.ulp)
