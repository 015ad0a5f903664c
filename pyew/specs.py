"""Spec files loaded at run time: pyew.load_spec("my_ops.toml") parses a spec file with the
generator's own validation (errors name the file, the op and the field), renders its map ops'
device functions, and makes each op callable, and usable by name in formulas, without nvcc or
make. An op runs as the formula of that one op (inside pyew.fuse, it joins the traced formula):
compiled by NVRTC on its first call for a signature, cached in memory and on disk like every
formula (pyew/jit.py), and run on the library's call path (pyew/fused.py, pyew/call.py).

The rendered headers live under the kernel cache folder, in a folder named by their digest (written
again if the cache is cleared meanwhile); their text is part of each kernel's cache key. Loading
another definition of a loaded name replaces it: its folder is searched first, the formula
vocabulary is rebuilt, formulas' programs are kept per version of the loaded ops and every
plan is dropped, so every caller of the name gets the new one.
Params are compiled into the kernel, as in formulas:
each new value of a param compiles once (as a new formula does), so a value that changes call after call
belongs in an input instead.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import json
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

from . import call, jit, library
from .errors import CompileError, SpecError
from .formula import Call, Var, trace_if_traced

_lock = threading.Lock()
_load_count = itertools.count()
_ops: dict[str, tuple[library.Op, str, str]] = {}     # name -> (op, its definition's digest, spec file)
_functions: dict[str, object] = {}                     # name -> its Python function, one per op
_dirs: dict[str, dict[str, str]] = {}                  # folder -> its headers (op name -> text)
_files: dict[str, str] = {}                            # name -> the spec file's absolute path
_loads: dict[str, int] = {}                            # name -> when its definition was loaded (a count)
_calls: dict[str, tuple] = {}                          # name -> the ops its expression calls
_made: weakref.WeakSet = weakref.WeakSet()              # every function load_spec made, of any definition
_earlier: dict[str, set] = {}                          # name -> digests of definitions replaced here
# load_spec's installing and the pyew.dask tasks running on the definitions they checked (using())
# exclude each other; a waiting install goes before tasks that have not started
_use = threading.Condition()
_running = 0
_installing = False
_waiting = 0
_here = threading.local()                              # depth: inside using() on this thread
_LOAD_TRIES = 4
_version = 0


def version() -> int:
    """Changes whenever ops are added (the formula vocabulary is rebuilt then)."""
    return _version


def loaded_ops() -> dict[str, library.Op]:
    """Every op loaded from spec files in this process, by name."""
    return {name: v[0] for name, v in _ops.items()}


def definitions(names) -> tuple:
    """What another process must load to have the definitions these ops (loaded ones among
    `names`, and the loaded ops they call) have here: ((spec file, ((name, digest), ...)), ...) in
    the order they were loaded here (using() loads them)."""
    with _lock:
        todo, seen = [n for n in names if n in _ops], set()
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += [c for c in _calls[n] if c in _ops]
        groups: list = []
        for n in sorted(seen, key=_loads.__getitem__):
            if groups and groups[-1][0] == _files[n]:
                groups[-1][1].append((n, _ops[n][1]))
            else:
                groups.append((_files[n], [(n, _ops[n][1])]))
        return tuple((path, tuple(pairs)) for path, pairs in groups)


@contextlib.contextmanager
def using(defs: tuple):
    """Run a block (a pyew.dask task) with the definitions `defs` (from definitions()) bound to
    their names: loaded first where this process has other definitions it never had, or none (a
    worker process); SpecError where this process has replaced one since (the graph was built with
    it: build it again). No load_spec installs anything while such blocks run."""
    global _running
    if getattr(_here, "depth", 0):          # inside a task already: its definitions must be these
        _check_current(defs)
        yield
        return
    for _ in range(_LOAD_TRIES):
        with _use:
            while _installing or _waiting:
                _use.wait()
            stale = [(n, d) for _, pairs in defs for n, d in pairs if _ops.get(n, (None, None))[1] != d]
            if not stale:
                _running += 1
                break
            earlier = [n for n, d in stale if d in _earlier.get(n, ())]
        if earlier:
            raise SpecError(f"this graph was built with an earlier definition of {', '.join(earlier)}, which "
                            "pyew.load_spec has replaced since: build the graph again")
        _load(defs)
    else:
        raise SpecError(f"the definitions of {', '.join(sorted(n for n, _ in stale))} kept changing while this task "
                        "waited (graphs built with different definitions computed at once): compute them one "
                        "after another")
    _here.depth = 1
    try:
        yield
    finally:
        _here.depth = 0
        with _use:
            _running -= 1
            _use.notify_all()


def _check_current(defs: tuple) -> None:
    stale = sorted(n for _, pairs in defs for n, d in pairs if _ops.get(n, (None, None))[1] != d)
    if stale:
        raise SpecError(f"a pyew.dask task inside another needs other definitions of {', '.join(stale)}: compute "
                        "the graphs one after another")


def _load(defs: tuple) -> None:
    for path, pairs in defs:
        if any(_ops.get(n, (None, None))[1] != d for n, d in pairs):
            _load_file(path, by_task=True)
    changed = sorted({n for _, pairs in defs for n, d in pairs if _ops.get(n, (None, None))[1] != d})
    if changed:
        files = ", ".join(sorted({path for path, _ in defs}))
        raise SpecError(f"{files} no longer define {', '.join(changed)} as the process that built this dask graph "
                        "loaded them (a file changed since): load them there again, and build the graph again")


def made_here(fn) -> bool:
    """Whether fn is a function pyew.load_spec returned (of its op's current definition or an
    earlier one: those call the current one)."""
    return fn in _made


def function(name: str):
    """The Python function of the loaded op `name` (the one load_spec returned), or None."""
    return _functions.get(name)


def include_dirs() -> list[str]:
    """The folders holding loaded ops' device functions (fn/<op>.cuh), for NVRTC, the latest loaded
    first (an op loaded again with another definition is found there); a header removed since
    (python -m pyew cache --clear) is written again."""
    with _lock:
        for folder, headers in _dirs.items():
            if not all(os.path.exists(os.path.join(folder, "fn", f"{n}.cuh")) for n in headers):
                _write(Path(folder), headers)
        return list(reversed(_dirs))


class SpecOps:
    """The ops of a spec file loaded by pyew.load_spec: ops.NAME(*inputs, out=None, stream=None,
    **params), or ops["NAME"] (for an op named like an attribute: path, names)."""

    def __init__(self, path: str, functions: dict):
        self._path, self._functions = path, dict(functions)

    @property
    def path(self) -> str:
        return self._path

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._functions)

    def __getitem__(self, name: str):
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"{self._path} has no op {name!r} (its ops: {', '.join(self._functions)})") from None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._functions[name]
        except KeyError:
            raise AttributeError(f"{self._path} has no op {name!r} (its ops: {', '.join(self._functions)})") from None

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._functions))

    def __repr__(self):
        return f"<pyew ops from {self._path}: {', '.join(self._functions)}>"


def load_spec(path) -> SpecOps:
    """Make the map ops of a spec file callable without building the library: each one as
    `ops.name(*inputs, out=None, stream=None, **params)` on the returned object, and by name in
    pyew.evaluate and pyew.fuse. The file has the format of libew/ops.toml; its ops may call the
    loaded library's ops. Each op is compiled by NVRTC on its first call for a signature (operand
    dtypes and kinds, the values of its params), then cached in memory and on disk. Loading a file
    again returns its ops; an op whose definition changed (the file edited, or another file with
    the name) takes the new one everywhere: its functions, old and new, and formulas. Raises
    SpecError for a file it cannot take (naming the file, the op and the field), CompileError
    when an op's C++ does not compile (at its first call), FileNotFoundError."""
    return _load_file(path, by_task=False)


