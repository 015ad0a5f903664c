"""The one place that finds, checks and declares libew.so, and reads its op table.

Order: $PYEW_LIB, then build/libew.so of the checkout this package sits in, then the copy a wheel
ships inside the package (pyew/_lib/libew.so). The library's ABI version must match; its
embedded op table (the manifest) is parsed once into the frozen dataclasses below, which the rest
of pyew uses; if a spec file it was built from has changed since, the library is refused as
stale.

Entry points are called through pyew's C extension (_ewcall.abi3.so, built beside libew.so),
which calls each entry's packed twin and costs a fraction of a ctypes call; where it was not
built (no Python headers) or cannot load, or PYEW_CTYPES=1 is set, each entry is declared to
ctypes from the manifest instead. Either way an entry is called as fn(*args) and returns the
cudaError_t value.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import dtypes as dt
from . import runtime as rt
from .errors import CudaError, LibraryError

ABI_VERSION = 3
_PACKAGE = Path(__file__).resolve().parent
_REPO = _PACKAGE.parent
BUNDLED = _PACKAGE / "_lib" / "libew.so"
# C type of each argument kind of the ABI (generator/ writes the kinds into the manifest).
ABI_CTYPES = {"out": ctypes.c_void_p, "in": ctypes.c_void_p, "stream": ctypes.c_void_p,
              "i64": ctypes.c_int64, "f64": ctypes.c_double, "i32": ctypes.c_int,
              "layout": ctypes.c_void_p, "u64": ctypes.c_uint64}
# Argument kind -> the C extension's conversion code (pyew/_ewcall.c).
_EXT_CODES = {"out": "p", "in": "p", "stream": "p", "layout": "p", "i64": "l", "f64": "d", "i32": "i", "u64": "u"}
_DEFAULT_BUILD = "make all"
# a process keeps the library it loaded (the dynamic loader hands the same copy back)
_RESTART = ", then start Python again"
EXTENSION = "_ewcall.abi3.so"      # built beside libew.so by the Makefile


def load_extension(folder: Path):
    """pyew's C extension from `folder`, or (None, why not)."""
    flag = os.environ.get("PYEW_CTYPES", "")
    if flag not in ("", "0", "1"):
        raise LibraryError(f"PYEW_CTYPES={flag!r}: set it to 1 to call libew through ctypes, or to 0 (or leave "
                           "it unset) for pyew's C extension")
    if flag == "1":
        return None, "PYEW_CTYPES is set"
    if ".abi3.so" not in importlib.machinery.EXTENSION_SUFFIXES or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None, "this Python does not load stable-ABI extensions (a free-threaded build)"
    path = folder / EXTENSION
    if not path.exists():
        return None, f"no {path} (built only where the Python headers are installed)"
    try:
        loader = importlib.machinery.ExtensionFileLoader("pyew._ewcall", str(path))
        spec = importlib.util.spec_from_file_location("pyew._ewcall", path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (ImportError, OSError) as e:
        return None, f"cannot load {path}: {e}"
    return module, str(path)


def library_path() -> Path:
    env = os.environ.get("PYEW_LIB")
    if env:
        # resolved now: dlopen would search the library path for a bare file name
        return Path(env).expanduser().resolve()
    checkout = _REPO / "build" / "libew.so"
    if checkout.exists() or not BUNDLED.exists():
        return checkout
    return BUNDLED


# ---- the manifest, parsed ----------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    name: str
    type: str                       # "float" or "int"
    default: float | int | None     # None: the caller must pass it


@dataclass(frozen=True, eq=False)
class Entry:
    role: str                       # "forward", "naive", "backward", a dot method, ...
    symbol: str
    args: tuple[tuple[str, str], ...]
    fn: object = field(repr=False)  # the declared ctypes function


@dataclass(frozen=True, eq=False)
class Kernel:
    dtype: dt.DType
    out_dtype: dt.DType
    paired: bool
    entries: tuple[Entry, ...]
    # each input's dtype: `dtype`, except an input the op fixes (where's condition: bool)
    in_dtypes: tuple[dt.DType, ...] = ()

    def entry(self, role: str) -> Entry | None:
        for e in self.entries:
            if e.role == role:
                return e
        return None


@dataclass(frozen=True, eq=False)
class Op:
    name: str
    kind: str
    inputs: tuple[str, ...]
    params: tuple[Param, ...]
    doc: str
    ref: str
    out: str | None
    source: str
    rtol: float | None
    tuning: str | None
    kernels: tuple[Kernel, ...]
    # the numpy ufunc the op implements where its name differs (sub: "subtract"), else None; a numpy
    # ufunc maps to the op whose `ufunc` is its __name__, else to the op of that name
    ufunc: str | None = None
    # input name -> the dtype that input always has (where: {"condition": bool}); {} for most ops
    fixed: dict = field(default_factory=dict)
    ulp: int | None = None          # float32 accuracy the tests check, in ulp; None: rtol
    launch: str | None = None       # map ops: "tuned" or "basic" (the contiguous entry's kernels)
    call_tuning: str | None = None  # map ops: the shape a call of it asks of a fused formula
    by_dtype: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "by_dtype", {k.dtype: k for k in self.kernels})

    def kernel(self, dtype: dt.DType) -> Kernel | None:
        return self.by_dtype.get(dtype)

    @property
    def dtypes(self) -> tuple[dt.DType, ...]:
        return tuple(k.dtype for k in self.kernels)


