"""Stand-ins for libew's entry points on the CPU, over tests/fake_cuda.py's host "device" memory:
map entries (contiguous and strided) evaluate the op's numpy reference, casts cast, relu_mask and
its backward follow their definitions. With them the CPU tests run pyew's whole call layer
(promotion, broadcasting, dimension collapsing, the transfer engine, out=) without a GPU."""
from __future__ import annotations

import ctypes

import numpy as np

from pyew import call, library

from .fake_cuda import device_view
from .reference import evaluate


def _strided(ptr, info, shape, strides):
    if not shape or 0 in shape:
        return np.zeros(shape, info.np)
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    base = device_view(ptr + lo * info.itemsize, info.np, (span,))
    return np.lib.stride_tricks.as_strided(base[-lo:] if lo else base, shape,
                                           [s * info.itemsize for s in strides])


class FakeKernels:
    def __init__(self):
        self.by_symbol = {}
        for op in library.get().manifest.ops:
            for k in op.kernels:
                for e in k.entries:
                    self.by_symbol[e.symbol] = (op, k)
        self.launches = []

    def launch(self, entry, args, stream):
        op, k = self.by_symbol[entry.symbol]
        self.launches.append(entry.role)
        kd, out_info = k.dtype, k.out_dtype
        if op.kind == "map" and entry.role in ("forward", "strided"):
            nin = len(op.inputs)
            out, ins, n = args[0], args[1:1 + nin], args[1 + nin]
            params = dict(zip((p.name for p in op.params), args[2 + nin:2 + nin + len(op.params)]))
            if entry.role == "forward":
                arrays = [device_view(p, d.np, (n,)) for p, d in zip(ins, k.in_dtypes)]
                shape = (n,)
            else:
                lay = args[-1]
                nd = ctypes.c_int64.from_address(lay).value
                vals = (ctypes.c_int64 * (1 + nd * (1 + nin))).from_address(lay)
                shape = tuple(vals[1:1 + nd])
                assert int(np.prod(shape)) == n
                arrays = [_strided(p, d, shape, tuple(vals[1 + nd * (1 + i): 1 + nd * (2 + i)]))
                          for i, (p, d) in enumerate(zip(ins, k.in_dtypes))]
            with np.errstate(all="ignore"):
                ref = evaluate(op.ref, op.inputs, [a.reshape(-1) if entry.role == "forward" else a for a in arrays],
                               params, kd, k.in_dtypes)
                device_view(out, out_info.np, shape)[...] = np.broadcast_to(ref, shape).astype(out_info.np)
            return
        if op.kind == "relu_mask":
            y, mask, *ins = args[:2 + len(op.inputs)]
            n = args[2 + len(op.inputs)]
            x = sum(device_view(p, kd.np, (n,)).astype(np.float64) for p in ins)
            device_view(y, kd.np, (n,))[...] = np.maximum(x, 0).astype(kd.np)
            bits = np.zeros(-(-n // 32) * 32, bool)
            bits[:n] = x > 0
            words = (bits.reshape(-1, 32) * (1 << np.arange(32, dtype=np.uint64))).sum(1).astype(np.uint32)
            device_view(mask, np.uint32, words.shape)[...] = words
            return
        if op.kind == "mask_backward":
            dx, dy, mask, n = args
            words = device_view(mask, np.uint32, (-(-n // 32),))
            bits = ((words[:, None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(-1)[:n].astype(bool)
            g = device_view(dy, kd.np, (n,))
            device_view(dx, kd.np, (n,))[...] = np.where(bits, g, np.zeros((), kd.np))
            return
        raise NotImplementedError(f"no CPU stand-in for {entry.symbol}")

    def fill(self, ptr, n, info, bits, stream):
        word = np.array([bits], np.uint64).view(np.uint8)[: info.itemsize].view(info.np)[0]
        device_view(ptr, info.np, (n,))[...] = word


def install(monkeypatch) -> FakeKernels:
    f = FakeKernels()
    monkeypatch.setattr(library, "launch", f.launch)
    monkeypatch.setattr(call, "fill", f.fill)
    from pyew import fused
    monkeypatch.setattr(fused.Program, "launch_ptrs", _fake_formula)
    return f


def _fake_formula(prog, in_ptrs, out_ptr, out_shape, stream, blob, lay, n=None):
    """A fused formula's kernel on the CPU: its tree node by node through the ops' references, each
    node rounded to its dtype as the op alone would round it (the real kernel rounds once)."""
    import struct

    from pyew import dtypes as dt
    from pyew.formula import Const, Var
    n = int(np.prod(out_shape))
    if n == 0:
        return
    shape = tuple(out_shape)
    if lay is None:
        arrays = [device_view(p, a.info.np, shape) for p, a in zip(in_ptrs, prog.arrays)]
    else:
        nd = lay[0]
        shp = tuple(lay[1:1 + nd])
        arrays = [_strided(p, a.info, shp, tuple(lay[1 + nd * (1 + i): 1 + nd * (2 + i)])).reshape(shape)
                  for i, (p, a) in enumerate(zip(in_ptrs, prog.arrays))]
    scalars = struct.unpack(prog.fmt, blob.raw[:struct.calcsize(prog.fmt)]) if prog.scalars else ()
    env = {a.name: v for a, v in zip(prog.arrays, arrays)}
    env.update({a.name: (a.pytype(v) if a.info is None else a.info.np.type(v)) for a, v in zip(prog.scalars, scalars)})
    vocab = prog.vocab              # the ops the program was typed with: a stale program shows
    # parts computed from the call's numbers on the host come in the blob, as the kernel reads them
    derived = {id(d): env[a.name] for d, a in zip(prog.derived, prog.scalars[prog.given:])}

    def ev(node):
        if id(node) in derived:
            return derived[id(node)], None
        if isinstance(node, Const):
            return node.value, None
        if isinstance(node, Var):
            v = env[node.name]
            return (v, dt.lookup(v.dtype)) if isinstance(v, (np.ndarray, np.generic)) else (v, None)
        op = vocab[node.op]
        kids = [ev(a) for a in node.args]
        from pyew.formula import PYTHON_OPS
        from pyew.operands import (
            COMPARISONS,
            DEVICE,
            SCALAR,
            Operand,
            kernel_dtype,
            numpy_name,
            past_int64,
            result_dtype,
        )
        if node.operator and node.op in PYTHON_OPS and not node.params and all(i is None for _, i in kids):
            return PYTHON_OPS[node.op](*[v for v, _ in kids]), None        # Python's arithmetic (weak)
        operands = [Operand(nm, SCALAR, v, None, ()) if i is None else Operand(nm, DEVICE, None, i, ())
                    for nm, (v, i) in zip(op.inputs, kids)]
        operands = past_int64(op, operands)          # a constant past int64: the infinity of its sign
        result = result_dtype(operands, op.name)
        if numpy_name(op) in COMPARISONS and result.kind in "iu" and any(
                o.kind == SCALAR and type(o.value) is int for o in operands):
            result = np.dtype(np.int64)             # as the formula's kernel compares Python ints
        kd = kernel_dtype(result, op.dtypes, op.name, numpy_name(op))
        k = op.kernel(kd)
        params = {p.name: p.default for p in op.params}
        params.update(dict(node.params))
        want = getattr(k, "in_dtypes", None) or [kd] * len(kids)
        values = [o.value if o.kind == SCALAR else v for o, (v, _) in zip(operands, kids)]
        ins = [np.asarray(float(v) if type(v) is int and d.kind == "float" else v).astype(d.np)
               for v, d in zip(values, want)]
        with np.errstate(all="ignore"):
            r = evaluate(op.ref, op.inputs, ins, params, kd, getattr(k, "in_dtypes", None))
            return np.asarray(r).astype(k.out_dtype.np), k.out_dtype

    r, _ = ev(prog.tree)
    with np.errstate(all="ignore"):
        device_view(out_ptr, prog.out.np, shape)[...] = np.broadcast_to(r, shape).astype(prog.out.np)


def install_all(monkeypatch):
    """The fake runtime and the fake kernels together."""
    from . import fake_cuda
    cuda = fake_cuda.install(monkeypatch)
    kernels = install(monkeypatch)
    return cuda, kernels
