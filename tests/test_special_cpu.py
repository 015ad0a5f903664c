"""The special kinds without a GPU: rendering, exported symbols, spec errors, and pyew's argument
checks, which must all fire before any GPU call (device access is patched to fail here)."""
from __future__ import annotations

import inspect
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import pyew

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

from generator.render import generate
from generator.spec import SpecError, load, parse_text
from pyew import dtypes as dt
from pyew import library
from pyew.array import DeviceArray, Foreign
from pyew.errors import LibraryError

from .helpers import header_compiles_as_c

ROOT = Path(__file__).resolve().parent.parent
SPECIAL = {"relu_mask", "add_relu_mask", "relu_mask_backward", "upsample_nearest2d", "dot", "scatter_add"}


def _lib_reason():
    try:
        pyew.ops()
    except LibraryError as e:
        return str(e)
    return None


LIB_REASON = _lib_reason()
needs_lib = pytest.mark.skipif(LIB_REASON is not None, reason=f"libew.so not usable: {LIB_REASON}")


# ---- generator -------------------------------------------------------------------------------

def test_special_kernels_render(tmp_path):
    spec = load([ROOT / "libew/ops.toml"])
    assert SPECIAL <= {o.name for o in spec.ops}
    generate(spec, tmp_path)
    gen = tmp_path / "gen"
    for name in ("ew_relu_mask_f16", "ew_add_relu_mask_bf16", "ew_relu_mask_backward_f32",
                 "ew_upsample_nearest2d_f64", "ew_dot_f16", "ew_scatter_add_bf16"):
        text = (gen / f"{name}.cu").read_text()
        assert text.startswith("// generated from") and "do not edit" in text.splitlines()[0]
    add = (gen / "ew_add_relu_mask_f32.cu").read_text()
    assert ("EW_API int ew_add_relu_mask_f32(void* y, void* mask, const void* x, const void* addend, int64_t n, "
            "void* stream, int sms, int threads_per_sm)") in add
    assert "launch_relu_mask<float, float>" in add
    assert "nullptr" in (gen / "ew_relu_mask_f32.cu").read_text()       # no addend
    up = (gen / "ew_upsample_nearest2d_f16.cu").read_text()
    assert "ew_upsample_nearest2d_backward_f16(void* dx, const void* dy, int64_t nc" in up
    assert "launch_upsample_backward<__half, float>" in up
    assert "launch_upsample_forward<double, double>" in (gen / "ew_upsample_nearest2d_f64.cu").read_text()
    dot16 = (gen / "ew_dot_f16.cu").read_text()
    assert "ew::launch_dot<__half, float>(" in dot16 and "atomic" not in dot16       # the atomics: libew_bench
    assert "ew::launch_dot<float, float>(" in (gen / "ew_dot_f32.cu").read_text()
    sc = (gen / "ew_scatter_add_f16.cu").read_text()
    for sym in ("ew_scatter_add_f16_i32", "ew_scatter_add_f16_i64", "ew_scatter_add_check_f16_i32",
                "ew_scatter_add_check_f16_i64"):
        assert f"EW_API int {sym}(" in sc
    header = (tmp_path / "ew.h").read_text()
    assert ("EW_API int ew_dot_fast_bf16(void* result, void* work, const void* a, const void* b, "
            "int64_t n, void* stream, int sms, int threads_per_sm);") in header and "half2_pack" not in header
    man = json.loads((tmp_path / "manifest.json").read_text())
    kinds = {o["name"]: o["kind"] for o in man["ops"]}
    assert kinds["add_relu_mask"] == "relu_mask" and kinds["relu_mask_backward"] == "mask_backward"


def test_special_kernels_compile_as_c_header(tmp_path):
    generate(load([ROOT / "libew/ops.toml"]), tmp_path)
    header_compiles_as_c(tmp_path, "ew_scatter_add_check_f32_i64 == 0")


def _spec(body: str):
    return parse_text(body, "s.toml")


