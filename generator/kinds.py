"""Op kinds: what a spec entry of each kind may say, which template renders it, and the C ABI of
the entry points it produces. `map` is the plain elementwise op; the others are the seeds' special
kernels. The ABI argument kinds are read back by pyew's loader to declare ctypes argtypes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

FLOATS = ("float32", "float64", "float16", "bfloat16")
ALL = FLOATS + ("int32", "int64")

# The launch context every entry point takes last: stream, SM count, threads per SM.
LAUNCH = (("stream", "stream"), ("sms", "i32"), ("threads_per_sm", "i32"))


@dataclass(frozen=True)
class Entry:
    role: str                       # "forward", "backward", a dot method, an index dtype ...
    symbol: str
    args: tuple[tuple[str, str], ...]   # (name, abi kind): out/in pointers, i64, f64, stream, i32


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


def _map_entries(op, d):
    args = (("out", "out"),) + tuple((i, "in") for i in op.inputs) + (("n", "i64"),)
    args += tuple((p.name, "f64" if p.type == "float" else "i64") for p in op.params)
    # forward first: pyew binds entries[0]. "naive" is the seeds' one-element-per-thread kernel of
    # the same expression, built only so the benchmark can show what the template gains over it.
    return [Entry("forward", f"ew_{op.name}_{d.token}", args + LAUNCH),
            Entry("naive", f"ew_naive_{op.name}_{d.token}", args + LAUNCH)]


def _relu_mask_entries(op, d):
    args = (("y", "out"), ("mask", "out")) + tuple((i, "in") for i in op.inputs) + (("n", "i64"),)
    return [Entry("forward", f"ew_{op.name}_{d.token}", args + LAUNCH)]


def _mask_backward_entries(op, d):
    args = (("dx", "out"), ("dy", "in"), ("mask", "in"), ("n", "i64"))
    return [Entry("forward", f"ew_{op.name}_{d.token}", args + LAUNCH)]


def _upsample_entries(op, d):
    shape = (("nc", "i64"), ("h", "i64"), ("w", "i64"), ("oh", "i64"), ("ow", "i64"))
    return [
        Entry("forward", f"ew_{op.name}_{d.token}", (("y", "out"), ("x", "in")) + shape + LAUNCH),
        Entry("backward", f"ew_{op.name}_backward_{d.token}", (("dx", "out"), ("dy", "in")) + shape + LAUNCH),
    ]


DOT_METHODS = {"float32": ("fast",), "float64": ("fast",),
               "float16": ("fast", "half_atomic", "half2_pack"),
               "bfloat16": ("fast", "half_atomic", "half2_pack")}


def _dot_entries(op, d):
    # result: one element of the dtype; work: 2 float32 scratch words (zeroed by the entry point)
    args = (("result", "out"), ("work", "out"), ("a", "in"), ("b", "in"), ("n", "i64")) + LAUNCH
    return [Entry(m, f"ew_{op.name}_{m}_{d.token}", args) for m in DOT_METHODS[d.name]]


def _scatter_entries(op, d):
    args = (("dst", "out"), ("dst_len", "i64"), ("index", "in"), ("src", "in"), ("n", "i64")) + LAUNCH
    check = (("bad", "out"), ("index", "in"), ("n", "i64"), ("dst_len", "i64")) + LAUNCH
    out = []
    for tok in ("i32", "i64"):
        out.append(Entry(f"index_{tok}", f"ew_{op.name}_{d.token}_{tok}", args))
        # bounds check run before any write, so a bad index leaves dst untouched
        out.append(Entry(f"check_{tok}", f"ew_{op.name}_check_{d.token}_{tok}", check))
    return out


_COMMON = frozenset({"doc", "dtypes"})
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("map", "map.cu.mako", frozenset({"inputs", "dtypes", "expr", "ref", "doc"}),
         _COMMON | {"inputs", "expr", "ref", "params", "pair", "out", "rtol", "tuning"}, ALL, 1, 8, ("x",), _map_entries),
    Kind("relu_mask", "relu_mask.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON | {"inputs"}, FLOATS, 1, 2, ("x",), _relu_mask_entries),
    Kind("mask_backward", "mask_backward.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON, FLOATS, 1, 1, ("dy",), _mask_backward_entries),
    Kind("upsample_nearest2d", "upsample_nearest2d.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON, FLOATS, 1, 1, ("x",), _upsample_entries),
    Kind("dot", "dot.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON, ("float32", "float16", "bfloat16", "float64"), 2, 2, ("a", "b"), _dot_entries),
    Kind("scatter_add", "scatter_add.cu.mako", frozenset({"dtypes", "doc"}),
         _COMMON, ("float32", "float16", "bfloat16", "float64"), 1, 1, ("src",), _scatter_entries),
)}
