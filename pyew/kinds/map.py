"""map ops: one C++ expression per element, with numpy broadcasting, promotion and out=."""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from .. import array, call, interop, library, transfer
from .. import runtime as rt
from ..array import DeviceArray
from ..operands import weak_scalar_bits
from . import OUT_STREAM, P, binder, make_function, positional


class MapOp:
    """One elementwise op of the library; called through the function `function()` builds."""

    def __init__(self, op: library.Op):
        self.op = op
        self.name = op.name
        self.arity = len(op.inputs)
        # The fast paths take every operand in one dtype: only kernels whose inputs are all of their
        # dtype (of an op with a fixed input, such as where's bool condition, only the one where
        # the fixed dtype is the kernel's; every other call goes through call.prepare).
        uniform = [k for k in op.kernels if all(d is k.dtype for d in k.in_dtypes)]
        # DeviceArray fast path: dtype -> (entry function, output dtype, symbol)
        self.fast = {k.dtype: (k.entry("forward").fn, k.out_dtype, k.entry("forward").symbol) for k in uniform}
        self.host_fast = {d.np: v for d, v in self.fast.items()}   # the same, by numpy dtype
        # arrays with Python numbers: dtype -> (strided entry, output dtype)
        self.with_numbers = {k.dtype: (k.entry("strided"), k.out_dtype) for k in uniform
                             if k.entry("strided") is not None}
        self.default_pvals = (None if any(p.default is None for p in op.params)
                              else call.param_values(op, {}))

    def __call__(self, *args, out=None, stream=None, **kw):
        # The common case on the GPU, with less Python per call: DeviceArrays of one dtype and
        # shape, no params given, out= absent or a DeviceArray that fits and is not a shifted view
        # of an input. Same checks as the general path, which handles anything else.
        if not kw and len(args) == self.arity and self.default_pvals is not None:
            a0 = args[0]
            t0 = type(a0)
            if t0 is DeviceArray:
                info, shape, where = a0._info, a0.shape, a0._buf.stream.ordinal
                for a in args:
                    if type(a) is not DeviceArray or a._info is not info or a.shape != shape \
                            or a._buf.stream.ordinal != where:
                        break
                else:
                    entry = self.fast.get(info)
                    s = rt.resolve_stream(stream)
                    if entry is not None and s.ordinal == where:
                        if out is None:
                            return self._run_device(entry, args, s, None)
                        if type(out) is DeviceArray and out._info is entry[1] and out.shape == shape \
                                and out._buf.stream.ordinal == where and not out.readonly:
                            ob = out._buf
                            for a in args:
                                if a._buf is ob and (a.ptr != out.ptr or a.nbytes != out.nbytes):
                                    break
                            else:
                                return self._run_device(entry, args, s, out)
            elif t0 is np.ndarray and out is None:
                # small numpy arrays of one dtype and shape: one shot, without the general path
                dtype, shape = a0.dtype, a0.shape
                for a in args:
                    if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
                        break
                else:
                    entry = self.host_fast.get(dtype)
                    if entry is not None and 0 < a0.nbytes * (self.arity + 1) <= transfer.small_bytes():
                        res = np.empty(shape, entry[1].np)
                        s = rt.resolve_stream(stream)
                        launch = functools.partial(self._launch_one_shot, entry, a0.size)
                        if transfer.one_shot(args, (res,), launch, s):
                            return res
            elif t0 is not np.ndarray:
                # GPU arrays of other libraries: imported without a copy, then the DeviceArray path
                s = rt.resolve_stream(stream)
                devs = [a if type(a) is DeviceArray else interop.import_device(a, s, self.name) for a in args]
                if out is not None and type(out) is not DeviceArray:
                    imported = interop.import_device(out, s, self.name)
                    out = out if imported is None else imported
                d0 = devs[0]
                if d0 is not None:
                    info, shape = d0._info, d0.shape
                    entry = self.fast.get(info)
                    if entry is not None and all(d is not None and d._info is info and d.shape == shape for d in devs):
                        if out is None:
                            return self._run_device(entry, devs, s, None)
                        if type(out) is DeviceArray and out._info is entry[1] and out.shape == shape \
                                and not out.readonly and not any(call.overlaps(out, d) for d in devs):
                            return self._run_device(entry, devs, s, out)
                # the general path below takes the imported arrays: no second import, no second wait
                args = tuple(a if d is None else d for a, d in zip(args, devs))
        if not kw and len(args) == self.arity and self.default_pvals is not None:
            res = self._with_numbers(args, out, stream)
            if res is not None:
                return res
        s = rt.resolve_stream(stream)
        pvals = call.param_values(self.op, kw) if (kw or self.op.params) else ()
        p = call.prepare(self.op, args, s)
        out_info = p.kernel.out_dtype
        o = call.check_out(out, p.device, p.shape, out_info, self.name, s)
        if isinstance(o, DeviceArray):
            p.device = True
            call.check_alias(o, p.operands, self.name)
        kernel = p.kernel

        def step(ins, outs, shapes, st):
            call.launch_elementwise(kernel, pvals, ins, outs[0], shapes[0], st)

        return call.run_elementwise(p, o, s, [(p.shape, out_info, o)], step)[0]

    def function(self):
        """The op's Python function. The commonest calls (DeviceArrays of one dtype and shape on
        the only GPU; no stream= or params; out= absent, or a pyew-allocated DeviceArray that fits
        and is not a shifted view of an input) run here, one frame from the checks to the launch.
        Anything else goes through __call__, under the operands' GPU when there are several."""
        fast, arity, pvals = self.fast, self.arity, self.default_pvals
        general = make_function(self.name, self.__call__, self.signature(), self.doc())
        DA, Buffer, lib = DeviceArray, array.Buffer, library
        one_gpu, current_stream = rt.only_one_gpu, rt.resolve_stream

        def op(*args, out=None, stream=None, **kw):
            if stream is None and not kw and len(args) == arity and pvals is not None and one_gpu():
                a0 = args[0]
                if type(a0) is DA:
                    info, shape = a0._info, a0.shape
                    for a in args:
                        if type(a) is not DA or a._info is not info or a.shape != shape:
                            break
                    else:
                        entry = fast.get(info)
                        if entry is not None:
                            fn, out_info, sym = entry
                            s = current_stream(None)
                            if out is None:
                                ob = Buffer(a0.size * out_info.itemsize, s)
                                out = DA(ob, ob.ptr, shape, out_info)
                            elif type(out) is DA and type(out._buf) is Buffer and out._info is out_info \
                                    and out.shape == shape:
                                ob = out._buf
                                for a in args:
                                    if a._buf is ob and (a.ptr != out.ptr or a.nbytes != out.nbytes):
                                        return general(*args, out=out)      # partial overlap: its error
                                if ob.stream is s:
                                    ob.last = s
                                else:
                                    ob.used_on(s)
                            else:
                                return general(*args, out=out)
                            for a in args:
                                b = a._buf
                                if b.stream is s:
                                    b.last = s
                                else:
                                    b.used_on(s)
                            n = a0.size
                            if n:
                                rc = fn(out.ptr, *[a.ptr for a in args], n, *pvals, s.handle, *s.dims)
                                if rc:
                                    lib.get().check(rc, sym)
                            return out
            return general(*args, out=out, stream=stream, **kw)

        for attr in ("__name__", "__qualname__", "__module__", "__doc__", "__signature__"):
            setattr(op, attr, getattr(general, attr))
        return op

    def _with_numbers(self, args, out, stream):
        """DeviceArrays of one dtype, of shapes that broadcast, with Python numbers that keep that
        dtype (numpy's weak scalars: 0.5 with float16, 3 with int32), as in x * 0.5 or x + bias:
        straight to the strided entry with a layout cached per shapes, each number read from its
        GPU's slot for the value (runtime.constant). None where the general path must decide
        (other operands, promotion, a misfit or overlapping out=, shapes that do not broadcast)."""
        info = None
        shapes = []
        for a in args:
            t = type(a)
            if t is DeviceArray:
                if info is None:
                    info, where = a._info, a._buf.stream.ordinal
                elif a._info is not info or a._buf.stream.ordinal != where:
                    return None
                shapes.append(a.shape)
            elif t is float or t is int:
                shapes.append(None)
            else:
                return None
        entry = self.with_numbers.get(info) if info is not None else None
        if entry is None:
            return None
        s = rt.resolve_stream(stream)
        plan = call.broadcast_plan(tuple(shapes))
        if s.ordinal != where or plan is None:
            return None
        shape, layout, n = plan
        strided, out_info = entry
        if out is not None and not (
                type(out) is DeviceArray and out._info is out_info and out.shape == shape and not out.readonly
                and out._buf.stream.ordinal == where and
                not any(type(a) is DeviceArray and call.overlaps(out, a) and
                        not (a.ptr == out.ptr and a.shape == shape and a._info is out._info) for a in args)):
            return None
        bits = [weak_scalar_bits(a, info) if sh is None else None for a, sh in zip(args, shapes)]
        if any(b is None and sh is None for b, sh in zip(bits, shapes)):
            return None
        # everything is checked: from here the call runs
        ptrs = []
        for a, b in zip(args, bits):
            if b is None:
                ptrs.append(a.ptr)
                continue
            ptr = rt.constant(b, info.itemsize, where)
            if not ptr:
                return None
            ptrs.append(ptr)
        if out is None:
            res = DeviceArray._alloc(shape, out_info, s)
        else:
            res = out
            out._buf.used_on(s)
        for a in args:
            if type(a) is DeviceArray:
                a._buf.used_on(s)
        if not n:
            return res
        pvals = self.default_pvals
        if layout[0] == 1:
            # One dim: the strided entry's packs kernel takes whole 16-byte packs from aligned
            # pointers, so a length past a multiple of the pack goes as the packs, then the rest.
            strides = layout[2:]
            pack = 16 // max(info.itemsize, out_info.itemsize)
            tail = n % pack
            if tail and n > pack and res.ptr % 16 == 0 and all(st == 0 or p % 16 == 0 for p, st in zip(ptrs, strides)):
                head = n - tail
                for at, count in ((0, head), (head, tail)):
                    part = (ctypes.c_int64 * len(layout))(1, count, *strides)
                    library.launch(strided, (res.ptr + at * out_info.itemsize,
                                             *[p + at * info.itemsize * st for p, st in zip(ptrs, strides)],
                                             count, *pvals, ctypes.addressof(part)), s)
                return res
        library.launch(strided, (res.ptr, *ptrs, n, *pvals, ctypes.addressof(layout)), s)
        return res

    def _launch_one_shot(self, entry, n, in_ptrs, out_ptrs, s):
        self._launch(entry, out_ptrs[0], in_ptrs, n, s)

    def _launch(self, entry, out_ptr, in_ptrs, n, s):
        fn, _, sym = entry
        rc = fn(out_ptr, *in_ptrs, n, *self.default_pvals, s.handle, *s.dims)
        if rc:
            library.get().check(rc, sym)

    def _run_device(self, entry, args, s, out):
        a0 = args[0]
        if out is None:
            res = DeviceArray._alloc(a0.shape, entry[1], s)
        else:
            res = out
            out._buf.used_on(s)
        for a in args:
            a._buf.used_on(s)
        if a0.size:
            self._launch(entry, res.ptr, [a.ptr for a in args], a0.size, s)
        return res

    def signature(self) -> list[P]:
        ps = positional(self.op.inputs) + list(OUT_STREAM)
        for p in self.op.params:
            ps.append(P(p.name, P.KEYWORD_ONLY, default=P.empty if p.default is None else p.default,
                        annotation=float if p.type == "float" else int))
        return ps

    def doc(self) -> str:
        op = self.op
        lines = [op.doc, ""]
        lines.append(f"Inputs: {', '.join(op.inputs)}: numpy arrays, GPU arrays (DeviceArray, or torch/CuPy/JAX/"
                     "Numba arrays through DLPack or the CUDA Array Interface), or scalars; shapes broadcast "
                     "and dtypes promote as in numpy.")
        for name, info in op.fixed.items():
            lines.append(f"Input {name} is always {info.name}: it takes no part in promotion, and an argument of "
                         f"another dtype is converted to {info.name} (to_{info.name}).")
        if op.ufunc:
            lines.append(f"numpy's {op.ufunc}.")
        for p in op.params:
            d = "required" if p.default is None else f"default {p.default}"
            lines.append(f"Param {p.name} ({p.type}, {d}).")
        dts = [k.dtype.name + ("" if k.dtype is k.out_dtype else f" -> {k.out_dtype.name}") for k in op.kernels]
        lines.append(f"dtypes: {', '.join(dts)}.")
        lines.append("numpy in -> numpy out (streamed through pinned memory); any GPU input -> DeviceArray out. "
                     "out= writes into a given array; stream= runs on a pyew.Stream.")
        lines.append(f"Reference (numpy, float64): {op.ref}")
        return "\n".join(lines)


BOUND: dict[str, MapOp] = {}     # the MapOp behind each bound function (the CPU stand-ins swap entries)


@binder("map")
def bind_map(op: library.Op):
    m = MapOp(op)
    BOUND[op.name] = m
    return {op.name: m.function()}
