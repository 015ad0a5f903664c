"""Render the spec model through the Mako templates into build/.

Files are written only when their content changes, so make rebuilds only what a spec edit touched:
make compiles one translation unit per op (build/gen/<op>.cu, which includes the op's kernel
sources build/gen/ew_<op>_<dtype>.cu), each checked against its op's own prototypes
(build/gen/proto/<op>.h) and including no other op's; each op's device function lives in its own
header (build/gen/fn/<op>.cuh), included only by the kernels of that op and of the ops that call
it. build/ew.h, every prototype, is for users of the library.
"""
from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

from mako import exceptions
from mako.lookup import TemplateLookup

from pyew.formula import comment

from . import abi
from .spec import DEFAULT_SPEC, REPO, Op, Spec, call_tuning, direct_calls, op_calls, op_tuning, spec_path

TEMPLATES = Path(__file__).parent / "templates"
LIBEW = Path(__file__).resolve().parent.parent / "libew"
_lookup = TemplateLookup(directories=[str(TEMPLATES)], strict_undefined=True,
                         input_encoding="utf-8")


class GeneratorError(RuntimeError):
    """A template failed to render; the message carries Mako's view of the template."""


def abi_version() -> int:
    m = re.search(r"#define\s+EW_ABI_VERSION\s+(\d+)", (LIBEW / "ew_api.h").read_text())
    if not m:
        raise GeneratorError("libew/ew_api.h does not define EW_ABI_VERSION")
    return int(m.group(1))


def render(template: str, **ctx) -> str:
    ctx.setdefault("abi", abi)
    ctx.setdefault("comment", comment)
    try:
        return _lookup.get_template(template).render(**ctx)
    except Exception:
        raise GeneratorError(f"rendering {template} failed:\n"
                             + exceptions.text_error_template().render()) from None


def write_if_changed(path: Path, text: str) -> bool:
    try:
        if path.exists() and path.read_text(encoding="utf-8") == text:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except (OSError, UnicodeDecodeError) as e:
        raise GeneratorError(f"cannot write {path}: {getattr(e, 'strerror', None) or e}") from None
    return True


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./,:=+@%^-]+")


def shell_word(value: str) -> str:
    """`value` as one shell word, quoted only when it needs to be (double quotes where they do)."""
    if _PLAIN_WORD.fullmatch(value):
        return value
    if not any(c in value for c in '"$`\\!'):
        return f'"{value}"'
    return shlex.quote(value)


def spec_list(paths) -> str:
    """SPEC's value for these spec files: separated by spaces, a path with spaces (or quotes) in
    double quotes, as the generator's --spec-list reads it back."""
    def word(p):
        if _PLAIN_WORD.fullmatch(p):
            return p
        return '"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return " ".join(word(p) for p in paths)


def build_command(spec: Spec, out: Path, make_vars=()) -> str:
    """The make command that rebuilds this library: `make all`, SPEC= unless it is the default
    spec, BUILD= unless it is build/, then the given (name, value) make variables in order. Spec
    paths and the build folder are spelled as spec_path() does, so however a path was typed, the
    command (and every generated file) is the same."""
    words = ["make", "all"]
    paths = [f.path for f in spec.files]
    if paths != [DEFAULT_SPEC]:
        words.append("SPEC=" + shell_word(spec_list(paths)))
    build = spec_path(out)
    if build != "build":
        words.append("BUILD=" + shell_word(build))
    words += [f"{name}={shell_word(value)}" for name, value in make_vars]
    return " ".join(words)


def manifest(spec: Spec, command: str | None = None) -> dict:
    """The library's op table (pyew reads it back from the library). `command` is the build command
    it records (default: build_command(spec, Path("build")))."""
    if command is None:
        command = build_command(spec, Path("build"))
    return {"abi": abi_version(), "spec_files": [{"path": f.path, "sha256": f.sha256} for f in spec.files],
            "sources": source_digests(), "root": REPO.as_posix(), "build_command": command,
            "ops": [op_entry(op, spec) for op in spec.ops]}


# What else a library is built from, beside its spec files: libew's hand-written CUDA and the
# generator's templates. pyew compares them with the checkout it loads the library from, so a
# library older than its headers (which formulas compile against) is refused as stale.
SOURCES = ("libew/*.cuh", "libew/*.h", "libew/*.cu", "generator/templates/*.mako", "pyew/_ewcall.c")
BENCH_ONLY = frozenset(("libew/naive.cuh", "libew/dot_atomics.cuh", "generator/templates/bench_manifest.cu.mako"))


