"""Fused formulas without a GPU: typing (numpy's promotion over the formula), the rendered source,
the errors raised before anything compiles, NVRTC compiles of the kernels (NVRTC needs no GPU)
and the kernel cache (memory and disk, corrupt entries, unusable folders, concurrent writers)."""
import dataclasses
import gc
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pyew
from pyew import dtypes as dt
from pyew import formula, fused, jit

from .helpers import ROOT


@pytest.fixture(scope="module")
def vocab():
    try:
        return fused.vocabulary()
    except pyew.LibraryError as e:
        pytest.skip(f"libew.so not usable: {e}")


def typed(expr, **kinds):
    tree, names = fused.parse(expr)
    args = tuple(fused.Arg(n, False, None, kinds[n]) if isinstance(kinds[n], type)
                 else fused.Arg(n, True, dt.BY_NAME[kinds[n]]) for n in names)
    return fused.Program(tree, args, expr)


def test_the_source_comment_is_the_formula_written_back(vocab):
    """The kernel's first line names the formula as its tree reads: a caller's comment ending in a
    backslash does not swallow the next line, and spacing does not make another kernel."""
    a = typed("x * 2  # scale \\", x="float32")
    b = typed("x*2", x="float32")
    assert a.source.splitlines()[0] == "// pyew fused formula: (x * 2)" and a.source == b.source
    assert "\\\n" not in a.source


def _renamed(node, old: str, new: str):
    """The tree with variable `old` called `new` (as a fused function's keyword argument may be)."""
    if isinstance(node, formula.Var):
        return formula.Var(new) if node.name == old else node
    if isinstance(node, formula.Call):
        return dataclasses.replace(node, args=tuple(_renamed(a, old, new) for a in node.args))
    return node


def test_a_name_cannot_break_out_of_the_source_comment(vocab):
    """A variable's name is any string (fuse's **kwargs): in the kernel's first line it stays one
    comment line, which no newline ends and no trailing backslash continues; a long formula shows
    only its start there."""
    weird = "x\n#error injected \\"
    tree = _renamed(fused.parse("x * 2")[0], "x", weird)
    p = fused.Program(tree, (fused.Arg(weird, True, dt.BY_NAME["float32"]),), "x * 2")
    first, second = p.source.split("\n")[:2]
    assert first.startswith("// pyew fused formula: (x #error injected") and not first.endswith("\\")
    assert second == '#include "broadcast.cuh"'
    long = typed(" + ".join(["x"] * 60), x="float32")
    assert len(long.source.split("\n")[0]) <= len("// pyew fused formula: ") + fused._COMMENT_CHARS


def test_deep_traces_are_a_formula_error(fakes):
    """A fused loop of many steps, each on the last one's result, nests past Python's recursion:
    a FormulaError that says what to do, not a RecursionError."""
    steps = 3000

    @pyew.fuse
    def horner(x):
        y = x
        for _ in range(steps):
            y = y * 0.5 + x
        return y
    d = pyew.asarray(np.ones(4, np.float32))
    with pytest.raises(pyew.FormulaError, match="nested too deeply to compile.*fuse fewer steps"):
        horner(d)
    steps = 60                         # a shorter one runs (traced again: the failed trace was not kept)
    np.testing.assert_allclose(horner(d).get(), horner.__wrapped__(np.ones(4, np.float32)), rtol=1e-6)


def test_long_formulas_are_a_formula_error(fakes):
    """A formula that parses but nests past Python's recursion while it is typed: evaluate says
    to split it, and a shorter one runs."""
    d = pyew.asarray(np.ones(4, np.float32))
    with pytest.raises(pyew.FormulaError, match="nests too deeply to compile.*split it"):
        pyew.evaluate(" + ".join(["x"] * 600), local_dict={"x": d})
    np.testing.assert_array_equal(pyew.evaluate(" + ".join(["x"] * 60), local_dict={"x": d}).get(), 60)


def needs(vocab, *ops):
    missing = [o for o in ops if o not in vocab]
    if missing:
        pytest.fail(f"the default library lacks {missing}")


def test_types_follow_numpy_over_the_formula(vocab):
    needs(vocab, "multiply", "add", "exp", "greater", "where", "divide")
    cases = [("x * 0.5", dict(x="float16"), "float16"), ("x * 0.5 + y", dict(x="float16", y="float32"), "float32"),
             ("i * 3 + 1", dict(i="int32"), "int32"), ("exp(i / 4)", dict(i="int32"), "float64"),
             ("x > y", dict(x="float32", y="float16"), "bool"), ("where(x > 0, x, a)", dict(x="float16", a=float),
                                                                  "float16"),
             ("x * a", dict(x="float32", a=int), "float32"), ("i + j", dict(i="int32", j="int64"), "int64")]
    for expr, kinds, want in cases:
        assert typed(expr, **kinds).out.name == want, expr
        with np.errstate(all="ignore"):
            sample = {k: (np.ones(2, dt.BY_NAME[v].np) if isinstance(v, str) else v(1)) for k, v in kinds.items()}
        if "where" not in expr and "exp" not in expr and all(dt.BY_NAME[v].name != "bfloat16" for v in kinds.values()
                                                             if isinstance(v, str)):
            ref = eval(expr, {"exp": np.exp}, sample)
            assert np.asarray(ref).dtype.name == want, f"numpy gives {np.asarray(ref).dtype} for {expr}"


def test_source_uses_the_ops_device_functions_and_rounds_once(vocab):
    needs(vocab, "gelu", "multiply", "add")
    p = typed("gelu(x * w + b)", x="float16", w="float16", b="float16")
    assert '#include "fn/gelu.cuh"' in p.source and "::ewf::gelu_fn<__half>" in p.source
    # inner ops keep float; only the stored result is float16
    assert "::ewf::mul_fn<float>" in p.source or "_fn<float>" in p.source
    assert p.source.count("convert<__half>") == 1
    assert p.tuning == 1            # gelu is compute-bound: the compute launch shape


def test_a_cast_or_bool_test_leaves_a_formula_its_shape(vocab):
    """isnan and the casts take the compute shape for their own narrow stores; in a formula the rest
    of it decides the shape (the memory shape for a compare and a select)."""
    needs(vocab, "isnan", "where", "to_float16", "gelu")
    assert vocab["isnan"].tuning == "compute" and vocab["isnan"].call_tuning == "memory"
    assert typed("where(isnan(x), 0, x)", x="float32").tuning == 0
    assert typed("to_float16(x)", x="float32").tuning == 0
    assert typed("gelu(to_float16(x))", x="float32").tuning == 1


def test_errors_before_compiling(vocab):
    needs(vocab, "elu", "add")
    with pytest.raises(pyew.FormulaError, match="takes 1 input"):
        typed("elu(x, x)", x="float32")
    with pytest.raises(pyew.FormulaError, match="no param beta"):
        typed("elu(x, beta=1.0)", x="float32")
    with pytest.raises(OverflowError, match="out of bounds"):       # numpy's error for it
        typed("i + 4294967296", i="int32")
    with pytest.raises(pyew.FormulaError, match="no array operand"):
        typed("a + 1", a=float)
    p = typed("i + a", i="int32", a=int)
    with pytest.raises(OverflowError):
        p.check_scalars([2 ** 40])
    p.check_scalars([7])


