"""Generated sources under nvcc, without a GPU: every definition is checked against ew.h, names the
generated code used to take for itself compile as spec names now, and a spec expression that does
not compile is reported with its spec file, op and expression (generator/nvcc.py). Skipped where
nvcc is missing; each compile takes a second or two."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

from generator.render import generate  # noqa: E402
from generator.spec import load, spec_path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NVCC = os.environ.get("NVCC") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME")
                                  else shutil.which("nvcc"))
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not NVCC or not os.path.exists(NVCC), reason="nvcc not found")]
ARCH = ["-gencode", "arch=compute_90,code=sm_90"]


def flags(out: Path, libew: Path = ROOT / "libew") -> list[str]:
    return ["-std=c++17", *ARCH, "-Xcompiler", "-fPIC", f"-I{libew}", f"-I{out}", f"-I{out / 'gen'}"]


def nvcc(out: Path, source: Path, wrapped=False, libew: Path = ROOT / "libew"):
    cmd = [NVCC, *flags(out, libew), "-c", str(source), "-o", str(source.with_suffix(".o"))]
    if wrapped:
        cmd = [sys.executable, "-m", "generator.nvcc", *cmd]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def test_definition_that_differs_from_ew_h_does_not_compile(tmp_path):
    generate(load([ROOT / "libew/ops.toml"]), tmp_path)
    good = tmp_path / "gen/ew_relu_mask_backward_f32.cu"
    r = nvcc(tmp_path, good)
    assert r.returncode == 0, r.stdout + r.stderr
    text = good.read_text()
    head = "const void* mask, int64_t n,"
    assert head in text
    bad = tmp_path / "gen/ew_relu_mask_backward_f64.cu"     # a listed source, so the wrapper knows its op
    bad.write_text(text.replace(head, "const void* mask, int n,"))
    r = nvcc(tmp_path, bad, wrapped=True)
    assert r.returncode != 0
    assert 'more than one instance of overloaded function "ew_relu_mask_backward_f32" has "C" linkage' in r.stderr
    assert r.stderr.splitlines()[-1].startswith("error: libew/ops.toml: op 'relu_mask_backward' does not compile: ")


def test_former_template_names_compile_as_spec_names(tmp_path):
    spec = tmp_path / "names.toml"
    spec.write_text('''
[[op]]
name = "fma_ish"
inputs = ["f", "Fn"]
dtypes = ["float16"]
params = [{ name = "apply2", type = "float", default = 1.0 }, { name = "i", type = "int", default = 2 }]
expr = "f * Fn + C(apply2) + C(i)"
pair = { float16 = "__hfma2(f, Fn, __float2half2_rn(apply2 + float(i)))" }
ref = "f * Fn + apply2 + i"
doc = "f * Fn + apply2 + i."
''')
    generate(load([spec]), tmp_path / "b")
    r = nvcc(tmp_path / "b", tmp_path / "b/gen/ew_fma_ish_f16.cu")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("fields,source,field,expr,nvcc_says", [
    ('expr = "nosuchop(x)"', "ew_bad_f32.cu", "expr", "nosuchop(x)", 'identifier "nosuchop" is undefined'),
    ('expr = "x +* 2"', "ew_bad_f32.cu", "expr", "x +* 2", "error"),
    ('expr = "x"\npair = { float16 = "__hadd2(x, nosuch)" }', "ew_bad_f16.cu", "pair", "__hadd2(x, nosuch)",
     'identifier "nosuch" is undefined'),
    ('expr = "inner(x) + C(1)"', "ew_bad_f32.cu", "expr", "inner(x) + C(1)", "error"),
])
def test_compile_error_names_spec_file_op_and_expression(tmp_path, fields, source, field, expr, nvcc_says):
    spec = tmp_path / "bad ops.toml"
    spec.write_text(f'''
[[op]]
name = "inner"
inputs = ["x"]
dtypes = ["float32", "float16"]
expr = "x + undefined_thing"
ref = "x"
doc = "broken on purpose."

[[op]]
name = "bad"
inputs = ["x"]
dtypes = ["float32", "float16"]
{fields}
ref = "x"
doc = "bad."
''')
    generate(load([spec]), tmp_path / "b")
    r = nvcc(tmp_path / "b", tmp_path / "b/gen" / source, wrapped=True)
    assert r.returncode != 0
    last = r.stderr.splitlines()[-1]
    if expr.startswith("inner("):     # the error is in the op it calls: that op is named
        op, field, expr, nvcc_says = "inner", "expr", "x + undefined_thing", 'identifier "undefined_thing" is undefined'
    else:
        op = "bad"
    assert last.startswith(f"error: {spec_path(spec)}: op '{op}': field '{field}': {expr!r} does not compile: "), last
    assert nvcc_says in last and "error" in last.split("does not compile: ")[1]


def _libew_copy(tmp_path: Path, header: str, edit) -> Path:
    """libew/ copied under tmp_path with one header edited."""
    libew = tmp_path / "libew"
    shutil.copytree(ROOT / "libew", libew)
    path = libew / header
    path.write_text(edit(path.read_text()))
    return libew


def test_error_in_a_header_reached_from_an_expression_names_the_expression(tmp_path):
    """nvcc reports an error inside a helper at the helper's line in libew/; its notes trace the
    instantiation back to the spec expression that called it, which is what the user can fix."""
    helper = "template <typename C>\n__device__ C needs_a_struct(C x) { return x.field; }\n"
    libew = _libew_copy(tmp_path, "ew_math.cuh",
                        lambda text: text.replace("namespace ew {", "namespace ew {\n" + helper, 1))
    spec = tmp_path / "ops.toml"
    spec.write_text('[[op]]\nname = "bad"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "ew::needs_a_struct(x) + x"\n'
                    'ref = "x"\ndoc = "bad."\n')
    generate(load([spec]), tmp_path / "b")
    r = nvcc(tmp_path / "b", tmp_path / "b/gen/ew_bad_f32.cu", wrapped=True, libew=libew)
    assert r.returncode != 0
    last = r.stderr.splitlines()[-1]
    assert last.startswith(f"error: {spec_path(spec)}: op 'bad': field 'expr': 'ew::needs_a_struct(x) + x' "
                           "does not compile: "), last
    assert "ew_math.cuh" in last and "error" in last.split("does not compile: ")[1]


def test_error_in_a_hand_written_header_is_not_put_on_the_spec(tmp_path):
    """A mistake in the template itself (an edit of libew/elementwise.cuh) fails every op's build;
    the line names the header, not the op's expression."""
    body = "  if constexpr (N % 2 == 0 && has_apply2<F>::value) {"
    libew = _libew_copy(tmp_path, "elementwise.cuh",
                        lambda text: text.replace(body, "  undeclared_step(f);\n" + body, 1))
    assert "undeclared_step" in (libew / "elementwise.cuh").read_text()
    generate(load([ROOT / "libew/ops.toml"]), tmp_path / "b")
    r = nvcc(tmp_path / "b", tmp_path / "b/gen/ew_relu_f32.cu", wrapped=True, libew=libew)
    assert r.returncode != 0
    last = r.stderr.splitlines()[-1]
    assert last.startswith("error: libew/ops.toml: op 'relu': nvcc's first error is in "), last
    assert "elementwise.cuh, not in code generated from this op's expressions" in last, last
    assert "field 'expr'" not in last
    assert 'identifier "undeclared_step" is undefined' in last


def test_make_reports_the_spec_behind_a_compile_error(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('[[op]]\nname = "bad"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "nosuchop(x)"\n'
                    'ref = "x"\ndoc = "bad."\n')
    build = tmp_path / "b"
    common = [f"BUILD={build}", f"NVCC={NVCC}", "ARCH=" + " ".join(ARCH)]
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "generate", f"SPEC={spec}", *common], cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["make", str(build / "obj/ew_bad_f32.o"), *common], cwd=ROOT, capture_output=True, text=True,
                       env=env)
    assert r.returncode != 0
    assert (f"error: {spec_path(spec)}: op 'bad': field 'expr': 'nosuchop(x)' does not compile: "
            in r.stderr), r.stderr
