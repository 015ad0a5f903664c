"""scatter_add: np.add.at on the GPU, with every index checked before anything is written."""
from __future__ import annotations

import numpy as np

from .. import call, library
from .. import dtypes as dt
from .. import runtime as rt
from ..array import Buffer, DeviceArray, cast
from ..operands import DEVICE, HOST, classify
from . import P, binder, make_function

_INDEX = {"int32": "i32", "int64": "i64"}
_NO_BAD = 2**64 - 1


class ScatterAddOp:
    def __init__(self, op: library.Op):
        self.op = op
        self.name = op.name

    def __call__(self, dst, index, src, /, *, stream=None):
        op = self.name
        s = rt.resolve_stream(stream)
        if isinstance(dst, np.ndarray) and not dst.flags.writeable:
            raise ValueError(f"{op}: dst is a read-only numpy array; it is updated in place")
        if not isinstance(dst, np.ndarray) and call.device_out(dst, s, op, "dst") is None:
            raise TypeError(f"{op}: dst must be a GPU array or a writeable numpy array (it is updated in "
                            f"place), not {type(dst).__name__}")
        do = classify(dst, op, "dst", s, scalars=False)
        io = classify(index, op, "index", s, scalars=False)
        so = classify(src, op, "src", s, scalars=False)
        info = do.info
        tok = _INDEX.get(io.info.name)
        if tok is None:
            raise TypeError(f"{op}: index has dtype {io.info.name}; it must be int32 or int64")
        entry = call.kernel_for(self.op, info, f"index_{tok}")
        call.need_cast(so.info, info, op, "src", f"dst is {info.name}")
        if len(do.shape) != 1 or len(io.shape) != 1 or so.shape != io.shape:
            raise ValueError(f"{op}: dst must be 1-D and index and src 1-D of one length, got shapes "
                             f"dst {do.shape}, index {io.shape}, src {so.shape}")
        device = do.kind == DEVICE
        if device and do.value.readonly:
            raise ValueError(f"{op}: dst is a read-only GPU array")
        length, n = do.shape[0], io.shape[0]
        if n == 0:
            return dst
        if device:      # index or src over dst's memory: read as they were, as np.add.at reads them
            for o in (io, so):
                if o.kind == DEVICE and call.overlaps(do.value, o.value):
                    o.value = o.value.copy(stream=s)
        if io.kind == HOST:     # checked on the host: no GPU work before the error
            idx = io.value
            bad = np.flatnonzero((idx < -length) | (idx >= length))
            if bad.size:
                self._raise(int(bad[0]), int(idx[bad[0]]), length)
        keep: list = []
        i_dev = call.on_device(io, s, keep)
        if io.kind == DEVICE:   # a GPU index: the check kernel, read back first
            flag = Buffer(8, s)
            keep.append(flag)
            library.launch(call.kernel_for(self.op, info, f"check_{tok}"), (flag.ptr, i_dev.ptr, n, length), s)
            got = DeviceArray(flag, flag.ptr, (), dt.BY_NAME["int64"]).get(s).view(np.uint64)
            if int(got) != _NO_BAD:
                k = int(got)
                self._raise(k, int(i_dev[k].get(s)), length)
        s_dev = call.on_device(so, s, keep)
        if s_dev.info is not info:
            s_dev = cast(s_dev, info, s)
            keep.append(s_dev)
        if device:
            target = do.value
            target.used_on(s)
        else:
            target = call.on_device(do, s, keep)
        library.launch(entry, (target.ptr, length, i_dev.ptr, s_dev.ptr, n), s)
        if device:
            return dst
        back = target.get(s)
        np.copyto(dst, back)
        return dst

    def _raise(self, k: int, value: int, length: int):
        raise IndexError(f"{self.name}: index[{k}] = {value} is out of bounds for dst of length {length}; "
                         f"indices must lie in [-{length}, {length}); dst is unchanged")


@binder("scatter_add")
def bind_scatter_add(op: library.Op):
    sc = ScatterAddOp(op)
    params = [P("dst", P.POSITIONAL_ONLY), P("index", P.POSITIONAL_ONLY), P("src", P.POSITIONAL_ONLY),
              P("stream", P.KEYWORD_ONLY, default=None)]
    doc = "\n".join([
        op.doc, "",
        f"{op.name}(dst, index, src) adds src[k] to dst[index[k]] for every k, like np.add.at(dst, index, src), "
        "and returns dst. dst: a 1-D GPU array or writeable numpy array (copied in, scattered, copied back); "
        "index: 1-D int32 or int64, duplicates accumulate, negative values count from the end; src: 1-D, "
        "index's length, converted to dst's dtype first (np.add.at adds in the dtypes' promotion and rounds "
        "once, so a src wider than dst may differ by 1 ulp of dst per add).",
        "Any index outside [-len(dst), len(dst)) raises IndexError before dst is written (a GPU index is "
        "checked by a kernel and read back first). float16/bfloat16 add through FastAtomicAdd (a paired "
        "32-bit atomic with the neighbour guarded by dst's length); the order of duplicates' adds is not "
        "fixed, so low bits may vary between runs.",
        f"dtypes: {', '.join(d.name for d in op.dtypes)}. stream= runs on a pyew.Stream.",
    ])
    return {op.name: make_function(op.name, sc.__call__, params, doc, fusable=False)}
