"""The built library and the loader, without a GPU: symbols, ABI, manifest, stale/missing/foreign
libraries, import and ops() with no GPU, and the no-GPU error."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pyew
from pyew import library
from pyew.errors import LibraryError

ROOT = Path(__file__).resolve().parent.parent
LIB = library.library_path()
needs_lib = pytest.mark.skipif(not LIB.exists(), reason=f"{LIB} not built (run make all)")


def run_py(code, **env):
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=e)


@needs_lib
def test_one_symbol_per_op_dtype():
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIB)], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
    man = library.get().manifest
    want = {e.symbol for o in man.ops for k in o.kernels for e in k.entries}
    assert want <= exported
    packed = {e["packed"] for o in man.raw["ops"] for k in o["kernels"] for e in k["entries"]}
    assert packed == {s + "_packed" for s in want} and packed <= exported
    assert {"ew_abi_version", "ew_manifest", "ew_error_name", "ew_fill"} <= exported
    assert all(s.startswith("ew_") for s in exported), "only ew_ entry points are exported"


@needs_lib
def test_ops_lists_every_op_with_metadata():
    ops = {o["name"]: o for o in pyew.ops()}
    assert ops["elu"]["params"] == {"alpha": 1.0} and ops["elu"]["arity"] == 1
    assert ops["add"]["arity"] == 2 and "int32" in ops["add"]["dtypes"]
    assert ops["gelu"]["doc"]
    for name in ops:
        assert callable(getattr(pyew, name))
    assert "gelu" in dir(pyew)


@needs_lib
def test_function_signature_and_doc():
    import inspect
    sig = inspect.signature(pyew.hardshrink)
    assert str(sig) == "(x, /, *, out=None, stream=None, lambd: float = 0.5)"
    assert "dtypes: float32, float64, float16, bfloat16" in pyew.hardshrink.__doc__


@needs_lib
def test_manifest_matches_build_dir():
    assert library.get().manifest.raw == json.loads((LIB.parent / "manifest.json").read_text())


def test_missing_library_says_make_all(tmp_path):
    r = run_py("import pyew\ntry:\n pyew.ops()\nexcept pyew.LibraryError as e: print('ERR', e)",
               PYEW_LIB=str(tmp_path / "none.so"))
    assert "ERR libew not found" in r.stdout and "make all" in r.stdout


def test_foreign_and_mismatched_library(tmp_path):
    src = tmp_path / "fake.c"
    src.write_text('int ew_abi_version(void){return 999;} const char* ew_manifest(void){return "{}";}\n'
                   'const char* ew_error_name(int c){return "x";} int ew_fill(void){return 0;}\n')
    so = tmp_path / "fake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    r = run_py("import pyew\ntry:\n pyew.ops()\nexcept pyew.LibraryError as e: print('ERR', e)", PYEW_LIB=str(so))
    assert "ABI version 999" in r.stdout and "make all" in r.stdout
    other = tmp_path / "other.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(other), "-x", "c", "-"], input="int f(void){return 1;}",
                   text=True, check=True)
    r = run_py("import pyew\ntry:\n pyew.ops()\nexcept pyew.LibraryError as e: print('ERR', e)", PYEW_LIB=str(other))
    assert "not a libew library" in r.stdout
    for i, (abi, manifest, says) in enumerate([(3, "not json", "holds an unreadable manifest"),
                                               (3, "[1, 2]", "a JSON list, not an object"),
                                               (999, "not json", "ABI version 999")]):
        src = tmp_path / f"m{i}.c"
        src.write_text(f'int ew_abi_version(void){{return {abi};}} const char* ew_manifest(void){{return '
                       f'"{manifest}";}}\n')
        so = tmp_path / f"m{i}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
        r = run_py("import pyew\ntry:\n pyew.ops()\nexcept pyew.LibraryError as e: print('ERR', e)", PYEW_LIB=str(so))
        assert says in r.stdout and "then start Python again" in r.stdout and r.stderr == "", (r.stdout, r.stderr)


@needs_lib
def test_stale_library_is_refused(tmp_path):
    spec = tmp_path / "ops.toml"
    spec.write_text("x")
    lib = library.get()
    raw = dict(lib.manifest.raw, spec_files=[{"path": str(spec), "sha256": "0" * 64}])
    with pytest.raises(LibraryError, match="stale: .*ops.toml changed.*rebuild it: make all"):
        lib._check_fresh(raw)


@needs_lib
def test_a_library_older_than_its_headers_is_stale():
    """Formulas compile against the checkout's headers: a library built from others is refused."""
    lib = library.get()
    sources = lib.manifest.raw["sources"]
    assert any(f["path"] == "libew/elementwise.cuh" for f in sources)
    assert any(f["path"].startswith("generator/templates/") for f in sources)
    lib._check_fresh(lib.manifest.raw)
    raw = dict(lib.manifest.raw, sources=[dict(sources[0], sha256="0" * 64)])
    with pytest.raises(LibraryError, match=f"stale: .*{sources[0]['path']} changed.*rebuild it: make all"):
        lib._check_fresh(raw)