def test_operators_on_python_numbers_stay_weak(vocab):
    """x * (1 - a) with a a Python float: 1 - a is Python's arithmetic, a Python float, so the
    formula keeps x's dtype (numpy: float32 * (1 - 0.25) is float32); a function of numbers alone
    is numpy's typed result (np.exp(0.5) is a float64)."""
    needs(vocab, "multiply", "subtract", "add", "exp", "floor_divide")
    cases = [("x * (1 - a)", dict(x="float32", a=float), "float32"),
             ("h * (a * 2)", dict(h="float16", a=float), "float16"),
             ("i + n * 2", dict(i="int32", n=int), "int32"), ("x * +2", dict(x="float32"), "float32"),
             ("i + ~5", dict(i="int32"), "int32"), ("a * x + (1 - a) * y", dict(x="float16", y="float16", a=float),
                                                    "float16"),
             ("i + n / 2", dict(i="int32", n=int), "float64"), ("x * exp(a)", dict(x="float32", a=float), "float64")]
    for expr, kinds, want in cases:
        assert typed(expr, **kinds).out.name == want, expr
        sample = {k: (np.ones(2, dt.BY_NAME[v].np) if isinstance(v, str) else v(1)) for k, v in kinds.items()}
        assert np.asarray(eval(expr, {"exp": np.exp}, sample)).dtype.name == want, expr
    p = typed("i + (n * 2 - 1)", i="int32", n=int)
    assert [a.name for a in p.scalars] == ["n", "((n * 2) - 1)"] and p.derived
    assert p.complete([5]) == [5, 9]
    with pytest.raises(OverflowError):              # numpy: int32 + 2**40 is refused; so is n * 2 - 1 of it
        p.packed([2 ** 39])
    p.packed([7])
    q = typed("x * (1 / a)", x="float32", a=float)
    with pytest.raises(ZeroDivisionError, match="1 / a"):
        q.packed([0.0])
    # the part's type by Python's rules, not by trying values: (a - 10) ** 0.5 is a float for a = 20
    r = typed("x * (a - 10) ** 0.5", x="float32", a=int)
    assert r.scalars[-1].pytype is float and r.complete([20]) == [20, 10 ** 0.5]
    with pytest.raises(TypeError, match="no complex dtypes"):      # (-6) ** 0.5 is complex in Python
        r.packed([4])
    assert typed("i + n ** 2", i="int32", n=int).out.name == "int32"
    assert typed("i + n ** -1", i="int32", n=int).out.name == "float64"
    w = typed("x * (a // 1000)", x="float32", a=int)
    w.packed([2 ** 64])                             # a number only the host reads may be any int


def test_a_power_of_two_call_ints_is_refused_clearly(fakes):
    d = pyew.asarray(np.arange(3, dtype=np.float32))
    with pytest.raises(pyew.FormulaError, match="by the exponent's sign"):
        pyew.fuse(lambda x, a, b: x + a ** b)(d, 2, -1)


def test_formula_comparisons_with_any_python_int(fakes):
    d = pyew.asarray(np.array([-5, 0, 7], np.int32))
    for v in (3, 2 ** 40, -(2 ** 40)):
        got = pyew.evaluate("x < v", local_dict={"x": d, "v": v})
        np.testing.assert_array_equal(got.get(), np.array([-5, 0, 7], np.int32) < v)
    np.testing.assert_array_equal(pyew.evaluate("x == 4294967296", local_dict={"x": d}).get(), [False] * 3)


def test_numpy_scalars_are_typed(vocab, fakes):
    """np.float64 is a Python float but a typed scalar (NEP 50): float32 * np.float64 is float64."""
    needs(vocab, "multiply")
    p = typed("x * m", x="float32", m="float64")
    assert p.out.name == "float64"
    d = pyew.asarray(np.arange(4, dtype=np.float32))
    m = np.arange(8.0).mean()
    assert pyew.evaluate("x - m", local_dict={"x": d, "m": m}).dtype == np.float64
    assert pyew.evaluate("x - m", local_dict={"x": d, "m": 3.5}).dtype == np.float32
    assert pyew.sub(d, m).dtype == np.float64 and pyew.sub(d, 3.5).dtype == np.float32


@pytest.mark.parametrize("expr, kinds, want", [
    ("i ** 2", dict(i="int32"), "int32"), ("i ** 2.0", dict(i="int32"), "float64"),
    ("x ** 2", dict(x="float16"), "float16"), ("x ** -2", dict(x="float32"), "float32"),
    ("x ** 0.5", dict(x="float16"), "float16"), ("x ** 0.5", dict(x="bfloat16"), "float32"),
    ("x ** 2.0", dict(x="bfloat16"), "float32"), ("x ** 2", dict(x="bfloat16"), "bfloat16"),
    ("b ** 3", dict(b="bool"), "int64"),
])
def test_powers_type_as_numpy(vocab, expr, kinds, want):
    needs(vocab, "power", "multiply", "reciprocal")
    sample = {k: np.ones(2, dt.BY_NAME[v].np) for k, v in kinds.items()}
    assert eval(expr, {}, sample).dtype.name == want
    p = typed(expr, **kinds)
    assert p.out.name == want
    if expr == "x ** -2":       # (1/x)^2, not 1/(x*x), which overflows to 0 for x = 1e20
        assert "reciprocal_fn" in p.source and p.source.count("reciprocal_fn") == 1


def test_integer_to_a_negative_integer_power_is_numpys_error(vocab):
    needs(vocab, "power")
    with pytest.raises(pyew.FormulaError, match="negative integer powers"):
        typed("i ** -1", i="int32")
    # the same in every spelling: a function, a bool base, a numpy integer of pyew.fuse
    for expr, kinds in (("pow(i, -1)", dict(i="int32")), ("power(i, -2)", dict(i="int64")),
                        ("b ** -1", dict(b="bool")), ("(i > j) ** -1", dict(i="int32", j="int32"))):
        with pytest.raises(pyew.FormulaError, match="negative integer power"):
            typed(expr, **kinds)
    tree = formula.Call("power", (formula.Var("i"), formula.Const(-1, "int32")), operator=True)
    with pytest.raises(pyew.FormulaError, match="negative integer power"):
        fused.Program(tree, (fused.Arg("i", True, dt.BY_NAME["int32"]),), "i ** np.int32(-1)")
    assert typed("i ** 2.0", i="int32").out.name == "float64"


def test_too_many_arrays_is_a_formula_error(vocab):
    names = [f"a{i}" for i in range(jit.MAX_ARRAYS + 1)]
    with pytest.raises(pyew.FormulaError, match=f"at most {jit.MAX_ARRAYS}"):
        typed(" + ".join(names), **{n: "float32" for n in names})


