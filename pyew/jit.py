"""Kernels compiled at run time: fused formulas' CUDA source compiled by NVRTC (through
cuda-python's cuda.bindings.nvrtc) to a cubin for the GPU's architecture, cached in memory and on
disk, loaded into the process by libew (ew_jit_load) and launched along libew's own launch plans
(ew_jit_map: plan_map and plan_strided, the same kernels and shapes as the library's ops).

The disk cache is a folder of files, $PYEW_CACHE_DIR (else $XDG_CACHE_HOME/pyew/kernels, else
~/.cache/pyew/kernels), each entry
written to a temporary file and renamed into place, so a reader sees an old entry or a new one,
never a partial one. A key covers the kernel's source, the headers it includes (libew's and the
ops' device functions), the GPU architecture, NVRTC's version, the CUDA headers and the options.
An entry that does not read back as pyew's (a corrupt or truncated file) is compiled again; two
processes compiling one kernel at once both succeed, and one of the two identical entries stays.

A kernel read from the disk cache neither loads NVRTC nor looks up the CUDA headers: NVRTC's version and
the CUDA headers' folder are remembered in the cache folder (a file `toolchain-<environment>` for
each Python environment and CUDA_HOME), checked against the NVRTC library's and cuda_fp16.h's size
and time, and only found again when either changed.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import struct
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from . import library, specs
from .errors import CompileError

MAGIC = b"PYEWJIT2"
OPTIONS = ("-std=c++17", "-default-device")
MAX_ARRAYS = 12                # a formula's array operands: libew/jit.cu's kMaxJitInputs
NEED = 11                      # ew_jit_map's description of a missing kernel: see libew/jit.cu
MISSING = -1
TEMPLATES = ("ew::map_kernel", "ew::map_shifted_kernel", "ew::bcast_pack_kernel", "ew::strided_elem_kernel")


class Unavailable(RuntimeError):
    """No NVRTC in this process (the message says why)."""


# ---- NVRTC ----------------------------------------------------------------------------------------

_nvrtc = None
_nvrtc_why: str | None = None


def nvrtc():
    """cuda.bindings' NVRTC module, or Unavailable saying why not. NVRTC comes from NVIDIA's
    nvidia-cuda-nvrtc wheel when it is installed, else from the CUDA toolkit (cuda-pathfinder's
    search order)."""
    global _nvrtc, _nvrtc_why
    if _nvrtc is None and _nvrtc_why is None:
        try:
            from cuda.bindings import nvrtc as m
            err, major, minor = m.nvrtcVersion()
            if int(err):
                raise RuntimeError(f"nvrtcVersion failed ({err})")
            _nvrtc = m
        except Exception as e:       # ImportError, or the library not found
            _nvrtc_why = (f"NVRTC is not available ({type(e).__name__}: {e}); install the CUDA toolkit or "
                          "`pip install nvidia-cuda-nvrtc nvidia-cuda-runtime`")
    if _nvrtc is None:
        raise Unavailable(_nvrtc_why)
    return _nvrtc


def options() -> tuple[str, ...]:
    """NVRTC's options: OPTIONS, and from NVRTC 12.8 on its automatic precompiled header (-pch), so a
    process parses libew's headers once for all its formulas (fused.Program puts them first), and
    -minimal, which leaves out the CUDA runtime's declarations (texture, device-side launch, the
    runtime's types) that kernels of formulas never use and every compile otherwise parses."""
    return OPTIONS + (("-pch", "-minimal") if tuple(toolchain()["version"]) >= (12, 8) else ())


def nvrtc_version() -> tuple[int, int]:
    _, major, minor = nvrtc().nvrtcVersion()
    return int(major), int(minor)


