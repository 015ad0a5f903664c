"""The transfer engine's chunking, threading and error handling, on the CPU with a stand-in for
the CUDA runtime (tests/fake_cuda.py): copies are memmoves and "kernels" are numpy."""
from __future__ import annotations

import ctypes
import math
import threading
import time

import numpy as np
import pytest

from pyew import pinned, transfer
from pyew import runtime as rt
from pyew.errors import CudaError

from .fake_cuda import device_view, install
from .helpers import run_in_threads


class _S:
    cu = 0
    handle = 0
    ordinal = 0
    dims = (4, 2048)
    reuse = None


S = _S()


@pytest.fixture
def fake(monkeypatch):
    f = install(monkeypatch)
    old = transfer.transfer_limits()
    yield f
    transfer.release()
    transfer.set_transfer_limits(**{k: v for k, v in old.items()})
    transfer.release()


def small_limits(threads=3):
    transfer.set_transfer_limits(pinned_bytes=1 << 20, device_bytes=64 * 1024, threads=threads,
                                 small_bytes=4096)


@pytest.mark.parametrize("n", [0, 1, 100, 1000, 50_000, 200_003])
@pytest.mark.parametrize("threads", [1, 4])
def test_upload_download_round_trip(fake, n, threads):
    small_limits(threads)
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    d = fake.malloc(a.nbytes, S)
    transfer.to_device(a, d, S)
    if n:
        assert np.array_equal(device_view(d, np.float32, (n,)), a)
    back = np.full(n, np.nan, np.float32)
    transfer.to_host(d, back, S)
    assert np.array_equal(back, a)


def test_non_contiguous_host_arrays(fake):
    small_limits()
    base = np.arange(300 * 400, dtype=np.float64).reshape(300, 400)
    a = base[::2, 1::3]                                   # strided view
    d = fake.malloc(a.nbytes, S)
    transfer.to_device(a, d, S)
    assert np.array_equal(device_view(d, np.float64, a.shape), a)
    out = np.zeros((400, 300), np.float64).T[: a.shape[0], : a.shape[1]]   # a non-contiguous target
    transfer.to_host(d, out, S)
    assert np.array_equal(out, a)


def _add_kernel(chunk):
    x = device_view(chunk.inputs[0], np.float32, chunk.input_shapes[0])
    y = device_view(chunk.inputs[1], np.float32, chunk.input_shapes[1])
    o = device_view(chunk.out[0], np.float32, chunk.out_shapes[0])
    o[...] = x + y


@pytest.mark.parametrize("xs,ys", [((100_000,), (100_000,)), ((300, 257), (257,)), ((64, 33, 50), (33, 1)),
                                   ((7, 1, 5), (1, 6, 1)), ((3,), ())])
def test_stream_call_broadcasts_in_blocks(fake, xs, ys):
    small_limits()
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xs).astype(np.float32)
    y = rng.standard_normal(ys).astype(np.float32)
    shape = np.broadcast_shapes(xs, ys)
    out = np.full(shape, np.nan, np.float32)
    nd = len(shape)
    ops = [transfer.HostOperand(x, (1,) * (nd - x.ndim) + x.shape),
           transfer.HostOperand(y, (1,) * (nd - y.ndim) + y.shape)]
    transfer.stream_call(ops, [out], shape, _add_kernel, S)
    assert np.array_equal(out, x + y)
    assert fake.device_bytes() == 0, "device scratch is returned after the call"


def test_a_broadcast_call_streams_its_locked_full_operands_in_place(fake):
    """A streamed row-bias add (not flat: one operand broadcasts): its page-locked x and result,
    C-ordered over the call's shape, go up from and down into their own memory block by block, with
    nothing staged; a page-locked input or result that is not C-ordered is staged."""
    small_limits()
    rng = np.random.default_rng(4)
    shape = (300, 257)
    y = rng.standard_normal(257).astype(np.float32)

    def inside(a, p):
        return a.ctypes.data <= p < a.ctypes.data + a.nbytes

    x = pinned.empty_pinned(shape, "float32")
    x[...] = rng.standard_normal(shape)
    out = pinned.empty_pinned(shape, "float32")
    out[...] = np.nan
    fake.copy_log.clear()
    transfer.stream_call([transfer.HostOperand(x, shape), transfer.HostOperand(y, (1, 257))], [out], shape,
                         _add_kernel, S)
    np.testing.assert_array_equal(out, x + y)
    assert sum(n for _, src, n in fake.copy_log if inside(x, src)) == x.nbytes
    assert sum(n for dst, _, n in fake.copy_log if inside(out, dst)) == out.nbytes

    xt = pinned.empty_pinned(shape[::-1], "float32").T                  # locked, not C-ordered
    xt[...] = x
    back = np.full(shape, np.nan, np.float32)
    fake.copy_log.clear()
    transfer.stream_call([transfer.HostOperand(xt, shape), transfer.HostOperand(y, (1, 257))], [back], shape,
                         _add_kernel, S)
    np.testing.assert_array_equal(back, x + y)
    assert not any(inside(xt.T, src) for _, src, _ in fake.copy_log)
    back_t = pinned.empty_pinned(shape[::-1], "float32").T              # a locked result, not C-ordered
    back_t[...] = np.nan
    fake.copy_log.clear()
    transfer.stream_call([transfer.HostOperand(x, shape), transfer.HostOperand(y, (1, 257))], [back_t], shape,
                         _add_kernel, S)
    np.testing.assert_array_equal(back_t, x + y)
    assert not any(inside(back_t.T, dst) for dst, _, _ in fake.copy_log)
    assert fake.device_bytes() == 0


def _copy_kernel(chunk):
    device_view(chunk.out[0], np.float32, chunk.out_shapes[0])[...] = \
        device_view(chunk.inputs[0], np.float32, chunk.input_shapes[0])


def _blocks_of(call, step=_add_kernel):
    """The blocks a streamed call went in, as the shapes of its output blocks."""
    seen = []

    def kernel(chunk):
        seen.append(chunk.out_shapes[0])
        step(chunk)

    call(kernel)
    return seen


def test_a_broadcast_operand_and_a_locked_result_take_no_room_per_element_in_a_slot(fake):
    """Only staged operands share a slot, and a small broadcast one counts once, whole: a row-bias
    add streams in blocks as large as a one-input call's over the same shape, fewer than an add
    of two arrays, and a locked result takes no room in the slot at all."""
    transfer.set_transfer_limits(pinned_bytes=4 << 20, device_bytes=64 << 20, threads=1, small_bytes=0)
    rng = np.random.default_rng(5)
    shape = (2048, 1024)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    ops = [transfer.HostOperand(x, shape), transfer.HostOperand(w, (1, 1024))]

    def run(kernel, out, inputs=ops):
        transfer.stream_call(inputs, [out], shape, kernel, S)

    pageable = np.full(shape, np.nan, np.float32)
    row = _blocks_of(lambda k: run(k, pageable))
    np.testing.assert_array_equal(pageable, x + w)
    same = _blocks_of(lambda k: run(k, np.empty(shape, np.float32), [ops[0], transfer.HostOperand(x, shape)]))
    assert len(row) < len(same), "the 4 KiB row costs no room per element"
    copied = np.full(shape, np.nan, np.float32)
    one = _blocks_of(lambda k: transfer.stream_call([ops[0]], [copied], shape, k, S), _copy_kernel)
    np.testing.assert_array_equal(copied, x)
    assert len(row) == len(one), "as a one-input call's"
    locked = pinned.empty_pinned(shape, "float32")
    locked[...] = np.nan
    direct = _blocks_of(lambda k: run(k, locked))
    np.testing.assert_array_equal(locked, x + w)
    assert len(direct) < len(row), "a locked result is written by DMA, not through the slot"
    assert fake.device_bytes() == 0


