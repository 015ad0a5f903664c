"""Binders for the special kernel kinds (relu_mask, mask_backward, upsample_nearest2d, dot,
scatter_add). Importing this module registers them with pyew.opcall.

They follow the map ops' conventions: numpy in -> numpy out, DeviceArray in -> DeviceArray out
(a host array mixed with device ones is uploaded), out= and stream=, and every argument is checked
before anything is allocated or launched: ValueError for shapes and sizes, TypeError for dtypes
(naming the supported ones), IndexError for scatter indices.
"""
from __future__ import annotations

import inspect
import numbers

import numpy as np

from . import dtypes as dt
from . import library
from . import runtime as rt
from .array import DeviceArray, _Buffer
from .opcall import _check_alias, _check_out, _device_operands, _is_scalar, _Operands, _scalar_bits, binder, \
    finish, make_function, to_host as _to_host, upload as _device_ptr

MASK = dt.BY_NAME["uint32"]
_P = inspect.Parameter


# ---- shared helpers --------------------------------------------------------------------------

class _Kernels:
    """One op's entry points: dtype -> role -> (ctypes function, symbol)."""

    def __init__(self, info: dict, lib: library.Library):
        self.name = info["name"]
        self.lib = lib
        self.by_dtype: dict[dt.DType, dict[str, tuple]] = {}
        for k in info["kernels"]:
            self.by_dtype[dt.BY_NAME[k["dtype"]]] = {
                e["role"]: (lib.symbols[e["symbol"]], e["symbol"]) for e in k["entries"]}

    def dtype_names(self, role: str | None = None) -> str:
        return ", ".join(d.name for d, roles in self.by_dtype.items() if role is None or role in roles)

    def get(self, info: dt.DType, role: str, what: str = ""):
        roles = self.by_dtype.get(info)
        if roles is None or role not in roles:
            who = f"{self.name}{what}"
            raise TypeError(f"{who} has no {info.name} kernel; it supports {self.dtype_names(role)}")
        return roles[role]

    def run(self, entry, *args, stream, dev):
        fn, sym = entry
        self.lib.check(fn(*args, stream.handle, dev.sms, dev.threads_per_sm), sym)


def _array(a, op: str, what: str):
    """(array, dtype row, on_device) for an array argument; scalars are refused."""
    if isinstance(a, DeviceArray):
        return a, a._info, True
    if _is_scalar(a):
        raise TypeError(f"{op}: {what} must be an array, not a scalar")
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except Exception:
            raise TypeError(f"{op}: {what} is a {type(a).__name__}, not an array") from None
    try:
        info = dt.lookup(a.dtype)
    except (KeyError, TypeError):
        raise TypeError(f"{op}: {what} has dtype {a.dtype}, which pyew does not support") from None
    return a, info, False


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _result(shape, info, out, device: bool, s) -> DeviceArray:
    """Where a kernel writes: the caller's DeviceArray out, or a new device buffer."""
    res = out if (device and out is not None) else DeviceArray._alloc(tuple(shape), info, s)
    res._buf.used_on(s)
    return res


def _overlaps(a: DeviceArray, b) -> bool:
    return (isinstance(b, DeviceArray) and a._buf is b._buf and a.nbytes and b.nbytes
            and a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes)


def _positive_pair(v, op: str, what: str) -> tuple[int, int]:
    try:
        pair = tuple(v)
    except TypeError:
        raise TypeError(f"{op}: {what} must be a pair (H, W) of positive ints, not {v!r}") from None
    if len(pair) != 2 or any(isinstance(p, bool) or not isinstance(p, (numbers.Integral, np.integer)) for p in pair):
        raise TypeError(f"{op}: {what} must be a pair (H, W) of positive ints, not {v!r}")
    pair = (int(pair[0]), int(pair[1]))
    if min(pair) < 1:
        raise ValueError(f"{op}: {what} must be positive, got {pair}")
    return pair


def _positive_int(v, op: str, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, np.integer)):
        raise TypeError(f"{op}: {what} must be a positive int, not {v!r}"
                        + ("; use output_size=(H, W) for other sizes" if what == "scale" else ""))
    if v < 1:
        raise ValueError(f"{op}: {what} must be a positive int, got {v}")
    return int(v)


