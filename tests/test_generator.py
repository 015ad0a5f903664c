"""Generator output: files per (op, dtype), do-not-edit lines, write-only-when-changed, manifest,
header, stale-file removal, and nothing written when the spec is bad."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

from generator.render import generate
from generator.spec import load

from .helpers import header_compiles_as_c

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def run_gen(out, *specs):
    return subprocess.run([sys.executable, "-m", "generator", "--out", str(out), *map(str, specs)],
                          cwd=ROOT, capture_output=True, text=True)


def test_one_cu_per_op_dtype_and_manifest(tmp_path):
    spec = load([ROOT / "libew/ops.toml"])
    generate(spec, tmp_path)
    cus = sorted(p.name for p in (tmp_path / "gen").glob("ew_*.cu") if p.name != "ew_manifest.cu")
    assert cus == sorted(f"{k.name}.cu" for k in spec.kernels())
    text = (tmp_path / "gen" / "ew_gelu_f16.cu").read_text()
    assert text.startswith("// generated from") and "do not edit" in text.splitlines()[0]
    assert 'EW_API int ew_gelu_f16(void* out, const void* x, int64_t n, void* stream' in text
    assert "apply2" in (tmp_path / "gen" / "ew_mul_bf16.cu").read_text()
    assert "apply2" not in (tmp_path / "gen" / "ew_mul_f32.cu").read_text()
    man = json.loads((tmp_path / "manifest.json").read_text())
    syms = [e["symbol"] for o in man["ops"] for k in o["kernels"] for e in k["entries"]]
    assert "ew_elu_bf16" in syms and len(set(syms)) == len(syms)
    elu = next(o for o in man["ops"] if o["name"] == "elu")
    assert elu["params"] == [{"name": "alpha", "type": "float", "default": 1.0}]
    header = (tmp_path / "ew.h").read_text()
    assert "EW_API int ew_elu_bf16(void* out, const void* x, int64_t n, double alpha, void* stream, int sms, int threads_per_sm);" in header


def test_header_compiles_as_c(tmp_path):
    generate(load([ROOT / "libew/ops.toml"]), tmp_path)
    header_compiles_as_c(tmp_path, "ew_abi_version() == 0")


def test_written_only_when_changed(tmp_path):
    spec_file = tmp_path / "ops.toml"
    spec_file.write_text((ROOT / "libew/ops.toml").read_text())
    generate(load([spec_file]), tmp_path / "b")
    gelu = tmp_path / "b/gen/ew_gelu_f32.cu"
    fn = tmp_path / "b/gen/fn/elu.cuh"
    before = {p: p.stat().st_mtime_ns for p in (gelu, fn)}
    counts = generate(load([spec_file]), tmp_path / "b")
    assert counts["written"] == 0
    # change one op's expression: its function header changes, other ops' files do not
    spec_file.write_text(spec_file.read_text().replace("alpha * ew::expm1<R>(x)", "alpha * (exp(x) - C(1))"))
    counts = generate(load([spec_file]), tmp_path / "b")
    assert gelu.stat().st_mtime_ns == before[gelu]
    assert fn.stat().st_mtime_ns != before[fn]
    assert "exp(x) - C(1)" in fn.read_text()
    assert counts["written"] <= 4   # elu's function header, manifest .cu, manifest.json (+ ew.h untouched)


def test_user_spec_adds_ops_and_removed_ops_disappear(tmp_path):
    r = run_gen(tmp_path, ROOT / "libew/ops.toml", ROOT / "examples/my_ops.toml")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "gen/ew_bias_gelu_bf16.cu").exists()
    assert '#include "fn/gelu.cuh"' in (tmp_path / "gen/fn/bias_gelu.cuh").read_text()
    r = run_gen(tmp_path, ROOT / "libew/ops.toml")
    assert r.returncode == 0 and "removed" in r.stdout
    assert not (tmp_path / "gen/ew_bias_gelu_bf16.cu").exists()
    assert "bias_gelu" not in (tmp_path / "gen/sources.mk").read_text()


def test_bad_spec_writes_nothing(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[op]]\nname = "x1"\ninputs = ["x"]\ndtypes = ["float"]\nexpr = "x"\nref = "x"\n')
    r = run_gen(tmp_path / "out", ROOT / "libew/ops.toml", bad)
    assert r.returncode == 1
    assert "bad.toml: op 'x1': field 'doc': is missing" in r.stderr
    assert not (tmp_path / "out").exists()


def test_render_error_shows_template():
    import pytest
    from generator import render
    with pytest.raises(render.GeneratorError, match=r"rendering fn.cuh.mako failed:(.|\n)*NameError"):
        render.render("fn.cuh.mako")   # strict_undefined: a missing name is an error, not ''