def _load_file(path, by_task: bool) -> SpecOps:
    """load_spec's work; `by_task`: a pyew.dask task loads the definitions its graph was built with
    (what it replaces is not the user's earlier definition)."""
    try:                                  # an installed pyew ships it as pyew._generator
        from ._generator import render
        from ._generator import spec as gspec
    except ImportError as first:
        try:                              # a checkout has it beside pyew/
            from generator import render
            from generator import spec as gspec
        except ImportError as e:
            why = first if getattr(first, "name", None) != f"{__package__}._generator" else e
            raise RuntimeError(f"pyew.load_spec renders kernels with pyew's generator and mako, which this Python "
                               f"cannot import ({why}): `pip install mako`, and run pyew from its checkout or an "
                               "installed wheel") from None
    why = jit.unavailable()
    if why:
        raise RuntimeError(f"pyew.load_spec compiles ops with NVRTC: {why}")
    lib = library.get()
    user = Path(os.fspath(path))
    if not user.is_file():
        raise FileNotFoundError(f"pyew.load_spec: no spec file at {user}")
    base = [p for p in (_built_from(lib, f.path) for f in lib.manifest.spec_files) if p is not None]
    if any(p.resolve() == user.resolve() for p in base):
        raise SpecError(f"pyew.load_spec: {user} is one of the library's own spec files; its ops are built in "
                         "(pyew.ops() lists them)")
    shown = gspec.spec_path(user)
    try:
        own = gspec.parse_text(gspec.decode(user.read_bytes(), shown), shown)     # its own fields' errors first
    except gspec.SpecError as e:
        raise SpecError(str(e)) from None
    if not own:
        raise SpecError(f"{shown}: no ops defined")
    # imported here: fused imports this module for its vocabulary
    from . import fused
    taken = fused.vocabulary()
    for op in own:
        if op.name in taken and op.name not in _ops:
            lib_op = taken[op.name].name
            why = ("the loaded library already has an op of this name" if lib_op == op.name else
                   f"formulas already call the library's op {lib_op!r} by this name (numpy's name for it)")
            raise SpecError(f"{shown}: op {op.name!r}: field 'name': {why}; choose another")
    try:
        spec = gspec.load([*base, user])      # with the library's ops: an op may call them
    except gspec.SpecError as e:
        raise SpecError(str(e)) from None
    mine = [op for op in spec.ops if op.source == shown]
    for op in mine:
        if op.kind != "map":
            raise SpecError(f"{shown}: op {op.name!r}: field 'kind': {op.kind!r}: pyew.load_spec compiles "
                                  "map ops only; build other kinds into the library with make")
        elsewhere = sorted(set(op.calls) & (set(_ops) - {o.name for o in mine}))
        if elsewhere:           # their device functions are not in this file's headers
            raise SpecError(f"{shown}: op {op.name!r}: field 'expr': calls {', '.join(elsewhere)}, an op of "
                                  "another file pyew.load_spec loaded; an op may call the library's ops and the ops "
                                  "of its own file: put them in one file")
    headers = {op.name: render.fn_header(op, spec) for op in mine}
    calls = {op.name: tuple(op.calls) for op in mine}
    entries = {op.name: render.op_entry(op, spec) for op in mine}
    digest = hashlib.sha256("\0".join(f"{n}\0{h}" for n, h in sorted(headers.items())).encode()).hexdigest()
    # an op's definition without the file it came from: the same op from a copy of the file is the same
    defs = {n: hashlib.sha256((_without_source(headers[n]) + json.dumps(
        {k: v for k, v in entries[n].items() if k != "source"}, sort_keys=True)).encode()).hexdigest() for n in headers}
    with _installs():
        return _install(shown, user, digest, headers, entries, defs, calls, by_task)


