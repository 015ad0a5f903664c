"""The C ABI of libew.so in one place: entry-point symbols, argument kinds and their C types, and
the prototypes that ew.h declares and the generated sources define.

An entry point's arguments are (name, kind) pairs; the kind is what the manifest records and what
pyew's loader maps to a ctypes type. This module holds the only mapping from a kind (and from a
spec param's type) to C, so a declaration and its definition are always spelled alike.
"""
from __future__ import annotations

from dataclasses import dataclass

# ABI argument kind -> C type.
C_TYPES = {
    "out": "void*",          # device pointer the entry point writes
    "in": "const void*",     # device pointer it only reads
    "i64": "int64_t",
    "f64": "double",
    "i32": "int",
    "u64": "uint64_t",
    "stream": "void*",       # a cudaStream_t
    "layout": "const int64_t*",  # host array: [ndim, shape..., each input's element strides...]
}

# A spec param's type -> the ABI kind that carries it (floats as double, ints as int64_t).
PARAM_KINDS = {"float": "f64", "int": "i64"}

# The launch context every generated entry point takes last: stream, SM count, threads per SM.
LAUNCH = (("stream", "stream"), ("sms", "i32"), ("threads_per_sm", "i32"))


@dataclass(frozen=True)
class Function:
    """A C function of the library: what ew.h declares."""
    symbol: str
    args: tuple[tuple[str, str], ...]      # (name, ABI kind)
    returns: str = "int"                   # C return type; entry points return a cudaError_t value


# The hand-written functions every library exports next to the generated entry points.
RUNTIME = (
    Function("ew_abi_version", (), "int"),
    Function("ew_manifest", (), "const char*"),
    Function("ew_error_name", (("code", "i32"),), "const char*"),
    Function("ew_fill", (("out", "out"), ("n", "i64"), ("itemsize", "i32"), ("bits", "u64")) + LAUNCH),
    Function("ew_event_synchronize", (("event", "stream"),)),
    Function("ew_stream_synchronize", (("stream", "stream"),)),
)


def symbol(op: str, dtype, role: str = "", *, variant: str = "", index: str = "") -> str:
    """The procedural name of an entry point: ew_[<variant>_]<op>[_<role>]_<dtype token>[_<index>].

    The forward entry of an op is plain ew_<op>_<token> (also the name of its generated .cu);
    `variant` names a second implementation of the same function (the naive baseline), `role` a
    further function of the op (backward, a dot method, a check), `index` an index dtype token.
    """
    parts = ["ew"]
    if variant:
        parts.append(variant)
    parts.append(op)
    if role:
        parts.append(role)
    parts.append(dtype.token)
    if index:
        parts.append(index)
    return "_".join(parts)


# The member of ew_arg (libew/ew_api.h) each kind travels in, in an entry's packed twin.
ARG_MEMBER = {"out": "p", "in": "p", "stream": "p", "layout": "p", "i64": "i", "i32": "i", "u64": "u", "f64": "f"}


def packed_symbol(symbol_: str) -> str:
    """The packed twin of an entry point: `int <symbol>_packed(const ew_arg* args)`, the same call
    with the arguments in an array, for callers that cannot spell each signature (pyew's C
    extension). No procedural name ends in `_packed`: the last part is a dtype or index token."""
    return symbol_ + "_packed"


def packed_head(fn) -> str:
    return f"EW_API int {packed_symbol(fn.symbol)}(const ew_arg* args)"


def packed_call(fn) -> str:
    """The packed twin's body: the entry called with each argument cast back to its C type."""
    parts = [f"({C_TYPES[kind]})args[{i}].{ARG_MEMBER[kind]}" for i, (_, kind) in enumerate(fn.args)]
    return f"return {fn.symbol}({', '.join(parts)});"


def param_kind(param) -> str:
    """The ABI kind of a spec param (a generator.spec.Param)."""
    return PARAM_KINDS[param.type]


def c_type(kind: str) -> str:
    return C_TYPES[kind]


def parameters(args) -> str:
    """The C parameter list of (name, kind) pairs; `void` when there are none."""
    return ", ".join(f"{C_TYPES[kind]} {name}" for name, kind in args) or "void"


def head(fn) -> str:
    """`EW_API <ret> <symbol>(<params>)`: the start of a definition, or with ';' a declaration.
    `fn` is a Function or an op kind's Entry (both have symbol and args)."""
    return f"EW_API {getattr(fn, 'returns', 'int')} {fn.symbol}({parameters(fn.args)})"


def declaration(fn) -> str:
    return head(fn) + ";"