def source_digests() -> list[dict]:
    """The sources of the library (not those of the benchmark's library alone), with their SHA-256."""
    files = [p for pattern in SOURCES for p in sorted(REPO.glob(pattern))]
    return [{"path": p.relative_to(REPO).as_posix(), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
            for p in files if p.relative_to(REPO).as_posix() not in BENCH_ONLY]


def op_entry(op: Op, spec: Spec) -> dict:
    """One op's row of the manifest (pyew.load_spec reads its ops' rows without a library)."""
    return {
        "name": op.name, "kind": op.kind, "inputs": list(op.inputs), "doc": op.doc,
        "params": [{"name": p.name, "type": p.type, "default": p.default} for p in op.params],
        "ref": op.ref, "out": op.out, "source": op.source, "rtol": op.rtol,
        "tuning": op_tuning(op, spec) if op.kind == "map" else None,
        "call_tuning": call_tuning(op, spec) if op.kind == "map" else None,
        "ufunc": op.ufunc, "fixed": dict(op.fixed), "ulp": op.ulp,
        "launch": op.launch if op.kind == "map" else None,
        "kernels": [{
            "dtype": k.dtype.name, "out_dtype": k.out_dtype.name,
            "in_dtypes": [d.name for d in k.in_dtypes],
            "paired": op.pair_expr(k.dtype) is not None,
            "entries": [{"role": e.role, "symbol": e.symbol, "packed": abi.packed_symbol(e.symbol),
                         "args": [list(a) for a in e.args]}
                        for e in k.entries()],
        } for k in op.kernels()],
    }


def fn_header(op: Op, spec: Spec) -> str:
    """build/gen/fn/<op>.cuh: a map op's device function, which its kernels, the ops calling it and
    fused formulas include."""
    return render("fn.cuh.mako", op=op, deps=op_calls(op, spec), direct=direct_calls(op, spec),
                  signature=_fn_signature(op), returns=_fn_returns(op), mark=EXPR_MARK)


# Generated sources mark the line of each spec expression, so that a compile error on it can be
# traced back to the spec (generator/nvcc.py).
EXPR_MARK = "// spec: expr"
PAIR_MARK = "// spec: pair"


def _fn_signature(op: Op) -> str:
    """Inputs in the compute type C, a fixed input in its own dtype's compute type (bool)."""
    fixed = dict(op.fixed)
    some = op.in_dtypes(op.dtypes[0])
    args = [f"{d.compute if i in fixed else 'C'} {i}" for i, d in zip(op.inputs, some)]
    for p in op.params:
        t = "::ew::id_t<C>" if p.type == "float" else "::int64_t"
        args.append(f"{t} {p.name}")
    return ", ".join(args)


def _fn_returns(op: Op) -> str:
    """The device function's result type: C, or bool for ops whose output is bool (comparisons,
    the is* tests), so that a caller (another op, a fused formula) gets the bool itself."""
    return "bool" if op.out is not None and op.out_dtype(op.dtypes[0]).kind == "bool" else "C"


def _map_context(op: Op, kernel, spec: Spec) -> dict:
    C = kernel.dtype.compute
    ptype = lambda p: C if p.type == "float" else "int64_t"   # noqa: E731
    ins = kernel.in_dtypes
    call_args = ", ".join([f"::ew::convert<{d.compute}>({i})" for i, d in zip(op.inputs, ins)]
                          + [f"ew_param_{p.name}" for p in op.params])
    basic = op.launch == "basic"
    return dict(T=kernel.dtype, Out=kernel.out_dtype, C=C, ptype=ptype, call_args=call_args, ins=ins,
                pair=op.pair_expr(kernel.dtype), tuning=op_tuning(op, spec), mark=PAIR_MARK,
                launcher="launch_map_basic" if basic else "launch_map",
                strided_launcher="launch_map_strided_basic" if basic else "launch_map_strided")


def _source_index(spec: Spec) -> dict:
    """gen/sources.json: which op each generated source belongs to, and that op's spec file and
    expressions, for generator/nvcc.py's error messages."""
    files, ops = {}, {}
    for op in spec.ops:
        if op.kind == "map":
            files[f"fn/{op.name}.cuh"] = op.name
        files[f"{op.name}.cu"] = files[f"proto/{op.name}.h"] = op.name
        for k in op.kernels():
            files[f"{k.name}.cu"] = op.name
        ops[op.name] = {"source": op.source, "kind": op.kind, "expr": op.expr, "pair": dict(op.pair)}
    return {"files": files, "ops": ops}


def _embedded(doc: dict) -> str:
    """JSON for a raw string literal R"EW_MANIFEST(...)EW_MANIFEST"; spec text cannot end it early,
    because ')' is written as \\u0029 there (it only occurs in JSON strings)."""
    return json.dumps(doc, indent=1, sort_keys=True).replace(")EW_MANIFEST", "\\u0029EW_MANIFEST")


def _write(files: dict[Path, str], gen: Path, folder: Path, var: str, stale: tuple[str, ...],
           compiled=None) -> dict:
    """Write `files` and folder/sources.mk (make variable `var`: the .cu files under folder, or those of
    `compiled` when given, in make's own spelling of the build folder); remove files matching
    `stale` under folder that are no longer generated (those of ops no longer in the spec must not
    linger in the build)."""
    cu = sorted(p.relative_to(gen).as_posix() for p in (files if compiled is None else compiled)
                if p.suffix == ".cu")
    files[folder / "sources.mk"] = (f"# generated by generator/ -- do not edit\n{var} := \\\n"
                                    + "".join(f"  $(BUILD)/gen/{c} \\\n" for c in cu) + "\n")
    written = sum(write_if_changed(p, t) for p, t in files.items())
    removed = 0
    for old in [p for pattern in stale for p in folder.glob(pattern)]:
        if old not in files:
            try:
                old.unlink()
            except OSError as e:
                raise GeneratorError(f"cannot remove {old}: {e.strerror or e}") from None
            removed += 1
    return {"written": written, "unchanged": len(files) - written, "removed": removed}


def generate(spec: Spec, out: Path, command: str | None = None) -> dict:
    """Write every generated file under `out`; returns counts of written and unchanged files.
    `command` is the build command the manifest records (default: build_command(spec, out))."""
    out = Path(out)
    gen = out / "gen"
    sources_label = ", ".join(Path(f.path).name for f in spec.files)
    files: dict[Path, str] = {}
    for op in spec.ops:
        if op.kind == "map":
            files[gen / "fn" / f"{op.name}.cuh"] = fn_header(op, spec)
        kernel_sources = []
        for k in op.kernels():
            ctx = dict(op=op, kernel=k, entries=k.entries())
            if op.kind == "map":
                ctx.update(_map_context(op, k, spec))
            files[gen / f"{k.name}.cu"] = text = render(op.kind_info.template, **ctx)
            kernel_sources.append(text)
        # what make compiles: the op's kernels as one translation unit, checked against the op's
        # own prototypes (so a spec edit recompiles only the ops it changes)
        files[gen / "proto" / f"{op.name}.h"] = render("proto.h.mako", op=op)
        files[gen / f"{op.name}.cu"] = render("unit.cu.mako", op=op, includes=hoisted_includes(kernel_sources))
    man_json = _embedded(manifest(spec, command if command is not None else build_command(spec, out)))
    files[gen / "ew_manifest.cu"] = render("manifest.cu.mako", sources=sources_label, manifest_json=man_json)
    files[out / "ew.h"] = render("ew.h.mako", sources=sources_label, kernels=spec.kernels())
    files[out / "manifest.json"] = man_json + "\n"
    files[gen / "sources.json"] = json.dumps(_source_index(spec), indent=1, sort_keys=True) + "\n"
    compiled = [gen / f"{op.name}.cu" for op in spec.ops] + [gen / "ew_manifest.cu"]
    return _write(files, gen, gen, "GEN_SOURCES", ("*.cu", "fn/*.cuh", "proto/*.h"), compiled)


def hoisted_includes(sources) -> list[str]:
    """The #include lines of the kernels' sources, each once, in order: a translation unit includes
    them before it includes the sources themselves inside namespaces (unit.cu.mako)."""
    seen: dict[str, None] = {}
    for text in sources:
        for line in text.splitlines():
            if line.startswith("#include "):
                seen.setdefault(line.strip(), None)
    return list(seen)


def generate_bench(spec: Spec, out: Path, naive_ops) -> dict:
    """The benchmark library's sources under out/gen/bench (`make bench` links them into
    out/libew_bench.so): each kernel's bench-only entries (generator/kinds.py), for map ops only
    those named in `naive_ops`, and the table of them the library embeds (ew_bench_manifest)."""
    maps = [o.name for o in spec.ops if o.kind == "map"]
    unknown = [n for n in naive_ops if n not in maps]
    if unknown:
        raise GeneratorError(f"BENCH_NAIVE names {', '.join(unknown)}, not a map op of the spec; its map ops: "
                             f"{', '.join(maps)}")
    bench = Path(out) / "gen" / "bench"
    files: dict[Path, str] = {}
    entries = []
    for op in spec.ops:
        for k in op.kernels():
            listed = op.kind_info.bench_entries(op, k.dtype)
            if not listed or (op.kind == "map" and op.name not in naive_ops):
                continue
            ctx = dict(op=op, kernel=k, entries=listed)
            if op.kind == "map":
                ctx.update(_map_context(op, k, spec))
            files[bench / f"{k.name}.cu"] = render(op.kind_info.template, **ctx)
            entries += [{"op": op.name, "dtype": k.dtype.name, "role": e.role, "symbol": e.symbol,
                         "args": [list(a) for a in e.args]} for e in listed]
    doc = {"abi": abi_version(), "spec_files": [{"path": f.path, "sha256": f.sha256} for f in spec.files],
           "entries": entries}
    label = ", ".join(Path(f.path).name for f in spec.files)
    files[bench / "ew_bench_manifest.cu"] = render("bench_manifest.cu.mako", sources=label,
                                                   manifest_json=_embedded(doc))
    return _write(files, bench.parent, bench, "BENCH_SOURCES", ("*.cu",))