# ---- relu with a bitmask -----------------------------------------------------------------------

def mask_words(n: int) -> int:
    """Words of relu_mask's bitmask for n elements: bit i % 32 of word i // 32 is element i."""
    return (n + 31) // 32


class ReluMaskOp:
    def __init__(self, info: dict, lib: library.Library):
        self.k = _Kernels(info, lib)
        self.name = info["name"]
        self.inputs = tuple(info["inputs"])

    def __call__(self, *args, out=None, stream=None):
        name = self.name
        if len(args) != len(self.inputs):
            raise TypeError(f"{name}() takes {len(self.inputs)} input(s) ({', '.join(self.inputs)}), got {len(args)}")
        s = rt.resolve_stream(stream)
        ops = _Operands(args, name, self.inputs)
        info = ops.info
        entry = self.k.get(info, "forward")
        for i, (kind, a) in enumerate(ops.items):
            if kind == "s":
                _scalar_bits(a, info, name, f"input {self.inputs[i]!r}")
        y_out, m_out = _out_pair(out, name)
        shape, n = ops.shape, _size(ops.shape)
        _check_out(y_out, ops.device, shape, info, f"{name} (out[0], y)")
        _check_out(m_out, ops.device, (mask_words(n),), MASK, f"{name} (out[1], the mask)")
        if ops.device:
            for o in (y_out, m_out):
                if o is not None:
                    _check_alias(o, args, name)
            if y_out is not None and m_out is not None and _overlaps(y_out, m_out):
                raise ValueError(f"{name}: the two outs overlap")
        dev = rt.device()
        keep: list = []
        ptrs = _device_operands(ops, n, s, keep)
        y = _result(shape, info, y_out, ops.device, s)
        mask = _result((mask_words(n),), MASK, m_out, ops.device, s)
        if n:
            self.k.run(entry, y.ptr, mask.ptr, *ptrs, n, stream=s, dev=dev)
        if ops.device:
            return y, mask
        res = (_to_host(y, y_out, s), _to_host(mask, m_out, s))
        s.synchronize()
        return res


def _out_pair(out, op):
    if out is None:
        return None, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{op}: out must be a pair (y, mask) (either may be None), not {type(out).__name__}")
    return out[0], out[1]


@binder("relu_mask")
def bind_relu_mask(info: dict, lib: library.Library):
    op = ReluMaskOp(info, lib)
    params = [_P(i, _P.POSITIONAL_ONLY) for i in op.inputs]
    params += [_P("out", _P.KEYWORD_ONLY, default=None), _P("stream", _P.KEYWORD_ONLY, default=None)]
    expr = " + ".join(op.inputs)
    doc = "\n".join([
        info["doc"], "",
        f"y, mask = {op.name}({', '.join(op.inputs)}): y = relu({expr}) with the inputs' shape and dtype; "
        f"mask is a uint32 array of ceil(n / 32) words where bit i % 32 of word i // 32 is set iff "
        f"element i of {expr} is > 0 (in C order; unused high bits of the last word are 0). NaN is "
        "not > 0: its bit is 0 and y is NaN, as numpy's maximum gives.",
        "Pass mask to relu_mask_backward for the gradient"
        + (f" (of every input: d{op.inputs[1]} = dx)." if len(op.inputs) > 1 else "."),
        f"dtypes: {op.k.dtype_names()}. Inputs are numpy arrays, DeviceArrays of one shape, or scalars;",
        "numpy in -> numpy out, DeviceArray in -> DeviceArray out. out=(y, mask) writes into given arrays "
        "(either may be None); stream= runs on a pyew.Stream.",
    ])
    return {op.name: make_function(op.name, op.__call__, params, doc)}