def cuda_include() -> str:
    """The folder holding cuda_fp16.h and cuda_bf16.h: the toolkit's, or the nvidia-cuda-runtime
    wheel's."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        d = find_nvidia_header_directory("cudart")
    except Exception:
        d = None
    if not d:
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        d = os.path.join(home, "include")
    if not os.path.exists(os.path.join(d, "cuda_fp16.h")):
        raise Unavailable(f"no cuda_fp16.h found (looked in {d}); install the CUDA toolkit or "
                          "`pip install nvidia-cuda-runtime`")
    return d


def include_dirs() -> list[str]:
    """libew's headers and the loaded library's op device functions: the checkout's libew/ and
    build/gen/, or the copies a wheel ships in pyew/_lib/include; then the folders of the ops
    pyew.load_spec rendered."""
    loaded = library.get()
    lib = loaded.path.parent
    bundled = Path(__file__).resolve().parent / "_lib" / "include"
    checkout = loaded.checkout / "libew"
    if (lib / "gen" / "fn").is_dir() and (checkout / "elementwise.cuh").exists():
        return [str(checkout), str(lib / "gen"), *specs.include_dirs()]
    if (bundled / "elementwise.cuh").exists():
        return [str(bundled), *specs.include_dirs()]
    raise Unavailable(f"no libew headers beside {library.get().path} (looked for {checkout} and {bundled})")



_INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


_digests: dict = {}        # (dirs, includes) -> (the paths read, their stamps, the digest)


def _stamps(paths) -> tuple:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def headers_digest(dirs: tuple[str, ...], includes: tuple[str, ...]) -> str:
    """A digest of libew's headers (each folder's own .cuh files) and of the op device functions a
    kernel includes (`includes`, as its #include lines name them), with those they include in turn,
    each found as NVRTC finds it, in the first folder that has it: a rebuilt library with changed
    ops or headers makes new keys, a loaded spec op's included library ops among them. Kept while
    the files read and the folders (files added or removed) keep their size and time, so a header
    changed under a running process gets a new key for what NVRTC then reads."""
    key = (dirs, includes)
    kept = _digests.get(key)
    if kept is not None and _stamps(kept[0]) == kept[1]:
        return kept[2]
    watched = (*dirs, *(p for d in dirs for p in (os.path.join(d, "fn"),) if os.path.isdir(p)))
    stamps = _stamps(watched)             # before reading: a change while reading makes the next call read again
    paths, digest = _headers_digest(dirs, includes)
    watched += paths
    if len(_digests) >= 1024:
        _digests.clear()
    _digests[key] = (watched, stamps + _stamps(paths), digest)
    return digest


def _headers_digest(dirs: tuple[str, ...], includes: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    found: dict[str, str] = {}
    todo = [f for f in includes if "/" in f]
    while todo:                      # the op headers a kernel includes, and those they include (add_relu: relu)
        name = todo.pop()
        if name in found:
            continue
        path = next((p for p in (os.path.join(d, name) for d in dirs) if os.path.exists(p)), None)
        if path is None:
            continue
        found[name] = path
        with open(path) as f:
            todo += [i for i in _INCLUDE.findall(f.read()) if "/" in i]
    h = hashlib.sha256()
    own = [(f, os.path.join(d, f)) for d in dirs for f in sorted(os.listdir(d)) if f.endswith(".cuh")]
    for name, path in own + sorted(found.items()):
        with open(path, "rb") as f:
            h.update(name.encode() + b"\0" + f.read() + b"\0")
    return tuple(p for _, p in own + sorted(found.items())), h.hexdigest()


def compile_cubin(source: str, name_expression: str, arch: str, include: list[str], formula: str) -> tuple[str, bytes]:
    """(lowered name, cubin) of `name_expression` in `source`, for arch like "sm_90"."""
    m = nvrtc()
    err, prog = m.nvrtcCreateProgram(source.encode(), b"pyew_formula.cu", 0, [], [])
    _ok(err, "nvrtcCreateProgram", formula)
    try:
        _ok(m.nvrtcAddNameExpression(prog, name_expression.encode())[0], "nvrtcAddNameExpression", formula)
        opts = [f"-arch={arch}".encode(), *(o.encode() for o in options()), *(f"-I{d}".encode() for d in include)]
        (err,) = m.nvrtcCompileProgram(prog, len(opts), opts)
        if int(err):
            _, size = m.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            m.nvrtcGetProgramLog(prog, log)
            errors = [ln for ln in log.decode(errors="replace").splitlines() if "error" in ln]
            first = errors[0].split("error:", 1)[-1].strip() if errors else "see PYEW_JIT_LOG"
            kept = "set PYEW_JIT_LOG=<file> to keep the source and log"
            if os.environ.get("PYEW_JIT_LOG"):
                text = log.decode(errors="replace")
                try:
                    Path(os.environ["PYEW_JIT_LOG"]).write_text(f"{source}\n/* NVRTC log:\n{text}*/\n")
                    kept = f"source and log in {os.environ['PYEW_JIT_LOG']}"
                except OSError as e:
                    kept = f"PYEW_JIT_LOG could not be written: {e}"
            raise CompileError(f"NVRTC could not compile the kernel of formula {formula!r}: {first} "
                               f"({len(errors)} error(s); {kept})")
        err, size = m.nvrtcGetCUBINSize(prog)
        _ok(err, "nvrtcGetCUBINSize", formula)
        cubin = b" " * size
        _ok(m.nvrtcGetCUBIN(prog, cubin)[0], "nvrtcGetCUBIN", formula)
        err, lowered = m.nvrtcGetLoweredName(prog, name_expression.encode())
        _ok(err, "nvrtcGetLoweredName", formula)
        return lowered.decode() if isinstance(lowered, bytes) else str(lowered), cubin
    finally:
        m.nvrtcDestroyProgram(prog)


def _ok(err, what: str, formula: str) -> None:
    if int(err):
        raise CompileError(f"NVRTC failed ({what}: {err}) compiling formula {formula!r}")


# ---- the cache ------------------------------------------------------------------------------------

def cache_dir() -> Path:
    env = os.environ.get("PYEW_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyew" / "kernels"


class _Store:
    """Entries as files under a folder (two-character subfolders), each written to a temporary file
    beside it and renamed over: a reader sees an old entry or a new one, never a partial one.
    (cuda.core's FileStreamProgramCache does the same; importing cuda.core takes longer than a
    cached kernel may take to load: docs/tuning.md.)"""

    def __init__(self, path: Path):
        self.path = path

    def __getitem__(self, key: str) -> bytes:
        try:
            return (self.path / key[:2] / key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def __setitem__(self, key: str, blob: bytes) -> None:
        folder = self.path / key[:2]
        folder.mkdir(parents=True, exist_ok=True)       # the cache folder too, if it was removed meanwhile
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, folder / key)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class _Disk:
    """The disk half of the cache when its folder is usable, else nothing (with one warning saying
    why). A folder that can be read but not written (a cache made ahead, in an image or shared by
    a site) still serves the kernels it holds; new ones are then compiled in each process."""

    def __init__(self):
        self.store = None
        self.writable = False
        self.warned = False
        self.path: Path | None = None

    def get(self):
        """The store to read, or None."""
        path = cache_dir()
        if self.path != path:
            self.path, self.store, self.writable = path, None, False
            try:
                if not path.is_dir():
                    path.mkdir(parents=True, exist_ok=True)
                if not os.access(path, os.R_OK | os.X_OK):
                    raise PermissionError(f"{path} is not readable")
                self.store = _Store(path)
                self.writable = os.access(path, os.W_OK)
                if not self.writable:
                    self.warn(PermissionError(f"{path} is not writable; the kernels it holds are read"))
            except Exception as e:
                self.disable(e)
        return self.store

    def writer(self):
        """The store to write, or None."""
        return self.store if self.get() is not None and self.writable else None

    def disable(self, e: Exception) -> None:
        self.store, self.writable = None, False
        self.warn(e)

    def read_only(self, e: Exception) -> None:
        self.writable = False
        self.warn(e)

    def warn(self, e: Exception) -> None:
        if not self.warned:
            self.warned = True
            warnings.warn(f"pyew: kernels of formulas are not cached on disk ({type(e).__name__}: {e}); each process "
                          "compiles them again. Set PYEW_CACHE_DIR to a writable folder.", RuntimeWarning, stacklevel=5)


def _stamp(path: str) -> str:
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}"


_toolchain: dict | None = None
_recorded: set[str] = set()           # cache folders known to hold this process's toolchain record


def toolchain() -> dict:
    """NVRTC's version and library, and the CUDA headers' folder: from the cache folder's record
    when the files it names are unchanged, else found (loading NVRTC) and recorded again. A cache
    folder set later in the process (PYEW_CACHE_DIR) gets the record too, so the next process
    reading its kernels does not load NVRTC to find it."""
    global _toolchain
    record = cache_dir() / f"toolchain-{_environment()}"
    t, found = _toolchain, False
    if t is None:
        try:
            r = json.loads(record.read_text())
            fp16 = os.path.join(r["include"], "cuda_fp16.h")
            if r["nvrtc_stamp"] == _stamp(r["nvrtc"]) and r["fp16_stamp"] == _stamp(fp16):
                t = _toolchain = r
                _recorded.add(str(record))
                return t
        except (OSError, ValueError, KeyError, TypeError):
            pass                     # none yet, unreadable, or stale: found again below
        nvrtc()
        include = cuda_include()
        lib = _nvrtc_library()
        t = _toolchain = {"version": list(nvrtc_version()), "nvrtc": lib, "nvrtc_stamp": _stamp(lib) if lib else "",
                          "include": include, "fp16_stamp": _stamp(os.path.join(include, "cuda_fp16.h"))}
        found = True
    if str(record) not in _recorded:
        _recorded.add(str(record))
        if t["nvrtc"] and (found or not record.exists()) and _disk.writer() is not None:
            try:
                fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=".tmp-")
                with os.fdopen(fd, "w") as f:
                    json.dump(t, f)
                os.replace(tmp, record)
            except OSError:
                pass                 # not recorded: the next process finds it again
    return t


def _environment() -> str:
    """What decides which NVRTC and CUDA headers a process finds (cuda-pathfinder's search: the
    Python environment's wheels, CUDA_HOME / CUDA_PATH, the loader's path): one record for each,
    so environments sharing a cache folder do not take each other's."""
    parts = (sys.prefix, *(os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _nvrtc_library() -> str | None:
    """The file NVRTC was loaded from (cuda-pathfinder's record of it), or None."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        return load_nvidia_dynamic_lib("nvrtc").abs_path
    except Exception:
        return None


_disk = _Disk()
_memory: dict[str, tuple[str, bytes]] = {}
_loaded: dict[str, int] = {}
_lock = threading.Lock()
STATS = {"compiled": 0, "disk": 0, "memory": 0}


def _pack(name: str, cubin: bytes) -> bytes:
    n = name.encode()
    body = struct.pack("<II", len(n), len(cubin)) + n + cubin
    return MAGIC + hashlib.sha256(body).digest() + body


def _unpack(blob: bytes) -> tuple[str, bytes] | None:
    """An entry read back, or None where it is not whole or not as written (then it is compiled
    again): its digest covers every byte after it."""
    try:
        if blob[:8] != MAGIC or hashlib.sha256(blob[40:]).digest() != blob[8:40]:
            return None
        ln, lc = struct.unpack_from("<II", blob, 40)
        name = blob[48:48 + ln].decode()
        cubin = blob[48 + ln:]
        if len(cubin) != lc or cubin[:4] != b"\x7fELF":
            return None
        return name, bytes(cubin)
    except (struct.error, UnicodeDecodeError):
        return None


def key_of(source: str, name_expression: str, arch: str, include: list[str]) -> str:
    """include[0] is the CUDA headers' folder, which toolchain() stands for (with NVRTC's version);
    the rest, pyew's own headers, are read."""
    t = toolchain()
    h = hashlib.sha256()
    for part in (source, name_expression, arch, repr(t["version"]), repr(options()), t["include"], t["fp16_stamp"],
                 headers_digest(tuple(include[1:]), tuple(_INCLUDE.findall(source)))):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def cubin(source: str, name_expression: str, arch: str, formula: str) -> tuple[str, str, bytes]:
    """(key, lowered name, cubin) of `name_expression` in `source`: from this process's memory,
    else the disk cache, else compiled now and stored in both."""
    include = [toolchain()["include"], *include_dirs()]
    key = key_of(source, name_expression, arch, include)
    with _lock:
        entry = _memory.get(key)
        if entry is not None:
            STATS["memory"] += 1
            return (key, *entry)
        store = _disk.get()
        if store is not None:
            try:
                blob = store[key]
            except KeyError:
                blob = None
            except Exception as e:     # an unreadable entry: compiled again below
                blob = None
                if isinstance(e, PermissionError):
                    _disk.disable(e)
            entry = _unpack(blob) if blob else None
            if entry is not None:
                STATS["disk"] += 1
        if entry is None:
            entry = compile_cubin(source, name_expression, arch, include, formula)
            STATS["compiled"] += 1
            store = _disk.writer()
            if store is not None:
                try:
                    store[key] = _pack(*entry)
                except Exception as e:
                    _disk.read_only(e)
        _memory[key] = entry
        return (key, *entry)


def kernel(source: str, name_expression: str, arch: str, formula: str) -> int:
    """The loaded kernel (a cudaKernel_t) of `name_expression` in `source`, loaded once a process."""
    key, name, image = cubin(source, name_expression, arch, formula)
    with _lock:
        handle = _loaded.get(key)
        if handle is None:
            handle = _loaded[key] = library.get().jit_load(image, name)
        return handle


def clear_memory() -> None:
    """Forget compiled kernels held in memory (the loaded ones stay loaded)."""
    with _lock:
        _memory.clear()


_ENTRY = re.compile(r"[0-9a-f]{64}")
_HEX2 = re.compile(r"[0-9a-f]{2}")
_RECORD = re.compile(r"toolchain-[0-9a-f]{16}")       # toolchain()'s, named by _environment()
_TEMPORARY = re.compile(r"\.tmp-[A-Za-z0-9_]{8}")      # tempfile.mkstemp's, prefix ".tmp-"


def _cache_files(path: Path, partial: bool = False) -> list[Path]:
    """The files pyew wrote under a cache folder: its entries (<2 hex>/<64 hex>), with `partial`
    also the temporary files of writes cut short and the toolchain records. Nothing else there is
    pyew's to count or delete (PYEW_CACHE_DIR may name a folder that holds other files)."""
    if not path.is_dir():
        return []
    out = []
    for p in path.glob("??/*"):
        if not p.is_file() or not _HEX2.fullmatch(p.parent.name):
            continue
        if (p.parent.name == p.name[:2] and _ENTRY.fullmatch(p.name)) or (partial and _TEMPORARY.fullmatch(p.name)):
            out.append(p)
    if partial:
        out += [p for p in path.glob("toolchain-*") if p.is_file() and _RECORD.fullmatch(p.name)]
        out += [p for p in path.glob(".tmp-*") if p.is_file() and _TEMPORARY.fullmatch(p.name)]
        for d in path.glob("specs/*"):      # the headers of spec files pyew.load_spec compiled
            if d.is_dir() and re.fullmatch(r"[0-9a-f]{24}", d.name):
                out += [p for p in d.rglob("*") if p.is_file()]
    return out


def cache_info() -> dict:
    path = cache_dir()
    files = _cache_files(path)
    return {"path": str(path), "entries": len(files), "bytes": sum(p.stat().st_size for p in files),
            "in_memory": len(_memory), **STATS}


def cache_clear() -> int:
    """Delete the disk cache's entries (and pyew's records and leftover temporary files there, not
    other files); returns how many files went."""
    path = cache_dir()
    n = 0
    for p in _cache_files(path, partial=True):
        p.unlink(missing_ok=True)
        n += 1
    folders = [*(d for d in path.glob("??") if _HEX2.fullmatch(d.name)),
               *sorted(path.glob("specs/**/"), reverse=True)] if path.is_dir() else []
    for d in folders:
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    _recorded.clear()
    clear_memory()
    return n


# ---- launching ------------------------------------------------------------------------------------

_why: list = []


def unavailable() -> str | None:
    """Why formulas cannot be compiled in this process (no NVRTC, no CUDA headers), or None."""
    if not _why:
        try:
            toolchain()
            _why.append(None)
        except Unavailable as e:
            _why.append(str(e))
    return _why[0]


class Slots:
    """One formula's loaded kernels on one GPU, as libew's ew_jit_map indexes them."""

    def __init__(self, count: int, arch: str, overlap: bool):
        self.table = (ctypes.c_void_p * count)()
        self.need = (ctypes.c_int64 * 16)()
        self.table_at, self.need_at = ctypes.addressof(self.table), ctypes.addressof(self.need)
        self.arch = arch
        self.overlap = int(overlap)


def slots_for(ordinal: int, count: int) -> Slots:
    """Empty slots for a GPU: kernels compiled for its architecture (sm_XY), overlapping the
    previous kernel (programmatic dependent launch) from compute capability 9.0 on."""
    from . import runtime as rt
    major, minor = rt.props(ordinal).capability
    return Slots(count, f"sm_{major}{minor}", major >= 9)


def name_expression(desc, out_t: str, in_t: list[str]) -> str:
    """The template instantiation ew_jit_map asked for: desc = [slot, template, block, unroll,
    waves, tile, hint, pack, shuffle, fixed shift, 64-bit index]."""
    _, template, block, unroll, waves, tile, hint, pack, shuffle, shift, i64 = (int(v) for v in desc[:NEED])
    tn = f"ew::Tuning<{block}, {unroll}, {waves}, {'true' if tile else 'false'}, {hint}>"
    idx = "long long" if i64 else "int"
    types = ", ".join(["ew_jit::fn", out_t, *in_t])
    if template == 0:
        args = f"{tn}, {pack}, {idx}"
    elif template == 1:
        args = f"{tn}, {pack}, {'true' if shuffle else 'false'}, {shift}, {idx}"
    elif template == 2:
        args = f"{tn}, {pack}, {idx}"
    else:
        args = f"{tn}, {idx}"
    return f"{TEMPLATES[template]}<{args}, {types}>"


def cli(argv) -> int:
    """python -m pyew cache [--clear]"""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m pyew cache", description="The disk cache of fused formulas' "
                                 "kernels: $PYEW_CACHE_DIR, else $XDG_CACHE_HOME/pyew/kernels, else "
                                 "~/.cache/pyew/kernels.")
    ap.add_argument("--clear", action="store_true", help="delete the cached kernels (and pyew's other files there)")
    a = ap.parse_args(argv)
    if a.clear:
        print(f"removed {cache_clear()} file(s) from {cache_dir()}")
        return 0
    info = cache_info()
    print(f"kernel cache: {info['path']}")
    print(f"  entries: {info['entries']}, {info['bytes'] / 2**20:.2f} MiB")
    return 0