def test_integer_params_are_not_truncated(vocab, tmp_path, monkeypatch):
    """An op's integer param given 2.5 in a formula is refused, not rounded (an op of a spec file
    loaded here: the default library's params are floats)."""
    pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")
    if jit.unavailable():
        pytest.skip(jit.unavailable())
    monkeypatch.setenv("PYEW_CACHE_DIR", str(tmp_path / "cache"))
    name = f"times_k_{os.getpid()}"
    (tmp_path / "k.toml").write_text(textwrap.dedent(f"""
        [[op]]
        name = "{name}"
        inputs = ["x"]
        dtypes = ["float32"]
        params = [{{ name = "k", type = "int", default = 2 }}]
        expr = "x * C(k)"
        ref = "x * k"
        doc = "x times k."
    """))
    pyew.load_spec(tmp_path / "k.toml")
    assert typed(f"{name}(x, k=3)", x="float32").out.name == "float32"
    with pytest.raises(pyew.FormulaError, match="takes an integer for param 'k', not 2.5"):
        typed(f"{name}(x, k=2.5)", x="float32")


def test_names_come_from_the_callers_globals_when_only_local_dict_is_given(fakes):
    d = pyew.asarray(np.arange(3, dtype=np.float32))
    globals()["_formula_global_w"] = 2.0
    try:
        got = pyew.evaluate("x * _formula_global_w", local_dict={"x": d})
    finally:
        del globals()["_formula_global_w"]
    np.testing.assert_array_equal(got.get(), np.arange(3, dtype=np.float32) * 2)


def test_fuse_traces_again_for_other_values_of_other_arguments(fakes):
    calls = []

    @pyew.fuse
    def act(x, kind="relu", bias=None):
        calls.append(kind)
        y = x if bias is None else x + bias
        return -y if kind == "neg" else y * 2

    d = pyew.asarray(np.arange(-2, 2, dtype=np.float32))
    np.testing.assert_array_equal(act(d).get(), np.arange(-2, 2, dtype=np.float32) * 2)
    np.testing.assert_array_equal(act(d, kind="neg").get(), -np.arange(-2, 2, dtype=np.float32))
    np.testing.assert_array_equal(act(d, bias=1.0).get(), (np.arange(-2, 2, dtype=np.float32) + 1) * 2)
    assert calls == ["relu", "neg", "relu"]
    with pytest.raises(TypeError, match="hashable"):
        act(d, kind={"neg": 1})

    @pyew.fuse
    def scaled(x, k):
        return x * k
    np.testing.assert_array_equal(scaled(d, (1, 2, 3, 4)).get(), np.arange(-2, 2) * np.arange(1, 5))   # a tuple
    np.testing.assert_array_equal(scaled(d, (1.5, 2.0, 3.0, 4.0)).get(),
                                  np.arange(-2, 2, dtype=np.float32) * np.array([1.5, 2, 3, 4]))


def test_fuse_binds_positional_calls_as_inspect_does(fakes):
    """A call that gives every argument by position (bound without inspect) traces and runs as the
    same call by keyword does; wrong argument counts still get Python's TypeError."""
    a = np.arange(-2, 2, dtype=np.float32)
    d = pyew.asarray(a)

    @pyew.fuse
    def f(x, k=2.0):
        return x * k
    np.testing.assert_array_equal(f(d, 3.0).get(), a * 3)
    np.testing.assert_array_equal(f(x=d, k=3.0).get(), a * 3)
    np.testing.assert_array_equal(f(d).get(), a * 2)
    assert len(f.trees) == 1
    with pytest.raises(TypeError, match="too many positional"):
        f(d, 1.0, 2.0)
    with pytest.raises(TypeError, match="missing"):
        f()

    @pyew.fuse
    def g(x, *, k):
        return x * k
    assert g.positional is None
    np.testing.assert_array_equal(g(d, k=2.0).get(), a * 2)
    with pytest.raises(TypeError, match="positional"):
        g(d, 2.0)


@pytest.fixture
def nvrtc_ok(vocab):
    why = jit.unavailable()
    if why:
        pytest.skip(why)


NEEDS = [[0, 0, 256, 1, 0, 1, 0, 4, 0, 0, 0], [1, 1, 128, 1, 0, 1, 0, 4, 0, 3, 1],
         [30, 2, 256, 1, 0, 1, 0, 4, 0, 0, 0], [33, 3, 256, 1, 0, 1, 0, 4, 0, 0, 1]]


@pytest.mark.parametrize("expr, kinds", [
    ("gelu(x * w + b)", dict(x="float32", w="float32", b="float32")),
    ("where(x > 0, x, a * expm1(x))", dict(x="bfloat16", a=float)),
    ("sigmoid(x) * 2 + y", dict(x="float16", y="float32")),
    ("(i * 3) // 2 + j", dict(i="int32", j="int64")),
    ("isnan(x) | (x > 1)", dict(x="float64")),
])
def test_kernels_compile_with_nvrtc(expr, kinds, nvrtc_ok):
    p = typed(expr, **kinds)
    sizes = [a.info.itemsize for a in p.arrays] + [p.out.itemsize]
    pack = 16 // max(sizes)
    for need in NEEDS:
        need = list(need)
        need[7] = pack
        if need[1] == 1 and (need[9] >= pack or len(p.arrays) > 1):
            need[9] = 0          # a shift fixed at compile time is for one input only
        name, cubin = jit.compile_cubin(p.source, jit.name_expression(need, p.out.ctype, p.in_types), "sm_90",
                                        [jit.cuda_include(), *jit.include_dirs()], expr)
        assert cubin[:4] == b"\x7fELF" and name.startswith("_Z")


def test_compile_error_names_the_formula_not_the_source(nvrtc_ok):
    with pytest.raises(jit.CompileError) as e:
        jit.compile_cubin("struct { broken", "ew::nothing<int>", "sm_90", [jit.cuda_include()], "x + y")
    msg = str(e.value)
    assert "'x + y'" in msg and "PYEW_JIT_LOG" in msg and len(msg) < 600


def test_an_unwritable_compile_log_keeps_the_compile_error(nvrtc_ok, tmp_path, monkeypatch):
    monkeypatch.setenv("PYEW_JIT_LOG", str(tmp_path / "missing" / "log.cu"))
    with pytest.raises(jit.CompileError, match="PYEW_JIT_LOG could not be written"):
        jit.compile_cubin("struct { broken", "ew::nothing<int>", "sm_90", [jit.cuda_include()], "x + y")
    monkeypatch.setenv("PYEW_JIT_LOG", str(tmp_path / "log.cu"))
    with pytest.raises(jit.CompileError, match="source and log in"):
        jit.compile_cubin("struct { broken", "ew::nothing<int>", "sm_90", [jit.cuda_include()], "x + y")
    assert "broken" in (tmp_path / "log.cu").read_text()


# ---- the cache ------------------------------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    from pyew import dtypes as dt, fused, jit
    tree, names = fused.parse("tanh(x) * 3 + {k}")
    p = fused.Program(tree, (fused.Arg("x", True, dt.BY_NAME["float32"]),), "t")
    need = [0, 0, 256, 1, 0, 1, 0, 4, 0, 0, 0]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(2):
            key, name, cubin = jit.cubin(p.source, jit.name_expression(need, "float", ["float"]), "sm_90", "t")
    print(json.dumps(dict(jit.STATS, elf=cubin[:4] == b"\\x7fELF", warnings=[str(x.message) for x in w],
                          nvrtc_loaded="cuda.bindings.nvrtc" in sys.modules, cuda_core="cuda.core" in sys.modules)))
