"""map ops: one C++ expression per element, with numpy broadcasting, promotion and out=."""
from __future__ import annotations

import ctypes
import math

import numpy as np

from .. import call, interop, library, transfer
from .. import runtime as rt
from ..array import DeviceArray
from ..operands import DEVICE, HOST, SCALAR, weak_scalar_bits
from . import OUT_STREAM, P, binder, make_function, positional


class MapOp:
    """One elementwise op of the library; called through the function `function()` builds."""

    def __init__(self, op: library.Op):
        self.op = op
        self.name = op.name
        self.arity = len(op.inputs)

    def __call__(self, *args, out=None, stream=None, **kw):
        """A call of the op: replayed from its plan where one was made for calls like it, else
        classified (call.prepare) and checked; a call on GPU arrays and numbers becomes a plan,
        kept for the next calls like it, and runs from it; anything else (numpy operands, inputs
        to convert first) runs through call.run_elementwise."""
        s = rt.resolve_stream(stream)
        dev = call.plan_args(args, s, self.name, self.op.inputs) if len(args) == self.arity else None
        key = plan = None
        if dev is not None:
            args = dev
            if out is not None and type(out) is not DeviceArray and not isinstance(out, np.ndarray):
                imported = interop.import_device(out, s, self.name, "out")
                out = out if imported is None else imported
            key = call.plan_key(self, dev, kw)
            plan = call.find_plan(key, self)
            if plan is not None:
                res = call.replay(plan, dev, out, s)
                if res is not None:
                    return res
        pvals = call.param_values(self.op, kw) if (kw or self.op.params) else ()
        p = call.prepare(self.op, args, s)
        out_info = p.kernel.out_dtype
        o = call.check_out(out, p.device, p.shape, out_info, self.name, s)
        if isinstance(o, DeviceArray):
            p.device = True
            call.check_alias(o, p.operands, self.name)
        if key is not None and plan is None:
            # (a kept plan that declined this call would decline it again: the general path runs it)
            plan = self._plan(p, pvals)
            if plan is not None:
                call.keep_plan(key, plan)
                res = call.replay(plan, args, o, s)
                if res is not None:
                    return res
        kernel = p.kernel

        def step(ins, outs, shapes, st):
            call.launch_elementwise(kernel, pvals, ins, outs[0], shapes[0], st)

        return call.run_elementwise(p, s, [(p.shape, out_info, o)], step)[0]

    def _plan(self, p: call.Prepared, pvals: tuple) -> call.Plan | None:
        """The plan of a classified GPU call whose arrays are already in the dtypes its kernel
        takes (a call that converts an input first is not planned): the contiguous entry where
        every operand is an array of the result's shape, else the strided entry, the numbers read
        from their GPU's slot for each value (runtime.constant)."""
        kernel = p.kernel
        wants = call.input_dtypes(kernel, len(p.operands))
        if not p.device:
            return self._host_plan(p, pvals, wants)
        arrays, numbers_at = [], []
        for i, (o, want) in enumerate(zip(p.operands, wants)):
            if o.kind == DEVICE:
                if o.info is not want:
                    return None
                arrays.append(i)
            elif type(o.value) in call.NUMBERS:
                numbers_at.append(i)
            else:
                return None
        if not arrays:              # numbers alone (a GPU out= made it a GPU call): the general path
            return None
        out_info, shape = kernel.out_dtype, p.shape
        if not numbers_at and all(o.shape == shape for o in p.operands):
            forward, n = kernel.entry("forward"), math.prod(shape)
            if arrays == [0, 1] and not pvals:       # the common binary call, without a loop
                def contiguous(out_ptr, args, _, s):
                    library.launch(forward, (out_ptr, args[0].ptr, args[1].ptr, n), s)
            else:
                def contiguous(out_ptr, args, _, s):
                    library.launch(forward, (out_ptr, *[args[i].ptr for i in arrays], n, *pvals), s)
            native = library.native(forward, [("o", 0), *[("a", i) for i in arrays], ("c", n),
                                              *[("c", v) for v in pvals]], shape, out_info, n)
            return call.Plan(self, shape, out_info, arrays, (), None, contiguous, native=native)
        strided = kernel.entry("strided")
        shapes = call.broadcast_plan(tuple(None if o.kind == SCALAR else o.shape for o in p.operands))
        if strided is None or shapes is None:
            return None
        layout, n = shapes
        pack = 16 // max(max(w.itemsize for w in wants), out_info.itemsize)
        where = [(i in arrays, numbers_at.index(i) if i in numbers_at else 0) for i in range(len(wants))]
        strides = list(layout)[2:] if layout[0] == 1 else None
        tail = n % pack if strides is not None and n > pack else 0
        at_layout = ctypes.addressof(layout)
        # One dim past a multiple of the pack: the packs kernel takes whole 16-byte packs from
        # aligned pointers, so such a call goes as the packs, then the rest. Each part's layout and
        # byte offsets are made here once; the layouts live as long as the plan.
        parts = []
        if tail:
            for at, count in ((0, n - tail), (n - tail, tail)):
                part = (ctypes.c_int64 * len(layout))(1, count, *strides)
                parts.append((at * out_info.itemsize, [at * w.itemsize * st for w, st in zip(wants, strides)],
                              count, ctypes.addressof(part), part))

        numbers = _numbers(numbers_at, [wants[i] for i in numbers_at])

        def sources(offsets):
            return [("a", i, off) if arr else ("n", j, off) for (i, (arr, j)), off in zip(enumerate(where), offsets)]
        native = library.native(
            strided, [("o", 0), *sources([0] * len(where)), ("c", n), *[("c", v) for v in pvals], ("c", at_layout)],
            shape, out_info, n,
            [[("o", 0, out_off), *sources(offs), ("c", count), *[("c", v) for v in pvals], ("c", at)]
             for out_off, offs, count, at, _ in parts],
            [0, *[1 + i for i, st in enumerate(strides or ()) if st]] if parts else ())

        if not tail and not pvals and len(where) == 2:      # a row bias, x * 0.5, 2 ** x: no loops
            (arr0, _), (arr1, _) = where

            def two(out_ptr, args, nums, s, _alive=layout):    # the kernel reads the layout by address
                library.launch(strided, (out_ptr, args[0].ptr if arr0 else nums[0],
                                         args[1].ptr if arr1 else nums[-1], n, at_layout), s)
            return call.Plan(self, shape, out_info, arrays, numbers_at, numbers, two, native=native)

        def broadcast(out_ptr, args, nums, s, _alive=(layout, parts)):    # the kernels read the layouts by address
            full = [args[i].ptr if arr else nums[j] for i, (arr, j) in enumerate(where)]
            if tail and out_ptr % 16 == 0 and all(st == 0 or q % 16 == 0 for q, st in zip(full, strides)):
                for out_off, offs, count, at, _ in parts:
                    library.launch(strided, (out_ptr + out_off, *[q + o for q, o in zip(full, offs)],
                                             count, *pvals, at), s)
                return
            library.launch(strided, (out_ptr, *full, n, *pvals, at_layout), s)
        return call.Plan(self, shape, out_info, arrays, numbers_at, numbers, broadcast, native=native)

    def _host_plan(self, p: call.Prepared, pvals: tuple, wants) -> call.Plan | None:
        """The plan of a call on numpy arrays of the kernel's dtypes, each of the result's shape, a
        row or a column of it (transfer.runs_of), and numbers (call.NUMBERS): replayed in one shot when it
        is small (call.replay), in runs of whole rows whose copies up and down overlap; else
        streamed as now. Arrays alone of the result's shape take the contiguous entry, the others
        the strided one."""
        arrays, numbers_at = [], []
        for i, (o, w) in enumerate(zip(p.operands, wants)):
            if o.kind == HOST and o.info is w and o.value.dtype == w.np:
                arrays.append(i)
            elif o.kind == SCALAR and type(o.value) in call.NUMBERS:
                numbers_at.append(i)
            else:
                return None
        shape, kernel = p.shape, p.kernel
        shapes = [p.operands[i].shape for i in arrays]
        runs = transfer.runs_of(shapes, shape) if arrays else None
        if runs is None:
            return None
        host = (runs.period, runs.scales)
        if not numbers_at and all(s == shape for s in shapes):
            forward = kernel.entry("forward")

            def contiguous(in_ptrs, out_ptrs, s, count, _):
                library.launch(forward, (out_ptrs[0], *in_ptrs, count, *pvals), s)
            return call.Plan(self, shape, kernel.out_dtype, arrays, (), None, contiguous, host=host)
        strided = kernel.entry("strided")
        if strided is None:
            return None
        where = [(i in arrays, arrays.index(i) if i in arrays else numbers_at.index(i)) for i in range(len(wants))]
        numbers = _numbers(numbers_at, [wants[i] for i in numbers_at]) if numbers_at else None

        def broadcast(in_ptrs, out_ptrs, s, count, nums):
            _, own = runs.shapes(count)
            layout, n = call.broadcast_plan(tuple(own[j] if arr else None for arr, j in where))
            library.launch(strided, (out_ptrs[0], *[in_ptrs[j] if arr else nums[j] for arr, j in where], n, *pvals,
                                     ctypes.addressof(layout)), s)
        return call.Plan(self, shape, kernel.out_dtype, arrays, numbers_at, numbers, broadcast, host=host)

    def function(self):
        """The op's Python function: on one GPU, a call whose plan is known replays it from here, in
        C where the plan has a native form, else one frame from the lookup to the launch; any other
        goes through __call__ (under the operands' GPU when there are several)."""
        general = make_function(self.name, self.__call__, self.signature(), self.doc(), ufunc=self.op.ufunc)
        one_gpu, current_stream = rt.only_one_gpu, rt.resolve_stream
        plan_key, plan_args, plans, replay, me = call.plan_key, call.plan_args, call.plans(), call.replay, self
        arity, names, DA = self.arity, self.op.inputs, DeviceArray
        native = call.native_replayer(self, self.arity)

        def op(*args, out=None, stream=None, **kw):
            if native is not None and out is None and stream is None and not kw:
                res = native(args)
                if res is not None:
                    return res
            if stream is None and one_gpu():
                key, s = plan_key(me, args, kw), None
                if key is None and len(args) == arity:          # GPU arrays of other libraries
                    s = current_stream(None)
                    dev = plan_args(args, s, me.name, names)
                    if dev is not None:
                        args, key = dev, plan_key(me, dev, kw)
                plan = plans.get(key) if key is not None else None
                if plan is not None and plan.target is me and (out is None or type(out) is DA):
                    res = replay(plan, args, out, current_stream(None) if s is None else s)
                    if res is not None:
                        return res
            return general(*args, out=out, stream=stream, **kw)

        for attr in ("__name__", "__qualname__", "__module__", "__doc__", "__signature__"):
            setattr(op, attr, getattr(general, attr))
        return op

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


