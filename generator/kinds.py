"""Op kinds: what a spec entry of each kind may say, which template renders it, and the C ABI of
the entry points it produces. `map` is the plain elementwise op; the others are the special
kernels (relu with a bitmask, nearest upsampling, dot, scatter_add). The ABI argument kinds are
read back by pyew's loader to declare ctypes argtypes.

A kind's `bench_entries` are kernels only the benchmark compares libew's with (a map op's naive
one-element-per-thread twin, dot's per-thread atomic methods): they go into the benchmark library
(build/libew_bench.so, `make bench`), never into libew.so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .abi import LAUNCH, param_kind, symbol

FLOATS = ("float32", "float64", "float16", "bfloat16")
ALL = FLOATS + ("int32", "int64", "bool", "int8", "uint8", "int16", "uint16")


@dataclass(frozen=True)
class Entry:
    role: str                       # "forward", "backward", a dot method, an index dtype ...
    symbol: str
    args: tuple[tuple[str, str], ...]   # (name, ABI kind); generator/abi.py maps kinds to C types


@dataclass(frozen=True)
class Kind:
    name: str
    template: str
    required: frozenset
    allowed: frozenset
    dtypes: tuple[str, ...]
    min_inputs: int
    max_inputs: int
    default_inputs: tuple[str, ...]
    entries: Callable
    # the Python functions pyew binds for an op of this kind, from its name (pyew/kinds/)
    functions: Callable = lambda name: (name,)
    bench_entries: Callable = lambda op, d: []


def _map_args(op):
    args = (("out", "out"),) + tuple((i, "in") for i in op.inputs) + (("n", "i64"),)
    return args + tuple((p.name, param_kind(p)) for p in op.params)


def _map_entries(op, d):
    # "strided" takes numpy broadcasting and strided inputs (a layout of shape and strides)
    return [Entry("forward", symbol(op.name, d), _map_args(op) + LAUNCH),
            Entry("strided", symbol(op.name, d, "strided"), _map_args(op) + (("layout", "layout"),) + LAUNCH)]


def _map_bench_entries(op, d):
    # the one-element-per-thread kernel of the same expression: what the vectorised template gains
    return [Entry("naive", symbol(op.name, d, variant="naive"), _map_args(op) + LAUNCH)]


def _relu_mask_entries(op, d):
    args = (("y", "out"), ("mask", "out")) + tuple((i, "in") for i in op.inputs) + (("n", "i64"),)
    return [Entry("forward", symbol(op.name, d), args + LAUNCH)]


def _mask_backward_entries(op, d):
    args = (("dx", "out"), ("dy", "in"), ("mask", "in"), ("n", "i64"))
    return [Entry("forward", symbol(op.name, d), args + LAUNCH)]


def _upsample_entries(op, d):
    shape = (("nc", "i64"), ("h", "i64"), ("w", "i64"), ("oh", "i64"), ("ow", "i64"))
    return [
        Entry("forward", symbol(op.name, d), (("y", "out"), ("x", "in")) + shape + LAUNCH),
        Entry("backward", symbol(op.name, d, "backward"), (("dx", "out"), ("dy", "in")) + shape + LAUNCH),
    ]


# result: one element of the dtype; work: 2 float32 scratch words (zeroed by the entry point)
_DOT_ARGS = (("result", "out"), ("work", "out"), ("a", "in"), ("b", "in"), ("n", "i64")) + LAUNCH


def _dot_entries(op, d):
    return [Entry("fast", symbol(op.name, d, "fast"), _DOT_ARGS)]


def _dot_bench_entries(op, d):
    # per-thread 16-bit atomics, plain and paired (FastAtomicAdd): what one atomic per block gains
    methods = ("half_atomic", "half2_pack") if d.name in ("float16", "bfloat16") else ()
    return [Entry(m, symbol(op.name, d, m), _DOT_ARGS) for m in methods]


def _scatter_entries(op, d):
    args = (("dst", "out"), ("dst_len", "i64"), ("index", "in"), ("src", "in"), ("n", "i64")) + LAUNCH
    check = (("bad", "out"), ("index", "in"), ("n", "i64"), ("dst_len", "i64")) + LAUNCH
    out = []
    for tok in ("i32", "i64"):
        out.append(Entry(f"index_{tok}", symbol(op.name, d, index=tok), args))
        # bounds check run before any write, so a bad index leaves dst untouched
        out.append(Entry(f"check_{tok}", symbol(op.name, d, "check", index=tok), check))
    return out


_COMMON = frozenset({"doc", "dtypes"})
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("map", "map.cu.mako", frozenset({"inputs", "dtypes", "expr", "ref", "doc"}),
         _COMMON | {"inputs", "expr", "ref", "params", "pair", "out", "rtol", "tuning", "ufunc", "fixed", "ulp",
                    "launch"}, ALL, 1, 8, ("x",),
         _map_entries, bench_entries=_map_bench_entries),
    Kind("relu_mask", "relu_mask.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON | {"inputs"}, FLOATS, 1, 2, ("x",), _relu_mask_entries),
    Kind("mask_backward", "mask_backward.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON, FLOATS, 1, 1, ("dy",), _mask_backward_entries),
    Kind("upsample_nearest2d", "upsample_nearest2d.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON, FLOATS, 1, 1, ("x",), _upsample_entries, lambda name: (name, f"{name}_backward")),
    Kind("dot", "dot.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON, ("float32", "float16", "bfloat16", "float64"), 2, 2, ("a", "b"), _dot_entries,
         bench_entries=_dot_bench_entries),
    Kind("scatter_add", "scatter_add.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON, ("float32", "float16", "bfloat16", "float64"), 1, 1, ("src",), _scatter_entries),
)}