""")


def run_script(cache, k=0.25):
    env = dict(os.environ, PYEW_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(k=k)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    import json
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_disk_cache_serves_a_new_process(tmp_path, nvrtc_ok):
    first = run_script(tmp_path)
    assert first["compiled"] == 1 and first["memory"] == 1 and first["elf"] and first["nvrtc_loaded"]
    second = run_script(tmp_path)
    assert second["compiled"] == 0 and second["disk"] == 1 and second["elf"]
    assert not second["nvrtc_loaded"] and not second["cuda_core"], "a hit loads neither NVRTC nor cuda.core"


def test_a_cache_folder_set_later_gets_the_toolchain_record(tmp_path, nvrtc_ok):
    """A process that found NVRTC for one cache folder and then compiles into another records its
    toolchain there too: the next process reading that folder's kernels does not load NVRTC."""
    first, later = tmp_path / "first", tmp_path / "later"
    switch = textwrap.dedent(f"""
        import os
        from pyew import jit
        jit.toolchain()
        os.environ["PYEW_CACHE_DIR"] = {str(later)!r}
    """)
    env = dict(os.environ, PYEW_CACHE_DIR=str(first), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", switch + SCRIPT.format(k=0.75)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert list(later.glob("toolchain-*")) and list(first.glob("toolchain-*"))
    again = run_script(later, k=0.75)
    assert again["compiled"] == 0 and again["disk"] == 1 and not again["nvrtc_loaded"]


@pytest.mark.parametrize("damage", ["garbage", "stale"])
def test_a_damaged_or_stale_toolchain_record_is_found_again(tmp_path, nvrtc_ok, damage):
    """The record of NVRTC's version and the CUDA headers: unreadable, or naming a library whose
    size or time changed, it is found again (loading NVRTC) and written back."""
    import json
    run_script(tmp_path)
    [record] = tmp_path.glob("toolchain-*")
    t = json.loads(record.read_text())
    record.write_text("{not json" if damage == "garbage" else json.dumps(dict(t, nvrtc_stamp="1:2")))
    again = run_script(tmp_path)
    assert again["compiled"] == 0 and again["disk"] == 1 and again["nvrtc_loaded"]
    assert json.loads(record.read_text()) == t
    assert not run_script(tmp_path)["nvrtc_loaded"]


def test_corrupt_entries_are_compiled_again(tmp_path, nvrtc_ok):
    run_script(tmp_path)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files
    for p in files:
        p.write_bytes(p.read_bytes()[:40])          # truncated
    again = run_script(tmp_path)
    assert again["compiled"] == 1 and again["elf"]
    assert run_script(tmp_path)["compiled"] == 0    # and written back whole


def test_an_entry_changed_in_place_is_compiled_again(tmp_path, nvrtc_ok):
    run_script(tmp_path)
    [entry] = [p for p in tmp_path.glob("??/*") if p.is_file()]
    blob = bytearray(entry.read_bytes())
    blob[-100] ^= 0xFF                              # same length, ELF header intact
    entry.write_bytes(bytes(blob))
    assert run_script(tmp_path)["compiled"] == 1


def test_literals_without_a_cpp_spelling_compile(vocab, nvrtc_ok):
    """NaN and the infinities, written or reached by rounding (float16 100000, float32 1e39)."""
    needs(vocab, "multiply", "add", "where", "greater")
    for expr, kinds in [("x * nan + where(x > 0, x, -inf)", dict(x="float32")), ("x + 100000", dict(x="float16")),
                        ("x * 1e39", dict(x="float32")), ("x * -nan", dict(x="bfloat16"))]:
        p = typed(expr, **kinds)
        need = list(NEEDS[0])
        need[7] = 16 // max([a.info.itemsize for a in p.arrays] + [p.out.itemsize])
        name, cubin = jit.compile_cubin(p.source, jit.name_expression(need, p.out.ctype, p.in_types), "sm_90",
                                        [jit.cuda_include(), *jit.include_dirs()], expr)
        assert cubin[:4] == b"\x7fELF", expr


def test_two_processes_compiling_at_once_both_succeed(tmp_path, nvrtc_ok):
    env = dict(os.environ, PYEW_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT.format(k=0.5)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert run_script(tmp_path, k=0.5)["compiled"] == 0


def test_unusable_cache_folder_warns_once(tmp_path, nvrtc_ok):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    r = run_script(blocker / "cache")
    assert r["compiled"] == 1 and r["elf"]
    assert len([w for w in r["warnings"] if "not cached on disk" in w]) == 1


def test_a_cache_folder_that_cannot_be_written_is_still_read(tmp_path, nvrtc_ok):
    """A cache made ahead (an image, a site's shared folder) serves its kernels to a process that
    may not write there; a new formula is compiled, not written, and one warning says so."""
    run_script(tmp_path)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    read_only = ("import os\n_real = os.access\n"
                 "os.access = lambda p, m, *a, **k: False if m & os.W_OK else _real(p, m, *a, **k)\n")
    env = dict(os.environ, PYEW_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    import json
    for k, hit in ((0.25, True), (0.5, False)):
        r = subprocess.run([sys.executable, "-c", read_only + SCRIPT.format(k=k)], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert (got["disk"], got["compiled"]) == ((1, 0) if hit else (0, 1)) and got["elf"]
        assert [w for w in got["warnings"] if "not cached on disk" in w and "not writable" in w] == got["warnings"]
        assert len(got["warnings"]) == 1
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == files


def test_cache_command_shows_and_clears(tmp_path, nvrtc_ok):
    run_script(tmp_path)
    env = dict(os.environ, PYEW_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    show = subprocess.run([sys.executable, "-m", "pyew", "cache"], env=env, capture_output=True, text=True)
    assert show.returncode == 0 and str(tmp_path) in show.stdout and "entries: 0" not in show.stdout
    clear = subprocess.run([sys.executable, "-m", "pyew", "cache", "--clear"], env=env, capture_output=True, text=True)
    assert clear.returncode == 0 and "removed" in clear.stdout
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_cache_clear_deletes_only_what_pyew_wrote(tmp_path, nvrtc_ok):
    """PYEW_CACHE_DIR may name a folder that holds other files: they are neither counted nor
    deleted."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "results.csv").write_text("1,2")
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "notes.txt").write_text("keep")
    (tmp_path / "notes.txt").write_text("keep")
    (tmp_path / "toolchain-notes.txt").write_text("keep")        # named like pyew's files, but not theirs
    (tmp_path / ".tmp-mine").write_text("keep")
    (tmp_path / "xy").mkdir()                                    # an empty folder of two letters
    run_script(tmp_path)
    env = dict(os.environ, PYEW_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    show = subprocess.run([sys.executable, "-m", "pyew", "cache"], env=env, capture_output=True, text=True)
    assert "entries: 1," in show.stdout
    clear = subprocess.run([sys.executable, "-m", "pyew", "cache", "--clear"], env=env, capture_output=True, text=True)
    assert clear.returncode == 0
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == [".tmp-mine", "ab/notes.txt", "mine/results.csv", "notes.txt", "toolchain-notes.txt"]
    assert (tmp_path / "xy").is_dir() and not list(tmp_path.glob("toolchain-*[0-9a-f]"))


def test_formula_parse_is_cached_per_text(vocab):
    a = fused.parse("x + 1")
    assert fused.parse("x + 1") is a
    assert formula.variables(a[0]) == ["x"]


def test_without_nvrtc_formulas_run_op_by_op_and_say_why_once(fakes, monkeypatch, rng):
    import warnings
    monkeypatch.setattr(jit, "unavailable", lambda: "NVRTC is not available (for the test)")
    monkeypatch.setattr(fused, "_fallback_warned", False)
    x = rng.uniform(-2, 2, 300).astype(np.float32)
    w = rng.uniform(-2, 2, 300).astype(np.float32)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = pyew.evaluate("gelu(x * w + 1)", local_dict={"x": x, "w": w})
        again = pyew.evaluate("sigmoid(x) - w", local_dict={"x": x, "w": w})
    assert [str(m.message) for m in seen if "one kernel per op" in str(m.message)] == [
        "pyew: formulas run one kernel per op, not fused: NVRTC is not available (for the test)"]
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, pyew.gelu(pyew.add(pyew.mul(x, w), 1)))
    np.testing.assert_array_equal(again, pyew.sub(pyew.sigmoid(x), w))
    # out= as numpy's there too: exact, another dtype, a shape the result broadcasts to, on the
    # host and on the GPU; a refused cast writes nothing
    want = np.asarray(pyew.sub(pyew.sigmoid(x), w))
    o32, o64, wide = np.empty(300, np.float32), np.empty(300, np.float64), np.empty((2, 300), np.float32)
    for o in (o32, o64, wide):
        assert pyew.evaluate("sigmoid(x) - w", local_dict={"x": x, "w": w}, out=o) is o
        np.testing.assert_array_equal(o, np.broadcast_to(want, o.shape).astype(o.dtype))
    g = pyew.asarray(np.zeros((2, 300), np.float64))
    assert pyew.evaluate("sigmoid(x) - w", local_dict={"x": pyew.asarray(x), "w": w}, out=g) is g
    np.testing.assert_array_equal(g.get(), np.broadcast_to(want, (2, 300)))
    oi = np.full(300, 7, np.int32)
    with pytest.raises(TypeError, match="Cannot cast formula 'sigmoid\\(x\\) - w' output"):
        pyew.evaluate("sigmoid(x) - w", local_dict={"x": x, "w": w}, out=oi)
    assert (oi == 7).all()
    pyew.evaluate("sigmoid(x) - w", {"x": x, "w": w}, None, oi, casting="unsafe")
    np.testing.assert_array_equal(oi, want.astype(np.int32))
    # the outs the fused path refuses, refused alike: a numpy out for GPU inputs, and no array at all
    with pytest.raises(TypeError, match="out must be a GPU array .* when an input is on the GPU"):
        pyew.evaluate("sigmoid(x) - w", local_dict={"x": pyew.asarray(x), "w": w}, out=o32)
    with pytest.raises(TypeError, match="out must be a numpy array or a GPU array, not list"):
        pyew.evaluate("sigmoid(x) - w", local_dict={"x": x, "w": w}, out=[0.0] * 300)
    d = pyew.asarray(np.zeros(300, np.float32))
    assert pyew.evaluate("sigmoid(x) - w", local_dict={"x": pyew.asarray(x), "w": w}, out=d) is d
    np.testing.assert_array_equal(d.get(), want)


def test_nvrtc_lost_after_its_record_falls_back_op_by_op(fakes, monkeypatch, rng):
    """A toolchain record can outlive the NVRTC it names: a kernel that cannot be compiled then
    runs the formula op by op, and nothing was written first."""
    def gone(*args, **kw):
        raise jit.Unavailable("NVRTC is not available (gone for the test)")
    monkeypatch.setattr(jit, "unavailable", lambda: None)
    monkeypatch.setattr(fused.Program, "launch_ptrs", gone)
    monkeypatch.setattr(fused, "_fallback_warned", True)
    x = rng.uniform(-2, 2, 50).astype(np.float32)
    d = pyew.asarray(x)
    for _ in range(2):
        got = pyew.evaluate("x * 3 + 1", local_dict={"x": d})
        np.testing.assert_array_equal(got.get(), pyew.add(pyew.mul(x, 3), 1))


def test_formulas_mixing_numpy_and_gpu_arrays_run_every_call(fakes, nvrtc_ok, rng):
    """numpy operands with GPU ones: uploaded each call (no GPU plan holds them), also into a GPU out=."""
    x = rng.standard_normal(40).astype(np.float32)
    y = rng.standard_normal(40).astype(np.float32)
    d = pyew.asarray(x)
    for _ in range(3):
        np.testing.assert_allclose(pyew.evaluate("a + b * 2", local_dict={"a": d, "b": y}).get(), x + y * 2, rtol=1e-6)
    o = pyew.empty(40, "float32")
    for _ in range(2):
        assert pyew.evaluate("b * 2", local_dict={"b": y}, out=o) is o
        np.testing.assert_array_equal(o.get(), y * 2)


def test_the_header_digest_follows_includes_across_folders(tmp_path):
    """A loaded spec op's header (its own folder) including a library op's (build/gen): a change to
    the library op makes a new key, in the same process too; which other folders are searched
    does not."""
    lib, gen, spec, other = (tmp_path / n for n in ("libew", "gen", "spec", "other"))
    for d in (lib, gen / "fn", spec / "fn", other / "fn"):
        d.mkdir(parents=True)
    (lib / "ew.cuh").write_text("// libew\n")
    (gen / "fn" / "gelu.cuh").write_text("// gelu v1\n")
    (spec / "fn" / "bias_gelu.cuh").write_text('#include "fn/gelu.cuh"\n// bias_gelu\n')
    (other / "fn" / "softplus.cuh").write_text("// another file's op\n")
    key = lambda *dirs: jit.headers_digest(tuple(map(str, dirs)), ("fn/bias_gelu.cuh",))  # noqa: E731
    before = key(lib, gen, spec)
    assert key(lib, gen, spec, other) == before
    (gen / "fn" / "gelu.cuh").write_text("// gelu, second version\n")
    assert key(lib, gen, spec) != before


def test_the_header_digest_follows_op_headers_into_the_ops_they_include(tmp_path):
    (tmp_path / "fn").mkdir()
    (tmp_path / "ew.cuh").write_text("// libew\n")
    (tmp_path / "fn" / "add_relu.cuh").write_text('#include "fn/relu.cuh"\n// add_relu\n')
    (tmp_path / "fn" / "relu.cuh").write_text("// relu v1\n")
    before = jit.headers_digest((str(tmp_path),), ("fn/add_relu.cuh",))
    (tmp_path / "fn" / "relu.cuh").write_text("// relu, second version\n")
    changed = jit.headers_digest((str(tmp_path),), ("fn/add_relu.cuh",))
    assert changed != before
    (tmp_path / "fn" / "unused.cuh").write_text("// not included\n")     # a header no kernel includes
    jit._digests.clear()
    assert jit.headers_digest((str(tmp_path),), ("fn/add_relu.cuh",)) == changed


def test_the_libew_headers_of_op_headers_are_in_the_precompiled_prefix(vocab):
    """Every libew header an op's device function includes is in the prefix each formula's source
    starts with: NVRTC's automatic precompiled header covers that prefix only, and a header left
    out of it would be parsed again by every compile."""
    f32 = dt.BY_NAME["float32"]
    source = fused.Program(fused.parse("sigmoid(x) + x")[0], (fused.Arg("x", True, f32),), "t").source
    head = source.split("namespace ew_jit {}")[0]
    prefix = set(re.findall(r'^#include "([^"]+)"', head, re.M))
    included = set()
    for d in jit.include_dirs():
        for h in Path(d, "fn").glob("*.cuh"):
            included.update(i for i in re.findall(r'^#include "([^"]+)"', h.read_text(), re.M)
                            if not i.startswith("fn/"))
    assert included and included <= prefix, f"op headers include {sorted(included - prefix)} outside {sorted(prefix)}"


def test_numexpr_mistakes_are_refused_before_anything_runs(vocab):
    """What numpy raises on or numexpr refuses is refused, saying what to write: & inside a chain
    of comparisons (Python reads x > 0 & y > 0 as x > (0 & y) > 0), and/or/not, numexpr's
    reductions; a bracketed & in a chain is what was written, and stays."""
    with pytest.raises(pyew.FormulaError, match=r"chain of comparisons over 0 & y .*write \(x > 0\) & \(y > 0\)"):
        fused.parse("x > 0 & y > 0")
    with pytest.raises(pyew.FormulaError, match=r"write \(x == 1\) \| \(y != 2\)"):
        fused.parse("x == 1 | y != 2")
    with pytest.raises(pyew.FormulaError, match="chain of comparisons over \\(0\\) & y"):
        fused.parse("x > (0) & y > 0")
    tree, _ = fused.parse("x > (0 & y) > 0")
    assert [c.op for c in formula.calls(tree)].count("bitwise_and") == 2
    for expr, word in (("x and y", "and"), ("x or y", "or"), ("not x", "not")):
        with pytest.raises(pyew.FormulaError, match=f"'{word}' is not allowed in a formula.*use & \\| ~"):
            fused.parse(expr)
    for name, use in (("max", "maximum"), ("min", "minimum"), ("sum", "np.sum")):
        with pytest.raises(pyew.FormulaError, match=f"{name}\\(\\) is a reduction in numexpr.*{use}"):
            fused.parse(f"{name}(x, 0)")
    for name, why in (("complex", "complex dtype: compute the real and imaginary parts"),
                      ("real", "complex dtype: of a real array it is the array itself, so leave real"),
                      ("imag", "complex dtype: of a real array it is 0"),
                      ("conj", "complex dtype: of a real array it is the array itself, so leave conj"),
                      ("contains", "strings in numexpr; .*: compare on the host")):
        with pytest.raises(pyew.FormulaError, match=f"{name}\\(\\) .*{why}") as e:
            fused.parse(f"{name}(x, y)")
        assert "in numexpr" in str(e.value)
    assert fused.parse("round(x)")[0].op == "rint"          # numexpr's round: to even
    with pytest.raises(pyew.FormulaError, match="fails: ZeroDivisionError: integer division or modulo by zero"):
        fused.parse("x + 1 // 0")
    with pytest.raises(pyew.FormulaError, match="fails: a complex result"):
        fused.parse("x + (-1) ** 0.5")
    assert typed("i << 2", i="int32").out.name == "int32" and typed("i >> n", i="int64", n=int).out.name == "int64"
    assert fused.parse("true_divide(x, y)")[0].op == "divide"
    assert fused.parse("copy(x)")[0] == formula.Var("x")
    assert fused.parse("ones_like(x)")[0].op == "where"
    with pytest.raises(pyew.FormulaError, match="copy\\(\\) of anything but one argument"):
        fused.parse("copy(x, y)")


def test_powers_take_any_exponent(vocab, fakes):
    """x ** p, 2 ** x and x ** y as numpy and numexpr compute them; an integer base to a negative
    Python int exponent given at run time is numpy's ValueError, from evaluate and fuse."""
    a = np.array([0.5, 1.0, 2.0, 3.0], np.float32)
    d = pyew.asarray(a)
    np.testing.assert_allclose(pyew.evaluate("x ** p", dict(x=d, p=3.0)).get(), a ** 3.0, rtol=1e-6)
    np.testing.assert_allclose(pyew.evaluate("2 ** x", dict(x=d)).get(), 2 ** a, rtol=1e-6)
    np.testing.assert_allclose(pyew.evaluate("x ** y", dict(x=d, y=d)).get(), a ** a, rtol=1e-6)
    i = pyew.asarray(np.arange(1, 5, dtype=np.int32))
    np.testing.assert_array_equal(pyew.evaluate("i ** k", dict(i=i, k=2)).get(), np.arange(1, 5) ** 2)
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        pyew.evaluate("i ** k", dict(i=i, k=-1))
    power = pyew.fuse(lambda x, k: x ** k)
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        power(i, -1)
    np.testing.assert_array_equal(power(i, 3).get(), np.arange(1, 5) ** 3)
    np.testing.assert_allclose(pyew.evaluate("x + 2 ** 64", dict(x=d)).get(), a + np.float32(2 ** 64))
    # a Python int meeting float dtypes alone may be any, as in numpy; one meeting an int dtype fits it
    np.testing.assert_allclose(pyew.evaluate("x * n", dict(x=d, n=2 ** 64)).get(), a * np.float32(2 ** 64))
    np.testing.assert_allclose(pyew.evaluate("i * 0.5 + n", dict(i=i, n=2 ** 70)).get(),
                               np.arange(1, 5) * 0.5 + 2 ** 70)
    with pytest.raises(OverflowError, match="n is an int too large for a float \\(1329 bits\\)"):
        pyew.evaluate("x * n", dict(x=d, n=10 ** 400))
    with pytest.raises(OverflowError, match="does not fit in 64 bits"):
        pyew.evaluate("i + n", dict(i=i, n=2 ** 64))


def test_numexpr_spellings_shifts_and_ints_past_int64(fakes):
    """copy, ones_like and true_divide as numexpr has them; << and >> as numpy's shifts (a count
    outside [0, bits) shifts every bit out); a Python int past int64 compared with integers gives
    numpy 2's answer, from evaluate and fuse, a formula's constant or a call's number, after a plan
    was made with a small one; anywhere else numpy's OverflowError, nothing written to out=."""
    x = np.array([-1.5, 0.0, 2.0, np.nan], np.float32)
    b = np.array([True, False])
    np.testing.assert_array_equal(pyew.evaluate("copy(x) * 2"), x * 2)
    for v in (x, b, np.arange(3, dtype=np.int64)):
        got = pyew.evaluate("ones_like(v)")
        assert got.dtype == v.dtype
        np.testing.assert_array_equal(got, np.ones_like(v))
    np.testing.assert_array_equal(pyew.evaluate("true_divide(x, 2)"), x / np.float32(2))
    for dtype in (np.int32, np.int64):
        bits = np.iinfo(dtype).bits
        i = np.array([5, -5, 1, -1, 123456, -(1 << (bits - 1))], dtype)
        for count in (-1, 0, 1, bits - 1, bits, bits + 1, 1000):
            n = np.full(i.shape, count, dtype)
            np.testing.assert_array_equal(pyew.evaluate("i << n"), np.left_shift(i, n), err_msg=str(count))
            np.testing.assert_array_equal(pyew.evaluate("i >> n"), np.right_shift(i, n), err_msg=str(count))
            np.testing.assert_array_equal((pyew.asarray(i) << pyew.asarray(n)).get(), i << n)
    top, bottom = (1 << 63) - 1, -(1 << 63)
    i = np.array([bottom, bottom + 1, -3, 0, 4, top - 1, top], np.int64)
    d = pyew.asarray(i)
    less = pyew.fuse(lambda a, n: a < n)
    np.testing.assert_array_equal(pyew.evaluate("i < n", dict(i=d, n=3)).get(), i < 3)      # a plan, then
    np.testing.assert_array_equal(less(d, 3).get(), i < 3)
    np.testing.assert_array_equal(pyew.evaluate("i < n + 1", dict(i=d, n=3)).get(), i < 4)
    for n in (2 ** 70, -2 ** 70, 2 ** 63, -2 ** 63 - 1):
        np.testing.assert_array_equal(pyew.evaluate("i < n", dict(i=d, n=n)).get(), i < n)
        np.testing.assert_array_equal(pyew.evaluate("(i + 1) >= n", dict(i=i, n=n)), (i + 1) >= n)
        np.testing.assert_array_equal(less(d, n).get(), i < n)
    # the kernel compares with the infinity of the constant's sign (2**63 as a double is INT64_MAX's)
    assert "__longlong_as_double(9218868437227405312LL)" in typed("i == 9223372036854775808", i="int64").source
    # a number computed from the call's: past int64 (numpy's answer), or back within it (fused)
    np.testing.assert_array_equal(pyew.evaluate("i < n + 1", dict(i=d, n=top)).get(), i < top + 1)
    np.testing.assert_array_equal(pyew.evaluate("i < n - 1", dict(i=d, n=top + 1)).get(), i < top)
    for k, want in ((2 ** 63, i == 2 ** 63), (-2 ** 63 - 1, i == -2 ** 63 - 1), (2 ** 70, i == 2 ** 70)):
        np.testing.assert_array_equal(pyew.evaluate(f"i == {k}", dict(i=d)).get(), want, err_msg=str(k))
        np.testing.assert_array_equal(pyew.evaluate(f"i < {k}", dict(i=i)), i < k, err_msg=str(k))
        np.testing.assert_array_equal(pyew.fuse(lambda a, k=k: a >= k)(d).get(), i >= k, err_msg=str(k))
    out = np.full(i.shape, 7, np.int64)
    with pytest.raises(OverflowError, match="does not fit in 64 bits"):
        pyew.evaluate("i + n", dict(i=i, n=2 ** 70), out=out)
    assert (out == 7).all()
    with pytest.raises(OverflowError):                          # numpy refuses bool < 2**70
        pyew.evaluate("b < n", dict(b=pyew.asarray(b), n=2 ** 70))
    with pytest.raises(OverflowError):
        pyew.evaluate("i + 1180591620717411303424", dict(i=d))
    import enum

    class Big(enum.IntEnum):
        HUGE = 2 ** 70
    with pytest.raises(OverflowError, match="a Big past int64 \\(71 bits\\)"):
        pyew.less(d, Big.HUGE)
    assert pyew.clip(b, False, True).dtype == np.bool_
    np.testing.assert_array_equal(pyew.clip(b, True, True), np.clip(b, True, True))


def test_evaluate_takes_numexprs_signature(fakes, rng):
    """evaluate(ex, local_dict, global_dict, out, order, casting) as numexpr's: out positional, order
    'K', 'A' or 'C' (results are C-ordered), casting numpy's rule for an out of another dtype (a
    refused cast writes nothing); anything else is refused before it runs."""
    x = rng.uniform(-2, 2, 64).astype(np.float32)
    o = np.full(64, np.nan, np.float32)
    assert pyew.evaluate("x * 2", {"x": x}, None, o) is o
    np.testing.assert_array_equal(o, x * 2)
    for order in ("K", "A", "C"):
        np.testing.assert_array_equal(pyew.evaluate("x * 2", {"x": x}, order=order), x * 2)
    o16 = np.full(64, 7, np.float16)
    with pytest.raises(TypeError, match="with casting rule 'safe'"):
        pyew.evaluate("x * 2", {"x": x}, out=o16, casting="safe")
    assert (o16 == 7).all()
    pyew.evaluate("x * 2", {"x": x}, out=o16)                    # numpy's 'same_kind' by default
    np.testing.assert_array_equal(o16, (x * 2).astype(np.float16))
    oi = np.full(64, 7, np.int32)
    with pytest.raises(TypeError, match="with casting rule 'same_kind'"):
        pyew.evaluate("x * 2", {"x": x}, out=oi)
    assert (oi == 7).all()
    pyew.evaluate("x * 2", {"x": x}, out=oi, casting="unsafe")
    np.testing.assert_array_equal(oi, (x * 2).astype(np.int32))
    with pytest.raises(ValueError, match="order='F'; pyew's results are C-ordered"):
        pyew.evaluate("x * 2", {"x": x}, order="F")
    with pytest.raises(ValueError, match="casting must be one of"):
        pyew.evaluate("x * 2", {"x": x}, casting="sometimes")


def test_fuse_takes_params_flags_methods_and_any_signature(fakes):
    """A number an op takes as its param is traced by value (once per value); True and False
    select what is traced; methods, *args, **kwargs and positional-only arguments work; out=
    inside the function is refused rather than dropped."""
    a = np.arange(-2, 2, dtype=np.float32)
    d = pyew.asarray(a)

    @pyew.fuse
    def act(x, alpha=0.5):
        return pyew.elu(x, alpha=alpha) * 2
    for alpha in (0.3, 0.7, 0.3):
        np.testing.assert_array_equal(act(d, alpha).get(), pyew.mul(pyew.elu(d, alpha=alpha), 2).get())
    assert len(act.trees) == 2

    @pyew.fuse
    def scaled(x, a):
        return pyew.elu(x, alpha=a * 2)
    np.testing.assert_array_equal(scaled(d, 0.25).get(), pyew.elu(d, alpha=0.5).get())
    with pytest.raises(TypeError, match="param 'alpha' of elu takes a number, and is computed from 'a', an array"):
        scaled(d, d)

    @pyew.fuse
    def maybe(x, training=True):
        return x * 0.5 if training else x
    np.testing.assert_array_equal(maybe(d).get(), a * 0.5)
    np.testing.assert_array_equal(maybe(d, training=False).get(), a)

    class Layer:
        k = 2.0

        @pyew.fuse
        def twice(self, x):
            return x * 2

        @pyew.fuse
        def times(self, x):
            return x * self.k
    np.testing.assert_array_equal(Layer().twice(d).get(), a * 2)
    layer = Layer()
    np.testing.assert_array_equal(layer.times(d).get(), a * 2)
    layer.k = 3.0                  # an attribute the trace read, set: traced again, not a stale kernel
    np.testing.assert_array_equal(layer.times(d).get(), a * 3)
    layer.k = 2.0
    np.testing.assert_array_equal(layer.times(d).get(), a * 2)
    assert len(Layer.times.trees) == 3          # k of the class; 3.0 and 2.0 of the instance

    class Poly:
        @pyew.fuse
        def apply(self, x):
            return x * self.coef[0] + self.coef[1]
    p = Poly()
    for c in (2.0, 3.0, 4.0, 5.0, 6.0):        # a new tuple each time, perhaps at a freed one's address
        p.coef = (c, 0.0)
        np.testing.assert_array_equal(p.apply(d).get(), a * c)
    del layer                                   # traces hold an instance weakly
    gc.collect()
    assert all(dict(key)["self"][1]() is None for key in Layer.times.trees)

    @pyew.fuse
    def many(*xs, **kw):
        return xs[0] + xs[1] * kw["s"]
    np.testing.assert_array_equal(many(d, d, s=3.0).get(), a + a * 3)
    np.testing.assert_array_equal(pyew.fuse(lambda x, /: x * 2)(d).get(), a * 2)

    @pyew.fuse
    def writes(x, buf):
        pyew.exp(x, out=buf)
        return x * 2
    buf = pyew.asarray(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="exp\\(..., out=\\) inside a fused function"):
        writes(d, buf)

    # traced by value: a numpy scalar too; floats by their bits (-0.0 is not 0.0; NaN is one trace)
    np.testing.assert_array_equal(act(d, np.float32(0.25)).get(), pyew.mul(pyew.elu(d, alpha=0.25), 2).get())
    before = len(act.trees)
    for alpha in (0.0, -0.0):
        act(d, alpha)
    assert len(act.trees) == before + 2
    for alpha in (float("nan"), float("nan")):
        act(d, alpha)
    assert len(act.trees) == before + 3

    @dataclasses.dataclass
    class Unhashable:
        k: float = 2.0

        @pyew.fuse
        def times(self, x):
            return x * self.k
    with pytest.raises(TypeError, match="must be hashable \\(for a method, a class with __hash__"):
        Unhashable().times(d)


def test_chains_written_over_lines_are_read_by_their_own_brackets(vocab):
    assert fused.parse("(x +\n y > (0 & y) > 0)")[1] == ["x", "y"]
    assert fused.parse("(x +\r y > (0 & y) > 0)")[1] == ["x", "y"]      # a lone carriage return ends a line
    assert fused.parse("(x > (0 & y  # é\n) > 0)")[1] == ["x", "y"]      # a comment inside the brackets
    assert fused.parse("(x > (0 & y \\\n) > 0)")[1] == ["x", "y"]        # a line continuation
    with pytest.raises(pyew.FormulaError, match=r"write \(x > 0\) & \(y > 0\)\n    \(x > 0 &\n"):
        fused.parse("(x > 0 &\n y > 0)")


_LAUNCH_PTRS = fused.Program.launch_ptrs        # the real one (the stand-ins replace it per test)


def test_a_zero_d_numpy_operand_is_read_each_call(fakes):
    """A 0-d numpy array is the same object after a += 1: each call reads its value again."""
    d = pyew.asarray(np.arange(4, dtype=np.float32))
    a = np.zeros((), np.float32)
    for k in range(3):
        np.testing.assert_array_equal(pyew.evaluate("x * a", {"x": d, "a": a}).get(), np.arange(4) * k)
        a += 1


def test_numpy_scalars_replay_a_formulas_plan(fakes, monkeypatch):
    """A numpy scalar operand is a number of the formula's plan, keyed by its type: later calls with
    other values replay it; another type is another plan, with numpy's promotion."""
    general = []
    monkeypatch.setattr(fused, "_run_fused", lambda *a, _f=fused._run_fused: (general.append(1), _f(*a))[1])
    h = np.arange(4, dtype=np.float32)
    d = pyew.asarray(h)
    for k in range(3):
        got = pyew.evaluate("x * a + 1", {"x": d, "a": np.float32(k)})
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.get(), h * np.float32(k) + 1)
        np.testing.assert_array_equal(pyew.evaluate("x * a + 1", {"x": h, "a": np.float32(k)}), h * np.float32(k) + 1)
    assert len(general) == 2                # one for the GPU arrays, one for the numpy ones
    for k in (0.1, 0.3):        # typed: float32 * np.float64 is float64, 0.1 not rounded to float32
        got = pyew.evaluate("x * a + 1", {"x": d, "a": np.float64(k)})
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got.get(), h * np.float64(k) + 1)
    assert len(general) == 3


def test_a_cached_formula_launches_from_its_plan_as_the_general_launch_does(fakes, monkeypatch):
    """After a formula's first call, run() replays its plan and calls libew's ew_jit_map itself:
    with the same arguments the general launch passes (the operands' pointers read back from the
    array it passes), for a plain and a broadcast formula."""
    import ctypes
    monkeypatch.setattr(fused.Program, "launch_ptrs", _LAUNCH_PTRS)
    monkeypatch.setattr(jit, "slots_for", lambda ordinal, count: jit.Slots(count, "sm_90", True))
    lib = pyew.library.get()
    calls = []

    def jit_map(*args):
        ptrs = list((ctypes.c_uint64 * args[6]).from_address(args[5]))
        calls.append(args[:5] + (ptrs,) + args[6:])
        return 0
    monkeypatch.setattr(lib, "jit_map", jit_map)
    general = []
    monkeypatch.setattr(fused, "_run_fused", lambda *a, _f=fused._run_fused: (general.append(1), _f(*a))[1])
    x = pyew.asarray(np.ones((3, 4), np.float32))
    for b in (x, pyew.asarray(np.ones(4, np.float32))):
        calls.clear()
        general.clear()
        out = [pyew.evaluate("x * 2 + b", {"x": x, "b": b}) for _ in range(3)]
        assert len(general) == 1 and len(calls) == 3     # the first call classified; the others replayed
        for c, o in zip(calls, out):
            assert c[4] == o.ptr and c[5] == [x.ptr, b.ptr]
            assert c[:4] + c[6:] == calls[0][:4] + calls[0][6:]


@pytest.mark.parametrize("kinds, want", [
    (dict(b="bool", y="float32"), "float32"), (dict(b="bool", y="int32"), "int32"),
    (dict(b="bool", y="float16"), "float16"), (dict(b="int32", y="int32"), "int32"),
])
def test_three_operands_promote_as_numpy(vocab, kinds, want):
    """Arrays promote among themselves before a Python number adjusts the result: clip(b, 0, y)
    with b bool and y float32 is float32 in numpy, not bool + 0 (int64) then float32 (float64)."""
    needs(vocab, "clip")
    sample = {k: np.ones(2, dt.BY_NAME[v].np) for k, v in kinds.items()}
    assert np.clip(sample["b"], 0, sample["y"]).dtype.name == want
    assert typed("clip(b, 0, y)", **kinds).out.name == want


def test_arrays_promote_by_numpys_n_ary_rule():
    """Three arrays' dtypes promote together, as numpy's result_type (and its clip) has them:
    int8, uint8 and float16 give float16, where promoting two at a time would give float32."""
    from pyew.operands import _promote_key
    names = ["float32", "float64", "float16", "int32", "int64", "bool", "int8", "uint8", "int16", "uint16"]
    for a in names:
        for b in names:
            for c in names:
                key = tuple(np.dtype(n) for n in (a, b, c))
                want = np.clip(np.zeros(1, a), np.zeros(1, b), np.zeros(1, c)).dtype
                assert _promote_key(key) == want, (a, b, c)
    assert _promote_key((np.dtype("int8"), np.dtype("uint8"), np.dtype("float16"))) == np.float16