@pytest.mark.parametrize("body,match", [
    ('[[op]]\nname = "r"\nkind = "relu_mask"\ninputs = ["x", "y", "z"]\ndtypes = ["float"]\ndoc = "d"\n',
     r"op 'r': field 'inputs': a 'relu_mask' op takes 1\.\.2 inputs, got 3"),
    ('[[op]]\nname = "r"\nkind = "relu_mask"\ndtypes = ["int32"]\ndoc = "d"\n',
     r"field 'dtypes': a 'relu_mask' op supports float32, float64, float16, bfloat16; not int32"),
    ('[[op]]\nname = "r"\nkind = "relu_mask"\ninputs = ["x", "mask"]\ndtypes = ["float"]\ndoc = "d"\n',
     r"field 'inputs': name 'mask' clashes with a parameter of the C entry point ew_r_f32"),
    ('[[op]]\nname = "u"\nkind = "upsample_nearest2d"\ninputs = ["x"]\ndtypes = ["float"]\ndoc = "d"\n',
     r"op 'u': field 'inputs': unknown key for a 'upsample_nearest2d' op"),
    ('[[op]]\nname = "d"\nkind = "dot"\ndtypes = ["float"]\nexpr = "x"\ndoc = "d"\n',
     r"field 'expr': unknown key for a 'dot' op"),
    ('[[op]]\nname = "s"\nkind = "scatter_add"\ndtypes = ["int64"]\ndoc = "d"\n',
     r"a 'scatter_add' op supports float32, float16, bfloat16, float64; not int64"),
    ('[[op]]\nname = "m"\nkind = "mask_backward"\ndtypes = ["float"]\n',
     r"op 'm': field 'doc': is missing"),
    ('[[op]]\nname = "m"\nkind = "mask_backward"\ndoc = "d"\n',
     r"op 'm': field 'dtypes': is missing"),
    # the mask's word type is a dtype of the table but no kind instantiates kernels for it
    ('[[op]]\nname = "t"\ninputs = ["x"]\ndtypes = ["uint32"]\nexpr = "x"\nref = "x"\ndoc = "d"\n',
     r"a 'map' op supports .*; not uint32"),
    ('[[op]]\nname = "t"\ninputs = ["x", "sms"]\ndtypes = ["float"]\nexpr = "x"\nref = "x"\ndoc = "d"\n',
     r"field 'inputs': name 'sms' clashes"),
])
def test_bad_special_specs(body, match):
    with pytest.raises(SpecError, match=match):
        _spec(body)


def test_uint32_is_a_mask_dtype_only():
    info = dt.lookup(np.uint32)
    assert info.name == "uint32" and info.itemsize == 4
    assert all("uint32" not in g for g in dt.GROUPS.values())


# ---- the built library -----------------------------------------------------------------------

@needs_lib
def test_special_symbols_exported():
    lib = library.get()
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib.path)], capture_output=True, text=True,
                         check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
    for d in ("f32", "f64", "f16", "bf16"):
        want = {f"ew_relu_mask_{d}", f"ew_add_relu_mask_{d}", f"ew_relu_mask_backward_{d}",
                f"ew_upsample_nearest2d_{d}", f"ew_upsample_nearest2d_backward_{d}", f"ew_dot_fast_{d}",
                f"ew_scatter_add_{d}_i32", f"ew_scatter_add_{d}_i64", f"ew_scatter_add_check_{d}_i32",
                f"ew_scatter_add_check_{d}_i64"}
        assert want <= exported, sorted(want - exported)
    assert not [s for s in exported if "half_atomic" in s or "half2_pack" in s]      # the benchmark library's


@needs_lib
def test_special_signatures_and_docs():
    sig = lambda f: str(inspect.signature(f))  # noqa: E731
    assert sig(pyew.relu_mask) == "(x, /, *, out=None, stream=None)"
    assert sig(pyew.add_relu_mask) == "(x, addend, /, *, out=None, stream=None)"
    assert sig(pyew.relu_mask_backward) == "(dy, mask, /, *, out=None, stream=None)"
    assert sig(pyew.upsample_nearest2d) == "(x, /, scale=None, *, output_size=None, out=None, stream=None)"
    assert sig(pyew.upsample_nearest2d_backward) == "(dy, /, scale=None, *, input_size=None, out=None, stream=None)"
    assert sig(pyew.dot) == "(a, b, /, *, out=None, stream=None)"
    assert sig(pyew.scatter_add) == "(dst, index, src, /, *, stream=None)"
    assert "one atomicAdd per block" in pyew.dot.__doc__ and "bit i % 32 of word i // 32" in pyew.relu_mask.__doc__
    kinds = {o["name"]: o["kind"] for o in pyew.ops()}
    assert kinds["dot"] == "dot" and kinds["upsample_nearest2d"] == "upsample_nearest2d"
    bwd = next(o for o in pyew.ops() if o["name"] == "upsample_nearest2d_backward")
    assert bwd["kind"] == "upsample_nearest2d" and bwd["inputs"] == ["dy"]
    assert bwd["params"] == {"scale": None, "input_size": None} and bwd["doc"]


@pytest.fixture
def no_gpu(monkeypatch):
    """Any device use fails the test: the argument checks must come first."""
    def boom(*a, **k):
        raise AssertionError("GPU touched before the arguments were checked")
    for name in ("device", "malloc", "copy_htod", "copy_dtoh", "copy_dtod"):
        monkeypatch.setattr(pyew.runtime, name, boom)


