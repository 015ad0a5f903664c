"""Turning the library's op table into Python functions, and running one op call.

Each op kind has a binder that makes the Python functions for one manifest entry; `map` ops are
bound here, the special kinds in pyew/special.py. A call validates everything (arity, params,
dtypes, shapes, out=) before it allocates or launches anything, so bad input changes nothing.
"""
from __future__ import annotations

import inspect
import numbers
import sys
from typing import Callable

import numpy as np

from . import dtypes as dt
from . import library
from . import runtime as rt
from .array import DeviceArray, _Buffer

BINDERS: dict[str, Callable] = {}


def binder(kind: str):
    def register(fn):
        BINDERS[kind] = fn
        return fn
    return register


def make_function(name: str, impl: Callable, params: list[inspect.Parameter], doc: str) -> Callable:
    def op(*args, **kwargs):
        return impl(*args, **kwargs)
    op.__name__ = op.__qualname__ = name
    op.__module__ = "pyew"
    op.__doc__ = doc
    op.__signature__ = inspect.Signature(params)
    op.__wrapped_impl__ = impl
    return op


# ---- operands --------------------------------------------------------------------------------

def _is_scalar(a) -> bool:
    return isinstance(a, (numbers.Number, np.generic)) or (isinstance(a, np.ndarray) and a.ndim == 0)


def _scalar_bits(value, info: dt.DType, op: str, pos: str) -> int:
    """The scalar as `info`'s bit pattern; refuses values the dtype cannot hold exactly in kind."""
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype != info.np:
            raise TypeError(f"{op}: {pos} is a {value.dtype} scalar but the array inputs are {info.name}; "
                            "pyew does not promote: pass a Python number or a matching dtype")
        arr = np.asarray(value, dtype=info.np).reshape(1)
    else:
        if info.kind == "int" and not float(value).is_integer():
            raise TypeError(f"{op}: {pos} is {value!r}, not an integer, but the inputs are {info.name}")
        if isinstance(value, complex):
            raise TypeError(f"{op}: {pos} is complex; pyew has no complex dtypes")
        try:
            with np.errstate(over="raise", invalid="ignore"):
                arr = np.array([value], dtype=info.np) if info.kind == "float" else np.array([int(value)], dtype=info.np)
        except (OverflowError, FloatingPointError):
            raise ValueError(f"{op}: {pos} = {value!r} does not fit in {info.name}") from None
    return int(arr.view(f"u{info.itemsize}")[0])


class _Operands:
    """Classified inputs of one call: device arrays, host arrays, scalars."""
    __slots__ = ("device", "shape", "info", "items")

    def __init__(self, args, op: str, names):
        self.device = False
        self.shape = None
        self.info = None
        items = []
        first = None
        for name, a in zip(names, args):
            if isinstance(a, DeviceArray):
                self.device = True
                items.append(("d", a))
            elif _is_scalar(a):
                items.append(("s", a))
                continue
            else:
                if not isinstance(a, np.ndarray):
                    try:
                        a = np.asarray(a)
                    except Exception:
                        raise TypeError(f"{op}: input {name!r} is a {type(a).__name__}, not an array or number") from None
                    if a.ndim == 0:
                        items.append(("s", a))
                        continue
                items.append(("h", a))
            try:
                info = dt.lookup(a.dtype)
            except (KeyError, TypeError):
                raise TypeError(f"{op}: input {name!r} has dtype {a.dtype}, which pyew does not support") from None
            if first is None:
                first, self.info, self.shape = name, info, tuple(a.shape)
            else:
                if info is not self.info:
                    raise TypeError(f"{op}: inputs {first!r} ({self.info.name}) and {name!r} ({info.name}) "
                                    "differ in dtype; pyew does not promote: convert with .astype() first")
                if tuple(a.shape) != self.shape:
                    raise ValueError(f"{op}: input shapes differ: {first!r} has {self.shape}, {name!r} has "
                                     f"{tuple(a.shape)}; inputs must have identical shapes (or be scalars)")
        if first is None:   # scalars only: numpy's dtype for them, one element, 0-d result
            self.shape = ()
            try:
                self.info = dt.lookup(np.result_type(*[np.asarray(v) for _, v in items]))
            except (KeyError, TypeError):
                raise TypeError(f"{op}: cannot run on these scalars' dtype") from None
        self.items = items