class MaskBackwardOp:
    def __init__(self, info: dict, lib: library.Library):
        self.k = _Kernels(info, lib)
        self.name = info["name"]

    def __call__(self, dy, mask, /, *, out=None, stream=None):
        name = self.name
        s = rt.resolve_stream(stream)
        dy, info, dy_dev = _array(dy, name, "dy")
        mask, minfo, m_dev = _array(mask, name, "mask")
        device = dy_dev or m_dev
        entry = self.k.get(info, "forward")
        if minfo is not MASK:
            raise TypeError(f"{name}: mask must be the uint32 bitmask from the forward, not {minfo.name}")
        shape, n = tuple(dy.shape), _size(dy.shape)
        if tuple(mask.shape) != (mask_words(n),):
            raise ValueError(f"{name}: dy has shape {shape} ({n} elements), so mask must have shape "
                             f"({mask_words(n)},), got {tuple(mask.shape)}")
        _check_out(out, device, shape, info, name)
        if device and out is not None:
            _check_alias(out, (dy,), name)
            if _overlaps(out, mask):
                raise ValueError(f"{name}: out overlaps mask")
        dev = rt.device()
        keep: list = []
        dy_ptr, m_ptr = _device_ptr(dy, s, keep), _device_ptr(mask, s, keep)
        dx = _result(shape, info, out, device, s)
        if n:
            self.k.run(entry, dx.ptr, dy_ptr, m_ptr, n, stream=s, dev=dev)
        return finish(dx, out, device, s)


@binder("mask_backward")
def bind_mask_backward(info: dict, lib: library.Library):
    op = MaskBackwardOp(info, lib)
    params = [_P("dy", _P.POSITIONAL_ONLY), _P("mask", _P.POSITIONAL_ONLY),
              _P("out", _P.KEYWORD_ONLY, default=None), _P("stream", _P.KEYWORD_ONLY, default=None)]
    doc = "\n".join([
        info["doc"], "",
        f"dx = {op.name}(dy, mask): mask is the uint32 bitmask of relu_mask / add_relu_mask for an input "
        "of dy's size (ceil(n / 32) words). dx has dy's shape and dtype.",
        f"dtypes: {op.k.dtype_names()}. numpy in -> numpy out, DeviceArray in -> DeviceArray out; out=, stream=.",
    ])
    return {op.name: make_function(op.name, op.__call__, params, doc)}


# ---- upsample_nearest2d --------------------------------------------------------------------------

def _scale_or_size(scale, size, op: str, size_name: str):
    """(scale, None) or (None, (h, w)): the two exclusive ways to give the other side's size;
    scale defaults to 2."""
    if size is not None:
        if scale is not None:
            raise ValueError(f"{op}: give scale or {size_name}, not both")
        return None, _positive_pair(size, op, size_name)
    return (2 if scale is None else _positive_int(scale, op, "scale")), None


class UpsampleOp:
    def __init__(self, info: dict, lib: library.Library):
        self.k = _Kernels(info, lib)
        self.name = info["name"]

    def _nchw(self, a, op, what):
        a, info, device = _array(a, op, what)
        if len(a.shape) != 4:
            raise ValueError(f"{op}: {what} must be 4-D (N, C, H, W), got shape {tuple(a.shape)}")
        return a, info, device, tuple(int(d) for d in a.shape)

    def forward(self, x, /, scale=None, *, output_size=None, out=None, stream=None):
        op = self.name
        s = rt.resolve_stream(stream)
        x, info, device, (n, c, h, w) = self._nchw(x, op, "x")
        entry = self.k.get(info, "forward")
        if h < 1 or w < 1:
            raise ValueError(f"{op}: x has shape {(n, c, h, w)}; its height and width must be positive")
        k, size = _scale_or_size(scale, output_size, op, "output_size")
        oh, ow = size if size is not None else (h * k, w * k)
        return self._run(op, entry, x, (n, c, oh, ow), info, device, out, s, n * c, h, w, oh, ow)

    def backward(self, dy, /, scale=None, *, input_size=None, out=None, stream=None):
        op = f"{self.name}_backward"
        s = rt.resolve_stream(stream)
        dy, info, device, (n, c, oh, ow) = self._nchw(dy, op, "dy")
        entry = self.k.get(info, "backward", "_backward")
        if oh < 1 or ow < 1:
            raise ValueError(f"{op}: dy has shape {(n, c, oh, ow)}; its height and width must be positive")
        k, size = _scale_or_size(scale, input_size, op, "input_size")
        if size is not None:
            h, w = size
        else:
            if oh % k or ow % k:
                raise ValueError(f"{op}: dy's height and width {(oh, ow)} are not multiples of scale {k}; "
                                 "pass input_size=(H, W) for an upsample by output_size")
            h, w = oh // k, ow // k
        return self._run(op, entry, dy, (n, c, h, w), info, device, out, s, n * c, h, w, oh, ow)

    def _run(self, op, entry, src, shape, info, device, out, s, nc, h, w, oh, ow):
        _check_out(out, device, shape, info, op)
        if device and out is not None and _overlaps(out, src):
            raise ValueError(f"{op}: out overlaps the input")
        dev = rt.device()
        keep: list = []
        src_ptr = _device_ptr(src, s, keep)
        res = _result(shape, info, out, device, s)
        if res.size:
            self.k.run(entry, res.ptr, src_ptr, nc, h, w, oh, ow, stream=s, dev=dev)
        return finish(res, out, device, s)