@contextlib.contextmanager
def _installs():
    """The writer's side of using(): wait for the running tasks, keep new ones waiting."""
    global _installing, _waiting
    if getattr(_here, "depth", 0):
        raise SpecError("pyew.load_spec inside a pyew.dask task would wait for that task itself: load spec files "
                        "before computing")
    with _use:
        _waiting += 1
        try:
            while _installing or _running:
                _use.wait()
        finally:
            _waiting -= 1
        _installing = True
    try:
        yield
    finally:
        with _use:
            _installing = False
            _use.notify_all()


def _install(shown: str, user: Path, digest: str, headers: dict, entries: dict, defs: dict, calls: dict,
             by_task: bool) -> SpecOps:
    global _version
    with _lock:
        new = [n for n, d in defs.items() if n not in _ops or _ops[n][1] != d]
        for name in defs:
            _files[name] = str(user.resolve())      # where it is now (a moved file, loaded again)
        if new:
            folder = _folder(digest, headers)
            _dirs.pop(folder, None)
            _dirs[folder] = headers         # searched first
            for name in new:
                if name in _ops and not by_task:
                    _earlier.setdefault(name, set()).add(_ops[name][1])
                _earlier.get(name, set()).discard(defs[name])      # loaded again: current, not earlier
                _ops[name] = (library.op_of(entries[name]), defs[name], shown)
                _loads[name] = next(_load_count)
                _calls[name] = calls[name]
                _functions[name] = fn = _function(_ops[name][0])       # an earlier one calls this one
                _made.add(fn)
            _version += 1                   # formulas' programs are kept per version
            call.plans().clear()            # and no plan runs a kernel of an op's earlier definition
        fns = {name: _functions[name] for name in headers}
    return SpecOps(shown, fns)


