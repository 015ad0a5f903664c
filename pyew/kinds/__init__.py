"""Op kinds and the op table: every op of the loaded library as a Python function.

Each op kind has a module here (map, relu_mask, mask_backward, upsample, dot, scatter) that
registers a binder: given one op of the manifest, it returns the Python function(s) for it. The
functions validate their own arguments and run through pyew.call.
"""
from __future__ import annotations

import inspect
from typing import Callable

import numpy as np

from .. import library
from ..call import OutMismatch, device_of, returned, write_out
from ..errors import LibraryError
from ..formula import trace_if_traced
from ..runtime import on, several

BINDERS: dict[str, Callable] = {}
_table: dict[str, Callable] | None = None
_on_reset: list[Callable[[], None]] = []

P = inspect.Parameter
OUT_STREAM = [P("out", P.KEYWORD_ONLY, default=None), P("stream", P.KEYWORD_ONLY, default=None)]


def binder(kind: str):
    def register(fn):
        BINDERS[kind] = fn
        return fn
    return register


def make_function(name: str, impl: Callable, params: list[inspect.Parameter], doc: str,
                  fusable: bool = True, ufunc: str | None = None) -> Callable:
    """An op's Python function; `fusable`: a map op, which pyew.fuse traces into its formula (the
    special kernels are whole-array operations a formula cannot hold); `ufunc`: numpy's name for
    the op, which numpy's out= messages give."""
    def run(args, kwargs):
        if several():
            # run on the operands' GPU, restoring the caller's current device afterwards
            with on(device_of(args, kwargs.get("out"), kwargs.get("stream"))):
                return impl(*args, **kwargs)
        return impl(*args, **kwargs)

    def op(*args, **kwargs):
        try:
            return dispatch(args, kwargs)
        except TypeError:
            if not fusable:     # a special kernel's method would name itself: the public signature instead
                _check_binds(name, op.__signature__, args, kwargs)
            raise

    def dispatch(args, kwargs):
        traced = trace_if_traced(name, args, kwargs, fusable)     # inside pyew.fuse: build the formula
        if traced is not None:
            return traced
        out = kwargs.get("out")
        if fusable and type(out) is tuple and len(out) == 1:        # numpy's out=(o,)
            out = kwargs["out"] = out[0]
        if out is None:
            res = run(args, kwargs)
            # numpy's answer for 0-d operands (numbers, 0-d arrays) is a numpy scalar
            return res[()] if type(res) is np.ndarray and not res.ndim else res
        try:
            return returned(out, run(args, kwargs))
        except OutMismatch as e:
            if not fusable:
                raise
            # numpy's out=: another dtype (a same_kind cast), a numpy out the result broadcasts to, a
            # GPU out overlapping an input in part: the result first, then written into out
            return write_out(out, e, lambda: run(args, {**kwargs, "out": None}), name, kwargs.get("stream"),
                             f"ufunc {ufunc or name!r}")
    op.__name__ = op.__qualname__ = name
    op.__module__ = "pyew"
    op.__doc__ = doc
    op.__signature__ = inspect.Signature(params)
    return op


def _check_binds(name: str, sig: inspect.Signature, args, kwargs) -> None:
    """A TypeError naming the function and its signature where the arguments do not fit it."""
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{name}{sig}: {e}") from None


def positional(names) -> list[inspect.Parameter]:
    return [P(n, P.POSITIONAL_ONLY) for n in names]


def table() -> dict[str, Callable]:
    """name -> function for every op of the loaded library (loads it on first use)."""
    global _table
    if _table is None:
        lib = library.get()
        t: dict[str, Callable] = {}
        for op in lib.manifest.ops:
            bind = BINDERS.get(op.kind)
            if bind is None:
                raise LibraryError(f"{lib.path} has an op of kind {op.kind!r} this pyew cannot bind; "
                                   f"update pyew or rebuild the library: {lib.build_command}")
            t.update(bind(op))
        _table = t
    return _table


def on_reset(fn: Callable[[], None]) -> None:
    """Call fn whenever the table is forgotten (pyew's package unbinds the functions it cached)."""
    _on_reset.append(fn)


def reset() -> None:
    """Forget the table and the loaded library (tests point PYEW_LIB elsewhere, then call this)."""
    global _table
    _table = None
    library.reset()
    for fn in _on_reset:
        fn()


from . import dot, map, mask_backward, relu_mask, scatter, upsample  # noqa: E402,F401  (each registers its binder)