@binder("upsample_nearest2d")
def bind_upsample(info: dict, lib: library.Library):
    op = UpsampleOp(info, lib)
    common = [_P("out", _P.KEYWORD_ONLY, default=None), _P("stream", _P.KEYWORD_ONLY, default=None)]
    fwd = [_P("x", _P.POSITIONAL_ONLY), _P("scale", _P.POSITIONAL_OR_KEYWORD, default=None),
           _P("output_size", _P.KEYWORD_ONLY, default=None)] + common
    bwd = [_P("dy", _P.POSITIONAL_ONLY), _P("scale", _P.POSITIONAL_OR_KEYWORD, default=None),
           _P("input_size", _P.KEYWORD_ONLY, default=None)] + common
    rule = ("Output index d reads input min(floor(float(d) * float(in) / float(out)), in - 1) in float32 "
            "arithmetic: PyTorch's interpolate(mode='nearest') rule, bit for bit.")
    dts = f"dtypes: {op.k.dtype_names()}. numpy in -> numpy out, DeviceArray in -> DeviceArray out; out=, stream=."
    fdoc = "\n".join([
        info["doc"], "",
        f"y = {op.name}(x, scale=2) or {op.name}(x, output_size=(OH, OW)) for x of shape (N, C, H, W); "
        "scale is a positive int (default 2), y has shape (N, C, H*scale, W*scale) or (N, C, OH, OW).",
        rule, "2x runs a fast path that writes both output rows of an input row with paired (up to "
        "16-byte) stores.", dts])
    bdoc = "\n".join([
        f"Gradient of {op.name}: dx[n, c, i, j] sums dy over the outputs that read input (i, j), accumulating "
        "in float32 (float64 for float64) in a fixed order: no atomics, deterministic.", "",
        f"dx = {op.name}_backward(dy, scale=2) or {op.name}_backward(dy, input_size=(H, W)) for dy of shape "
        "(N, C, OH, OW); dx has shape (N, C, H, W). The windows are PyTorch's (ceil(i * OH / H) ..., in "
        "float32), so the result equals torch's gradient bit for bit in float32.", dts])
    return {op.name: make_function(op.name, op.forward, fwd, fdoc),
            f"{op.name}_backward": make_function(f"{op.name}_backward", op.backward, bwd, bdoc)}


# ---- dot -----------------------------------------------------------------------------------------