@pytest.mark.parametrize("threads", [1, 3, 4, 16])
@pytest.mark.parametrize("space", [(1 << 20,), (3_000_001,), (1 << 24,), (16384, 4096), (10007, 1000),
                                   (4099, 3, 331), (30, 1_000_000), (5, 7, 1_000_003), (4, 2600, 2600),
                                   (1, 8192, 4096), (2, 4160, 3883)])
def test_streamed_blocks_come_in_whole_rounds_of_the_workers(fake, threads, space):
    """The blocks chunks() cuts with _block_elems' size: each at most what a slot holds (a multiple
    of align in a flat call), runs of whole rows of the trailing dims from one index of the dims
    before them; enough for every worker, and whole rounds of them where there are rows enough (a
    last round of a few would leave the others idle), unless _MIN_BLOCK_BYTES (or a slot that
    holds less) stands in the way; none under that where a slot holds it; and no step shorter
    would cut as few blocks."""
    transfer.set_transfer_limits(threads=threads)
    n = math.prod(space)
    for most in (1 << 16, 300_001, 1 << 21, 1 << 62):
        for per_elem, align in ((8.0, 1), (12.0, 32)) if len(space) == 1 else ((8.0, 1), (12.0, 1)):
            per = transfer._block_elems(space, most, per_elem, align)
            sizes = [math.prod(sl.stop - sl.start if sl.stop is not None else d for sl, d in zip(b, space))
                     for b in transfer.chunks(space, per)]
            assert sum(sizes) == n and per % align == 0 and max(sizes) <= per <= max(most, align)
            unit, s = 1, len(space) - 1                   # chunks()' rows: unit elements, dim s cut
            while s > 0 and unit * space[s] <= per:
                unit *= space[s]
                s -= 1
            outer, rows, step = math.prod(space[:s]), space[s], max(1, per // unit)
            assert len(sizes) == outer * -(-rows // step)
            if step > align:
                assert -(-rows // (step - align)) > -(-rows // step), "a shorter step would cut as few"
            floor = transfer._MIN_BLOCK_BYTES / per_elem
            if most >= floor + unit:                      # blocks of the floor fit: none smaller, but one
                assert per + unit > floor or len(sizes) == 1
            if n < floor * threads or most < floor:
                continue                                  # too few bytes for a block per worker of the floor
            if outer * rows >= threads ** 2:
                assert len(sizes) >= threads
            if outer == 1 and rows >= len(sizes) ** 2:    # k blocks of rows come out at k with k^2 rows
                assert len(sizes) % threads == 0, (most, per_elem, per, len(sizes))


def test_a_slot_holds_the_staged_operands_of_a_block():
    """_slot_elems' blocks fit a slot: every staged operand's block, each rounded up to _ALIGN,
    with small broadcast operands whole (a quarter of the slot for them all at most), and a large
    one, or those past that quarter, counted per element; and they use most of the slot."""
    slot = 15 << 20
    shape = (4096, 4096)
    x = np.empty(shape, np.float32)
    row = np.empty((1, 4096), np.float16)
    wide = np.empty((4096, 1, 4096), np.float32)        # broadcast, but more than the slot
    rows = [np.empty((1, 128, 4096), np.float32) for _ in range(12)]   # 2 MiB each, more than a slot together
    out = np.empty(shape, np.float32)
    for arrays, full, direct in (([x, row, out], [True, False, True], [False, False, False]),
                                 ([x, row, out], [True, False, True], [False, False, True]),
                                 ([wide, x, out], [False, True, True], [False, False, False]),
                                 ([x, *rows, out], [True] + [False] * 12 + [True], [False] * 14)):
        per = transfer._slot_elems(slot, arrays, [1] * len(arrays), full, direct)
        assert per >= 1
        need = sum(transfer._round(min(a.nbytes, per * a.itemsize)) for a, d in zip(arrays, direct) if not d)
        assert need <= slot
        assert need > slot // 2, "and uses most of it"


@pytest.mark.parametrize("case", range(5))
def test_a_slot_holds_the_staged_operands_of_every_block(fake, case):
    """Every block's staged operands (each at a 256-byte boundary from the region's start) fit the
    worker's slot, whatever is staged, locked or broadcast: a small broadcast operand counted whole,
    many of them beyond a quarter of the slot, a large one (more than the slot) per element."""
    rng = np.random.default_rng(case)
    transfer.set_transfer_limits(pinned_bytes=3 << 20, device_bytes=8 << 20, threads=3, small_bytes=0)
    shape = [(999, 1001), (999, 1001), (77, 31, 413), (999, 1001), (513, 3, 2011)][case]
    bshapes = [[(1, 1001)], [(999, 1)] * 3 + [(1, 1001)] * 9, [(77, 1, 413), (1, 31, 1)], [], [(513, 1, 2011)]][case]
    x = (pinned.empty_pinned(shape, "float32") if case == 3 else np.empty(shape, np.float32))
    x[...] = rng.standard_normal(shape)
    extra = [rng.standard_normal(b).astype(np.float32) for b in bshapes]
    out = pinned.empty_pinned(shape, "float32") if case in (0, 4) else np.empty(shape, np.float32)
    out[...] = np.nan
    worst = [0]
    move = transfer._move

    def checked(ins, outs, ptrs, stream_cu, buf=None, start=0, here=None, **kw):
        if buf is not None:
            end = start + sum(transfer._round(v.nbytes) for v, d in zip(ins + outs, here) if not d)
            assert end <= buf.nbytes, (end, buf.nbytes)
            worst[0] = max(worst[0], end / buf.nbytes)
        return move(ins, outs, ptrs, stream_cu, buf, start, here, **kw)

    def kernel(chunk):
        views = [device_view(p, np.float32, s) for p, s in zip(chunk.inputs, chunk.input_shapes)]
        device_view(chunk.out[0], np.float32, chunk.out_shapes[0])[...] = sum(views[1:], views[0])

    ops = [transfer.HostOperand(x, shape)] + [transfer.HostOperand(e, e.shape) for e in extra]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(transfer, "_move", checked)
        transfer.stream_call(ops, [out], shape, kernel, S)
    np.testing.assert_allclose(out, sum(extra, x), rtol=1e-6)
    assert worst[0] > 0.3, "and the blocks are not needlessly small"


def test_a_block_that_fills_its_slot_keeps_room_for_the_operands_alignment(fake):
    """A flat call on one worker whose blocks are as large as the slot allows, its operands of
    three item sizes, so each staged block rounds up to a 256-byte boundary: the slot keeps room
    for that rounding."""
    transfer.set_transfer_limits(pinned_bytes=3 << 20, device_bytes=64 << 20, threads=1, small_bytes=0)
    kinds = [np.float16, np.float32, np.float64]
    probe = [np.empty(1, t) for t in kinds] + [np.empty(1, np.float32)]
    most = transfer._slot_elems(transfer._ring_slot_bytes(), probe, [1] * 4, [True] * 4, [False] * 4)
    n = 3 * most
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal(n).astype(t) for t in kinds]
    out = np.full(n, np.nan, np.float32)
    fullest = [0.0]
    move = transfer._move

    def checked(ins, outs, ptrs, stream_cu, buf=None, start=0, here=None, **kw):
        end = start + sum(transfer._round(v.nbytes) for v, d in zip(ins + outs, here) if not d)
        assert end <= buf.nbytes, (end, buf.nbytes)
        fullest[0] = max(fullest[0], end / buf.nbytes)
        return move(ins, outs, ptrs, stream_cu, buf, start, here, **kw)

    def kernel(chunk):
        views = [device_view(p, t, sh).astype(np.float32) for p, sh, t in zip(chunk.inputs, chunk.input_shapes, kinds)]
        device_view(chunk.out[0], np.float32, chunk.out_shapes[0])[...] = views[0] + views[1] + views[2]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(transfer, "_move", checked)
        transfer.stream_call([transfer.HostOperand(x, (n,)) for x in xs], [out], (n,), kernel, S)
    np.testing.assert_array_equal(out, xs[0].astype(np.float32) + xs[1].astype(np.float32) + xs[2].astype(np.float32))
    assert fullest[0] > 0.99


def test_random_streamed_calls_stay_in_their_slots_and_scratch(fake):
    """Random streamed calls: shapes of 0 to 3 dims, operands broadcast, strided, locked or of
    three dtypes, results locked or transposed, a bitmask output, 1 to 16 workers, small slots
    and device budgets. Every block's staged operands fit its slot and its views its lane's
    scratch, and the results are right."""
    import random
    move, laid_out = transfer._move, transfer._laid_out

    def checked_move(ins, outs, ptrs, stream_cu, buf=None, start=0, here=None, **kw):
        if buf is not None:
            end = start + sum(transfer._round(v.nbytes) for v, d in zip(ins + outs, here) if not d)
            assert end <= buf.nbytes, ("slot", end, buf.nbytes)
        return move(ins, outs, ptrs, stream_cu, buf, start, here, **kw)

    def checked_laid_out(base, views):
        ptrs = laid_out(base, views)
        if base in fake.device_blocks and views:
            assert ptrs[-1] + transfer._round(views[-1].nbytes) - base <= len(fake.device_blocks[base]), "scratch"
        return ptrs

    r, rng = random.Random(7), np.random.default_rng(7)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(transfer, "_move", checked_move)
        m.setattr(transfer, "_laid_out", checked_laid_out)
        for _ in range(60):
            transfer.set_transfer_limits(pinned_bytes=r.choice([1 << 20, 3 << 20, 5 << 20]), small_bytes=0,
                                         device_bytes=r.choice([64 << 10, 200_000, 1 << 20]),
                                         threads=r.choice([1, 2, 3, 5, 16]))
            bitmask = r.random() < 0.2
            shape = tuple(r.choice([1, 2, 3, 7, 33, 257, 1000, 4099]) for _ in range(r.choice([0, 1, 2, 2, 3, 3])))
            while math.prod(shape) > 400_000:
                shape = tuple(max(1, d // 3) for d in shape)
            ops, arrays = [], []
            for _ in range(r.randint(1, 5)):
                own = shape if bitmask or r.random() < 0.4 else tuple(d if r.random() < 0.5 else 1 for d in shape)
                a = rng.standard_normal(own).astype(r.choice([np.float32, np.float16, np.float64]))
                pick = r.random()
                if pick < 0.2 and a.size > 1:
                    a = np.asfortranarray(a)
                elif pick < 0.4 and a.size > 1000:
                    locked = pinned.empty_pinned(own, a.dtype.name)
                    locked[...] = a
                    a = locked
                ops.append(transfer.HostOperand(a, own))
                arrays.append(a)
            n = math.prod(shape)
            if r.random() < 0.3 and n > 1000:
                out = pinned.empty_pinned(shape, "float32")
            elif r.random() < 0.2 and len(shape) >= 2 and not bitmask:
                out = np.empty(shape[::-1], np.float32).T
            else:
                out = np.empty(shape, np.float32)
            out[...] = np.nan
            outs, kw = [out], {}
            if bitmask:
                outs.append(np.zeros(-(-n // 32), np.uint32))
                kw = dict(out_scale=(1, 32), align=32)
            def kernel(chunk, kinds=tuple(a.dtype for a in arrays)):
                total = sum((device_view(p, t, sh).astype(np.float32)
                             for p, sh, t in zip(chunk.inputs, chunk.input_shapes, kinds)), np.float32(0))
                device_view(chunk.out[0], np.float32, chunk.out_shapes[0])[...] = total

            transfer.stream_call(ops, outs, shape, kernel, S, **kw)
            want = sum((a.reshape(op.shape).astype(np.float32) for a, op in zip(arrays, ops)), np.float32(0))
            np.testing.assert_array_equal(out, np.broadcast_to(want, shape))
    assert fake.device_bytes() == 0


def test_blocks_respect_the_device_budget(fake):
    transfer.set_transfer_limits(pinned_bytes=1 << 20, device_bytes=64 * 1024, threads=2, small_bytes=0)
    n = 4 * 64 * 1024 // 4 * 3                            # the operands are 12x the device budget
    x = np.arange(n, dtype=np.float32)
    seen = []

    def kernel(chunk):
        seen.append(fake.device_bytes())
        _add_kernel(chunk)

    out = np.empty(n, np.float32)
    transfer.stream_call([transfer.HostOperand(x, (n,)), transfer.HostOperand(x, (n,))], [out], (n,), kernel, S)
    assert np.array_equal(out, 2 * x)
    assert max(seen) <= 64 * 1024
    assert len(seen) > 8


def test_bitmask_outputs_and_inputs_scale(fake):
    small_limits()
    n = 10_000 * 32 + 7
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    y = np.empty(n, np.float32)
    words = np.zeros(-(-n // 32), np.uint32)

    def kernel(chunk):
        xv = device_view(chunk.inputs[0], np.float32, chunk.input_shapes[0])
        device_view(chunk.out[0], np.float32, chunk.out_shapes[0])[...] = np.maximum(xv, 0)
        bits = np.zeros(math.ceil(xv.size / 32) * 32, bool)
        bits[: xv.size] = xv > 0
        w = np.packbits(bits.reshape(-1, 32)[:, ::-1], axis=1, bitorder="big").view(">u4").reshape(-1)
        device_view(chunk.out[1], np.uint32, chunk.out_shapes[1])[...] = w.astype(np.uint32)

    transfer.stream_call([transfer.HostOperand(x, (n,))], [y, words], (n,), kernel, S, out_scale=(1, 32), align=32)
    assert np.array_equal(y, np.maximum(x, 0))
    bits = np.zeros(len(words) * 32, bool)
    bits[:n] = x > 0
    ref = np.packbits(bits.reshape(-1, 32)[:, ::-1], axis=1, bitorder="big").view(">u4").reshape(-1)
    assert np.array_equal(words, ref.astype(np.uint32))


def test_error_mid_stream_leaves_inputs_and_frees_scratch(fake):
    small_limits(threads=4)
    n = 200_000
    x = np.arange(n, dtype=np.float32)
    keep = x.copy()
    out = np.zeros(n, np.float32)
    fake.fail_after_copies = 10
    with pytest.raises(CudaError, match="cudaErrorFake"):
        transfer.stream_call([transfer.HostOperand(x, (n,)), transfer.HostOperand(x, (n,))], [out], (n,),
                             _add_kernel, S)
    assert np.array_equal(x, keep)
    assert fake.device_bytes() == 0
    fake.fail_after_copies = None
    transfer.stream_call([transfer.HostOperand(x, (n,)), transfer.HostOperand(x, (n,))], [out], (n,), _add_kernel, S)
    assert np.array_equal(out, 2 * x), "the engine works again after an error"


def test_keyboard_interrupt_mid_stream(fake, monkeypatch):
    """Ctrl-C reaching the caller while it waits for the workers stops them after their current
    block, frees what the call holds and leaves the inputs as they were. The interrupt is raised
    in the caller's wait itself: a real SIGINT can be handled inside a finalizer, where Python drops
    it, which made this test fail now and then."""
    small_limits(threads=2)
    n = 200_000
    x = np.arange(n, dtype=np.float32)
    keep = x.copy()
    out = np.zeros(n, np.float32)
    ops = [transfer.HostOperand(x, (n,)), transfer.HostOperand(x, (n,))]
    full = []
    transfer.stream_call(ops, [out], (n,), lambda c: (full.append(1), _add_kernel(c)), S)
    calls, counting, third = [], threading.Lock(), threading.Event()

    def slow(chunk):
        with counting:        # the workers count at once: exactly one of them sees the third call
            calls.append(1)
            if len(calls) == 3:
                third.set()
        time.sleep(0.005)
        _add_kernel(chunk)

    pool = transfer._worker_pool()

    class Interrupted:
        def submit(self, *args):
            f = pool.submit(*args)
            wait = f.result

            def result(timeout=None):
                if third.is_set():
                    raise KeyboardInterrupt
                return wait(timeout)
            f.result = result
            return f

    with monkeypatch.context() as m:
        m.setattr(transfer, "_worker_pool", Interrupted)
        with pytest.raises(KeyboardInterrupt):
            transfer.stream_call(ops, [out], (n,), slow, S)
    assert np.array_equal(x, keep)
    assert fake.device_bytes() == 0
    assert len(calls) < len(full) / 2, "the workers stopped early"
    transfer.stream_call(ops, [out], (n,), _add_kernel, S)
    assert np.array_equal(out, 2 * x)


def test_keyboard_interrupt_while_the_workers_start(fake, monkeypatch):
    """Ctrl-C between starting one worker and the next: the started ones stop before the call
    raises, so none writes into out= or the freed scratch afterwards."""
    small_limits(threads=3)
    n = 200_000
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    ops = [transfer.HostOperand(x, (n,)), transfer.HostOperand(x, (n,))]
    pool = transfer._worker_pool()

    class InterruptedSecond:
        started = 0

        def submit(self, *args):
            if InterruptedSecond.started == 1:
                raise KeyboardInterrupt
            InterruptedSecond.started += 1
            return pool.submit(*args)

    def slow(chunk):
        time.sleep(0.002)
        _add_kernel(chunk)
    with monkeypatch.context() as m:
        m.setattr(transfer, "_worker_pool", InterruptedSecond)
        with pytest.raises(KeyboardInterrupt):
            transfer.stream_call(ops, [out], (n,), slow, S)
    written = out.copy()
    time.sleep(0.1)
    assert np.array_equal(out, written), "no worker wrote after the call raised"
    assert fake.device_bytes() == 0
    transfer.stream_call(ops, [out], (n,), _add_kernel, S)
    assert np.array_equal(out, 2 * x)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")     # np.matrix's own
def test_numpy_subclasses_are_read_and_written_as_their_memory(fake):
    """np.matrix keeps two dims through reshape(-1): the engine works on a plain view of its
    memory, so blocks are what they say (before, the first block read the whole matrix into one
    block's room)."""
    small_limits(threads=3)
    m = np.matrix(np.arange(300 * 300, dtype=np.float32).reshape(300, 300))
    out = np.matrix(np.zeros((300, 300), np.float32))
    transfer.stream_call([transfer.HostOperand(m, (300, 300))] * 2, [out], (300, 300), _add_kernel, S)
    assert np.array_equal(np.asarray(out), 2 * np.asarray(m)) and type(out) is np.matrix
    d = fake.malloc(m.nbytes, S)
    transfer.to_device(m, d, S)
    back = np.matrix(np.zeros((300, 300), np.float32))
    transfer.to_host(d, back, S)
    assert np.array_equal(np.asarray(back), np.asarray(m))
    assert fake.device_bytes() == m.nbytes


def test_two_threads_at_once(fake):
    small_limits(threads=3)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(100_000).astype(np.float32) for _ in range(4)]
    results = [None] * 4

    def run(i):
        out = np.empty_like(xs[i])
        transfer.stream_call([transfer.HostOperand(xs[i], xs[i].shape)] * 2, [out], xs[i].shape, _add_kernel, S)
        results[i] = out

    run_in_threads(run, 4)
    for x, r in zip(xs, results):
        assert np.array_equal(r, 2 * x)


def test_pinned_memory_is_bounded_and_released(fake):
    transfer.set_transfer_limits(pinned_bytes=2 << 20, device_bytes=1 << 20, threads=4, small_bytes=4096)
    x = np.arange(1_000_000, dtype=np.float32)
    out = np.empty_like(x)
    transfer.stream_call([transfer.HostOperand(x, x.shape)] * 2, [out], x.shape, _add_kernel, S)
    assert 0 < transfer.pinned_bytes_held() <= 2 << 20
    assert fake.pinned_bytes() == transfer.pinned_bytes_held()
    transfer.release()
    assert transfer.pinned_bytes_held() == 0 and fake.pinned_bytes() == 0


def _read_from(log, a) -> bool:
    """Whether a copy in `log` read any of a's bytes."""
    lo, hi = a.ctypes.data, a.ctypes.data + a.nbytes
    return any(src < hi and lo < src + n for _, src, n in log)


@pytest.mark.parametrize("locked", ["head", "middle"])
def test_partly_locked_arrays_are_staged(fake, locked):
    """An array part of which another library has page-locked (its first half, or one page inside
    it) is not pinned as a whole: the call copies it through the slots, not straight from it, and
    that library's lock is left alone."""
    transfer.set_transfer_limits(device_bytes=64 * 1024, threads=2, small_bytes=0)
    x = np.arange(100_000, dtype=np.float32)
    start = x.ctypes.data if locked == "head" else -(-(x.ctypes.data + x.nbytes // 2) // 4096) * 4096
    fake.lock_range(start, x.nbytes // 2 if locked == "head" else 4096)
    assert not pinned.is_pinned(x)
    out = np.empty_like(x)
    transfer.stream_call([transfer.HostOperand(x, x.shape)] * 2, [out], x.shape, _add_kernel, S)
    assert np.array_equal(out, 2 * x)
    assert not _read_from(fake.copy_log, x), "the partly locked array was read in place"
    assert fake.host_pinned(start)
    fake.unlock_range(start)


@pytest.mark.parametrize("kw,err", [({"pinned_bytes": 10}, ValueError), ({"threads": 0}, ValueError),
                                    ({"threads": 1.5}, TypeError), ({"small_bytes": -1}, ValueError),
                                    ({"device_bytes": -1}, ValueError)])
def test_limits_are_checked(kw, err):
    before = transfer.transfer_limits()
    with pytest.raises(err):
        transfer.set_transfer_limits(**kw)
    assert transfer.transfer_limits() == before


def test_chunks_cover_the_space_once():
    for shape, per in [((10,), 3), ((4, 5, 6), 7), ((4, 5, 6), 30), ((4, 5, 6), 1000), ((2, 1, 9), 4), ((3, 0, 2), 5)]:
        seen = np.zeros(shape, int)
        for block in transfer.chunks(shape, per):
            seen[block] += 1
            assert seen[block].size <= max(per, shape[-1] if per < shape[-1] else per)
        assert (seen == 1).all()


def test_uploads_take_turns_round_the_small_buffer(fake, monkeypatch):
    """Small uploads go to successive regions of the small pinned buffer: one waits only for the
    copy that last read the region it reuses, once the ring has come round, and never sees a region
    overwritten before its copy ran. Copies here run late, when an event is waited for."""
    from pyew import runtime as rt
    pending, done, waits = [], [0], []

    def run_until(k):
        while done[0] < k:
            d, s, n = pending[done[0]]
            ctypes.memmove(d, s, n)
            done[0] += 1

    class LateEvent:
        made = 0

        def __init__(self, timing=False):
            LateEvent.made += 1

        def record(self, stream_cu):
            self.mark = len(pending)

        def synchronize(self):
            waits.append(self.mark)
            run_until(self.mark)

    monkeypatch.setattr(rt, "copy_htod", lambda d, s, n, st: pending.append((d, s, n)))
    monkeypatch.setattr(rt, "Event", LateEvent)
    small_limits(threads=1)
    per_lap = transfer._small_buffer_bytes() // 4096            # 4000-byte uploads take 4096 each
    hosts = [np.full(1000, i, np.float32) for i in range(2 * per_lap + 3)]
    devs = [fake.malloc(h.nbytes, S) for h in hosts]
    for i, (h, d) in enumerate(zip(hosts, devs)):
        transfer.to_device(h, d, S)
        if i < per_lap:
            assert waits == [], f"upload {i} waited, with the ring not yet full"
        else:
            assert waits[-1] == i - per_lap + 1, "the region's last reader, and only it, is waited for"
    assert len(waits) == len(hosts) - per_lap and LateEvent.made <= per_lap + 1
    out = np.empty(1000, np.float32)
    transfer.to_host(devs[0], out, S)                              # a download has the buffer to itself
    assert done[0] == len(pending)
    for h, d in zip(hosts, devs):
        np.testing.assert_array_equal(device_view(d, np.float32, (1000,)), h)
    np.testing.assert_array_equal(out, hosts[0])


@pytest.fixture
def libew():
    """The built library (one-shot staging copies go through its copy threads)."""
    from pyew import library
    from pyew.errors import LibraryError
    try:
        return library.get()
    except LibraryError as e:
        pytest.skip(f"libew.so not usable: {e}")


def _one_shot_case(fake, monkeypatch):
    transfer.set_transfer_limits(pinned_bytes=256 << 20, device_bytes=64 << 20, threads=4, small_bytes=64 << 20)
    monkeypatch.setattr(transfer, "_copy_threads", 2)        # the caller and a worker
    rng = np.random.default_rng(7)
    big = rng.standard_normal((16 << 20) // 4 + 5).astype(np.float32)      # a little over 16 MiB
    small = rng.standard_normal(1000).astype(np.float32)
    return big, small


def _sends_log(libew, monkeypatch, exact: bool = True):
    """What staging and queueing copies up did, in order: ("ready", bytes asked for, bytes staged
    from the start), ("up", device pointer, host pointer, bytes). With `exact`, the staging seems
    to have reached just what was asked for (it may be further: a loaded host's caller thread may
    see it all done), so the runs sent are the same on any host."""
    log = []
    ready, htod = libew.host_copy_ready, rt.copy_htod
    seen = [0]          # how far the staging really got (once all of it, ready has no copy: -1)

    def logged_ready(want):
        got = ready(want)
        if exact:
            seen[0] = got if got >= 0 else seen[0]
            got = min(want, seen[0])
        log.append(("ready", want, got))
        return got

    def logged_up(dst, src, nbytes, stream):
        log.append(("up", dst, src, nbytes))
        htod(dst, src, nbytes, stream)

    monkeypatch.setattr(libew, "host_copy_ready", logged_ready)
    monkeypatch.setattr(rt, "copy_htod", logged_up)
    return log


@pytest.mark.parametrize("exact", [True, False], ids=["staged as asked", "staged as it goes"])
def test_one_shot_inputs_go_up_as_they_are_staged(fake, libew, monkeypatch, exact):
    """A one-shot call stages a large C-ordered input in order on libew's copy threads and queues
    each staged run's copy up before the rest is staged, never a byte not yet staged; a small input
    goes up from its own memory; every element arrives once, in place, and the results come back."""
    big, small = _one_shot_case(fake, monkeypatch)
    log = _sends_log(libew, monkeypatch, exact)
    seen = {}

    def launch(ins, outs, stream, n):
        seen["big"] = device_view(ins[0], np.float32, big.shape).copy()
        seen["small"] = device_view(ins[1], np.float32, small.shape).copy()
        device_view(outs[0], np.float32, big.shape)[...] = seen["big"] * 2

    res = np.full_like(big, np.nan)
    assert transfer.one_shot([big, small], [res], launch, S)
    np.testing.assert_array_equal(seen["big"], big)
    np.testing.assert_array_equal(seen["small"], small)
    np.testing.assert_array_equal(res, big * 2)
    ups = [e for e in log if e[0] == "up"]
    assert ups[-1][2:] == (small.ctypes.data, small.nbytes)            # not staged: CUDA copies it itself
    staged, sent, base = 0, 0, ups[0][1]
    step = max(transfer._SEND_STEP, -(-big.nbytes // 16))
    for e in log[:-1]:
        if e[0] == "ready":
            assert e[1] == min(big.nbytes, sent + step), "asked for more than the next run"
            staged = e[2]
            continue
        _, dst, src, nbytes = e
        assert dst == base + sent and sent + nbytes <= staged, "a copy up of bytes not yet staged"
        sent += nbytes
    assert sent == staged == big.nbytes
    assert len(ups) - 1 == -(-big.nbytes // step) if exact else 1 <= len(ups) - 1 <= -(-big.nbytes // step)
    assert libew.cdll.ew_host_copy_ready(1) == -1, "the staging was left to its thread"


def test_a_copy_up_error_after_runs_went_up(fake, libew, monkeypatch):
    """A copy up that fails after runs of a staged input were queued: the staging finishes, the
    stream is waited for before the buffers can be reused, nothing is launched, the error reaches
    the caller, and the next call is right."""
    big, small = _one_shot_case(fake, monkeypatch)
    log = _sends_log(libew, monkeypatch)
    logged_up = rt.copy_htod

    def failing(dst, src, nbytes, stream):
        if sum(e[0] == "up" for e in log) == 2:
            raise MemoryError("copy up failed")
        logged_up(dst, src, nbytes, stream)

    monkeypatch.setattr(rt, "copy_htod", failing)
    synced = len(fake.streams.synced)
    launched = []
    with pytest.raises(MemoryError, match="copy up failed"):
        transfer.one_shot([big, small], [np.empty_like(big)], lambda *a: launched.append(a), S)
    assert [e[0] for e in log].count("up") == 2 and not launched
    assert libew.cdll.ew_host_copy_ready(1) == -1, "the staging was left running"
    assert len(fake.streams.synced) > synced
    _assert_copy_threads_free(libew)
    monkeypatch.setattr(rt, "copy_htod", logged_up)

    def launch(ins, outs, stream, n):
        device_view(outs[0], np.float32, big.shape)[...] = device_view(ins[0], np.float32, big.shape) + 1

    res = np.full_like(big, np.nan)
    assert transfer.one_shot([big, small], [res], launch, S)
    np.testing.assert_array_equal(res, big + 1)


def _assert_copy_threads_free(libew):
    """libew's copy threads take a new copy (a copy left begun would leave every later one alone)."""
    src = np.arange(1 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert libew.host_copy_begin(dst.ctypes.data, src.ctypes.data, src.nbytes, 2, 1) == 1
    assert libew.host_copy_ready(src.nbytes) == src.nbytes
    np.testing.assert_array_equal(dst, src)


def test_an_exception_as_the_staging_begins_still_finishes_it(fake, libew, monkeypatch):
    """An exception raised just as libew's ordered copy has begun (a Ctrl-C landing as the call
    returns): the copy is finished before the error leaves, so no copy thread writes the buffer
    afterwards and the threads take the next copy; the next call is right."""
    big, small = _one_shot_case(fake, monkeypatch)
    begin, began = libew.host_copy_begin, []

    def interrupted(*a):
        began.append(begin(*a))
        raise KeyboardInterrupt

    monkeypatch.setattr(libew, "host_copy_begin", interrupted)
    with pytest.raises(KeyboardInterrupt):
        transfer.one_shot([big, small], [np.empty_like(big)], lambda *a: None, S)
    monkeypatch.setattr(libew, "host_copy_begin", begin)
    assert began == [1]
    assert libew.cdll.ew_host_copy_ready(1) == -1, "the copy was left begun"
    _assert_copy_threads_free(libew)
    res = np.full_like(big, np.nan)
    assert transfer.one_shot([big, small], [res], _add1, S)
    np.testing.assert_array_equal(res, big + 1)


def _parts_log(fake, monkeypatch):
    """What a one-shot call queues, in order: ("up" | "down", stream, bytes), ("launch", stream,
    elements), ("record", stream), ("wait", stream)."""
    log = []
    htod, dtoh = rt.copy_htod, rt.copy_dtoh

    def up(dst, src, nbytes, stream):
        log.append(("up", stream, nbytes))
        htod(dst, src, nbytes, stream)

    def down(dst, src, nbytes, stream):
        log.append(("down", stream, nbytes))
        dtoh(dst, src, nbytes, stream)

    monkeypatch.setattr(rt, "copy_htod", up)
    monkeypatch.setattr(rt, "copy_dtoh", down)
    monkeypatch.setattr(fake.streams, "record", lambda ev, stream: log.append(("record", stream)))
    monkeypatch.setattr(fake.streams, "wait", lambda stream, ev: log.append(("wait", stream)))
    return log


def _add_parts(log):
    def launch(ins, outs, stream, n):
        log.append(("launch", stream, n))
        a, b = (device_view(p, np.float32, (n,)) for p in ins)
        device_view(outs[0], np.float32, (n,))[...] = a + b
    return launch


def test_a_one_shot_call_in_parts_sends_each_part_down_on_a_second_stream(fake, libew, monkeypatch):
    """With parts, a call of equal C-ordered runs goes in parts: each part's inputs up and its
    kernel on the caller's stream, then its result down on the GPU's second stream once an event
    recorded after the kernel; parts of whole 256-element runs, every element once, and the call
    returns once the second stream is done."""
    transfer.set_transfer_limits(pinned_bytes=256 << 20, small_bytes=64 << 20)
    rng = np.random.default_rng(3)
    n = transfer._OVERLAP_PARTS * transfer._OVERLAP_PART_BYTES // 4 + 37       # 4 parts, the last short
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    log = _parts_log(fake, monkeypatch)
    res = np.full(n, np.nan, np.float32)
    assert transfer.one_shot([a, b], [res], _add_parts(log), S, period=1)
    np.testing.assert_array_equal(res, a + b)
    down = transfer._downs[S.ordinal].stream
    assert down != S.cu and down in fake.streams.synced
    launches = [e[2] for e in log if e[0] == "launch"]
    assert len(launches) == transfer._OVERLAP_PARTS and sum(launches) == n
    assert all(m % 256 == 0 for m in launches[:-1]) and launches[-1] < launches[0]
    expect = []
    for m in launches:
        expect += [("up", S.cu, 8 * m), ("launch", S, m), ("record", S.cu), ("wait", down), ("down", down, 4 * m)]
    assert _ups_merged(log) == expect


def _ups_merged(log):
    """The log with each run of copies up on one stream as one copy of their bytes (a staged input
    goes up in runs as it is staged)."""
    out = []
    for e in log:
        if e[0] == "up" and out and out[-1][:2] == e[:2]:
            out[-1] = ("up", e[1], out[-1][2] + e[2])
        else:
            out.append(e)
    return out


@pytest.mark.parametrize("case", ["small", "strided", "no parts"])
def test_a_one_shot_call_goes_whole_where_parts_do_not_apply(fake, libew, monkeypatch, case):
    """Below two parts' worth of bytes, with an operand that is not one C-ordered run, or without
    parts, one launch over the whole call on the caller's stream, and no second stream."""
    transfer.set_transfer_limits(pinned_bytes=256 << 20, small_bytes=64 << 20)
    rng = np.random.default_rng(4)
    n = transfer._OVERLAP_PART_BYTES // 4 + 1 if case == "small" else 4 * transfer._OVERLAP_PART_BYTES // 4
    a = rng.standard_normal(2 * n if case == "strided" else n).astype(np.float32)
    a = a[::2] if case == "strided" else a
    b = rng.standard_normal(n).astype(np.float32)
    log = _parts_log(fake, monkeypatch)
    res = np.full(n, np.nan, np.float32)
    assert transfer.one_shot([a, b], [res], _add_parts(log), S, period=int(case != "no parts"))
    np.testing.assert_array_equal(res, a + b)
    assert [e for e in log if e[0] != "up"] == [("launch", S, n), ("down", S.cu, res.nbytes)]


def test_a_wide_row_does_not_make_parts(fake, libew, monkeypatch):
    """Parts are sized by the inputs of the outputs' length: a float64 row of 6 MiB over a 3 MiB
    float32 input (one part's worth) goes whole, and no second stream is made for it."""
    transfer.set_transfer_limits(pinned_bytes=256 << 20, small_bytes=64 << 20)
    transfer._downs.pop(S.ordinal, None)
    rng = np.random.default_rng(6)
    n = 3 * transfer._OVERLAP_PART_BYTES // 8
    a, row = rng.standard_normal((1, n)).astype(np.float32), rng.standard_normal(n)
    log = _parts_log(fake, monkeypatch)

    def launch(ins, outs, stream, m):
        log.append(("launch", stream, m))
        x, r = device_view(ins[0], np.float32, (m,)), device_view(ins[1], np.float64, (n,))
        device_view(outs[0], np.float32, (m,))[...] = x + r[:m]
    res = np.full((1, n), np.nan, np.float32)
    assert transfer.one_shot([a, row], [res], launch, S, period=n, scales=(1, 0))
    np.testing.assert_array_equal(res, (a + row).astype(np.float32))
    assert [e for e in log if e[0] != "up"] == [("launch", S, n), ("down", S.cu, res.nbytes)]
    assert S.ordinal not in transfer._downs


def test_an_error_in_a_later_part_waits_for_both_streams(fake, libew, monkeypatch):
    """A staging copy that fails in the third part: both streams are waited for before the buffers
    can be reused, no later part is launched, the error reaches the caller, and the next call is right."""
    transfer.set_transfer_limits(pinned_bytes=256 << 20, small_bytes=64 << 20)
    rng = np.random.default_rng(5)
    n = transfer._OVERLAP_PARTS * transfer._OVERLAP_PART_BYTES // 4
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    staging, calls = transfer._send, []

    def failing(dst, src, dptr, stream):
        calls.append(1)
        if len(calls) == 5:                   # the first input of the third part
            raise MemoryError("staging failed")
        staging(dst, src, dptr, stream)

    log = _parts_log(fake, monkeypatch)
    monkeypatch.setattr(transfer, "_send", failing)
    with pytest.raises(MemoryError, match="staging failed"):
        transfer.one_shot([a, b], [np.empty_like(a)], _add_parts(log), S, period=1)
    assert [e[0] for e in log].count("launch") == 2
    down = transfer._downs[S.ordinal].stream
    assert fake.streams.synced[-2:] == [S.cu, down]
    monkeypatch.setattr(transfer, "_send", staging)
    res = np.full_like(a, np.nan)
    assert transfer.one_shot([a, b], [res], _add_parts(log), S, period=1)
    np.testing.assert_array_equal(res, a + b)


def test_a_locked_upload_past_the_staged_size_goes_by_dma(fake):
    """A page-locked array above _STAGED_UPLOAD_BYTES uploads in place (one copy from its own
    memory), below small_bytes too; a pageable one of that size is staged."""
    transfer.set_transfer_limits(pinned_bytes=256 << 20, small_bytes=64 << 20)
    n = (transfer._STAGED_UPLOAD_BYTES + (1 << 20)) // 4
    locked = pinned.empty_pinned(n, "float32")
    locked[...] = np.arange(n, dtype=np.float32)
    pageable = np.arange(n, dtype=np.float32)
    d = fake.malloc(locked.nbytes, S)
    for a, direct in ((locked, True), (pageable, False)):
        fake.copy_log.clear()
        transfer.to_device(a, d, S)
        assert np.array_equal(device_view(d, np.float32, (n,)), a)
        assert any(src == a.ctypes.data for _, src, _ in fake.copy_log) == direct
    fake.free(d, S)


def _add1(ins, outs, stream, n):
    device_view(outs[0], np.float32, (n,))[...] = device_view(ins[0], np.float32, (n,)) + 1


def test_the_small_buffer_grows_as_calls_need_it(fake, libew):
    """The small buffer is pinned in steps of _SMALL_STEP as one-shot calls need (a first small
    call does not pin the cap; a call with nothing to stage pins none), holds only the operands it
    stages (a pinned result is not counted), and a call staging more than its cap is declined."""
    step = transfer._SMALL_STEP
    transfer.set_transfer_limits(pinned_bytes=4 * step, small_bytes=3 * step, threads=2)
    assert 2 * step <= transfer._small_buffer_bytes() < 3 * step          # two thirds of small_bytes

    locked = pinned.empty_pinned(pinned.RESULT_BYTES // 4, "float32")
    locked[...] = 1
    out = pinned.empty_pinned(locked.shape, "float32")
    assert transfer.one_shot([locked], [out], _add1, S)             # nothing to stage: no small buffer
    np.testing.assert_array_equal(out, 2)
    assert transfer.pinned_bytes_held() == 0
    tiny = np.arange(32, dtype=np.float32)[::2]                         # strided: staged
    res = np.empty_like(tiny)
    assert transfer.one_shot([tiny], [res], _add1, S)
    np.testing.assert_array_equal(res, tiny + 1)
    assert transfer.pinned_bytes_held() == step
    big = np.arange((step + (1 << 20)) // 4, dtype=np.float32)        # a step and 1 MiB
    res = pinned.empty_pinned(big.shape, "float32")                    # direct: only big is staged
    res[...] = np.nan
    assert transfer.one_shot([big], [res], _add1, S, period=1)
    np.testing.assert_array_equal(res, big + 1)
    assert transfer.pinned_bytes_held() == 2 * step
    over = np.arange((3 * step) // 8, dtype=np.float32)                 # small_bytes moved, 3 steps staged
    assert not transfer.one_shot([over], [np.empty_like(over)], _add1, S)
    assert transfer.pinned_bytes_held() == 2 * step
    d = fake.malloc(tiny.nbytes, S)
    transfer.to_device(tiny, d, S)                    # an upload after the growth: a region of the new buffer
    np.testing.assert_array_equal(device_view(d, np.float32, (16,)), tiny)
    fake.free(d, S)


def _add2(ins, outs, stream, n):
    device_view(outs[0], np.float32, (n,))[...] = (device_view(ins[0], np.float32, (n,)) +
                                                   device_view(ins[1], np.float32, (n,)))


def test_a_call_staging_past_the_cap_streams_without_waking_the_copy_threads(fake, libew, monkeypatch):
    """A call within small_bytes whose staged operands pass the small buffer's cap (two thirds of
    small_bytes: two inputs and a pageable result) is declined before libew's copy threads are woken
    for it, fits_one_shot says so too, and stream_call then streams it right; with a page-locked
    result it fits and goes in one shot."""
    transfer.set_transfer_limits(pinned_bytes=8 << 20, small_bytes=3 << 20, threads=2)
    woken = []
    monkeypatch.setattr(libew, "host_copy_wake", lambda t: woken.append(t) or 0)
    a, b = (np.arange(n, n + (1 << 18), dtype=np.float32) for n in (0, 7))         # 1 MiB each
    res = np.full_like(a, np.nan)
    assert not transfer.fits_one_shot([a, b, res])
    assert not transfer.one_shot([a, b], [res], _add2, S) and not woken
    assert np.isnan(res).all()                                          # nothing done
    transfer.stream_call([transfer.HostOperand(a, a.shape), transfer.HostOperand(b, b.shape)], [res], a.shape,
                         lambda c: _add2(c.inputs, c.out, c.stream, c.out_shapes[0][0]), S)
    np.testing.assert_array_equal(res, a + b)
    locked = pinned.empty_pinned(a.shape, "float32")
    assert transfer.fits_one_shot([a, b, locked])
    assert transfer.one_shot([a, b], [locked], _add2, S) and woken
    np.testing.assert_array_equal(locked, a + b)


def test_small_operands_go_by_cudas_own_copy(fake, libew, monkeypatch):
    """C-ordered operands of at most _DRIVER_COPY_BYTES are copied by CUDA from and to their own
    (pageable) memory: nothing is staged and no small buffer is pinned. A strided one is staged, and
    so is one past the bound, or any small one of a call that goes in parts."""
    transfer.set_transfer_limits(pinned_bytes=64 << 20, small_bytes=32 << 20, threads=2)
    staged = []
    copy, send = transfer._copy, transfer._send
    monkeypatch.setattr(transfer, "_copy", lambda d, s: (staged.append(s.nbytes), copy(d, s)))
    monkeypatch.setattr(transfer, "_send", lambda d, s, p, st: (staged.append(s.nbytes), send(d, s, p, st)))
    limit = transfer._DRIVER_COPY_BYTES

    a = np.arange(limit // 4, dtype=np.float32)                           # at the bound
    res = np.full_like(a, np.nan)
    fake.copy_log.clear()
    assert transfer.one_shot([a], [res], _add1, S, period=1)
    np.testing.assert_array_equal(res, a + 1)
    assert staged == [] and transfer.pinned_bytes_held() == 0
    assert fake.copy_log[0][1] == a.ctypes.data and fake.copy_log[1][0] == res.ctypes.data   # up from a, down to res

    b = np.arange(2000, dtype=np.float32)[::2]                            # strided: staged, the result not
    res = np.full(b.shape, np.nan, np.float32)
    assert transfer.one_shot([b], [res], _add1, S)
    np.testing.assert_array_equal(res, b + 1)
    assert staged == [b.nbytes]

    staged.clear()
    c = np.arange(limit // 4 + 1, dtype=np.float32)                       # past the bound: both staged
    res = np.full_like(c, np.nan)
    assert transfer.one_shot([c], [res], _add1, S)
    np.testing.assert_array_equal(res, c + 1)
    assert staged == [c.nbytes, res.nbytes]

    staged.clear()
    big = np.arange(limit, dtype=np.float64)          # 4 MiB: 2 parts, so its 512 KiB int8 input is staged too
    small = np.ones(big.size, np.int8)
    assert small.nbytes == limit
    out = np.full_like(big, np.nan)

    def add_both(ins, outs, stream, n):
        x, y = device_view(ins[0], np.float64, (n,)), device_view(ins[1], np.int8, (n,))
        device_view(outs[0], np.float64, (n,))[...] = x + y
    assert transfer.one_shot([big, small], [out], add_both, S, period=1)
    np.testing.assert_array_equal(out, big + 1)
    # 3 parts in 4, then the last, the shorter; the result staged back whole
    assert staged == [3 * big.nbytes // 4, 3 * small.nbytes // 4, big.nbytes // 4, small.nbytes // 4, out.nbytes]


def test_the_threads_default_counts_the_cpus_the_process_may_run_on(monkeypatch):
    """A process limited to 3 CPUs (a container, taskset) gets 3 transfer threads, not the host's
    count; never more than 16, never fewer than 1."""
    import os
    for cpus, want in (({0, 1, 2}, 3), (set(range(64)), 16), (set(), 1)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, c=cpus: c, raising=False)
        assert transfer.Limits().threads == want


@pytest.mark.parametrize("shape", [(4 * (1 << 19) + 77,), (1 << 11, 1 << 10), (1 << 7, 1 << 4, 1 << 10)])
def test_a_streamed_call_in_one_shot_goes_in_parts(fake, libew, shape):
    """stream_call's one shot over C-ordered operands of the call's shape (1-d or not): the kernel
    step runs once per part on 1-d runs that cover every element once. With a row (ones, then the
    call's last dims, or a channel bias: ones, then the call's dims or ones) the parts are runs of
    whole rows, each step reading the row whole; with a column (the call's first dims, then ones),
    its part of the column; an operand with the call's first dim broadcast in a middle dim makes
    one whole step."""
    transfer.set_transfer_limits(pinned_bytes=256 << 20, small_bytes=64 << 20)
    rng = np.random.default_rng(6)
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    steps = []

    def kernel(chunk):
        steps.append((chunk.input_shapes, chunk.out_shapes[0]))
        _add_kernel(chunk)

    out = np.full(shape, np.nan, np.float32)
    transfer.stream_call([transfer.HostOperand(x, shape), transfer.HostOperand(y, shape)], [out], shape, kernel, S)
    np.testing.assert_array_equal(out, x + y)
    n = x.size
    assert len(steps) == transfer._OVERLAP_PARTS and all(len(o) == 1 for _, o in steps)
    assert sum(o[0] for _, o in steps) == n
    nd = len(shape)
    for t in range(nd - 1, 0, -1) if nd > 1 else (1,):
        steps.clear()
        row_shape = (1,) * t + shape[t:]
        row = rng.standard_normal(row_shape).astype(np.float32)
        out[...] = np.nan
        transfer.stream_call([transfer.HostOperand(x, shape), transfer.HostOperand(row, row_shape)], [out], shape,
                             kernel, S)
        np.testing.assert_array_equal(out, x + row)
        tail, period = shape[t:], math.prod(shape[t:])
        assert len(steps) == transfer._OVERLAP_PARTS, t
        assert [ins[1] for ins, _ in steps] == [(1, *tail)] * len(steps)
        assert all(o == ins[0] and o[1:] == tail and o[0] * period % 256 == 0 for ins, o in steps[:-1])
        assert sum(o[0] for _, o in steps) * period == n
    for u in range(1, nd):
        steps.clear()
        col_shape = shape[:u] + (1,) * (nd - u)
        col = rng.standard_normal(col_shape).astype(np.float32)
        transfer.stream_call([transfer.HostOperand(x, shape), transfer.HostOperand(col, col_shape)], [out], shape,
                             kernel, S)
        np.testing.assert_array_equal(out, x + col)
        tail, period = shape[u:], math.prod(shape[u:])
        assert len(steps) == transfer._OVERLAP_PARTS, u
        assert all(o == ins[0] and o[1:] == tail and ins[1] == (o[0], *(1,) * len(tail)) for ins, o in steps)
        assert sum(o[0] for _, o in steps) * period == n
    if nd > 2:
        steps.clear()
        mid = rng.standard_normal((1, shape[1], 1)).astype(np.float32)      # a channel bias: a row
        transfer.stream_call([transfer.HostOperand(x, shape), transfer.HostOperand(mid, mid.shape)], [out], shape,
                             kernel, S)
        np.testing.assert_array_equal(out, x + mid)
        assert len(steps) == transfer._OVERLAP_PARTS and all(ins[1] == mid.shape for ins, _ in steps)
        assert sum(o[0] for _, o in steps) == shape[0]
        steps.clear()
        skip = rng.standard_normal((shape[0], 1, shape[2])).astype(np.float32)
        transfer.stream_call([transfer.HostOperand(x, shape), transfer.HostOperand(skip, skip.shape)], [out], shape,
                             kernel, S)
        np.testing.assert_array_equal(out, x + skip)
        assert steps == [((shape, skip.shape), shape)]


def test_the_small_buffer_grows_only_once_uploads_reading_it_are_done(fake, libew, monkeypatch):
    """An upload queued (not yet run) from the small buffer, then a one-shot call that needs a
    larger buffer: the upload's copy runs before the old buffer is freed, and lands intact."""
    pending, ran = [], []

    class LateEvent:
        def __init__(self, timing=False):
            pass

        def record(self, stream_cu):
            self.mark = len(pending)

        def synchronize(self):
            while len(ran) < self.mark:
                d, s, n = pending[len(ran)]
                ctypes.memmove(d, s, n)
                ran.append(1)

    htod = rt.copy_htod
    step = transfer._SMALL_STEP
    transfer.set_transfer_limits(pinned_bytes=8 * step, small_bytes=6 * step, threads=2)
    monkeypatch.setattr(rt, "Event", LateEvent)
    monkeypatch.setattr(rt, "copy_htod", lambda d, s, n, st: pending.append((d, s, n)))
    a = np.arange(1000, dtype=np.float32)
    d = fake.malloc(a.nbytes, S)
    transfer.to_device(a, d, S)                                # queued from the first 16 MiB buffer
    assert not ran and transfer.pinned_bytes_held() == step
    monkeypatch.setattr(rt, "copy_htod", htod)
    big = np.arange((step + (1 << 20)) // 4, dtype=np.float32)

    res = np.empty_like(big)
    assert transfer.one_shot([big], [res], _add1, S)
    assert ran == [1] and transfer.pinned_bytes_held() == 3 * step        # big and res staged: 34 MiB
    np.testing.assert_array_equal(device_view(d, np.float32, a.shape), a)
    np.testing.assert_array_equal(res, big + 1)
    fake.free(d, S)


@pytest.mark.parametrize("shapes, shape, want", [
    ([(5, 4), (4,)], (5, 4), (4, (1, 0))),                      # a bias: a row read whole by each run
    ([(2, 3, 4), (3, 1)], (2, 3, 4), (12, (1, 0))),             # a channel bias: the same, runs of 12
    ([(2, 5, 3, 7), (5, 1, 7), (1,)], (2, 5, 3, 7), (105, (1, 0, 0))),
    ([(2, 3, 4), (2, 1, 1)], (2, 3, 4), (12, (1, 12))),         # a column: its share of each run
    ([(1, 5, 1)], (1, 5, 4), (4, (4,))),                        # a column, in shorter runs than a row's
    ([(6, 1), (1, 5)], (6, 5), (5, (5, 0))),                    # an outer product
    ([(2, 3, 4), (2, 1, 4)], (2, 3, 4), None),                  # a middle broadcast under the first dim
    ([(), (6, 2)], (6, 2), (1, (0, 1))),
])
def test_runs_of_rows_and_columns(shapes, shape, want):
    """runs_of: each operand of the call's shape (scale 1), a row (0) or a column (the call's
    elements per element of its own), and the shapes of any run of whole periods, over which each
    operand broadcasts as numpy would and holds the elements that run reads."""
    r = transfer.runs_of(shapes, shape)
    assert (None if r is None else (r.period, r.scales)) == want
    if r is None:
        return
    n = math.prod(shape)
    for m in range(r.period, n + 1, r.period):
        run, own = r.shapes(m)
        assert math.prod(run) == m and np.broadcast_shapes(run, *own) == run
        for s, o, k in zip(shapes, own, r.scales):
            assert math.prod(o) == (m if k == 1 else m // k if k else math.prod(s))


def test_one_shot_scratch_comes_in_a_few_sizes_per_power_of_two():
    """A one-shot call's device scratch is rounded up to one of eight sizes per power of two (at
    most 1/8 more), so calls of many sizes leave the caching allocator a few lists, not one each."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(4097, 1 << 24, 20000)
    classes = {transfer._size_class(int(n)) for n in sizes}
    assert len(classes) <= 8 * 12
    for n in sizes[:2000]:
        c = transfer._size_class(int(n))
        assert n <= c <= n * 1.125
    assert transfer._size_class(4096) == 4096 and transfer._size_class(1 << 20) == 1 << 20


@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("period", [1, 768, 4096])
def test_parts_are_whole_periods_the_last_half_of_the_others(parts, period):
    """A call in k parts: runs of whole periods and whole 256-element runs that cover it once, in
    order, the first k - 1 about equal and the last about half of an equal share (its copies are
    the call's tail); a call of too few periods for k parts gives fewer, never an empty one."""
    per_part = transfer._OVERLAP_PART_BYTES // 4
    n = (parts * per_part + 4096 * 3) // math.lcm(period, 256) * math.lcm(period, 256)
    x = np.empty(n, np.float32)
    got = transfer._parts([x], [x], period, [1])
    assert len(got) == parts and got[0][0] == 0 and got[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
    unit = math.lcm(period, 256)
    assert all(lo % unit == 0 for lo, _ in got)
    sizes = [hi - lo for lo, hi in got]
    assert max(sizes[:-1]) - min(sizes[:-1]) <= unit
    assert abs(sizes[-1] - n / (2 * parts)) <= unit, sizes
    coarse = 1 << 20                                     # 8 MiB of two periods: 2 parts, though 4 would fit
    two = np.empty(2 * coarse, np.float32)
    assert transfer._parts([two], [two], coarse, [1]) == [(0, coarse), (coarse, 2 * coarse)]
