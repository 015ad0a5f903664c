"""mask_backward (relu_mask_backward): the gradient of relu_mask, reading its packed bitmask
instead of y."""
from __future__ import annotations

import math

from .. import call, library
from .. import runtime as rt
from ..operands import DEVICE, classify
from . import OUT_STREAM, binder, make_function, positional
from .relu_mask import MASK, contiguous_host_out, mask_words


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
        contiguous_host_out(o, name, "out")
        if device and o is not None:
            call.check_alias(o, [dyo], name)
            call.check_alias(o, [mo], name, exact_ok=False)
        p = call.Prepared([dyo, mo], kernel, shape, device)
        entry = kernel.entry("forward")

        def step(ins, outs, shapes, st):
            library.launch(entry, (outs[0], ins[0].ptr, ins[1].ptr, math.prod(shapes[0])), st)

        return call.run_elementwise(p, s, [(shape, dyo.info, o)], step, in_scale=(1, 32), align=32)[0]


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
    return {op.name: make_function(op.name, m.__call__, positional(("dy", "mask")) + list(OUT_STREAM), doc,
                                   fusable=False)}
