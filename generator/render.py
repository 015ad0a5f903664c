"""Render the spec model through the Mako templates into build/.

Files are written only when their content changes, so make rebuilds only what a spec edit touched:
each op's device function lives in its own header (build/gen/fn/<op>.cuh), included only by the
kernels of that op and of the ops that call it.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from mako import exceptions
from mako.lookup import TemplateLookup

from . import abi
from .spec import DEFAULT_SPEC, Op, Spec, direct_calls, op_calls, op_tuning, spec_path

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


def comment(text: str) -> str:
    """Text safe inside a generated // or /* */ comment: it cannot end the comment, and a trailing
    backslash cannot splice the next line into it."""
    text = text.replace("*/", "* /").replace("??", "? ?").rstrip()
    return text + "." if text.endswith("\\") else text


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
    ops = []
    for op in spec.ops:
        ops.append({
            "name": op.name, "kind": op.kind, "inputs": list(op.inputs), "doc": op.doc,
            "params": [{"name": p.name, "type": p.type, "default": p.default} for p in op.params],
            "ref": op.ref, "out": op.out, "source": op.source, "rtol": op.rtol,
            "tuning": op_tuning(op, spec) if op.kind == "map" else None,
            "kernels": [{
                "dtype": k.dtype.name, "out_dtype": k.out_dtype.name,
                "paired": op.pair_expr(k.dtype) is not None,
                "entries": [{"role": e.role, "symbol": e.symbol, "packed": abi.packed_symbol(e.symbol),
                             "args": [list(a) for a in e.args]}
                            for e in k.entries()],
            } for k in op.kernels()],
        })
    return {"abi": abi_version(), "spec_files": [{"path": f.path, "sha256": f.sha256} for f in spec.files],
            "build_command": command, "ops": ops}


# Generated sources mark the line of each spec expression, so that a compile error on it can be
# traced back to the spec (generator/nvcc.py).
EXPR_MARK = "// spec: expr"
PAIR_MARK = "// spec: pair"


def _fn_signature(op: Op) -> str:
    args = [f"C {i}" for i in op.inputs]
    for p in op.params:
        t = "::ew::id_t<C>" if p.type == "float" else "::int64_t"
        args.append(f"{t} {p.name}")
    return ", ".join(args)


def _map_context(op: Op, kernel, spec: Spec) -> dict:
    C = kernel.dtype.compute
    ptype = lambda p: C if p.type == "float" else "int64_t"   # noqa: E731
    call_args = ", ".join([f"::ew::convert<{C}>({i})" for i in op.inputs] + [f"ew_param_{p.name}" for p in op.params])
    return dict(T=kernel.dtype, Out=kernel.out_dtype, C=C, ptype=ptype, call_args=call_args,
                pair=op.pair_expr(kernel.dtype), tuning=op_tuning(op, spec), mark=PAIR_MARK)


def _source_index(spec: Spec) -> dict:
    """gen/sources.json: which op each generated source belongs to, and that op's spec file and
    expressions, for generator/nvcc.py's error messages."""
    files, ops = {}, {}
    for op in spec.ops:
        if op.kind == "map":
            files[f"fn/{op.name}.cuh"] = op.name
        for k in op.kernels():
            files[f"{k.name}.cu"] = op.name
        ops[op.name] = {"source": op.source, "kind": op.kind, "expr": op.expr, "pair": dict(op.pair)}
    return {"files": files, "ops": ops}


def generate(spec: Spec, out: Path, command: str | None = None) -> dict:
    """Write every generated file under `out`; returns counts of written and unchanged files.
    `command` is the build command the manifest records (default: build_command(spec, out))."""
    out = Path(out)
    gen = out / "gen"
    sources_label = ", ".join(Path(f.path).name for f in spec.files)
    files: dict[Path, str] = {}
    for op in spec.ops:
        if op.kind == "map":
            files[gen / "fn" / f"{op.name}.cuh"] = render(
                "fn.cuh.mako", op=op, deps=op_calls(op, spec), direct=direct_calls(op, spec),
                signature=_fn_signature(op), mark=EXPR_MARK)
        for k in op.kernels():
            ctx = dict(op=op, kernel=k, entries=k.entries())
            if op.kind == "map":
                ctx.update(_map_context(op, k, spec), entry=k.entries()[0])
            files[gen / f"{k.name}.cu"] = render(op.kind_info.template, **ctx)
    man = manifest(spec, command if command is not None else build_command(spec, out))
    # The manifest is embedded as a raw string literal R"EW_MANIFEST(...)EW_MANIFEST"; spec text
    # cannot end it early, because ')' is written as \u0029 there (it only occurs in JSON strings).
    man_json = json.dumps(man, indent=1, sort_keys=True).replace(")EW_MANIFEST", "\\u0029EW_MANIFEST")
    files[gen / "ew_manifest.cu"] = render("manifest.cu.mako", sources=sources_label, manifest_json=man_json)
    files[gen / "ew_packed.cu"] = render("packed.cu.mako", sources=sources_label, kernels=spec.kernels())
    files[out / "ew.h"] = render("ew.h.mako", sources=sources_label, kernels=spec.kernels())
    files[out / "manifest.json"] = man_json + "\n"
    files[gen / "sources.json"] = json.dumps(_source_index(spec), indent=1, sort_keys=True) + "\n"
    # in make's own spelling of the build folder, however --out spelled it
    cu = sorted(p.relative_to(gen).as_posix() for p in files if p.suffix == ".cu")
    files[gen / "sources.mk"] = ("# generated by generator/ -- do not edit\nGEN_SOURCES := \\\n"
                                 + "".join(f"  $(BUILD)/gen/{c} \\\n" for c in cu) + "\n")
    written = sum(write_if_changed(p, t) for p, t in files.items())
    # Generated files of ops no longer in the spec must not linger in the build.
    removed = 0
    for stale in list(gen.glob("*.cu")) + list((gen / "fn").glob("*.cuh")):
        if stale not in files:
            try:
                stale.unlink()
            except OSError as e:
                raise GeneratorError(f"cannot remove {stale}: {e.strerror or e}") from None
            removed += 1
    return {"written": written, "unchanged": len(files) - written, "removed": removed}