class DotOp:
    def __init__(self, info: dict, lib: library.Library):
        self.k = _Kernels(info, lib)
        self.name = info["name"]
        self.methods = sorted({r for roles in self.k.by_dtype.values() for r in roles},
                              key=lambda m: (m != "fast", m))

    def __call__(self, a, b, /, *, method="fast", out=None, stream=None):
        op = self.name
        s = rt.resolve_stream(stream)
        if method not in self.methods:
            raise ValueError(f"{op}: unknown method {method!r}; methods: {', '.join(self.methods)}")
        a, info, a_dev = _array(a, op, "a")
        b, binfo, b_dev = _array(b, op, "b")
        device = a_dev or b_dev
        if binfo is not info:
            raise TypeError(f"{op}: a is {info.name} and b is {binfo.name}; pyew does not promote: "
                            "convert with .astype() first")
        entry = self.k.get(info, method, f"(method={method!r})")
        if len(a.shape) != 1 or len(b.shape) != 1 or a.shape != b.shape:
            raise ValueError(f"{op}: a and b must be 1-D of one length, got shapes {tuple(a.shape)} "
                             f"and {tuple(b.shape)}")
        if out is not None:
            want = DeviceArray if device else np.ndarray
            if not isinstance(out, want):
                raise TypeError(f"{op}: out must be a {want.__name__} here, not {type(out).__name__}")
            if out.size != 1 or len(out.shape) > 1 or out.dtype != info.np:
                raise ValueError(f"{op}: out is {out.dtype} {tuple(out.shape)}, the result is {info.name} () or (1,)")
            if not device and not (out.flags.c_contiguous and out.flags.writeable):
                raise ValueError(f"{op}: out must be a writeable C-contiguous array")
        n = int(a.shape[0])
        dev = rt.device()
        keep: list = []
        a_ptr, b_ptr = _device_ptr(a, s, keep), _device_ptr(b, s, keep)
        work = _Buffer(8, s)     # the float32/float64 sum or the half accumulator pair; zeroed by the entry
        keep.append(work)
        res = _result((), info, out, device, s)
        self.k.run(entry, res.ptr, work.ptr, a_ptr, b_ptr, n, stream=s, dev=dev)
        if device:
            return res
        host = out if out is not None else np.empty((), info.np)
        rt.copy_dtoh(host.ctypes.data, res.ptr, info.itemsize, s)
        s.synchronize()
        return host


@binder("dot")
def bind_dot(info: dict, lib: library.Library):
    op = DotOp(info, lib)
    params = [_P("a", _P.POSITIONAL_ONLY), _P("b", _P.POSITIONAL_ONLY),
              _P("method", _P.KEYWORD_ONLY, default="fast"),
              _P("out", _P.KEYWORD_ONLY, default=None), _P("stream", _P.KEYWORD_ONLY, default=None)]
    per_method = "; ".join(f"{m}: {op.k.dtype_names(m)}" for m in op.methods)
    doc = "\n".join([
        info["doc"], "",
        f"r = {op.name}(a, b, method='fast'): a, b 1-D of one length and dtype; r is a 0-d array of that "
        "dtype (numpy in) or a 0-d DeviceArray (device in). n = 0 gives 0.",
        "method (the seed's three variants, for the benchmark):",
        "  fast        per-thread and per-block sums in float32 (float64 for float64), one atomicAdd per "
        "block into a float32 scratch word, then rounded once to the dtype: within the dtype's rounding "
        "of the exact dot plus float32 summation error.",
        "  half_atomic per-thread float32 sums, each rounded to the dtype and added with a 16-bit "
        "atomicAdd straight into the result.",
        "  half2_pack  the same per-thread sums, each added with FastAtomicAdd: a paired half2/bfloat162 "
        "atomic {sum, -0} on an aligned accumulator pair, then copied to the result.",
        "  The last two add one rounded partial sum per thread in half precision: much less accurate "
        "than fast; they exist to compare the atomics.",
        f"dtypes per method: {per_method}. out= (size 1) and stream= as for the other ops.",
    ])
    return {op.name: make_function(op.name, op.__call__, params, doc)}


# ---- scatter_add ---------------------------------------------------------------------------------

_INDEX = {"int32": "i32", "int64": "i64"}
_NO_BAD = 2**64 - 1


