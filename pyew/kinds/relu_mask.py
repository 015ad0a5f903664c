"""relu_mask / add_relu_mask (ReLU that also writes a packed bitmask, after the BN-ReLU bitmask
kernel) and mask_backward (the gradient that reads the mask instead of y)."""
from __future__ import annotations

import math

from .. import call, library
from .. import dtypes as dt
from .. import runtime as rt
from ..array import DeviceArray
from ..operands import DEVICE, classify
from . import OUT_STREAM, P, binder, make_function, positional

MASK = dt.BY_NAME["uint32"]


def mask_words(n: int) -> int:
    """Words of relu_mask's bitmask for n elements: bit i % 32 of word i // 32 is element i."""
    return (n + 31) // 32


def _out_pair(out, op):
    if out is None:
        return None, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{op}: out must be a pair (y, mask) (either may be None), not {type(out).__name__}")
    return out[0], out[1]


def _contiguous_host_out(o, op, what):
    if o is not None and not isinstance(o, DeviceArray) and not o.flags.c_contiguous:
        raise ValueError(f"{op}: {what} must be C-contiguous")


class ReluMaskOp:
    def __init__(self, op: library.Op):
        self.op = op
        self.name = op.name

    def __call__(self, *args, out=None, stream=None):
        name = self.name
        s = rt.resolve_stream(stream)
        p = call.prepare(self.op, args, s, broadcast=False)
        info = p.kernel.out_dtype
        y_out, m_out = _out_pair(out, name)
        n = math.prod(p.shape)
        device = p.device or any(call.device_out(o, s, name) is not None for o in (y_out, m_out))
        p.device = device
        y_out = call.check_out(y_out, device, p.shape, info, f"{name} (out[0], y)", s)
        m_out = call.check_out(m_out, device, (mask_words(n),), MASK, f"{name} (out[1], the mask)", s)
        _contiguous_host_out(y_out, name, "out[0]")
        if device:
            for o in (y_out, m_out):
                if o is not None:
                    call.check_alias(o, p.operands, name, exact_ok=o is y_out)
            if y_out is not None and m_out is not None and call.overlaps(y_out, m_out):
                raise ValueError(f"{name}: the two outs overlap")
        kernel = p.kernel

        def step(ins, outs, shapes, st):
            call.launch_elementwise(kernel, (), ins, outs[0], shapes[0], st, extra_out=(outs[1],))

        y, mask = call.run_elementwise(p, None, s, [(p.shape, info, y_out), ((mask_words(n),), MASK, m_out)],
                                       step, out_scale=(1, 32), align=32)
        return y, mask

    def doc(self) -> str:
        op = self.op
        expr = " + ".join(op.inputs)
        return "\n".join([
            op.doc, "",
            f"y, mask = {op.name}({', '.join(op.inputs)}): y = relu({expr}) with the inputs' shape and dtype; "
            f"mask is a uint32 array of ceil(n / 32) words where bit i % 32 of word i // 32 is set iff "
            f"element i of {expr} is > 0 (in C order; unused high bits of the last word are 0). NaN is "
            "not > 0: its bit is 0 and y is NaN, as numpy's maximum gives.",
            "Pass mask to relu_mask_backward for the gradient"
            + (f" (of every input: d{op.inputs[1]} = dx)." if len(op.inputs) > 1 else "."),
            f"dtypes: {', '.join(d.name for d in op.dtypes)}. Inputs: arrays of one shape (numpy or GPU) or "
            "scalars; dtypes promote as in numpy.",
            "numpy in -> numpy out, GPU in -> DeviceArray out. out=(y, mask) writes into given arrays "
            "(either may be None); stream= runs on a pyew.Stream.",
        ])


@binder("relu_mask")
def bind_relu_mask(op: library.Op):
    m = ReluMaskOp(op)
    return {op.name: make_function(op.name, m.__call__, positional(op.inputs) + list(OUT_STREAM), m.doc())}


class MaskBackwardOp:
    def __init__(self, op: library.Op):
        self.op = op
        self.name = op.name

    def __call__(self, dy, mask, /, *, out=None, stream=None):
        name = self.name
        s = rt.resolve_stream(stream)
        dyo = classify(dy, name, "dy", s, scalars=False)
        mo = classify(mask, name, "mask", s, scalars=False)
        kernel = self.op.kernel(dyo.info)
        if kernel is None:
            raise TypeError(f"{name} has no {dyo.info.name} kernel; it supports "
                            f"{', '.join(d.name for d in self.op.dtypes)}")
        if mo.info is not MASK:
            raise TypeError(f"{name}: mask must be the uint32 bitmask from the forward, not {mo.info.name}")
        shape, n = dyo.shape, math.prod(dyo.shape)
        if mo.shape != (mask_words(n),):
            raise ValueError(f"{name}: dy has shape {shape} ({n} elements), so mask must have shape "
                             f"({mask_words(n)},), got {mo.shape}")
        device = dyo.kind == DEVICE or mo.kind == DEVICE or call.device_out(out, s, name) is not None
        o = call.check_out(out, device, shape, dyo.info, name, s)
        _contiguous_host_out(o, name, "out")
        if device and o is not None:
            call.check_alias(o, [dyo], name)
            call.check_alias(o, [mo], name, exact_ok=False)
        p = call.Prepared(self.op, [dyo, mo], kernel, shape, device)
        entry = kernel.entry("forward")

        def step(ins, outs, shapes, st):
            library.launch(entry, (outs[0], ins[0].ptr, ins[1].ptr, math.prod(shapes[0])), st)

        return call.run_elementwise(p, o, s, [(shape, dyo.info, o)], step, in_scale=(1, 32), align=32)[0]


@binder("mask_backward")
def bind_mask_backward(op: library.Op):
    m = MaskBackwardOp(op)
    doc = "\n".join([
        op.doc, "",
        f"dx = {op.name}(dy, mask): mask is the uint32 bitmask of relu_mask / add_relu_mask for an input "
        "of dy's size (ceil(n / 32) words). dx has dy's shape and dtype.",
        f"dtypes: {', '.join(d.name for d in op.dtypes)}. numpy in -> numpy out, GPU in -> DeviceArray out; "
        "out=, stream=.",
    ])
    return {op.name: make_function(op.name, m.__call__, positional(("dy", "mask")) + list(OUT_STREAM), doc)}