def _numbers(numbers_at, infos):
    """A plan's numbers(args, stream): each number's slot on the stream's GPU (runtime.constant), or
    None for one its dtype cannot hold. A number object seen in the last call (a loop's literal) is
    not converted again; its slot is still looked up, since the slots belong to the runtime."""
    if len(numbers_at) == 1:            # x * 0.5: one number, without the loops
        (at,), (info,) = numbers_at, infos
        last = [None]

        def one(args, s):
            v, seen = args[at], last[0]
            if seen is not None and seen[0] is v:
                bits = seen[1]
            else:
                bits = weak_scalar_bits(v, info)
                last[0] = (v, bits)
            ptr = rt.constant(bits, info.itemsize, s.ordinal) if bits is not None else 0
            return (ptr,) if ptr else None
        return one
    bits_of = call.reuse_last(lambda values: [weak_scalar_bits(v, info) for v, info in zip(values, infos)])

    def numbers(args, s):
        ptrs = []
        for bits, info in zip(bits_of([args[i] for i in numbers_at]), infos):
            ptr = rt.constant(bits, info.itemsize, s.ordinal) if bits is not None else 0
            if not ptr:
                return None
            ptrs.append(ptr)
        return ptrs
    return numbers


@binder("map")
def bind_map(op: library.Op):
    return {op.name: MapOp(op).function()}