@needs_lib
def test_relative_spec_paths_are_taken_from_the_checkout(tmp_path):
    lib = library.get()
    assert lib.spec_path("libew/ops.toml") == LIB.parent.parent / "libew" / "ops.toml"
    assert lib.spec_path(str(tmp_path)) == tmp_path


def test_pyew_lib_bare_name_is_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYEW_LIB", "libew.so")
    assert library.library_path() == tmp_path / "libew.so"


@needs_lib
def test_import_and_ops_work_without_gpu_then_clear_error():
    code = ("import numpy as np, pyew\nprint(len(pyew.ops()))\n"
            "try:\n pyew.gelu(np.ones(3, np.float32)); print('RAN')\n"
            "except pyew.NoDeviceError as e: print('NODEV', e)\n")
    r = run_py(code, CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.splitlines()[0]) == len(pyew.ops())
    assert "NODEV no usable NVIDIA GPU" in r.stdout


def test_import_without_library_or_gpu(tmp_path):
    r = run_py("import pyew; print('ok', pyew.__name__, hasattr(pyew, 'gelu'), getattr(pyew, 'x', 5))",
               PYEW_LIB=str(tmp_path / "none.so"))
    assert r.stdout.strip() == "ok pyew False 5", r.stderr
    r = run_py("import pyew; pyew.gelu", PYEW_LIB=str(tmp_path / "none.so"))
    assert "has no attribute 'gelu': the op table cannot load" in r.stderr and "make all" in r.stderr