class ScatterAddOp:
    def __init__(self, info: dict, lib: library.Library):
        self.k = _Kernels(info, lib)
        self.name = info["name"]

    def __call__(self, dst, index, src, /, *, stream=None):
        op = self.name
        s = rt.resolve_stream(stream)
        if isinstance(dst, DeviceArray):
            info, device = dst._info, True
        elif isinstance(dst, np.ndarray):
            if not dst.flags.writeable:
                raise ValueError(f"{op}: dst is a read-only numpy array; it is updated in place")
            try:
                info = dt.lookup(dst.dtype)
            except (KeyError, TypeError):
                raise TypeError(f"{op}: dst has dtype {dst.dtype}, which pyew does not support") from None
            device = False
        else:
            raise TypeError(f"{op}: dst must be a DeviceArray or a writeable numpy array (it is updated in "
                            f"place), not {type(dst).__name__}")
        index, iinfo, _ = _array(index, op, "index")
        src, sinfo, _ = _array(src, op, "src")
        tok = _INDEX.get(iinfo.name)
        if tok is None:
            raise TypeError(f"{op}: index has dtype {iinfo.name}; it must be int32 or int64")
        entry = self.k.get(info, f"index_{tok}")
        if sinfo is not info:
            raise TypeError(f"{op}: dst is {info.name} and src is {sinfo.name}; pyew does not promote: "
                            "convert with .astype() first")
        if len(dst.shape) != 1 or len(index.shape) != 1 or tuple(src.shape) != tuple(index.shape):
            raise ValueError(f"{op}: dst must be 1-D and index and src 1-D of one length, got shapes "
                             f"dst {tuple(dst.shape)}, index {tuple(index.shape)}, src {tuple(src.shape)}")
        if device and (_overlaps(dst, index) or _overlaps(dst, src)):
            raise ValueError(f"{op}: dst overlaps index or src")
        length, n = int(dst.shape[0]), int(index.shape[0])
        if n == 0:
            return dst
        if isinstance(index, np.ndarray):     # checked on the host: no GPU work before the error
            bad = np.flatnonzero((index < -length) | (index >= length))
            if bad.size:
                self._raise(int(bad[0]), int(index[bad[0]]), length)
        dev = rt.device()
        keep: list = []
        i_ptr = _device_ptr(index, s, keep)
        if isinstance(index, DeviceArray):    # a device index: the check kernel, read back first
            flag = _Buffer(8, s)
            keep.append(flag)
            self.k.run(self.k.get(info, f"check_{tok}"), flag.ptr, i_ptr, n, length, stream=s, dev=dev)
            got = np.empty((), np.uint64)
            rt.copy_dtoh(got.ctypes.data, flag.ptr, 8, s)
            s.synchronize()
            if int(got) != _NO_BAD:
                k = int(got)
                self._raise(k, int(index[k].get(s)), length)
        s_ptr = _device_ptr(src, s, keep)
        if device:
            dst._buf.used_on(s)
            self.k.run(entry, dst.ptr, length, i_ptr, s_ptr, n, stream=s, dev=dev)
            return dst
        tmp = DeviceArray._alloc((length,), info, s)
        host = np.ascontiguousarray(dst)
        rt.copy_htod(tmp.ptr, host.ctypes.data, tmp.nbytes, s)
        self.k.run(entry, tmp.ptr, length, i_ptr, s_ptr, n, stream=s, dev=dev)
        back = np.empty_like(host)
        rt.copy_dtoh(back.ctypes.data, tmp.ptr, tmp.nbytes, s)
        s.synchronize()
        np.copyto(dst, back)
        return dst

    def _raise(self, k: int, value: int, length: int):
        raise IndexError(f"{self.name}: index[{k}] = {value} is out of bounds for dst of length {length}; "
                         f"indices must lie in [-{length}, {length}); dst is unchanged")


@binder("scatter_add")
def bind_scatter_add(info: dict, lib: library.Library):
    op = ScatterAddOp(info, lib)
    params = [_P("dst", _P.POSITIONAL_ONLY), _P("index", _P.POSITIONAL_ONLY), _P("src", _P.POSITIONAL_ONLY),
              _P("stream", _P.KEYWORD_ONLY, default=None)]
    doc = "\n".join([
        info["doc"], "",
        f"{op.name}(dst, index, src) adds src[k] to dst[index[k]] for every k, like np.add.at(dst, index, src), "
        "and returns dst. dst: 1-D DeviceArray or writeable numpy array (copied in, scattered, copied back); "
        "index: 1-D int32 or int64, duplicates accumulate, negative values count from the end; src: 1-D, "
        "index's length, dst's dtype.",
        "Any index outside [-len(dst), len(dst)) raises IndexError before dst is written (a device index is "
        "checked by a kernel and read back first). float16/bfloat16 add through FastAtomicAdd (a paired "
        "32-bit atomic with the neighbour guarded by dst's length); the order of duplicates' adds is not "
        "fixed, so low bits may vary between runs.",
        f"dtypes: {op.k.dtype_names()}. stream= runs on a pyew.Stream.",
    ])
    return {op.name: make_function(op.name, op.__call__, params, doc)}