_fake_ptrs = iter(range(1 << 20, 1 << 40, 1 << 20))


def fake(shape, dtype):
    """A DeviceArray that owns no memory (each at its own address): enough for checks that must
    fail before any use."""
    return DeviceArray(Foreign(None), next(_fake_ptrs), tuple(shape), dt.BY_NAME[dtype])


def f32(*shape):
    return np.zeros(shape, np.float32)


BAD_CALLS = [
    # relu_mask / add_relu_mask
    (lambda: pyew.relu_mask(np.zeros(5, np.uint32)), TypeError,
     "runs in float64, but the library has no cast from uint32"),
    (lambda: pyew.relu_mask(fake((5,), "uint32")), TypeError, "no cast from uint32"),
    (lambda: pyew.relu_mask(np.zeros(5, np.complex64)), TypeError, "complex64, which pyew does not support"),
    (lambda: pyew.relu_mask(f32(5), f32(5)), TypeError, r"relu_mask\(x, /, \*, out=None, stream=None\): too many "),
    (lambda: pyew.add_relu_mask(f32(5), f32(6)), ValueError, r"'x' \(5,\), 'addend' \(6,\)"),
    (lambda: pyew.add_relu_mask(f32(5), f32(1)), ValueError, "inputs must have one shape"),
    (lambda: pyew.relu_mask(f32(40), out=f32(40)), TypeError, r"out must be a pair \(y, mask\)"),
    (lambda: pyew.relu_mask(f32(40), out=(None, np.zeros(1, np.uint32))), ValueError,
     r"the mask\): out is uint32 \(1,\), the result is uint32 \(2,\)"),
    (lambda: pyew.relu_mask(f32(40), out=(f32(41), None)), ValueError, r"out is float32 \(41,\)"),
    (lambda: pyew.relu_mask(f32(64), out=(None, np.zeros(4, np.uint32)[::2])), ValueError,
     r"relu_mask: out\[1\] \(the mask\) must be C-contiguous"),
    (lambda: pyew.fuse(lambda a: pyew.dot(a, a) + 1)(f32(8)), TypeError,
     "pyew.fuse: dot is not an elementwise map op"),
    (lambda: pyew.fuse(lambda a: pyew.relu_mask(a))(f32(8)), TypeError,
     "pyew.fuse: relu_mask is not an elementwise map op"),
    (lambda: pyew.relu_mask(fake((40,), "float32"), out=(f32(40), None)), TypeError, "out must be a GPU array"),
    (lambda: pyew.relu_mask(fake((40,), "float32"), out=(None, fake((2,), "int32"))), ValueError, "out is int32"),
    # relu_mask_backward
    (lambda: pyew.relu_mask_backward(f32(40), np.zeros(2, np.int32)), TypeError, "mask must be the uint32 bitmask"),
    (lambda: pyew.relu_mask_backward(f32(40), np.zeros(3, np.uint32)), ValueError,
     r"dy has shape \(40,\) \(40 elements\), so mask must have shape \(2,\), got \(3,\)"),
    (lambda: pyew.relu_mask_backward(np.zeros(40, np.int32), np.zeros(2, np.uint32)), TypeError, "no int32 kernel"),
    (lambda: pyew.relu_mask_backward(1.0, np.zeros(1, np.uint32)), TypeError, "dy must be an array"),
    (lambda: pyew.relu_mask_backward(fake((40,), "float16"), fake((2,), "uint32"), out=fake((40,), "float32")),
     ValueError, r"out is float32 \(40,\), the result is float16"),
    # upsample_nearest2d
    (lambda: pyew.upsample_nearest2d(f32(2, 3, 4)), ValueError, r"x must be 4-D \(N, C, H, W\), got shape \(2, 3, 4\)"),
    (lambda: pyew.upsample_nearest2d(np.zeros((1, 1, 2, 2), np.int32)), TypeError, "no int32 kernel"),
    (lambda: pyew.upsample_nearest2d(f32(1, 1, 2, 2), 1.5), TypeError, "use output_size"),
    (lambda: pyew.upsample_nearest2d(f32(1, 1, 2, 2), True), TypeError, "scale must be a positive int"),
    (lambda: pyew.upsample_nearest2d(f32(1, 1, 2, 2), 0), ValueError, "scale must be a positive int, got 0"),
    (lambda: pyew.upsample_nearest2d(f32(1, 1, 2, 2), 2, output_size=(4, 4)), ValueError, "not both"),
    (lambda: pyew.upsample_nearest2d(f32(1, 1, 2, 2), output_size=(4,)), TypeError, r"pair \(H, W\)"),
    (lambda: pyew.upsample_nearest2d(f32(1, 1, 2, 2), output_size=(4, 0)), ValueError, "must be positive"),
    (lambda: pyew.upsample_nearest2d(f32(1, 1, 0, 2)), ValueError, "height and width must be positive"),
    (lambda: pyew.upsample_nearest2d(f32(1, 1, 2, 2), out=f32(1, 1, 4, 5)), ValueError,
     r"out is float32 \(1, 1, 4, 5\)"),
    (lambda: pyew.upsample_nearest2d_backward(f32(1, 1, 3, 4)), ValueError, "not multiples of scale 2"),
    (lambda: pyew.upsample_nearest2d_backward(f32(1, 1, 3, 4), 2, input_size=(1, 2)), ValueError, "not both"),
    (lambda: pyew.upsample_nearest2d_backward(f32(1, 1, 4, 4), input_size=(2, -1)), ValueError, "must be positive"),
    (lambda: pyew.upsample_nearest2d_backward(f32(4, 4)), ValueError, "dy must be 4-D"),
    (lambda: pyew.upsample_nearest2d_backward(fake((1, 1, 4, 4), "float32"), out=f32(1, 1, 2, 2)),
     TypeError, "out must be a GPU array"),
    # dot
    (lambda: pyew.dot(f32(3), f32(3), method="fast"), TypeError, "unexpected keyword argument 'method'"),
    (lambda: pyew.dot(f32(3), f32(4)), ValueError, r"1-D of one length, got shapes \(3,\) and \(4,\)"),
    (lambda: pyew.dot(f32(2, 2), f32(2, 2)), ValueError, "1-D of one length"),
    (lambda: pyew.dot(f32(3), np.zeros(3, np.complex64)), TypeError, "complex64, which pyew does not support"),
    (lambda: pyew.dot(np.zeros(3, np.int32), np.zeros(3, np.int32)), TypeError, "no int32 kernel"),
    (lambda: pyew.dot(f32(3), f32(3), out=f32(2)), ValueError, r"out is float32 \(2,\)"),
    (lambda: pyew.dot(fake((3,), "float16"), fake((3,), "float16"), out=np.zeros((), np.float16)), TypeError,
     "out must be a GPU array"),
    # scatter_add
    (lambda: pyew.scatter_add(f32(4), np.array([0, 4]), f32(2)), IndexError,
     r"index\[1\] = 4 is out of bounds for dst of length 4"),
    (lambda: pyew.scatter_add(f32(4), np.array([-5, 0]), f32(2)), IndexError, r"index\[0\] = -5"),
    (lambda: pyew.scatter_add(f32(0), np.array([0]), f32(1)), IndexError, "dst of length 0"),
    (lambda: pyew.scatter_add(fake((4,), "float32"), np.array([1, 9], np.int32), fake((2,), "float32")),
     IndexError, r"index\[1\] = 9"),
    (lambda: pyew.scatter_add(f32(4), np.array([0.0, 1.0]), f32(2)), TypeError, "index has dtype float64"),
    (lambda: pyew.scatter_add(f32(4), np.array([0, 1], np.int16), f32(2)), TypeError, "it must be int32 or int64"),
    (lambda: pyew.scatter_add(f32(4), np.array([0, 1], np.uint64), f32(2)), TypeError, "pyew does not support"),
    (lambda: pyew.scatter_add(f32(4), np.array([0, 1]), np.zeros(2, np.complex64)), TypeError,
     "complex64, which pyew does not support"),
    (lambda: pyew.scatter_add(f32(4), np.array([0, 1]), f32(3)), ValueError, r"index \(2,\), src \(3,\)"),
    (lambda: pyew.scatter_add(f32(4, 1), np.array([0]), f32(1)), ValueError, "dst must be 1-D"),
    (lambda: pyew.scatter_add([0.0, 1.0], np.array([0]), f32(1)), TypeError, "dst must be a GPU array or"),
    (lambda: pyew.scatter_add(np.zeros(4, np.int32), np.array([0]), np.zeros(1, np.int32)), TypeError,
     "scatter_add has no int32 kernel"),
]


@needs_lib
@pytest.mark.parametrize("call,exc,match", BAD_CALLS, ids=[f"case{i}" for i in range(len(BAD_CALLS))])
def test_bad_arguments_raise_before_gpu_use(no_gpu, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@needs_lib
def test_read_only_dst_refused(no_gpu):
    d = f32(4)
    d.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pyew.scatter_add(d, np.array([0]), f32(1))


@needs_lib
def test_empty_scatter_needs_no_gpu(no_gpu):
    d = f32(4)
    assert pyew.scatter_add(d, np.zeros(0, np.int64), f32(0)) is d
