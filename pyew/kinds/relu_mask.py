"""relu_mask / add_relu_mask: ReLU that also writes a packed bitmask (after the BN-ReLU bitmask
kernel), which mask_backward reads instead of y."""
from __future__ import annotations

import math

import numpy as np

from .. import call, library
from .. import dtypes as dt
from .. import runtime as rt
from ..array import DeviceArray
from . import OUT_STREAM, binder, make_function, positional

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


def contiguous_host_out(o, op, what):
    """A numpy out= of a bitmask op must be C-contiguous (blocks are flat ranges)."""
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
        if device and not p.device:         # numpy inputs, and a GPU out: both outs must be on the GPU
            for o, label in ((y_out, "out[0] (y)"), (m_out, "out[1] (the mask)")):
                if isinstance(o, np.ndarray):
                    raise TypeError(f"{name}: {label} is a numpy array and the other out a GPU array; give both "
                                    "outs on the GPU (the numpy inputs are then copied up) or both as numpy arrays")
        p.device = device
        y_out = call.check_out(y_out, device, p.shape, info, f"{name} (out[0], y)", s)
        m_out = call.check_out(m_out, device, (mask_words(n),), MASK, f"{name} (out[1], the mask)", s)
        contiguous_host_out(y_out, name, "out[0]")
        contiguous_host_out(m_out, name, "out[1] (the mask)")
        if device:
            for o in (y_out, m_out):
                if o is not None:
                    call.check_alias(o, p.operands, name, exact_ok=o is y_out)
            if y_out is not None and m_out is not None and call.overlaps(y_out, m_out):
                raise ValueError(f"{name}: the two outs overlap")
        elif y_out is not None and m_out is not None and np.may_share_memory(y_out, m_out):
            raise ValueError(f"{name}: the two outs overlap")
        kernel = p.kernel

        def step(ins, outs, shapes, st):
            call.launch_elementwise(kernel, (), ins, outs[0], shapes[0], st, extra_out=(outs[1],))

        y, mask = call.run_elementwise(p, s, [(p.shape, info, y_out), ((mask_words(n),), MASK, m_out)],
                                       step, out_scale=(1, 32), align=32)
        return y, mask

    def doc(self) -> str:
        op = self.op
        expr = " + ".join(op.inputs)
        return "\n".join([
            op.doc, "",
            f"y, mask = {op.name}({', '.join(op.inputs)}): y = relu({expr}) with the inputs' shape, in the dtype "
            "the op runs in (numpy's promotion of the inputs, then the op's nearest dtype: float32 stays float32, "
            "int32 runs in float64); "
            f"mask is a uint32 array of ceil(n / 32) words where bit i % 32 of word i // 32 is set iff "
            f"element i of {expr} is > 0 (in C order; unused high bits of the last word are 0). NaN is "
            "not > 0: its bit is 0 and y is NaN, as numpy's maximum gives.",
            "Pass mask to relu_mask_backward for the gradient"
            + (f" (of every input: d{op.inputs[1]} = dx)." if len(op.inputs) > 1 else "."),
            f"dtypes: {', '.join(d.name for d in op.dtypes)}. Inputs: arrays of one shape (numpy or GPU) or "
            "scalars; dtypes promote as in numpy.",
            "numpy in -> numpy out, GPU in -> DeviceArray out. out=(y, mask) writes into given arrays "
            "(either may be None; C-contiguous; both numpy or both GPU arrays); stream= runs on a pyew.Stream.",
        ])


@binder("relu_mask")
def bind_relu_mask(op: library.Op):
    m = ReluMaskOp(op)
    return {op.name: make_function(op.name, m.__call__, positional(op.inputs) + list(OUT_STREAM), m.doc(),
                                   fusable=False)}
