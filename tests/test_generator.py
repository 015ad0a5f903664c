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
    # make compiles one translation unit per op (its kernels' sources inside namespaces) and the manifest
    units = sorted(p.name for p in (tmp_path / "gen").glob("*.cu") if not p.name.startswith("ew_"))
    assert units == sorted(f"{o.name}.cu" for o in spec.ops)
    mk = (tmp_path / "gen" / "sources.mk").read_text()
    assert "$(BUILD)/gen/gelu.cu" in mk and "$(BUILD)/gen/ew_manifest.cu" in mk and "ew_gelu_f16.cu" not in mk
    unit = (tmp_path / "gen" / "gelu.cu").read_text()
    assert unit.index('#include "fn/gelu.cuh"') < unit.index("namespace ew_unit_f16 {\n#include \"ew_gelu_f16.cu\"\n}")
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
    assert ("EW_API int ew_elu_bf16(void* out, const void* x, int64_t n, double alpha, void* stream, int sms, "
            "int threads_per_sm);") in header
    # its packed twin: the same call, each argument read from its member of ew_arg and cast back
    assert "EW_API int ew_elu_bf16_packed(const ew_arg* args);" in header
    packed = (tmp_path / "gen" / "elu.cu").read_text()
    assert ("EW_API int ew_elu_bf16_packed(const ew_arg* args) {\n  return ew_elu_bf16((void*)args[0].p, "
            "(const void*)args[1].p, (int64_t)args[2].i, (double)args[3].f, (void*)args[4].p, (int)args[5].i, "
            "(int)args[6].i);\n}") in packed
    assert next(e for e in elu["kernels"][0]["entries"] if e["role"] == "forward")["packed"] == "ew_elu_f32_packed"


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
    assert counts["written"] <= 5   # elu: function header, manifest .cu, manifest.json, sources.json


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


# ---- one C ABI: symbols, prototypes and definitions from generator/abi.py ---------------------

def test_every_definition_matches_its_declaration_in_ew_h(tmp_path):
    """Each generated source includes its op's prototypes (gen/proto/<op>.h, its part of ew.h) and no
    other op's, and each EW_API definition in it is spelled exactly as ew.h declares it (nvcc checks
    the same, see test_generator_nvcc.py)."""
    from generator import abi
    spec = load([ROOT / "libew/ops.toml", ROOT / "examples/my_ops.toml"])
    generate(spec, tmp_path)
    header = (tmp_path / "ew.h").read_text()
    declared = {line.split("  /*")[0] for line in header.splitlines() if line.startswith("EW_API ")}
    want = {abi.declaration(e) for k in spec.kernels() for e in k.entries()}
    want |= {abi.packed_head(e) + ";" for k in spec.kernels() for e in k.entries()}
    want |= {abi.declaration(f) for f in abi.RUNTIME}
    assert declared == want
    owner = json.loads((tmp_path / "gen" / "sources.json").read_text())["files"]
    defined = set()
    for cu in (tmp_path / "gen").glob("*.cu"):
        text = cu.read_text()
        includes = [line for line in text.splitlines() if line.startswith("#include ")]
        if cu.name == "ew_manifest.cu":
            assert includes == ['#include "ew_api.h"']
        else:
            op = owner[cu.name]
            assert includes[0] == f'#include "proto/{op}.h"', cu.name
            assert not any("proto/" in line for line in includes[1:] if f"proto/{op}.h" not in line), cu.name
            assert '#include "ew.h"' not in includes
        defined |= {line.split(" {")[0] + ";" for line in text.splitlines()
                    if line.startswith("EW_API ") and " {" in line}
    for op in spec.ops:
        proto = (tmp_path / "gen" / "proto" / f"{op.name}.h").read_text()
        mine = {line.split("  /*")[0] for line in proto.splitlines() if line.startswith("EW_API ")}
        assert mine == {f(e) for k in op.kernels() for e in k.entries()
                        for f in (abi.declaration, lambda e: abi.packed_head(e) + ";")}
    runtime_cu = {abi.declaration(f) for f in abi.RUNTIME if f.symbol not in ("ew_abi_version", "ew_manifest")}
    assert defined == want - runtime_cu     # libew/runtime.cu defines the runtime helpers