def _built_from(lib: library.Library, recorded: str) -> Path | None:
    """A spec file the library was built from: in its checkout, or the copy a wheel ships in
    pyew/_lib/spec."""
    p = lib.spec_path(recorded)
    if p.is_file():
        return p
    r = Path(recorded)
    shipped = Path(__file__).resolve().parent / "_lib" / "spec" / (r.name if r.is_absolute() else r)
    return shipped if shipped.is_file() else None


def _without_source(header: str) -> str:
    return "".join(ln for ln in header.splitlines(keepends=True) if not ln.startswith("// generated from "))


def _folder(digest: str, headers: dict[str, str]) -> str:
    """The folder holding fn/<op>.cuh for these headers: under the kernel cache, else (an unusable
    cache folder) a temporary one, removed at exit."""
    try:
        folder = jit.cache_dir() / "specs" / digest[:24]
        _write(folder, headers)
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="pyew-spec-"))
        atexit.register(shutil.rmtree, folder, True)
        _write(folder, headers)
    return str(folder)


def _write(folder: Path, headers: dict[str, str]) -> None:
    """Each header written to a temporary name and renamed, so a process compiling at the same time
    reads a whole one."""
    (folder / "fn").mkdir(parents=True, exist_ok=True)
    for name, text in headers.items():
        target = folder / "fn" / f"{name}.cuh"
        if target.is_file() and target.read_text() == text:
            continue
        fd, tmp = tempfile.mkstemp(dir=folder / "fn", prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


_TREES_MAX = 1024


def _function(op: library.Op):
    """op as a Python function: the formula `op(inputs..., params...)` run on the call path."""
    inputs = list(op.inputs)
    text = f"{op.name}({', '.join(inputs)})"
    names = [p.name for p in op.params]
    trees: dict = {}                      # the keywords as given -> the tree
    by_values: dict = {}                  # the params' values -> the tree (defaults filled in)

    def fn(*args, out=None, stream=None, **params):
        if _ops[op.name][0] is not op:      # loaded again with another definition: that one
            return _functions[op.name](*args, out=out, stream=stream, **params)
        traced = trace_if_traced(op.name, args, {**params, "out": out})     # inside pyew.fuse: the formula
        if traced is not None:
            return traced
        if len(args) != len(inputs):
            raise TypeError(f"{op.name}() takes {len(inputs)} input(s) ({', '.join(inputs)}), got {len(args)}")
        key = call.exact_params(sorted(params.items()))
        tree = trees.get(key) if key is not None else None
        if tree is None:                  # checked and filled in as a library op's params are
            values = call.param_values(op, params)
            tree = Call(op.name, tuple(Var(n) for n in inputs), tuple(sorted(zip(names, values))))
            exact = call.exact_params(zip(names, values))
            kept = by_values.get(exact) if exact is not None else None
            if kept is not None:
                tree = kept
            elif exact is not None and len(by_values) < _TREES_MAX:
                by_values[exact] = tree                       # one tree (one plan) per value
            if key is not None and len(trees) < _TREES_MAX:
                trees[key] = tree
        from . import fused
        try:
            return fused.run(tree, dict(zip(inputs, args)), text, out=out, stream=stream, names=inputs)
        except CompileError as e:     # the spec's C++ (its expr) did not compile: say where it is
            raise CompileError(f"{op.source}: op {op.name!r}: field 'expr': {e}") from None

    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = f"{op.doc}\n\n{op.name}({', '.join(inputs + [f'{p.name}={p.default}' for p in op.params])}, " \
                 "out=None, stream=None), loaded by pyew.load_spec from " + op.source
    return fn
