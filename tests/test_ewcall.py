"""pyew's C extension (pyew/_ewcall.c), without a GPU: argument conversion through a packed twin
compiled here, its errors, and the loader's choice between it and ctypes."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyew import library

from .helpers import shared_library

ROOT = Path(__file__).resolve().parent.parent
LIB = library.library_path()
EXT = LIB.parent / library.EXTENSION
needs_ext = pytest.mark.skipif(not EXT.exists(), reason=f"{EXT} not built (make all, with the Python headers)")
needs_lib = pytest.mark.skipif(not LIB.exists(), reason=f"{LIB} not built (run make all)")

# A packed twin that records what it was given: each argument's bits, and how many calls.
PROBE = r"""
#include "ew_api.h"
ew_arg seen[8];
int calls;
int probe_packed(const ew_arg* a) { for (int i = 0; i < 6; ++i) seen[i] = a[i]; return 40 + ++calls; }
"""


def _extension():
    """The built extension; a build that exists must load (else pyew would fall back unseen)."""
    if os.environ.get("PYEW_CTYPES", "") not in ("", "0"):
        pytest.skip("PYEW_CTYPES is set")
    ext, note = library.load_extension(EXT.parent)
    assert ext is not None, note
    return ext


class Arg(ctypes.Union):
    _fields_ = [("p", ctypes.c_void_p), ("i", ctypes.c_int64), ("u", ctypes.c_uint64), ("f", ctypes.c_double)]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    lib = shared_library(tmp_path_factory, "probe", PROBE, ROOT / "libew")
    ext = _extension()
    fn = ext.bind(ctypes.cast(lib.probe_packed, ctypes.c_void_p).value, "plidpu", "probe")
    return fn, (Arg * 8).in_dll(lib, "seen"), ctypes.c_int.in_dll(lib, "calls")


@needs_ext
def test_each_kind_arrives_in_its_member(probe):
    fn, seen, calls = probe
    before = calls.value
    rc = fn(0x7F00DEADBEEF0, -(2**63), -(2**31), 1.5, None, 2**64 - 1)
    assert rc == 40 + before + 1 and calls.value == before + 1
    assert seen[0].p == 0x7F00DEADBEEF0
    assert seen[1].i == -(2**63)
    assert seen[2].i == -(2**31)
    assert seen[3].f == 1.5
    assert seen[4].p is None                      # None is NULL, as with ctypes' c_void_p
    assert seen[5].u == 2**64 - 1
    # numpy scalars convert as ctypes takes them
    fn(1, np.int64(7), np.int32(-3), np.float32(0.25), 0, 0)
    assert (seen[1].i, seen[2].i, seen[3].f) == (7, -3, 0.25)
    fn(1, 2, 3, 4, 5, 6)                          # an int where a double goes
    assert seen[3].f == 4.0
    assert fn.__name__ == "probe"


@needs_ext
@pytest.mark.parametrize("args, error, message", [
    ((1, 2, 3, 4.0, 5), TypeError, r"probe takes 6 arguments \(5 given\)"),
    ((1, 2, 3, 4.0, 5, 6, 7), TypeError, r"probe takes 6 arguments \(7 given\)"),
    ((1.0, 2, 3, 4.0, 5, 6), TypeError, r"probe: argument 0 must be an address \(int\)"),
    ((1, 2.5, 3, 4.0, 5, 6), TypeError, r"probe: argument 1 must be a 64-bit integer"),
    ((1, 2, "3", 4.0, 5, 6), TypeError, r"probe: argument 2 must be a 32-bit integer"),
    ((1, 2, 2**31, 4.0, 5, 6), OverflowError, r"probe: argument 2 is 2147483648, outside a 32-bit int"),
    ((1, 2, 3, "4", 5, 6), TypeError, r"probe: argument 3 must be a float"),
    ((1, 2, 3, 4.0, 5, -1), OverflowError, "convert"),
    ((1, 2**64, 3, 4.0, 5, 6), OverflowError, "convert"),
])
def test_bad_arguments_raise_and_do_not_call(probe, args, error, message):
    fn, _, calls = probe
    before = calls.value
    with pytest.raises(error, match=message):
        fn(*args)
    assert calls.value == before


@needs_ext
def test_bind_refuses_what_it_cannot_call():
    ext = _extension()
    with pytest.raises(ValueError, match="unknown argument kind"):
        ext.bind(1, "px", "f")
    with pytest.raises(ValueError, match="at most 32"):
        ext.bind(1, "p" * 33, "f")
    with pytest.raises(ValueError, match="NULL"):
        ext.bind(0, "p", "f")
    with pytest.raises(TypeError, match="3 arguments"):
        ext.bind(1, "p")


@needs_lib
@needs_ext
def test_library_calls_entries_through_the_extension():
    if os.environ.get("PYEW_CTYPES", "") not in ("", "0"):
        pytest.skip("PYEW_CTYPES is set")
    lib = library.get()
    assert lib.ext is not None and lib.calls_note == str(EXT), lib.calls_note   # built, so it must load
    e = lib.manifest.op("add").kernels[0].entry("forward")
    assert e.fn.__name__ == e.symbol
    assert e.fn(0, 0, 0, 0, None, 132, 2048) == 0         # n = 0: nothing launched, no GPU needed
    with pytest.raises(TypeError, match=f"{e.symbol} takes 7 arguments"):
        e.fn(0, 0, 0, 0)


def _entry_call_in(env_lib: Path | None, **env) -> list[str]:
    code = ("from pyew import library\nlib = library.get()\n"
            "e = lib.manifest.op('add').kernels[0].entry('forward')\n"
            "print(type(lib.ext).__name__, e.fn(0, 0, 0, 0, None, 132, 2048))\nprint(lib.calls_note)\n")
    e = {k: v for k, v in os.environ.items() if k != "PYEW_CTYPES"}
    e.update(env)
    if env_lib is not None:
        e["PYEW_LIB"] = str(env_lib)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=e)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return r.stdout.splitlines()


@needs_lib
def test_ctypes_when_asked_absent_or_unloadable(tmp_path):
    assert _entry_call_in(None, PYEW_CTYPES="1") == ["NoneType 0", "PYEW_CTYPES is set"]
    assert _entry_call_in(None, PYEW_CTYPES="0")[1].endswith("_ewcall.abi3.so")           # 0: the C extension
    bad = subprocess.run([sys.executable, "-c", "import pyew; pyew.library.get()"], cwd=ROOT, capture_output=True,
                         text=True, env=dict(os.environ, PYEW_CTYPES="no"))
    assert bad.returncode != 0 and "PYEW_CTYPES='no': set it to 1" in bad.stderr      # not read as "set"
    alone = tmp_path / "libew.so"
    shutil.copy2(LIB, alone)
    out = _entry_call_in(alone)
    assert out[0] == "NoneType 0" and out[1].startswith(f"no {tmp_path / library.EXTENSION}")
    (tmp_path / library.EXTENSION).write_bytes(b"not a shared object")
    out = _entry_call_in(alone)
    assert out[0] == "NoneType 0" and out[1].startswith(f"cannot load {tmp_path / library.EXTENSION}")


@needs_lib
def test_an_entry_the_extension_cannot_take_goes_through_ctypes(monkeypatch):
    lib = library.get()
    if lib.ext is None:
        pytest.skip(lib.calls_note)
    e = lib.manifest.op("add").kernels[0].entry("forward")
    raw = {"symbol": e.symbol, "packed": e.symbol + "_packed"}

    class Refusing:
        def bind(self, *a):
            raise ValueError("at most 32 arguments")
    monkeypatch.setattr(lib, "ext", Refusing())
    fn = lib._bind(raw, e.args)
    assert fn.argtypes and fn(0, 0, 0, 0, None, 132, 2048) == 0        # a ctypes function, working
