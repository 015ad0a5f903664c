"""Generated sources under nvcc, without a GPU: every definition is checked against ew.h. Skipped
where nvcc is missing; each compile takes a second or two."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

from generator.render import generate  # noqa: E402
from generator.spec import load  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NVCC = os.environ.get("NVCC") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME")
                                  else shutil.which("nvcc"))
pytestmark = pytest.mark.skipif(not NVCC or not os.path.exists(NVCC), reason="nvcc not found")
ARCH = ["-gencode", "arch=compute_90,code=sm_90"]


def flags(out: Path) -> list[str]:
    return ["-std=c++17", *ARCH, "-Xcompiler", "-fPIC", f"-I{ROOT / 'libew'}", f"-I{out}", f"-I{out / 'gen'}"]


def nvcc(out: Path, source: Path):
    cmd = [NVCC, *flags(out), "-c", str(source), "-o", str(source.with_suffix(".o"))]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def test_definition_that_differs_from_ew_h_does_not_compile(tmp_path):
    generate(load([ROOT / "libew/ops.toml"]), tmp_path)
    good = tmp_path / "gen/ew_relu_mask_backward_f32.cu"
    r = nvcc(tmp_path, good)
    assert r.returncode == 0, r.stdout + r.stderr
    text = good.read_text()
    head = "const void* mask, int64_t n,"
    assert head in text
    bad = tmp_path / "gen/broken.cu"
    bad.write_text(text.replace(head, "const void* mask, int n,"))
    r = nvcc(tmp_path, bad)
    assert r.returncode != 0
    assert 'more than one instance of overloaded function "ew_relu_mask_backward_f32" has "C" linkage' in r.stderr