def _check_out(out, device: bool, shape, info: dt.DType, op: str):
    if out is None:
        return
    if device:
        if not isinstance(out, DeviceArray):
            raise TypeError(f"{op}: out must be a DeviceArray when an input is one, not {type(out).__name__}")
        got = out._info
    else:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"{op}: out must be a numpy array for numpy inputs, not {type(out).__name__}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(f"{op}: out must be a writeable C-contiguous array")
        try:
            got = dt.lookup(out.dtype)
        except (KeyError, TypeError):
            got = None
    if got is not info or tuple(out.shape) != tuple(shape):
        raise ValueError(f"{op}: out is {out.dtype} {tuple(out.shape)}, the result is {info.name} {tuple(shape)}")


def _check_alias(out: DeviceArray, ins, op: str):
    """In place (out is exactly an input) is fine elementwise; a shifted overlap is not."""
    lo, hi = out.ptr, out.ptr + out.nbytes
    for a in ins:
        if isinstance(a, DeviceArray) and a._buf is out._buf:
            alo, ahi = a.ptr, a.ptr + a.nbytes
            if alo < hi and lo < ahi and not (alo == lo and ahi == hi):
                raise ValueError(f"{op}: out partially overlaps an input; use a separate out or exactly the input")


def upload(a, s, keep: list) -> int:
    """Device pointer of an array operand: a DeviceArray as is (marked used on s), a numpy array
    copied into a new buffer that `keep` holds until the launch is queued."""
    if isinstance(a, DeviceArray):
        a._buf.used_on(s)
        return a.ptr
    a = np.ascontiguousarray(a)
    buf = _Buffer(a.nbytes, s)
    keep.append(buf)
    rt.copy_htod(buf.ptr, a.ctypes.data, a.nbytes, s)
    return buf.ptr


def to_host(res: DeviceArray, out, s) -> np.ndarray:
    """Queue the copy of a device result into `out` (or a new numpy array); the caller syncs."""
    host = out if out is not None else np.empty(res.shape, res.dtype)
    if res.size:
        rt.copy_dtoh(host.ctypes.data, res.ptr, res.nbytes, s)
    return host


def finish(res: DeviceArray, out, device: bool, s):
    """The call's result: the DeviceArray for device inputs, else numpy after the copy completes."""
    if device:
        return res
    host = to_host(res, out, s)
    s.synchronize()
    return host


def _device_operands(ops: _Operands, n: int, s, keep: list) -> list[int]:
    """Device pointers for every input: uploads host arrays, broadcasts scalars with ew_fill."""
    info = ops.info
    ptrs = []
    lib = None
    dev = None
    for i, (k, a) in enumerate(ops.items):
        if k != "s":
            ptrs.append(upload(a, s, keep))
        else:
            bits = _scalar_bits(a, info, "op", f"input {i}")
            buf = _Buffer(n * info.itemsize, s)
            keep.append(buf)
            if n:
                lib = lib or library.get()
                dev = dev or rt.device()
                lib.check(lib.fill(buf.ptr, n, info.itemsize, bits, s.handle, dev.sms, dev.threads_per_sm),
                          "ew_fill")
            ptrs.append(buf.ptr)
    return ptrs


# ---- map ops ---------------------------------------------------------------------------------

