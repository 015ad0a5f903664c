"""The one place that finds, checks and declares libew.so.

Order: $PYEW_LIB, then build/libew.so next to this package. The library's ABI version must match,
its embedded op table (the manifest) is the list of ops, and if a spec file it was built from has
changed since, the library is refused as stale. Every entry point gets its argtypes/restype from
the manifest once, here.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import threading
from pathlib import Path

from .errors import CudaError, LibraryError

ABI_VERSION = 1
_REPO = Path(__file__).resolve().parent.parent
_ABI_CTYPES = {"out": ctypes.c_void_p, "in": ctypes.c_void_p, "stream": ctypes.c_void_p,
               "i64": ctypes.c_int64, "f64": ctypes.c_double, "i32": ctypes.c_int}
_RUN_MAKE = "run `make all` in the pyew checkout (or set PYEW_LIB to a built libew.so)"


def library_path() -> Path:
    env = os.environ.get("PYEW_LIB")
    return Path(env) if env else _REPO / "build" / "libew.so"


class Library:
    def __init__(self, path: Path):
        self.path = path
        if not path.exists():
            raise LibraryError(f"libew not found at {path}: {_RUN_MAKE}")
        try:
            self.cdll = ctypes.CDLL(str(path))
        except OSError as e:
            raise LibraryError(f"cannot load {path}: {e}; {_RUN_MAKE}") from None
        for sym in ("ew_abi_version", "ew_manifest", "ew_error_name", "ew_fill"):
            if not hasattr(self.cdll, sym):
                raise LibraryError(f"{path} is not a libew library (no {sym}); {_RUN_MAKE}")
        self.cdll.ew_abi_version.restype = ctypes.c_int
        self.cdll.ew_abi_version.argtypes = []
        abi = self.cdll.ew_abi_version()
        if abi != ABI_VERSION:
            raise LibraryError(f"{path} has ABI version {abi}, this pyew needs {ABI_VERSION}; {_RUN_MAKE}")
        self.cdll.ew_manifest.restype = ctypes.c_char_p
        self.cdll.ew_manifest.argtypes = []
        self.manifest = json.loads(self.cdll.ew_manifest().decode("utf-8"))
        self._check_fresh()
        self.cdll.ew_error_name.restype = ctypes.c_char_p
        self.cdll.ew_error_name.argtypes = [ctypes.c_int]
        self.fill = self._declare("ew_fill", [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_uint64,
                                              ctypes.c_void_p, ctypes.c_int, ctypes.c_int])
        self.symbols: dict[str, ctypes._CFuncPtr] = {}
        for op in self.manifest["ops"]:
            for k in op["kernels"]:
                for e in k["entries"]:
                    self.symbols[e["symbol"]] = self._declare(
                        e["symbol"], [_ABI_CTYPES[kind] for _, kind in e["args"]])

    def _declare(self, symbol, argtypes):
        try:
            f = getattr(self.cdll, symbol)
        except AttributeError:
            raise LibraryError(f"{self.path} lacks {symbol}, which its own manifest lists; {_RUN_MAKE}") from None
        f.argtypes = argtypes
        f.restype = ctypes.c_int
        return f

    def _check_fresh(self):
        for f in self.manifest.get("spec_files", []):
            p = Path(f["path"])
            if p.exists() and hashlib.sha256(p.read_bytes()).hexdigest() != f["sha256"]:
                raise LibraryError(f"{self.path} is stale: {p} changed since the library was built; {_RUN_MAKE}")

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