def test_symbols_come_from_one_function():
    from generator import abi, kinds
    from pyew import dtypes as dt
    src = (ROOT / "generator/kinds.py").read_text()
    assert 'f"ew_' not in src
    spec = load([ROOT / "libew/ops.toml"])
    f16 = dt.BY_NAME["float16"]
    syms = {e.role: e.symbol for k in spec.op("upsample_nearest2d").kernels() if k.dtype is f16 for e in k.entries()}
    assert syms == {"forward": "ew_upsample_nearest2d_f16", "backward": "ew_upsample_nearest2d_backward_f16"}
    assert abi.symbol("relu", f16, variant="naive") == "ew_naive_relu_f16"
    assert abi.symbol("scatter_add", f16, "check", index="i64") == "ew_scatter_add_check_f16_i64"
    assert [k.name for k in spec.op("dot").kernels()][0] == abi.symbol("dot", dt.BY_NAME["float32"])
    assert abi.parameters(()) == "void" and abi.C_TYPES[abi.PARAM_KINDS["float"]] == "double"
    assert set(kinds.KINDS) == {"map", "relu_mask", "mask_backward", "upsample_nearest2d", "dot", "scatter_add"}


def test_ew_h_written_only_when_its_content_changes(tmp_path):
    spec_file = tmp_path / "ops.toml"
    spec_file.write_text((ROOT / "libew/ops.toml").read_text())
    generate(load([spec_file]), tmp_path / "b")
    header = tmp_path / "b/ew.h"
    before = header.stat().st_mtime_ns
    # an expression edit changes no prototype: ew.h (which every object depends on) stays
    spec_file.write_text(spec_file.read_text().replace("alpha * ew::expm1<R>(x)", "alpha * (exp(x) - C(1))"))
    generate(load([spec_file]), tmp_path / "b")
    assert header.stat().st_mtime_ns == before
    spec_file.write_text(spec_file.read_text().replace('name = "lambd", type = "float"', 'name = "lambd", type = "int"')
                         .replace("default = 0.5", "default = 1"))
    generate(load([spec_file]), tmp_path / "b")
    assert "int64_t lambd" in header.read_text() and header.stat().st_mtime_ns != before


# ---- spec paths, build command ---------------------------------------------------------------

