"""The README's Python examples run as written (on a GPU; the PyTorch one where torch has CUDA)."""
from __future__ import annotations

import re

import pytest

from .helpers import ROOT

pytestmark = pytest.mark.gpu

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_example_runs(i, request):
    code = BLOCKS[i]
    scope: dict = {}
    if "device=1" in code:
        import pyew
        if pyew.device_count() < 2:
            pytest.skip("the example needs two GPUs")
    if "dask_cuda" in code:
        pytest.importorskip("dask_cuda")
    if "import torch" in code:
        request.getfixturevalue("torch_cuda")
        exec(BLOCKS[0], scope)               # the torch example continues the quickstart's names
    exec(compile(code, f"README.md python block {i}", "exec"), scope)
