"""The bench's PyTorch counterparts that write into pyew's buffers compute what PyTorch's own
calls compute, bit for bit, for every map op and dtype of the library."""
from __future__ import annotations

import pytest

import pyew
from pyew import library
from pyew.bench import peers
from pyew.bench.data import random_device
from pyew.bench.map_suites import map_cases

pytestmark = pytest.mark.gpu

N = 4099                          # not a whole number of 16-byte packs of any dtype


def test_torch_into_forms_match_torchs_own_calls(torch_cuda, rng):
    torch = torch_cuda
    peer = peers.TorchPeer("torch", torch)
    seen = set()
    for case in map_cases(library.get().manifest):
        into = peer.op_into(case.op, case.dtype, case.params)
        own, why = peer.op(case.op, case.dtype, case.params)
        if into is None:
            continue
        assert own is not None, why
        arrays = [random_device(rng, case.dtype, (N,)) for _ in case.inputs]    # a wrap does not own its memory
        xs = [peer.wrap(a) for a in arrays]
        out = pyew.empty((N,), case.out_dtype)
        tout = peer.wrap(out)
        tout.fill_(7)                                        # poison: 7 is no op's result on every element
        got = into(*xs, out=tout)
        want = own(*xs)
        torch.cuda.synchronize()
        assert got.data_ptr() == out.ptr, case.op
        assert want.dtype == tout.dtype, (case.op, case.dtype)
        assert torch.equal(tout, want), (case.op, case.dtype)
        seen.add(case.op)
    assert {"relu", "sigmoid", "gelu_tanh", "hardshrink", "add_relu", "to_bfloat16"} <= seen, seen


def test_torch_into_broadcasts_a_bias(torch_cuda, rng):
    torch = torch_cuda
    peer = peers.TorchPeer("torch", torch)
    for name in ("add", "mul", "add_relu"):
        x, b = random_device(rng, "bfloat16", (5, 3, 7)), random_device(rng, "bfloat16", (3, 1))
        out = pyew.empty((5, 3, 7), "bfloat16")
        tout = peer.wrap(out)
        tout.fill_(7)
        peers.TORCH_INTO[name](torch, {})(peer.wrap(x), peer.wrap(b), out=tout)
        want = peer.op(name, "bfloat16", {})[0](peer.wrap(x), peer.wrap(b))
        torch.cuda.synchronize()
        assert torch.equal(tout, want), name