class MapOp:
    """One elementwise op of the library; called through the function make_function builds."""

    def __init__(self, info: dict, lib: library.Library):
        self.name = info["name"]
        self.inputs = tuple(info["inputs"])
        self.arity = len(self.inputs)
        self.params = [(p["name"], p["type"], p["default"]) for p in info["params"]]
        self.param_names = {p[0] for p in self.params}
        self.kernels: dict[dt.DType, tuple] = {}
        for k in info["kernels"]:
            sym = k["entries"][0]["symbol"]
            self.kernels[dt.BY_NAME[k["dtype"]]] = (lib.symbols[sym], dt.BY_NAME[k["out_dtype"]], sym)
        self.dtype_names = ", ".join(d.name for d in self.kernels)
        self.lib = lib
        # params all defaulted: the DeviceArray fast path can pass these without looking at kwargs
        self.default_pvals = (None if any(d is None for _, _, d in self.params)
                              else [float(d) if t == "float" else int(d) for _, t, d in self.params])
        self._dims = None     # (SMs, threads per SM) of the device, once it is open

    def _param_values(self, kw) -> list:
        if kw and not kw.keys() <= self.param_names:
            bad = sorted(set(kw) - self.param_names)
            have = ", ".join(sorted(self.param_names)) or "none"
            raise TypeError(f"{self.name}() got unexpected keyword argument(s) {', '.join(bad)}; its params: {have}")
        vals = []
        for name, typ, default in self.params:
            v = kw.get(name, default)
            if v is None:
                raise TypeError(f"{self.name}() missing required param {name!r}")
            if isinstance(v, bool) or not isinstance(v, (numbers.Real, np.generic)):
                raise TypeError(f"{self.name}(): param {name!r} must be a {typ}, not {type(v).__name__}")
            if typ == "int":
                if not float(v).is_integer():
                    raise TypeError(f"{self.name}(): param {name!r} must be an int, not {v!r}")
                v = int(v)
            else:
                v = float(v)
            vals.append(v)
        return vals

    def __call__(self, *args, out=None, stream=None, **kw):
        # Fast path, the common case on the GPU: DeviceArrays of one dtype and shape, no params,
        # out= absent or a DeviceArray that fits and is not a shifted view of an input. Same
        # checks as the general path, with less Python per call; anything else takes that path.
        if not kw and len(args) == self.arity and self.default_pvals is not None:
            a0 = args[0]
            if type(a0) is DeviceArray:
                info, shape = a0._info, a0.shape
                for a in args:
                    if type(a) is not DeviceArray or a._info is not info or a.shape != shape:
                        break
                else:
                    entry = self.kernels.get(info)
                    if entry is not None:
                        if out is None:
                            return self._run_device(entry, args, rt.resolve_stream(stream), None)
                        if type(out) is DeviceArray and out._info is entry[1] and out.shape == shape:
                            ob = out._buf
                            for a in args:
                                if a._buf is ob and (a.ptr != out.ptr or a.nbytes != out.nbytes):
                                    break
                            else:
                                return self._run_device(entry, args, rt.resolve_stream(stream), out)
        if len(args) != self.arity:
            raise TypeError(f"{self.name}() takes {self.arity} input(s) ({', '.join(self.inputs)}), got {len(args)}")
        pvals = self._param_values(kw) if (kw or self.params) else ()
        s = rt.resolve_stream(stream)
        ops = _Operands(args, self.name, self.inputs)
        info = ops.info
        entry = self.kernels.get(info)
        if entry is None:
            raise TypeError(f"{self.name} has no {info.name} kernel; it supports {self.dtype_names}")
        fn, out_info, sym = entry
        for i, (k, a) in enumerate(ops.items):
            if k == "s":
                _scalar_bits(a, info, self.name, f"input {self.inputs[i]!r}")   # validate now
        shape = ops.shape
        _check_out(out, ops.device, shape, out_info, self.name)
        if out is not None and ops.device:
            _check_alias(out, args, self.name)
        return self._run(fn, sym, ops, shape, out_info, out, s, pvals)

    def _run_device(self, entry, args, s, out):
        fn, out_info, sym = entry
        a0 = args[0]
        if out is None:
            res = DeviceArray._alloc(a0.shape, out_info, s)
        else:
            res = out
            if out._buf.stream is not s:
                out._buf.used_on(s)
        for a in args:
            if a._buf.stream is not s:
                a._buf.used_on(s)
        if a0.size:
            dims = self._dims
            if dims is None:
                dev = rt.device()
                dims = self._dims = (dev.sms, dev.threads_per_sm)
            rc = fn(res.ptr, *[a.ptr for a in args], a0.size, *self.default_pvals, s.handle, *dims)
            if rc:
                self.lib.check(rc, sym)
        return res

    def _run(self, fn, sym, ops, shape, out_info, out, s, pvals):
        n = 1
        for d in shape:
            n *= d
        dev = rt.device()
        keep: list = []
        ptrs = _device_operands(ops, n, s, keep)
        if ops.device:
            res = out if out is not None else DeviceArray._alloc(shape, out_info, s)
            res._buf.used_on(s)
            if n:
                self.lib.check(fn(res.ptr, *ptrs, n, *pvals, s.handle, dev.sms, dev.threads_per_sm), sym)
            return res
        tmp = DeviceArray._alloc(shape, out_info, s)
        if n:
            self.lib.check(fn(tmp.ptr, *ptrs, n, *pvals, s.handle, dev.sms, dev.threads_per_sm), sym)
        return finish(tmp, out, False, s)

    def signature_params(self) -> list[inspect.Parameter]:
        P = inspect.Parameter
        ps = [P(i, P.POSITIONAL_ONLY) for i in self.inputs]
        ps += [P("out", P.KEYWORD_ONLY, default=None), P("stream", P.KEYWORD_ONLY, default=None)]
        for name, typ, default in self.params:
            ps.append(P(name, P.KEYWORD_ONLY, default=P.empty if default is None else default,
                        annotation=float if typ == "float" else int))
        return ps


