"""pyew.load_spec without a GPU: a spec file's validation and errors (the generator's, naming the
file, the op and the field), the ops' place in the formula vocabulary, their device functions
compiled by NVRTC, and the errors of calling them, raised before anything runs."""
from __future__ import annotations

import itertools
import json
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt
from pyew import fused, jit, specs

from .helpers import ROOT, manifest_ops

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")
pytestmark = pytest.mark.skipif(not manifest_ops(), reason="libew.so not built (make all)")

_ids = itertools.count()


def spec_file(tmp_path, body: str, name: str = "ops.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def op_toml(name: str, expr: str = "x", ref: str = "x", inputs=("x",), **fields) -> str:
    """One [[op]] table: float32, the given fields (a field given as None is left out)."""
    table = {"name": name, "inputs": list(inputs), "dtypes": ["float32"], "expr": expr, "ref": ref, "doc": "d.",
             **fields}
    return "[[op]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items() if v is not None) + "\n"


def fresh(stem: str) -> str:
    """An op name no other test of this process has loaded."""
    return f"{stem}_{next(_ids)}_{id(_ids) % 9973}"


def test_example_ops_load_and_join_the_vocabulary():
    ops = pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    assert ops.names == ("bias_gelu", "softplus")
    assert callable(ops.softplus) and ops.softplus.__name__ == "softplus" and "beta" in ops.softplus.__doc__
    vocab = fused.vocabulary()
    assert vocab["softplus"].inputs == ("x",) and [p.name for p in vocab["softplus"].params] == ["beta"]
    assert {d.name for d in vocab["bias_gelu"].dtypes} >= {"float32", "float16", "bfloat16", "float64"}
    assert pyew.load_spec(ROOT / "examples" / "my_ops.toml").names == ops.names      # again: the same ops
    tree, names = fused.parse("softplus(x, beta=2.0) + bias_gelu(x, y)")
    assert names == ["x", "y"]


def test_loaded_ops_compile_with_nvrtc():
    if jit.unavailable():
        pytest.skip(jit.unavailable())
    pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    for d in ("float32", "float16"):
        info = dt.BY_NAME[d]
        tree, _ = fused.parse("softplus(x, beta=0.5) * bias_gelu(x, y)")
        p = fused.Program(tree, (fused.Arg("x", True, info), fused.Arg("y", True, info)), "t")
        assert '#include "fn/softplus.cuh"' in p.source and '#include "fn/bias_gelu.cuh"' in p.source
        need = [0, 0, 256, 1, 0, 1, 0, 16 // info.itemsize, 0, 0, 0]
        _, name, cubin = jit.cubin(p.source, jit.name_expression(need, info.ctype, [info.ctype] * 2), "sm_90", "t")
        assert cubin[:4] == b"\x7fELF" and name.startswith("_Z")
    assert any(Path(d).parent == jit.cache_dir() / "specs" for d in specs.include_dirs())


def test_an_op_may_call_the_librarys_ops_and_another_loaded_op(tmp_path):
    a, b = fresh("twice_relu"), fresh("plus_one")
    ops = pyew.load_spec(spec_file(tmp_path, op_toml(b, "x + C(1)", "x + 1")
                                   + op_toml(a, f"{b}(relu(x)) * C(2)", "(np.maximum(x, 0) + 1) * 2")))
    assert set(ops.names) == {a, b}
    header = (Path(specs.include_dirs()[0]) / "fn" / f"{a}.cuh").read_text()      # the latest loaded first
    assert f'#include "fn/{b}.cuh"' in header and '#include "fn/relu.cuh"' in header


@pytest.mark.parametrize("fields, match", [
    ({"colour": 1}, r"ops\.toml: op '{n}': field 'colour': unknown key"),
    ({"dtypes": ["float99"]}, r"ops\.toml: op '{n}': field 'dtypes': unknown dtype 'float99'"),
    ({"doc": None}, r"ops\.toml: op '{n}': field 'doc'"),
    ({"kind": "relu_mask", "dtypes": ["float"], "expr": None, "ref": None},
     r"ops\.toml: op '{n}': field 'kind': 'relu_mask': pyew\.load_spec compiles map ops only"),
])
def test_bad_spec_files_fail_with_the_file_the_op_and_the_field(tmp_path, fields, match):
    n = fresh("bad")
    with pytest.raises(pyew.SpecError, match=match.format(n=n)):
        pyew.load_spec(spec_file(tmp_path, op_toml(n, **fields)))
    assert n not in fused.vocabulary()


def test_a_name_the_library_has_is_refused(tmp_path):
    with pytest.raises(pyew.SpecError, match=r"ops\.toml: op 'sigmoid': field 'name': the loaded library already "
                       r"has an op of this name; choose another"):
        pyew.load_spec(spec_file(tmp_path, op_toml("sigmoid")))


def test_numpys_names_of_library_ops_and_empty_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"op 'multiply': field 'name': formulas already call the library's op "
                       r"'mul' by this name"):
        pyew.load_spec(spec_file(tmp_path, op_toml("multiply", "x * y * C(2)", "x * y * 2", ("x", "y"))))
    assert fused.vocabulary()["multiply"].name == "mul"
    with pytest.raises(pyew.SpecError, match=r"empty\.toml: no ops defined"):
        pyew.load_spec(spec_file(tmp_path, "# nothing yet\n", "empty.toml"))


def test_a_changed_definition_replaces_the_loaded_one(tmp_path, fakes):
    """Editing a spec file and loading it again (as a notebook does), or loading another file with
    the name, takes the new definition everywhere: the new function, the one loaded before, and
    formulas and fused functions that call the op by name."""
    n = fresh("half")
    path = spec_file(tmp_path, op_toml(n, "x * C(0.5)", "x * 0.5"), "a.toml")
    first = getattr(pyew.load_spec(path), n)
    x = pyew.asarray(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(first(x).get(), np.arange(4) * 0.5)
    np.testing.assert_array_equal(pyew.evaluate(f"{n}(x) + 1", {"x": x}).get(), np.arange(4) * 0.5 + 1)
    twice = pyew.fuse(lambda v: specs.function(n)(v) * 2)
    np.testing.assert_array_equal(twice(x).get(), np.arange(4) * 0.5 * 2)
    before = len(specs.include_dirs())
    path.write_text(op_toml(n, "x * C(0.25)", "x * 0.25"))
    second = getattr(pyew.load_spec(path), n)
    assert second is not first and fused.vocabulary()[n].source.endswith("a.toml")
    for got in (second(x), first(x), pyew.evaluate(f"{n}(x) + 1", {"x": x}) - 1, twice(x) / 2):
        np.testing.assert_array_equal(got.get(), np.arange(4) * 0.25)
    assert len(specs.include_dirs()) == before + 1
    other = spec_file(tmp_path, op_toml(n, "x * C(2)", "x * 2"), "b.toml")
    np.testing.assert_array_equal(getattr(pyew.load_spec(other), n)(x).get(), np.arange(4) * 2.0)
    assert fused.vocabulary()[n].source.endswith("b.toml") and specs.definitions([n])[0][0].endswith("b.toml")
    np.testing.assert_array_equal(getattr(pyew.load_spec(path), n)(x).get(), np.arange(4) * 0.25)   # back again
    assert "0.25" in (Path(specs.include_dirs()[0]) / "fn" / f"{n}.cuh").read_text()     # searched first


def test_missing_files_and_the_librarys_own_spec_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no spec file at"):
        pyew.load_spec(tmp_path / "nothing.toml")
    with pytest.raises(pyew.SpecError, match="one of the library's own spec files"):
        pyew.load_spec(ROOT / "libew" / "ops.toml")


def test_calls_with_wrong_arguments_raise_before_anything_runs():
    ops = pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    with pytest.raises(TypeError, match=r"bias_gelu\(\) takes 2 input\(s\) \(x, b\), got 1"):
        ops.bias_gelu([1.0])
    with pytest.raises(TypeError, match=r"softplus\(\) got unexpected keyword argument\(s\) gamma; its params: beta"):
        ops.softplus([1.0], gamma=2.0)
    with pytest.raises(TypeError, match=r"softplus\(\): param 'beta' must be a float, not str"):
        ops.softplus([1.0], beta="2")


def test_a_compile_error_names_the_op_not_a_page_of_cpp(tmp_path):
    if jit.unavailable():
        pytest.skip(jit.unavailable())
    n = fresh("broken")
    pyew.load_spec(spec_file(tmp_path, op_toml(n, "x + nosuchfunction(x)")))
    tree, _ = fused.parse(f"{n}(x)")
    p = fused.Program(tree, (fused.Arg("x", True, dt.BY_NAME["float32"]),), f"{n}(x)")
    need = [0, 0, 256, 1, 0, 1, 0, 4, 0, 0, 0]
    with pytest.raises(pyew.CompileError, match=rf"formula '{n}\(x\)'.*nosuchfunction") as e:
        jit.cubin(p.source, jit.name_expression(need, "float", ["float"]), "sm_90", f"{n}(x)")
    assert len(str(e.value).splitlines()) == 1


def test_a_compile_error_at_the_first_call_names_the_file_op_and_field(tmp_path, monkeypatch):
    """The spec's expr compiles at an op's first call: its error says which file, op and field."""
    n = fresh("broken")
    path = spec_file(tmp_path, op_toml(n, "x + nosuchfunction(x)"))
    ops = pyew.load_spec(path)

    def run(*a, **k):
        raise jit.CompileError(f"NVRTC could not compile the kernel of formula '{n}(x)': nosuchfunction")
    monkeypatch.setattr(fused, "run", run)
    with pytest.raises(jit.CompileError, match=rf"ops.toml: op '{n}': field 'expr': NVRTC could not compile"):
        ops[n]([1.0, 2.0])


def test_fuse_traces_loaded_ops():
    ops = pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    from pyew import formula
    t = ops.softplus(formula.Traced(formula.Var("x")), beta=2.0)
    assert isinstance(t, formula.Traced) and t.node == formula.Call("softplus", (formula.Var("x"),), (("beta", 2.0),))
    with pytest.raises(TypeError, match="softplus\\(..., out=\\) inside a fused function"):
        ops.softplus(formula.Traced(formula.Var("x")), out=np.zeros(3, np.float32))


def test_a_copy_of_a_loaded_file_gives_the_same_ops(tmp_path):
    text = (ROOT / "examples" / "my_ops.toml").read_text()
    copy = tmp_path / "copy_of_my_ops.toml"
    copy.write_text(text)
    first = pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    again = pyew.load_spec(copy)
    assert again.names == first.names and again.path.endswith("copy_of_my_ops.toml")


@pytest.mark.parametrize("alias", ["mod", "abs", "round"])
def test_names_formulas_read_as_other_functions_are_refused(tmp_path, alias):
    with pytest.raises(ValueError, match=rf"op '{alias}': field 'name': formulas read {alias}\(\) as \w+\(\)"):
        pyew.load_spec(spec_file(tmp_path, op_toml(alias)))


def test_ops_named_like_attributes_stay_reachable(tmp_path):
    n = fresh("x")
    ops = pyew.load_spec(spec_file(tmp_path, op_toml("names", "x * C(3)", "x * 3") + op_toml(n)))
    assert ops.names == ("names", n) and callable(ops["names"]) and ops["names"].__name__ == "names"
    assert "names" in repr(ops) and getattr(ops, n).__name__ == n
    with pytest.raises(AttributeError, match=r"has no op 'nothing' \(its ops: names, "):
        _ = ops.nothing
    with pytest.raises(KeyError, match="has no op 'nothing'"):
        ops["nothing"]


def test_a_cleared_cache_gets_the_headers_again(tmp_path, monkeypatch):
    monkeypatch.setenv("PYEW_CACHE_DIR", str(tmp_path / "cache"))
    n = fresh("cleared")
    pyew.load_spec(spec_file(tmp_path, op_toml(n)))
    [folder] = [Path(d) for d in specs.include_dirs() if (Path(d) / "fn" / f"{n}.cuh").is_file()]
    assert folder.parent == tmp_path / "cache" / "specs"
    jit.cache_clear()                     # python -m pyew cache --clear, while the op is loaded
    assert not (folder / "fn" / f"{n}.cuh").exists()
    assert str(folder) in specs.include_dirs() and (folder / "fn" / f"{n}.cuh").is_file()


def test_without_nvrtc_a_formula_with_a_loaded_op_says_it_needs_it():
    pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    tree, _ = fused.parse("softplus(x) + 1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(pyew.FormulaError, match=r"'softplus', an op of examples/my_ops\.toml loaded by "
                           r"pyew\.load_spec, which runs only compiled: no NVRTC here"):
            fused._op_by_op(tree, {"x": 1.0}, "softplus(x) + 1", None, None, "no NVRTC here")


def test_a_call_builds_one_tree_per_param_values(monkeypatch):
    ops = pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    trees = []
    monkeypatch.setattr(fused, "run", lambda tree, values, text, **kw: trees.append((tree, values)))
    ops.softplus([1.0])
    ops.softplus([1.0], beta=1.0)
    ops.softplus([2.0], beta=2)                      # an int for a float param, as a library op takes it
    assert trees[0][0] is trees[1][0] and trees[0][0].params == (("beta", 1.0),)
    assert trees[2][0].params == (("beta", 2.0),) and trees[2][1] == {"x": [2.0]}


def test_param_values_equal_to_python_but_not_to_numbers_get_their_own_trees(monkeypatch):
    """-0.0 and 0.0 are equal as dict keys, and NaN is not equal to itself: the trees are kept
    under the values' bits, so beta=-0.0 never runs beta=0.0's formula."""
    ops = pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    trees = []
    monkeypatch.setattr(fused, "run", lambda tree, values, text, **kw: trees.append(tree))
    ops.softplus([1.0], beta=0.0)
    ops.softplus([1.0], beta=-0.0)
    ops.softplus([1.0], beta=float("nan"))
    ops.softplus([1.0], beta=float("nan"))
    assert str(trees[1].params[0][1]) == "-0.0" and trees[0] is not trees[1]
    assert trees[2] is trees[3]                     # one tree for NaN, not one per call
    with pytest.raises(TypeError):
        ops.softplus([1.0], beta=[2.0])


def test_an_op_may_not_call_an_op_of_another_loaded_file(tmp_path):
    a, b = fresh("first"), fresh("second")
    pyew.load_spec(spec_file(tmp_path, op_toml(a, expr="x * C(2)", ref="x * 2"), "a.toml"))
    with pytest.raises(ValueError,
                       match=rf"op '{b}': field 'expr': calls {a}, an op of another file"):
        pyew.load_spec(spec_file(tmp_path, op_toml(b, expr=f"{a}(x) + x", ref="x * 3"), "b.toml"))


def test_without_the_generator_or_nvrtc_load_spec_says_what_to_install(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "generator", None)
    monkeypatch.setitem(sys.modules, "pyew._generator", None)
    with pytest.raises(RuntimeError, match=r"pyew\.load_spec renders kernels with pyew's generator and mako.*"
                       r"`pip install mako`"):
        pyew.load_spec(ROOT / "examples" / "my_ops.toml")
    monkeypatch.undo()
    monkeypatch.setattr(jit, "unavailable", lambda: "NVRTC is not available (a test)")
    with pytest.raises(RuntimeError, match=r"pyew\.load_spec compiles ops with NVRTC: NVRTC is not available"):
        pyew.load_spec(ROOT / "examples" / "my_ops.toml")


def test_an_unusable_cache_folder_takes_a_temporary_one(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PYEW_CACHE_DIR", str(blocker / "cache"))
    n = fresh("uncached")
    pyew.load_spec(spec_file(tmp_path, op_toml(n)))
    [folder] = [Path(d) for d in specs.include_dirs() if (Path(d) / "fn" / f"{n}.cuh").is_file()]
    assert folder.name.startswith("pyew-spec-") and not (blocker / "cache").exists()