@dataclass(frozen=True)
class SpecFile:
    path: str           # as recorded: relative to the checkout, or absolute
    sha256: str


@dataclass(frozen=True, eq=False)
class Manifest:
    abi: int
    spec_files: tuple[SpecFile, ...]
    build_command: str
    ops: tuple[Op, ...]
    raw: dict = field(repr=False)
    _by_name: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # cast lookups happen per streamed block of a mixed-dtype call: a dict, not a scan
        object.__setattr__(self, "_by_name", {o.name: o for o in self.ops})

    def op(self, name: str) -> Op | None:
        return self._by_name.get(name)


def op_of(o: dict, bind=None) -> Op:
    """An Op from its manifest row. bind(entry, args) makes an entry point callable; without it the
    op has no entry points (the ops of spec files loaded at run time, which run as fused formulas)."""
    kernels = []
    for k in o["kernels"]:
        entries = []
        for e in k["entries"] if bind is not None else ():
            args = tuple((str(a), str(kind)) for a, kind in e["args"])
            unknown = [kind for _, kind in args if kind not in ABI_CTYPES]
            if unknown:
                raise ValueError(f"entry {e['symbol']} has argument kind(s) {unknown} this pyew does not know")
            entries.append(Entry(e["role"], e["symbol"], args, bind(e, args)))
        info = dt.BY_NAME[k["dtype"]]
        ins = tuple(dt.BY_NAME[d] for d in k["in_dtypes"]) if "in_dtypes" in k else (info,) * len(o["inputs"])
        if len(ins) != len(o["inputs"]):
            raise ValueError(f"kernel {info.name} of op {o['name']} lists {len(ins)} input dtypes for "
                             f"{len(o['inputs'])} inputs")
        kernels.append(Kernel(info, dt.BY_NAME[k["out_dtype"]], bool(k.get("paired")), tuple(entries), ins))
    params = tuple(Param(p["name"], p["type"], p["default"]) for p in o["params"])
    fixed = {str(name): dt.BY_NAME[d] for name, d in (o.get("fixed") or {}).items()}
    return Op(o["name"], o["kind"], tuple(o["inputs"]), params, o.get("doc", ""), o.get("ref", ""),
              o.get("out"), o.get("source", ""), o.get("rtol"), o.get("tuning"), tuple(kernels),
              o.get("ufunc"), fixed, o.get("ulp"), o.get("launch"), o.get("call_tuning", o.get("tuning")))


