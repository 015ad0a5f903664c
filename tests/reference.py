"""float64 references for the spec's `ref` expressions, and the comparison rules of the suite:
float32 within 1e-6 relative (or within the op's `ulp` of the correctly rounded value),
float16/bfloat16 within 1 ulp of the correctly rounded value, float64 within 1e-13 relative,
integers and bools exact (bools stored as the bytes 0 and 1); NaN where and only where the
reference is NaN."""
from __future__ import annotations

import math

import numpy as np

from pyew import dtypes as dt

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def erf(x):
    return np.asarray(_erf(np.asarray(x, np.float64)), np.float64)


def erfc(x):
    return np.asarray(_erfc(np.asarray(x, np.float64)), np.float64)


def sigmoid(x):
    x = np.asarray(x, np.float64)
    e = np.exp(-np.abs(x))
    r = 1.0 / (1.0 + e)
    return np.where(x >= 0, r, e * r)


_WIDE = {"int": np.int64, "bool": np.bool_, "float": np.float64}


def evaluate(ref: str, names, arrays, params: dict, in_dtype: dt.DType, in_dtypes=None) -> np.ndarray:
    """The spec's ref expression on the inputs upcast to float64 (int64 for integer dtypes, bool for
    bools). in_dtypes: each input's dtype where they differ (a kernel's in_dtypes: where's bool
    condition); else every input is in_dtype."""
    kinds = [d.kind for d in in_dtypes] if in_dtypes else [in_dtype.kind] * len(names)
    scope = {"np": np, "erf": erf, "erfc": erfc, "sigmoid": sigmoid}
    with np.errstate(all="ignore"):            # NaN patterns of ml_dtypes' 16-bit floats warn
        scope.update({n: np.asarray(a).astype(_WIDE[k]) for n, a, k in zip(names, arrays, kinds)})
        scope.update(params)
        return np.asarray(eval(ref, scope))


def _ordinal16(a: np.ndarray) -> np.ndarray:
    """Map 16-bit float patterns to integers that are ordered like the values."""
    u = a.view(np.uint16).astype(np.int32)
    return np.where(u & 0x8000, -(u & 0x7FFF), u)


def _ordinal32(a: np.ndarray) -> np.ndarray:
    """float32 patterns as integers ordered like the values (adjacent floats differ by 1)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.int64)
    return np.where(u & 0x80000000, -(u & 0x7FFFFFFF), u)


# ops whose zero signs numpy itself gives differently by dtype or array length (its float16 loop
# of maximum returns the first of two equal zeros, the others the second; fmax and clip by path)
ZERO_SIGN_VARIES = frozenset(("maximum", "minimum", "fmax", "fmin", "clip"))


def zeros_checked(op_name: str) -> bool:
    return op_name not in ZERO_SIGN_VARIES


def assert_matches(out: np.ndarray, ref64: np.ndarray, out_dtype: dt.DType, what: str = "", rtol=None, ulp=None,
                   zeros: bool = False):
    """ulp: float32 results must be within this many ulp of the correctly rounded reference (the
    op's `ulp`), instead of rtol. zeros: where both are zero, their signs agree."""
    out = np.asarray(out)
    assert out.dtype == out_dtype.np, f"{what}: dtype {out.dtype}, expected {out_dtype.name}"
    ref64 = np.broadcast_to(ref64, out.shape)
    if out_dtype.kind == "bool":
        raw = out.view(np.uint8)
        assert np.all(raw <= 1), f"{what}: a bool result is not 0 or 1 (byte {int(raw.max())})"
        want = np.asarray(ref64).astype(bool)
        bad = np.flatnonzero(out != want)
        assert bad.size == 0, f"{what}: {bad.size} wrong, first at {bad[0]}: {out.flat[bad[0]]} != {want.flat[bad[0]]}"
        return
    if out_dtype.kind == "int":
        want = ref64.astype(out_dtype.np)
        bad = np.flatnonzero(out != want)
        assert bad.size == 0, f"{what}: {bad.size} wrong, first at {bad[0]}: {out.flat[bad[0]]} != {want.flat[bad[0]]}"
        return
    with np.errstate(invalid="ignore"):
        o64 = out.astype(np.float64)
    ref64 = ref64.astype(np.float64)      # an int64 reference (casts of ints) compares as floats
    nan_ref, nan_out = np.isnan(ref64), np.isnan(o64)
    bad = np.flatnonzero(nan_ref != nan_out)
    assert bad.size == 0, (f"{what}: NaN mismatch at {bad.size} places, first {bad[0]}: "
                           f"got {o64.flat[bad[0]]}, want {ref64.flat[bad[0]]}")
    ok = ~nan_ref
    if zeros:               # the reference rounded to the result's dtype: a tiny negative is -0 there
        with np.errstate(all="ignore"):
            rounded = ref64.astype(out_dtype.np).astype(np.float64)
        z = (rounded == 0) & (o64 == 0)
        bad = np.flatnonzero(z & (np.signbit(rounded) != np.signbit(o64)))
        assert bad.size == 0, (f"{what}: the sign of zero differs at {bad.size} places, first {bad[0]}: "
                               f"got {o64.flat[bad[0]]}, want {ref64.flat[bad[0]]}")
    if out_dtype.name in ("float16", "bfloat16"):
        with np.errstate(all="ignore"):
            want = ref64.astype(out_dtype.np)
        d = np.abs(_ordinal16(out) - _ordinal16(want))
        d = np.where(ok, d, 0)
        i = int(np.argmax(d)) if d.size else 0
        most = 0 if ulp == 0 else 1          # an op declared exact is exact in 16 bits too
        assert d.size == 0 or d.max() <= most, (f"{what}: {int((d > most).sum())} values off by more than {most} "
                                                f"ulp; worst at {i}: got {o64.flat[i]}, want {ref64.flat[i]}")
        return
    if out_dtype.name == "float32" and ulp is not None:
        with np.errstate(all="ignore"):
            want = ref64.astype(np.float32)
            d = np.abs(_ordinal32(out) - _ordinal32(want))
            d = np.where(ok, d, 0)             # both NaN (checked above) is no difference
        i = int(np.argmax(d)) if d.size else 0
        assert d.size == 0 or d.max() <= ulp, (f"{what}: {int((d > ulp).sum())} values off by more than {ulp} ulp; "
                                                f"worst ({int(d.max())} ulp) at {i}: got {o64.flat[i]!r}, "
                                                f"want {ref64.flat[i]!r}")
        return
    rtol = max(rtol or 0.0, 1e-6 if out_dtype.name == "float32" else 1e-13)
    tiny = np.finfo(out_dtype.np).tiny
    with np.errstate(all="ignore"):
        if out_dtype.name == "float32":
            ref64 = np.where(np.abs(ref64) > np.finfo(np.float32).max * (1 + 2**-25), np.copysign(np.inf, ref64), ref64)
        inf = np.isinf(ref64) & ok
        assert np.array_equal(o64[inf], ref64[inf]), f"{what}: infinities differ"
        fin = ok & ~inf
        err = np.abs(o64 - ref64)
        lim = rtol * np.abs(ref64) + 4 * tiny
        badm = fin & ~(err <= lim)
    idx = np.flatnonzero(badm)
    assert idx.size == 0, (f"{what}: {idx.size} values beyond {rtol} relative; first at {idx[0]}: "
                           f"got {o64.flat[idx[0]]!r}, want {ref64.flat[idx[0]]!r}")
