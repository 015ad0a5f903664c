"""dot: a 1-D dot product with float32 accumulation and one atomic per block (the library's "fast"
entry; the per-thread atomic variants it was measured against live in the benchmark library)."""
from __future__ import annotations

import numpy as np

from .. import call, library
from .. import runtime as rt
from ..array import Buffer, DeviceArray, cast, lookup_dtype
from ..operands import DEVICE, classify, result_dtype
from . import OUT_STREAM, P, binder, make_function


class DotOp:
    def __init__(self, op: library.Op):
        self.op = op
        self.name = op.name

    def __call__(self, a, b, /, *, out=None, stream=None):
        op = self.name
        s = rt.resolve_stream(stream)
        ao = classify(a, op, "a", s, scalars=False)
        bo = classify(b, op, "b", s, scalars=False)
        # numpy's dot keeps the promoted dtype (int stays int): that dtype needs a kernel itself
        info = lookup_dtype(result_dtype([ao, bo], op))
        entry = call.kernel_for(self.op, info, "fast")
        if len(ao.shape) != 1 or len(bo.shape) != 1 or ao.shape != bo.shape:
            raise ValueError(f"{op}: a and b must be 1-D of one length, got shapes {ao.shape} and {bo.shape}")
        for name, o in (("a", ao), ("b", bo)):
            call.need_cast(o.info, info, op, name, f"the dot runs in {info.name}")
        device = ao.kind == DEVICE or bo.kind == DEVICE or call.device_out(out, s, op) is not None
        if out is not None:
            o = call.device_out(out, s, op) if device else out
            want = "a GPU array" if device else "a numpy array"
            if o is None or (not device and not isinstance(o, np.ndarray)):
                raise TypeError(f"{op}: out must be {want} here, not {type(out).__name__}")
            if o.size != 1 or len(o.shape) > 1 or o.dtype != info.np:
                raise ValueError(f"{op}: out is {o.dtype} {tuple(o.shape)}, the result is {info.name} () or (1,)")
            if not device and not o.flags.writeable:
                raise ValueError(f"{op}: out is a read-only numpy array")
            out = o
        keep: list = []
        ptrs = []
        for o in (ao, bo):
            d = call.on_device(o, s, keep)
            if d.info is not info:
                d = cast(d, info, s)
                keep.append(d)
            ptrs.append(d.ptr)
        work = Buffer(8, s)     # the float32/float64 sum; zeroed by the entry
        keep.append(work)
        res = out if isinstance(out, DeviceArray) else DeviceArray.new((), info, s)
        res.used_on(s)
        library.launch(entry, (res.ptr, work.ptr, *ptrs, ao.shape[0]), s)
        if device:
            return res
        host = out if out is not None else np.empty((), info.np)
        return call.to_numpy(res.reshape(host.shape), host, s)


@binder("dot")
def bind_dot(op: library.Op):
    d = DotOp(op)
    params = [P("a", P.POSITIONAL_ONLY), P("b", P.POSITIONAL_ONLY)] + list(OUT_STREAM)
    doc = "\n".join([
        op.doc, "",
        f"r = {op.name}(a, b): a, b 1-D of one length (dtypes promote as in numpy); r is of the "
        "result dtype (numpy in: a numpy scalar, as np.dot gives) or a 0-d DeviceArray (GPU in). n = 0 gives 0.",
        "Per-thread and per-block sums in float32 (float64 for float64), one atomicAdd per block into a float32 "
        "scratch word, then rounded once to the dtype: within the dtype's rounding of the exact dot plus float32 "
        "summation error.",
        f"dtypes: {', '.join(k.dtype.name for k in op.kernels)}. out= (size 1) and stream= as for the other ops.",
    ])
    return {op.name: make_function(op.name, d.__call__, params, doc, fusable=False)}