def test_spec_path_spelling_changes_no_generated_file(tmp_path, monkeypatch):
    out = tmp_path / "b"
    assert run_gen(out, "libew/ops.toml").returncode == 0
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for spelling in ("./libew/ops.toml", str(ROOT / "libew/ops.toml"), "libew/../libew/ops.toml"):
        r = run_gen(out, spelling)
        assert r.returncode == 0 and " 0 files written" in r.stdout, (spelling, r.stdout)
    assert files == {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    man = json.loads((out / "manifest.json").read_text())
    assert [f["path"] for f in man["spec_files"]] == ["libew/ops.toml"]
    assert {o["source"] for o in man["ops"]} == {"libew/ops.toml"}
    assert "generated from libew/ops.toml by" in (out / "gen/ew_relu_f32.cu").read_text()


def test_manifest_paths_relative_inside_the_repo_absolute_outside(tmp_path):
    other = tmp_path / "my ops.toml"
    other.write_text((ROOT / "examples/my_ops.toml").read_text())
    spec = load([ROOT / "libew/ops.toml", other])
    generate(spec, tmp_path / "b")
    man = json.loads((tmp_path / "b/manifest.json").read_text())
    assert [f["path"] for f in man["spec_files"]] == ["libew/ops.toml", other.resolve().as_posix()]
    assert spec.op("softplus").source == other.resolve().as_posix()


def test_build_command(tmp_path):
    from generator.render import build_command
    generate(load([ROOT / "libew/ops.toml"]), tmp_path / "a")
    man = json.loads((tmp_path / "a/manifest.json").read_text())
    assert man["build_command"] == f"make all BUILD={(tmp_path / 'a').resolve().as_posix()}"
    assert build_command(load(["./libew/ops.toml"]), ROOT / "build") == "make all"
    spec = load([ROOT / "libew/ops.toml", ROOT / "examples/my_ops.toml"])
    assert build_command(spec, ROOT / "build") == 'make all SPEC="libew/ops.toml examples/my_ops.toml"'
    assert build_command(load([ROOT / "libew/ops.toml"]), "build", [("ARCH", "-gencode arch=compute_90,code=sm_90")]) \
        == 'make all ARCH="-gencode arch=compute_90,code=sm_90"'
    spaced = tmp_path / "my ops.toml"
    spaced.write_text((ROOT / "examples/my_ops.toml").read_text())
    cmd = build_command(load([ROOT / "libew/ops.toml", spaced]), "build")
    assert cmd == f"make all SPEC='libew/ops.toml \"{spaced.resolve().as_posix()}\"'"
    # the command's SPEC reads back as the same files, through the shell and then --spec-list
    import shlex
    value = shlex.split(cmd)[2].removeprefix("SPEC=")
    assert shlex.split(value) == ["libew/ops.toml", spaced.resolve().as_posix()]


def test_spec_list_argument_splits_like_shell_words(tmp_path):
    spaced = tmp_path / "my ops.toml"
    spaced.write_text((ROOT / "examples/my_ops.toml").read_text())
    r = subprocess.run([sys.executable, "-m", "generator", "--out", str(tmp_path / "b"),
                        "--spec-list", f'libew/ops.toml "{spaced}"'], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "b/gen/ew_softplus_f32.cu").exists()
    # a positional argument is one path, spaces and all
    r = run_gen(tmp_path / "c", ROOT / "libew/ops.toml", spaced)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "generator", "--out", str(tmp_path / "d"), "--spec-list", 'a "b'],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith("generator: error: SPEC=") and "quotes" in r.stderr
    assert not (tmp_path / "d").exists()


# ---- nothing written on failure ---------------------------------------------------------------

def test_overlong_name_fails_before_anything_is_written(tmp_path):
    bad = tmp_path / "long.toml"
    bad.write_text(f'[[op]]\nname = "{"a" * 300}"\ninputs = ["x"]\ndtypes = ["float"]\nexpr = "x"\nref = "x"\n'
                   'doc = "d"\n')
    r = run_gen(tmp_path / "out", ROOT / "libew/ops.toml", bad)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "long.toml: [[op]] #1: field 'name': op name 'aaaa" in r.stderr and "at most 64" in r.stderr
    assert not (tmp_path / "out").exists()


def test_late_error_leaves_an_existing_build_untouched(tmp_path):
    """A spec error found only when all files are checked together (a symbol clash) still writes
    nothing, and removes nothing, in an existing build folder."""
    out = tmp_path / "b"
    clash = tmp_path / "clash.toml"
    clash.write_text('[[op]]\nname = "relu_strided"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "x"\nref = "x"\n'
                     'doc = "d"\n')
    assert run_gen(out, clash).returncode == 0                 # alone it is fine
    assert run_gen(out, ROOT / "libew/ops.toml").returncode == 0
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    r = run_gen(out, ROOT / "libew/ops.toml", clash)           # next to relu, its symbol clashes
    assert r.returncode == 1 and "ew_relu_strided_f32" in r.stderr
    assert before == {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}


def test_doc_cannot_break_the_generated_comment(tmp_path):
    spec = tmp_path / "d.toml"
    spec.write_text('[[op]]\nname = "twice"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "x + x"\nref = "x + x"\n'
                    'doc = "ends in a backslash \\\\"\n')
    generate(load([spec]), tmp_path / "b")
    line = (tmp_path / "b/gen/ew_twice_f32.cu").read_text().splitlines()[1]
    assert not line.rstrip().endswith("\\")


# ---- the numpy vocabulary: bool, fixed inputs, the basic launch, one unit per op ----------------------