@needs_lib
def test_ops_lists_each_functions_own_signature():
    """The special kernels' rows come from their functions (the manifest has no inputs for them);
    a param without a default is told apart from one whose default is None."""
    ops = {o["name"]: o for o in pyew.ops()}
    assert ops["relu_mask_backward"]["inputs"] == ["dy", "mask"] and ops["relu_mask_backward"]["arity"] == 2
    assert ops["scatter_add"]["inputs"] == ["dst", "index", "src"]
    assert ops["upsample_nearest2d"]["params"] == {"scale": None, "output_size": None}
    assert ops["upsample_nearest2d"]["required"] == []
    assert ops["scale"]["required"] == ["alpha"] and ops["elu"]["required"] == []
    assert callable(pyew.add)                     # bound as a module attribute: listed once all the same
    names = dir(pyew)
    assert names.count("add") == 1 and "annotations" not in names
    r = subprocess.run([sys.executable, "-m", "pyew", "ops"], cwd=ROOT, capture_output=True, text=True)
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("scale "))
    assert " alpha " in row and "alpha=" not in row
    r = subprocess.run([sys.executable, "-m", "pyew"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and not r.stdout and "usage: python -m pyew COMMAND" in r.stderr


@needs_lib
def test_argument_errors_name_the_function_and_its_signature():
    import numpy as np
    a = np.ones(3, np.float32)
    with pytest.raises(TypeError, match=r"^dot\(a, b, /, \*, out=None, stream=None\): too many positional"):
        pyew.dot(a, a, a)
    with pytest.raises(TypeError, match=r"^relu_mask_backward\(dy, mask, .*missing a required argument: 'mask'"):
        pyew.relu_mask_backward(a)
    with pytest.raises(TypeError, match=r"^upsample_nearest2d\(.*unexpected keyword argument 'size'"):
        pyew.upsample_nearest2d(a, size=2)
    with pytest.raises(TypeError, match=r"elu\(\) takes 1 input\(s\) \(x\), got 2; its params are keywords only: "
                                        r"elu\(x, alpha=\.\.\.\)"):
        pyew.elu(a, 0.5)
    with pytest.raises(pyew.FormulaError, match=r"its params are keywords only: elu\(x, alpha=\.\.\.\)"):
        pyew.evaluate("elu(x, 0.5)", {"x": a})
    with pytest.raises(TypeError, match=r"has dtype uint64, .*; convert it first: a\.astype\(np\.int64\) where"):
        pyew.gelu(np.ones(3, np.uint64))
    with pytest.raises(TypeError, match=r"pyew has no dtype uint64; .*convert it first: a\.astype\(np\.int64\)"):
        pyew.asarray(np.ones(3, np.uint64))
    with pytest.raises(TypeError, match=r"no cast from uint32 to float64 \(op to_float64\); convert the input first "
                                        r"\(x\.astype\(np\.float64\)\)"):
        pyew.gelu(np.ones(3, np.uint32))
    assert issubclass(pyew.FormulaError, pyew.PyewError) and issubclass(pyew.FormulaError, ValueError)
    assert issubclass(pyew.SpecError, pyew.PyewError) and issubclass(pyew.CompileError, pyew.PyewError)


def test_errors_checked_before_gpu_use():
    import numpy as np
    if not LIB.exists():
        pytest.skip("library not built")
    with pytest.raises(TypeError, match="has dtype complex128, which pyew does not support"):
        pyew.sigmoid(np.ones(3, np.complex128))
    with pytest.raises(TypeError, match="no cast from uint32"):
        pyew.add(np.ones(3, np.uint32), np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        pyew.mul(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(TypeError, match="takes 2 input"):
        pyew.add(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="missing required param 'alpha'"):
        pyew.scale(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="stream must be a pyew.Stream"):
        pyew.relu(np.ones(3, np.float32), stream=5)


def test_no_gpu_errors_are_exact_and_quiet():
    """Without a usable GPU, allocating calls raise NoDeviceError (not a CUDA error from deep in an
    allocation), and nothing is printed from a half-made buffer's finalizer."""
    code = ("import pyew, gc\n"
            "for f in (lambda: pyew.asarray([1.0, 2.0]), lambda: pyew.empty(3), lambda: pyew.zeros(3)):\n"
            "    try:\n        f()\n    except pyew.NoDeviceError as e:\n        print('NODEV')\n"
            "gc.collect()\n")
    r = run_py(code, CUDA_VISIBLE_DEVICES="")
    assert r.stdout.split() == ["NODEV"] * 3, r.stdout + r.stderr
    assert "Exception ignored" not in r.stderr and r.stderr.strip() == "", r.stderr


def test_without_cuda_python_the_error_says_what_to_install(monkeypatch):
    from pyew import cudart, devices
    monkeypatch.setattr(cudart, "api", None)
    monkeypatch.setattr(devices, "cuda", devices.CudaDevices())     # made without cuda-python
    devices.forget()
    with pytest.raises(pyew.NoDeviceError, match="pip install cuda-python"):
        pyew.empty(123457)          # a size no freed buffer is kept for


@needs_lib
def test_a_build_folder_anywhere_finds_its_checkout(tmp_path, monkeypatch):
    """BUILD=build/a100 or a folder elsewhere: the manifest's root is the checkout, for the stale
    check and for the headers formulas compile against."""
    import shutil

    from pyew import jit
    where = tmp_path / "deep" / "er"
    where.mkdir(parents=True)
    shutil.copy(LIB, where / "libew.so")
    shutil.copytree(LIB.parent / "gen" / "fn", where / "gen" / "fn")
    lib = library.Library(where / "libew.so")          # a copy outside its checkout: compared with nothing
    assert lib.checkout == where.parent and not lib.bundled
    inside = LIB.parent / "nested" / "deeper"             # BUILD=build/nested/deeper: finds its checkout
    try:
        inside.mkdir(parents=True)
        shutil.copy(LIB, inside / "libew.so")
        shutil.copytree(LIB.parent / "gen" / "fn", inside / "gen" / "fn")
        lib = library.Library(inside / "libew.so")
        assert lib.checkout == LIB.parent.parent
        assert lib.spec_path("libew/ops.toml") == LIB.parent.parent / "libew" / "ops.toml"
        monkeypatch.setattr(library, "get", lambda: lib)
        assert jit.include_dirs()[:2] == [str(LIB.parent.parent / "libew"), str(inside / "gen")]
        raw = dict(lib.manifest.raw, sources=[{"path": "libew/no_such_header.cuh", "sha256": "0" * 64}])
        with pytest.raises(LibraryError, match="no_such_header.cuh is gone since the library was built"):
            lib._check_fresh(raw)
    finally:
        shutil.rmtree(LIB.parent / "nested", ignore_errors=True)


def test_without_dask_pyew_dask_is_an_attribute_error_that_says_why():
    r = run_py("import sys\nsys.modules['dask'] = None\nsys.modules['dask.array'] = None\nimport pyew\n"
               "print(hasattr(pyew, 'dask'), getattr(pyew, 'dask', 'none'))\n"
               "try:\n pyew.dask\nexcept AttributeError as e: print('ERR', e)")
    assert r.stdout.splitlines()[0] == "False none" and r.stderr == ""
    assert "ERR module 'pyew' has no attribute 'dask': pyew.dask needs dask" in r.stdout
    assert "pip install 'pyew[dask]'" in r.stdout
