"""Which names a spec may give its ops, inputs and params.

An op becomes a Python function pyew.<op>, a C++ function object ewf::<op>_fn and, inside the
expressions that call it, a local named <op>; inputs and params become C++ parameters of the
generated functions and names in the numpy reference. A name that collides with any of these
scopes would only fail later, in nvcc or at import, so the spec parser refuses it up front.

This module is imported before anything else of generator/ imports pyew, so that when it is the
one to import pyew (a generator run), pyew's namespace is seen as `import pyew` leaves it: pyew
binds ops as module attributes lazily, on first use, so a pyew that has run ops (a test process)
holds op names too, and the names are then read from a fresh interpreter instead.
"""
from __future__ import annotations

import functools
import json
import keyword
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

_PYEW_WAS_IMPORTED = "pyew" in sys.modules
import pyew  # noqa: E402

_FRESH_VARS = None if _PYEW_WAS_IMPORTED else frozenset(vars(pyew))

MAX_NAME = 64
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Every identifier the generated sources declare themselves starts with this (case-insensitively:
# the macros are EW_...), so no spec name may: ew_map_fn, ew_f, ew_param_<name>, EW_API, ...
RESERVED_PREFIX = "ew_"
LIBRARY_PREFIX = "libew_"             # build/obj/libew_<file>.o: libew's own sources (Makefile)
MACRO_LIKE = re.compile(r"[A-Z][A-Z0-9_]+")     # upper case, as the C headers' macros are

CPP_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
    nullptr operator or or_eq private protected public register reinterpret_cast requires return
    short signed sizeof static static_assert static_cast struct switch template this thread_local
    throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
    xor xor_eq
""".split())

CUDA_BUILTINS = frozenset("threadIdx blockIdx blockDim gridDim warpSize".split())

# Type names the generated sources spell unqualified (and their usual relatives): a parameter of
# that name would hide the type in the rest of the parameter list.
TYPE_NAMES = frozenset(
    "int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t intmax_t "
    "uintmax_t size_t ssize_t ptrdiff_t nullptr_t max_align_t std half half2 nv_bfloat16 "
    "nv_bfloat162 dim3 cudaStream_t cudaError_t".split()
    + [f"{b}{n}" for b in ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong",
                           "longlong", "ulonglong", "float", "double") for n in (1, 2, 3, 4)])

# Names of the expression language: C (compute type) and R (result type) are the template
# parameters an expression sees, ew is libew's namespace, ewf the namespace of op functions.
EXPR_NAMES = frozenset({"C", "R", "ew", "ewf"})

# Names the numpy reference (`ref`) is evaluated with, besides the inputs and params.
REF_NAMES = frozenset({"np", "erf", "erfc", "sigmoid"})

# Keywords every pyew op call takes besides its params.
CALL_KEYWORDS = frozenset({"out", "stream"})


def _module_names(path) -> set[str]:
    """Names of pyew's own modules and subpackages, found without importing any of them. Only
    these become attributes of pyew (pyew.bench); pyew.bench.cli is an attribute of pyew.bench."""
    return {info.name for info in pkgutil.iter_modules(path)}


def _vars_of_fresh_pyew() -> frozenset[str]:
    if _FRESH_VARS is not None:
        return _FRESH_VARS
    code = "import json, pyew; print(json.dumps(sorted(vars(pyew))))"
    root = str(Path(pyew.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root)
    if r.returncode != 0:
        raise RuntimeError(f"cannot list pyew's names: `import pyew` failed:\n{r.stderr}")
    return frozenset(json.loads(r.stdout))


@functools.cache
def pyew_names() -> frozenset[str]:
    """Names an op may not take because pyew itself uses them: every attribute of a freshly
    imported pyew, and the name of every module and subpackage inside it."""
    return _vars_of_fresh_pyew() | frozenset(_module_names(pyew.__path__))


def problem(name: str, what: str) -> str | None:
    """Why `name` is no good as any spec name (op, input, param), or None."""
    if not isinstance(name, str) or not IDENT.fullmatch(name):
        return f"{what} {show(name)} is not a C identifier"
    if len(name) > MAX_NAME:
        return f"{what} {show(name)} is {len(name)} characters long; at most {MAX_NAME}"
    if name.startswith("_"):
        return f"{what} {name!r} starts with '_' (reserved in C++ and for pyew's own names)"
    if name.lower().startswith(RESERVED_PREFIX):
        return f"{what} {name!r} starts with {RESERVED_PREFIX!r}, which the generated code reserves for itself"
    if name.lower().startswith(LIBRARY_PREFIX):
        return f"{what} {name!r} starts with {LIBRARY_PREFIX!r}, which names the library's own objects in the build"
    if MACRO_LIKE.fullmatch(name):
        return (f"{what} {name!r} reads as a C macro (NULL, INFINITY, M_PI, INT_MAX ... are macros of the headers "
                "the kernels include); use lower case")
    if name in CPP_KEYWORDS or keyword.iskeyword(name):
        return f"{what} {name!r} is a C++ or Python keyword"
    if name in CUDA_BUILTINS:
        return f"{what} {name!r} is a CUDA built-in variable"
    if name in TYPE_NAMES:
        return f"{what} {name!r} is a C/C++/CUDA type name"
    if name in EXPR_NAMES:
        return f"{what} {name!r} is a name of the expression language (C, R, ew, ewf)"
    return None


def show(value, limit: int = 60) -> str:
    """repr(value) for an error message: one line, cut short when long."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, (str, bytes, list, dict)) else ""
    return text[:limit] + "..." + size
