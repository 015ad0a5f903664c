"""The CPU peers of the numpy suite: numpy itself (each op's `ref` expression from the manifest,
evaluated on the inputs in their own dtype) and numexpr (a hand-written expression per op where
numexpr can express it).

numpy: the ref expressions are written for float64 references (tests/reference.py evaluates them
that way); here they run in the inputs' dtype, as a numpy user would write them. Constant
sub-expressions such as np.sqrt(2) are kept weakly typed (Python floats), so they do not promote
float32 or float16 inputs to float64 (numpy 2's rules make a np.float64 scalar strongly typed).
erf and erfc come from scipy.special; without scipy an op whose ref needs them has no numpy peer.

numexpr: it has where, exp, expm1, log1p, tanh, but no erf, no float16 and no bfloat16. Its
Python float constants are double, which would promote float32 arrays: every constant and param
is passed as a scalar of the input's dtype instead (named in the expression).
"""
from __future__ import annotations

import os
import re

import numpy as np

# op name -> (expression over the op's inputs and params, named constants). A constant given as a
# Python number takes the input's dtype; a numpy scalar keeps its own (to_float64's float64 one).
NUMEXPR_MAP: dict[str, tuple[str, dict]] = {
    "relu": ("where(x < 0, 0, x)", {}),
    "sigmoid": ("1 / (1 + exp(-x))", {}),
    "elu": ("where(x > 0, x, alpha * expm1(x))", {}),
    "gelu_tanh": ("h * x * (1 + tanh(k0 * (x + k1 * x * x * x)))",
                  {"h": 0.5, "k0": 0.7978845608028654, "k1": 0.044715}),
    "silu": ("x / (1 + exp(-x))", {}),
    "hardswish": ("where(x <= -3, 0, where(x >= 3, x, x * (x + 3) / 6))", {}),
    "hardshrink": ("where((x >= -lambd) & (x <= lambd), 0, x)", {}),
    "add": ("x + y", {}),
    "sub": ("x - y", {}),
    "mul": ("x * y", {}),
    "div": ("x / y", {}),
    "scale": ("x * alpha", {}),
    "add_relu": ("where(x + y < 0, 0, x + y)", {}),
    "to_float64": ("x * one", {"one": np.float64(1.0)}),
}
NUMEXPR_WHY_NOT = {
    "gelu": "numexpr has no erf",
    "to_float16": "numexpr has no float16",
    "to_bfloat16": "numexpr has no bfloat16",
    "to_float32": "numexpr has no float16/bfloat16 inputs",
    "to_int64": "the numpy suite runs float inputs only",
}
NUMEXPR_DTYPES = ("float32", "float64")

_ERF = re.compile(r"\berfc?\s*\(")


class _WeakConstants:
    """numpy seen through a filter: a ufunc called on Python numbers only returns a Python number
    (np.sqrt(2) -> 1.414..., a weak scalar), anything else is numpy's own."""

    def __getattr__(self, name):
        f = getattr(np, name)
        if not isinstance(f, np.ufunc):
            return f

        def call(*args, **kw):
            r = f(*args, **kw)
            if not kw and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
                return r.item() if isinstance(r, np.generic) else r
            return r
        return call


WEAK_NP = _WeakConstants()


def sigmoid(x):
    """1 / (1 + exp(-x)) in x's dtype (exp overflows to inf for very negative x: 1/inf = 0)."""
    return 1 / (1 + np.exp(-x))


def scipy_erf():
    """(erf, erfc) from scipy.special, or None when scipy is not installed."""
    try:
        from scipy import special
    except Exception:
        return None
    return special.erf, special.erfc


def needs_erf(ref: str) -> bool:
    return bool(_ERF.search(ref or ""))


def numpy_ref(op, params: dict, out_dtype: np.dtype, erf_funcs=None):
    """(callable(*inputs) -> result in out_dtype, "") evaluating the op's ref in the inputs' dtype,
    or (None, why not)."""
    ref = getattr(op, "ref", "") or ""
    if not ref:
        return None, f"numpy: op {op.name} has no ref expression in the manifest"
    scope = {"np": WEAK_NP, "sigmoid": sigmoid}
    if needs_erf(ref):
        if erf_funcs is None:
            return None, f"numpy: {op.name}'s ref needs erf/erfc and scipy is not installed; no numpy column for it"
        scope["erf"], scope["erfc"] = erf_funcs
    try:
        code = compile(ref, f"<ref of {op.name}>", "eval")
    except SyntaxError as e:
        return None, f"numpy: {op.name}'s ref does not parse ({e.msg})"
    names = tuple(op.inputs)
    out_dtype = np.dtype(out_dtype)
    fixed = dict(scope)
    fixed.update(params)

    def run(*xs):
        ns = dict(fixed)
        ns.update(zip(names, xs))
        with np.errstate(all="ignore"):
            r = np.asarray(eval(code, ns))
        if r.dtype != out_dtype:
            return r.astype(out_dtype)
        if any(r is x or np.shares_memory(r, x) for x in xs):
            return r.copy()          # a ref that is an input ("x"): the op still writes a new array
        return r
    return run, ""


def numexpr_fn(ne, op, dtype: str, params: dict):
    """(callable(*inputs) -> result, "") through numexpr.evaluate, or (None, why not)."""
    if dtype not in NUMEXPR_DTYPES:
        return None, f"numexpr: no column for {dtype} (numexpr computes in float32/float64 only)"
    spec = NUMEXPR_MAP.get(op.name)
    if spec is None:
        why = NUMEXPR_WHY_NOT.get(op.name, "no expression for it in pyew/bench/cpu_peers.py")
        return None, f"numexpr: no column for {op.name} ({why})"
    expr, consts = spec
    npd = np.dtype(dtype)
    local = {k: (v if isinstance(v, np.generic) else npd.type(v)) for k, v in consts.items()}
    local.update({k: npd.type(v) for k, v in params.items()})
    names = tuple(op.inputs)
    evaluate = ne.evaluate

    def run(*xs):
        d = dict(local)
        d.update(zip(names, xs))
        return evaluate(expr, local_dict=d)
    return run, ""


def numexpr_threads(ne) -> int:
    """Set numexpr to one thread per CPU (within its own cap); returns the count it now uses."""
    want = max(1, min(os.cpu_count() or 1, int(getattr(ne, "MAX_THREADS", 64) or 64)))
    ne.set_num_threads(want)
    get = getattr(ne, "get_num_threads", None)
    return int(get()) if get is not None else want