def _map_doc(info: dict) -> str:
    lines = [info["doc"], ""]
    lines.append(f"Inputs: {', '.join(info['inputs'])} (numpy arrays, DeviceArrays of one shape, or scalars).")
    for p in info["params"]:
        d = "required" if p["default"] is None else f"default {p['default']}"
        lines.append(f"Param {p['name']} ({p['type']}, {d}).")
    dts = [k["dtype"] + ("" if k["dtype"] == k["out_dtype"] else f" -> {k['out_dtype']}") for k in info["kernels"]]
    lines.append(f"dtypes: {', '.join(dts)}.")
    lines.append("numpy in -> numpy out; DeviceArray in -> DeviceArray out. out= writes into a given array; "
                 "stream= runs on a pyew.Stream.")
    lines.append(f"Reference (numpy, float64): {info['ref']}")
    return "\n".join(lines)


@binder("map")
def bind_map(info: dict, lib: library.Library) -> dict[str, Callable]:
    op = MapOp(info, lib)
    return {op.name: make_function(op.name, op.__call__, op.signature_params(), _map_doc(info))}


# ---- the op table ----------------------------------------------------------------------------

_table: dict[str, Callable] | None = None


def table() -> dict[str, Callable]:
    """name -> function for every op of the loaded library (loads it on first use)."""
    global _table
    if _table is None:
        lib = library.get()
        t: dict[str, Callable] = {}
        for info in lib.manifest["ops"]:
            bind = BINDERS.get(info["kind"])
            if bind is None:
                raise library.LibraryError(f"{lib.path} has an op of kind {info['kind']!r} this pyew "
                                           "cannot bind; update pyew or run `make all`")
            t.update(bind(info, lib))
        _table = t
    return _table


def reset() -> None:
    global _table
    _table = None
    pkg = sys.modules.get("pyew")
    if pkg is not None:
        pkg._forget_ops()


def cast(a: DeviceArray, info: dt.DType, stream=None) -> DeviceArray:
    fn = table().get(f"to_{info.name}")
    op = getattr(fn, "__wrapped_impl__", None)
    owner = getattr(op, "__self__", None)
    if owner is None or a._info not in owner.kernels:
        raise TypeError(f"no cast from {a.dtype} to {info.name} in the library (op to_{info.name})")
    return fn(a, stream=stream)