class Library:
    def __init__(self, path: Path):
        self.path = path
        if not path.exists():
            where = f"{path}" if os.environ.get("PYEW_LIB") else f"{path} (nor a bundled {BUNDLED})"
            raise LibraryError(f"libew not found at {where}: run `make all` in the pyew checkout, "
                               "or set PYEW_LIB to a built libew.so")
        try:
            self.cdll = ctypes.CDLL(str(path))
        except OSError as e:
            raise LibraryError(f"cannot load {path}: {e}; run `make all` in the pyew checkout") from None
        for sym in ("ew_abi_version", "ew_manifest"):
            if not hasattr(self.cdll, sym):
                raise LibraryError(f"{path} is not a libew library (no {sym}); run `make all` in the "
                                   "pyew checkout, or set PYEW_LIB to a built libew.so")
        self.cdll.ew_abi_version.restype = ctypes.c_int
        self.cdll.ew_abi_version.argtypes = []
        self.cdll.ew_manifest.restype = ctypes.c_char_p
        self.cdll.ew_manifest.argtypes = []
        abi = self.cdll.ew_abi_version()
        try:
            raw = json.loads(self.cdll.ew_manifest().decode("utf-8"))
            if not isinstance(raw, dict):
                raise ValueError(f"a JSON {type(raw).__name__}, not an object")
        except (ValueError, UnicodeDecodeError) as e:
            raw = None
            why = e
        self.build_command = (raw or {}).get("build_command") or _DEFAULT_BUILD
        if abi != ABI_VERSION:
            raise LibraryError(f"{path} has ABI version {abi}, this pyew needs {ABI_VERSION}; "
                               f"rebuild it: {self.build_command}{_RESTART}")
        if raw is None:
            raise LibraryError(f"{path} holds an unreadable manifest ({why}); rebuild it: {self.build_command}"
                               f"{_RESTART}")
        # the checkout it was built in (recorded by the generator; else the folder above its build
        # folder); a library a wheel bundles stands alone: nothing beside it is compared
        root = raw.get("root")
        here = path.resolve()
        self.bundled = here == BUNDLED.resolve()
        # the checkout is the recorded one where the library still lies inside it (BUILD=build/a100);
        # a copy elsewhere (PYEW_LIB=/opt/old/libew.so) is compared only with what lies beside it
        inside = bool(root) and not self.bundled and (Path(root) / "libew").is_dir() and here.is_relative_to(root)
        self.checkout = Path(root) if inside else path.parent.parent
        if not self.bundled:
            self._check_fresh(raw)
        self.ext, self.calls_note = load_extension(path.parent)
        self._declare("ew_error_name", [ctypes.c_int]).restype = ctypes.c_char_p
        self.fill = self._declare("ew_fill", [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_uint64,
                                              ctypes.c_void_p, ctypes.c_int, ctypes.c_int])
        self.manifest = self._parse(raw)
        self._bind_jit()
        # staging copies split over libew's spinning workers (libew/host_copy.cu); ctypes lets go
        # of the GIL while they run
        self.host_copy = self._declare("ew_host_copy", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                        ctypes.c_int])
        self.host_copy_begin = self._declare("ew_host_copy_begin", [ctypes.c_void_p, ctypes.c_void_p,
                                                                    ctypes.c_int64, ctypes.c_int, ctypes.c_int])
        self.host_copy_ready = self._declare("ew_host_copy_ready", [ctypes.c_int64])
        self.host_copy_ready.restype = ctypes.c_int64
        self.host_copy_finish = self._declare("ew_host_copy_finish", [])
        self.host_copy_finish.restype = ctypes.c_int64
        self.host_copy_wake = self._declare("ew_host_copy_wake", [ctypes.c_int])
        # cuda-python may hold the GIL in blocking waits; these ctypes calls never do
        ev_sync = self._declare("ew_event_synchronize", [ctypes.c_void_p])
        st_sync = self._declare("ew_stream_synchronize", [ctypes.c_void_p])
        rt.use_blocking_waits(lambda ev: ev_sync(int(ev)), lambda st: st_sync(int(st)))

    def _bind_jit(self):
        """The entry points of run-time compiled kernels (libew/jit.cu), for pyew/jit.py."""
        load = self._declare("ew_jit_load", [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)])
        self.jit_slot_count = self._declare("ew_jit_slots", [])()
        args = (("kernels", "layout"), ("tuning", "i32"), ("fn", "layout"), ("n", "i64"), ("out", "out"),
                ("ins", "layout"), ("k", "i32"), ("out_size", "i32"), ("in_sizes", "layout"), ("layout", "layout"),
                ("overlap", "i32"), ("need", "layout"), ("stream", "stream"), ("sms", "i32"), ("threads_per_sm", "i32"))
        self.jit_map = self._bind({"symbol": "ew_jit_map", "packed": "ew_jit_map_packed"}, args)

        def jit_load(image: bytes, name: str) -> int:
            handle = ctypes.c_void_p()
            self.check(load(image, name.encode(), ctypes.byref(handle)), f"loading the kernel {name}")
            return handle.value
        self.jit_load = jit_load

    def _declare(self, symbol, argtypes):
        try:
            f = getattr(self.cdll, symbol)
        except AttributeError:
            raise LibraryError(f"{self.path} lacks {symbol}, which its own manifest lists; "
                               f"rebuild it: {self.build_command}") from None
        f.argtypes = argtypes
        f.restype = ctypes.c_int
        return f

    def _bind(self, entry: dict, args):
        """An entry point as a Python callable: its packed twin through the C extension when
        both are there and the extension takes its arguments, else the entry itself through ctypes."""
        packed = entry.get("packed")
        if self.ext is not None and packed:
            try:
                address = ctypes.cast(getattr(self.cdll, packed), ctypes.c_void_p).value
            except AttributeError:
                raise LibraryError(f"{self.path} lacks {packed}, which its own manifest lists; "
                                   f"rebuild it: {self.build_command}") from None
            try:
                return self.ext.bind(address, "".join(_EXT_CODES[kind] for _, kind in args), entry["symbol"])
            except ValueError:      # more arguments than the extension takes (a spec with many params)
                pass
        return self._declare(entry["symbol"], [ABI_CTYPES[kind] for _, kind in args])

    def _parse(self, raw: dict) -> Manifest:
        try:
            ops = tuple(self._op(o) for o in raw["ops"])
            files = tuple(SpecFile(f["path"], f["sha256"]) for f in raw.get("spec_files", ()))
        except (KeyError, TypeError, ValueError) as e:
            raise LibraryError(f"{self.path} has a manifest this pyew cannot read ({type(e).__name__}: {e}); "
                               f"rebuild it: {self.build_command}") from None
        return Manifest(int(raw["abi"]), files, self.build_command, ops, raw)

    def _op(self, o: dict) -> Op:
        return op_of(o, self._bind)

    def spec_path(self, recorded: str) -> Path:
        """Where a spec file the library was built from lies now: a relative path is taken from the
        checkout the library was built in (the folder above its build folder)."""
        p = Path(recorded)
        return p if p.is_absolute() else self.checkout / p

    def _check_fresh(self, raw: dict):
        """The spec files and sources (libew's headers, the generator's templates) the library was
        built from, where they are beside it, must be unchanged."""
        checkout = (self.checkout / "libew").is_dir()
        for f in [*raw.get("spec_files", []), *[dict(s, source=True) for s in raw.get("sources", [])]]:
            p = self.spec_path(f["path"])
            try:
                data = p.read_bytes()
            except OSError:
                if f.get("source") and checkout:        # a source removed from the checkout since
                    raise LibraryError(f"{self.path} is stale: {p} is gone since the library was built; "
                                       f"rebuild it: {self.build_command}{_RESTART}") from None
                continue      # a library away from its checkout (a wheel, a copy): nothing to compare
            if hashlib.sha256(data).hexdigest() != f["sha256"]:
                raise LibraryError(f"{self.path} is stale: {p} changed since the library was built; "
                                   f"rebuild it: {self.build_command}{_RESTART}")

    def error_name(self, code: int) -> str:
        return self.cdll.ew_error_name(int(code)).decode()

    def check(self, rc: int, where: str) -> None:
        if rc != 0:
            raise CudaError(rc, self.error_name(rc), where)


