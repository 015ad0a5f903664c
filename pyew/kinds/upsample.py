"""upsample_nearest2d and its backward: NCHW nearest-neighbour upsampling (OneFlow's 2x kernel
with paired stores, PyTorch's index rule) and its deterministic gather gradient."""
from __future__ import annotations

import numbers

import numpy as np

from .. import call, library
from .. import runtime as rt
from ..array import DeviceArray
from ..operands import DEVICE, classify
from . import OUT_STREAM, P, binder, make_function


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


def _scale_or_size(scale, size, op: str, size_name: str):
    """(scale, None) or (None, (h, w)): the two exclusive ways to give the other side's size;
    scale defaults to 2."""
    if size is not None:
        if scale is not None:
            raise ValueError(f"{op}: give scale or {size_name}, not both")
        return None, _positive_pair(size, op, size_name)
    return (2 if scale is None else _positive_int(scale, op, "scale")), None


class UpsampleOp:
    def __init__(self, op: library.Op):
        self.op = op
        self.name = op.name

    def _nchw(self, a, op, what, s):
        o = classify(a, op, what, s, scalars=False)
        if len(o.shape) != 4:
            raise ValueError(f"{op}: {what} must be 4-D (N, C, H, W), got shape {o.shape}")
        return o

    def forward(self, x, /, scale=None, *, output_size=None, out=None, stream=None):
        op = self.name
        s = rt.resolve_stream(stream)
        xo = self._nchw(x, op, "x", s)
        entry = call.kernel_for(self.op, xo.info, "forward")
        n, c, h, w = xo.shape
        if h < 1 or w < 1:
            raise ValueError(f"{op}: x has shape {xo.shape}; its height and width must be positive")
        k, size = _scale_or_size(scale, output_size, op, "output_size")
        oh, ow = size if size is not None else (h * k, w * k)
        return self._run(op, entry, xo, (n, c, oh, ow), out, s, n * c, h, w, oh, ow)

    def backward(self, dy, /, scale=None, *, input_size=None, out=None, stream=None):
        op = f"{self.name}_backward"
        s = rt.resolve_stream(stream)
        go = self._nchw(dy, op, "dy", s)
        entry = call.kernel_for(self.op, go.info, "backward", "_backward")
        n, c, oh, ow = go.shape
        if oh < 1 or ow < 1:
            raise ValueError(f"{op}: dy has shape {go.shape}; its height and width must be positive")
        k, size = _scale_or_size(scale, input_size, op, "input_size")
        if size is not None:
            h, w = size
        else:
            if oh % k or ow % k:
                raise ValueError(f"{op}: dy's height and width {(oh, ow)} are not multiples of scale {k}; "
                                 "pass input_size=(H, W) for an upsample by output_size")
            h, w = oh // k, ow // k
        return self._run(op, entry, go, (n, c, h, w), out, s, n * c, h, w, oh, ow)

    def _run(self, op, entry, src, shape, out, s, nc, h, w, oh, ow):
        device = src.kind == DEVICE or call.device_out(out, s, op) is not None
        o = call.check_out(out, device, shape, src.info, op, s)
        if device and o is not None and call.overlaps(o, src.value):
            raise ValueError(f"{op}: out overlaps the input")
        keep: list = []
        d = call.on_device(src, s, keep)
        res = o if isinstance(o, DeviceArray) else DeviceArray.new(shape, src.info, s)
        res.used_on(s)
        if res.size:
            library.launch(entry, (res.ptr, d.ptr, nc, h, w, oh, ow), s)
        return res if device else call.to_numpy(res, o, s)


@binder("upsample_nearest2d")
def bind_upsample(op: library.Op):
    u = UpsampleOp(op)
    fwd = [P("x", P.POSITIONAL_ONLY), P("scale", P.POSITIONAL_OR_KEYWORD, default=None),
           P("output_size", P.KEYWORD_ONLY, default=None)] + list(OUT_STREAM)
    bwd = [P("dy", P.POSITIONAL_ONLY), P("scale", P.POSITIONAL_OR_KEYWORD, default=None),
           P("input_size", P.KEYWORD_ONLY, default=None)] + list(OUT_STREAM)
    rule = ("Output index d reads input min(floor(float(d) * float(in) / float(out)), in - 1) in float32 "
            "arithmetic: PyTorch's interpolate(mode='nearest') rule, bit for bit.")
    dts = (f"dtypes: {', '.join(d.name for d in op.dtypes)}. numpy in -> numpy out, GPU in -> DeviceArray out; "
           "out=, stream=.")
    fdoc = "\n".join([
        op.doc, "",
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
    return {op.name: make_function(op.name, u.forward, fwd, fdoc, fusable=False),
            f"{op.name}_backward": make_function(f"{op.name}_backward", u.backward, bwd, bdoc, fusable=False)}