def test_fixed_inputs_and_bool_results_in_the_generated_code(tmp_path):
    """where's device function takes its condition as bool and its values as C; a comparison's
    returns bool (the calling convention the fused formulas use); the kernel reads the condition
    as bool storage next to the values' type, through the basic launch."""
    spec = load([ROOT / "libew/ops.toml"])
    generate(spec, tmp_path)
    fn = (tmp_path / "gen/fn/where.cuh").read_text()
    assert "__device__ __forceinline__ C operator()(bool condition, C x, C y) const {" in fn
    assert '#include "ew_numpy.cuh"' in fn
    greater = (tmp_path / "gen/fn/greater.cuh").read_text()
    assert "__device__ __forceinline__ bool operator()(C x, C y) const {" in greater
    where = (tmp_path / "gen/ew_where_f16.cu").read_text()
    assert "operator()(bool condition, __half x, __half y) const" in where
    assert "::ew::convert<bool>(condition), ::ew::convert<float>(x)" in where
    assert ("static_cast<const bool*>(condition), static_cast<const __half*>(x), static_cast<const __half*>(y)"
            in where)
    assert "::ew::launch_map_basic<" in where and '#include "map_basic.cuh"' in where
    gelu = (tmp_path / "gen/ew_gelu_f16.cu").read_text()       # a tuned op keeps launch_map
    assert "::ew::launch_map<" in gelu and "map_basic" not in gelu
    isnan = (tmp_path / "gen/ew_isnan_bf16.cu").read_text()
    assert "__device__ __forceinline__ bool operator()(__nv_bfloat16 x) const" in isnan
    man = json.loads((tmp_path / "manifest.json").read_text())
    w = next(o for o in man["ops"] if o["name"] == "where")
    assert w["fixed"] == {"condition": "bool"} and w["ufunc"] is None and w["launch"] == "basic" and w["ulp"] == 0
    k = next(k for k in w["kernels"] if k["dtype"] == "int64")
    assert k["in_dtypes"] == ["bool", "int64", "int64"] and k["out_dtype"] == "int64"
    sub = next(o for o in man["ops"] if o["name"] == "sub")
    assert sub["ufunc"] == "subtract" and sub["fixed"] == {} and sub["launch"] == "tuned"


def test_a_new_op_touches_only_its_own_sources(tmp_path):
    """Adding an op writes its sources, its prototypes and the manifest; no other op's translation
    unit or prototypes change, so make recompiles the new op and the manifest alone."""
    spec_file = tmp_path / "ops.toml"
    spec_file.write_text((ROOT / "libew/ops.toml").read_text())
    generate(load([spec_file]), tmp_path / "b")
    gen = tmp_path / "b/gen"
    before = {p: p.stat().st_mtime_ns for p in gen.rglob("*") if p.is_file()}
    spec_file.write_text(spec_file.read_text() + '\n[[op]]\nname = "cube"\ninputs = ["x"]\ndtypes = ["float"]\n'
                         'expr = "x * x * x"\nref = "x ** 3"\ndoc = "x^3."\n')
    generate(load([spec_file]), tmp_path / "b")
    changed = sorted(p.relative_to(gen).as_posix() for p in gen.rglob("*") if p.is_file()
                     and before.get(p) != p.stat().st_mtime_ns)
    assert changed == sorted(["cube.cu", "proto/cube.h", "fn/cube.cuh", "ew_cube_f32.cu", "ew_cube_f64.cu",
                              "ew_cube_f16.cu", "ew_cube_bf16.cu", "ew_manifest.cu", "sources.json", "sources.mk"])
    assert "ew_cube_f16" in (tmp_path / "b/ew.h").read_text()      # the users' header has every op


def test_units_hoist_the_includes_of_their_sources():
    from generator.render import hoisted_includes
    a = '// x\n#include "proto/a.h"\n#include "elementwise.cuh"\nint a;\n'
    b = '#include "proto/a.h"\n#include "map_basic.cuh"\n#include "elementwise.cuh"\n'
    assert hoisted_includes([a, b]) == ['#include "proto/a.h"', '#include "elementwise.cuh"',
                                        '#include "map_basic.cuh"']
