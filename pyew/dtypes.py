"""The dtype table: one row per element type pyew knows.

Both the generator (C++ spelling, procedural name token) and the runtime (numpy dtype) read this
one table, so a dtype is described in one place.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


# eq=False: rows are singletons, compared and hashed by identity (a field-wise hash per dict
# lookup would cost every op call)
@dataclass(frozen=True, eq=False)
class DType:
    name: str            # numpy-style name, used in specs and in the Python API
    token: str           # procedural-name token: ew_<op>_<token>
    ctype: str           # C++ storage type
    compute: str         # C++ type the spec's expression is evaluated in
    pair: str | None     # C++ type holding two elements (OneFlow's Apply2 form), if any
    itemsize: int
    kind: str            # "float", "int" or "bool"

    @cached_property
    def np(self) -> np.dtype:
        if self.name == "bfloat16":
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.name)


TABLE: tuple[DType, ...] = (
    DType("float32", "f32", "float", "float", "float2", 4, "float"),
    DType("float64", "f64", "double", "double", "double2", 8, "float"),
    DType("float16", "f16", "__half", "float", "__half2", 2, "float"),
    DType("bfloat16", "bf16", "__nv_bfloat16", "float", "__nv_bfloat162", 2, "float"),
    DType("int32", "i32", "int32_t", "int32_t", None, 4, "int"),
    DType("int64", "i64", "int64_t", "int64_t", None, 8, "int"),
    # numpy's bool_: one byte holding 0 or 1 (C++ bool; its compute type too). Comparisons and the
    # is* ops return it, where's condition takes it; arithmetic on it is numpy's (add is or).
    DType("bool", "bool", "bool", "bool", None, 1, "bool"),
    # The word type of relu_mask's packed bitmask, so masks are ordinary arrays (asarray, get,
    # out=). It is in no group and in no op kind's dtype list: no kernel is built for it.
    DType("uint32", "u32", "uint32_t", "uint32_t", None, 4, "int"),
    # Storage dtypes of data as it comes (images, audio): arrays of them go in and out, and the
    # casts convert from them on the GPU, so an op takes them in the smallest kernel they cast to
    # safely (uint8 + uint8 runs in int32, sigmoid of uint8 in float16). No group holds them.
    DType("int8", "i8", "int8_t", "int32_t", None, 1, "int"),
    DType("uint8", "u8", "uint8_t", "int32_t", None, 1, "int"),
    DType("int16", "i16", "int16_t", "int32_t", None, 2, "int"),
    DType("uint16", "u16", "uint16_t", "int32_t", None, 2, "int"),
)

BY_NAME: dict[str, DType] = {d.name: d for d in TABLE}
BY_TOKEN: dict[str, DType] = {d.token: d for d in TABLE}

# Named groups a spec may use in place of a dtype list.
GROUPS: dict[str, tuple[str, ...]] = {
    "float": ("float32", "float64", "float16", "bfloat16"),
    "half": ("float16", "bfloat16"),
    "int": ("int32", "int64"),
}


_BY_NP: dict = {}      # numpy dtype -> row, filled on first lookup (bfloat16 needs ml_dtypes)


def lookup(dtype) -> DType:
    """The table row for a numpy dtype, a dtype name or a DType; KeyError if pyew lacks it."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str) and dtype in BY_NAME:
        return BY_NAME[dtype]
    try:
        return _BY_NP[dtype]
    except (KeyError, TypeError):
        pass
    npd = np.dtype(dtype)
    for d in TABLE:
        if d.np == npd:
            try:
                _BY_NP[dtype] = d
            except TypeError:       # an unhashable dtype spec
                pass
            _BY_NP[npd] = d
            return d
    raise KeyError(str(npd))


def unsupported_hint(dtype) -> str:
    """What to do about a numpy dtype pyew lacks, where something can be done: byte-swapped data
    (from a file or another machine) converts to the native order."""
    try:
        npd = np.dtype(dtype)
    except TypeError:
        return ""
    if not npd.isnative:
        native = npd.newbyteorder("=")
        then = "" if native.name in BY_NAME else unsupported_hint(native).replace("; convert it first", ", then")
        if native.name not in BY_NAME and not then:
            return ""           # >c8: swapping its bytes would not help
        return f"; it is byte-swapped: pass a.astype(a.dtype.newbyteorder('=')) for {native.name}{then}"
    if npd == np.uint64:
        return "; convert it first: a.astype(np.int64) where its values are below 2**63, else np.float64 (rounded)"
    for to in ("int32", "int64", "float32", "float64"):     # the narrowest that holds every value
        if npd.kind in "biuf" and np.can_cast(npd, to, "safe"):
            return f"; convert it first: a.astype(np.{to})"
    return ""