_lock = threading.Lock()
_lib: Library | None = None


def get() -> Library:
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = Library(library_path())
    return _lib


def reset() -> None:
    """Forget the loaded library (tests use this after pointing PYEW_LIB elsewhere)."""
    global _lib
    with _lock:
        _lib = None


def launch(entry: Entry, args: tuple, stream) -> None:
    """Call an entry point: its own arguments, then the launch context (stream, SMs, threads per
    SM) every entry takes last; a nonzero cudaError_t raises CudaError naming the symbol."""
    rc = entry.fn(*args, stream.handle, *stream.dims)
    if rc:
        get().check(rc, entry.symbol)


LIBEW_LAUNCH = launch       # `launch` itself, whatever stands in for it later (the C replay checks)


def check(rc: int, where: str) -> None:
    get().check(rc, where)


def native(entry: Entry | Callable, slots, shape: tuple, info: dt.DType, n: int, parts=(), aligned=(),
           declines: int | None = None):
    """How the C extension calls `entry` (an Entry, or a function the library bound, such as
    jit_map) for a plan (pyew/_ewcall.c: native): each argument's source (the result, an array
    argument, a number, a constant, the array arguments' addresses as one array; an address may
    carry a byte offset), then the launch context; `parts` launch instead where the slots `aligned`
    hold 16-byte aligned addresses; `declines`, a return code that leaves the call to Python. None
    without the extension, or for an entry it does not call."""
    ext = get().ext
    if ext is None or not hasattr(ext, "native"):
        return None
    context = (("s", 0), ("d", 0), ("d", 1))
    try:
        fn, parts = entry.fn if isinstance(entry, Entry) else entry, tuple((*part, *context) for part in parts)
        if declines is None:
            return ext.native(fn, (*slots, *context), shape, info, n, parts, tuple(aligned))
        return ext.native(fn, (*slots, *context), shape, info, n, parts, tuple(aligned), declines)
    except (TypeError, ValueError):
        return None
