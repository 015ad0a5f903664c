"""The runtime's buffer reuse on a GPU's default stream, on the CPU: what is kept, for how many
buffers and bytes, what goes back to the pool (when freed, when an allocation fails, when the pool
is trimmed), and a Buffer's life through it."""
from __future__ import annotations

import itertools

import pytest

from pyew import memory
from pyew import runtime as rt
from pyew.array import Buffer
from pyew.errors import CudaError

from .fake_cuda import install


class PoolCalls:
    """memory.cuda's calls, recorded, over pointers that hold no memory."""

    def __init__(self):
        self.mallocs, self.frees, self.trims = [], [], []
        self.out_of_memory = 0            # how many of the next allocations fail
        self._next = itertools.count(1 << 20, 1 << 12)

    def alloc(self, nbytes, stream):
        if self.out_of_memory:
            self.out_of_memory -= 1
            return None
        ptr = next(self._next)
        self.mallocs.append((ptr, nbytes))
        return ptr

    def free(self, ptr, stream):
        self.frees.append(ptr)

    def trim_pool(self, pool, keep):
        self.trims.append(keep)


@pytest.fixture
def pool(monkeypatch):
    fake = install(monkeypatch)
    calls = PoolCalls()
    calls.syncs = fake.streams.synced
    monkeypatch.setattr(memory, "cuda", calls)
    return calls, rt.DEFAULT_STREAM


def test_small_frees_are_kept_per_size_then_handed_out(pool):
    calls, s = pool
    ptrs = [rt.malloc(256, s) for _ in range(memory._REUSE_PER_SIZE + 1)]
    assert [p for p, _ in calls.mallocs] == ptrs
    for p in ptrs:
        rt.free(p, s, 256)
    assert calls.frees == [ptrs[-1]]                   # one more than the size keeps goes back
    kept = ptrs[:-1]
    again = [rt.malloc(256, s) for _ in kept]
    assert sorted(again) == sorted(kept) and len(calls.mallocs) == len(ptrs)   # no new allocation
    assert rt.malloc(256, s) not in ptrs               # the list is empty: from the pool again


def test_what_is_never_kept(pool, monkeypatch):
    calls, s = pool
    big = rt.malloc(memory._REUSE_MAX_BYTES + 1, s)
    rt.free(big, s, memory._REUSE_MAX_BYTES + 1)
    unsized = rt.malloc(64, s)
    rt.free(unsized, s)                                # no size given: a plain free
    assert calls.frees == [big, unsized]
    assert rt.malloc(0, s) == 0 and len(calls.mallocs) == 2
    rt.free(0, s, 64)                                  # nothing to free, nothing kept
    assert calls.frees == [big, unsized] and s.reuse == {}
    other = rt.RawStream.__new__(rt.RawStream)         # any stream but a default one allocates afresh
    other.cu, other.ordinal = 0, 0
    p = rt.malloc(64, other)
    rt.free(p, other, 64)
    assert calls.frees[-1] == p and s.reuse == {}


def test_the_total_bounds_what_is_held_and_comes_back_when_taken(pool, monkeypatch):
    calls, s = pool
    monkeypatch.setattr(memory, "_REUSE_TOTAL_BYTES", 3072)
    a, b, c = rt.malloc(1024, s), rt.malloc(2048, s), rt.malloc(512, s)
    for p, size in ((a, 1024), (b, 2048), (c, 512)):
        rt.free(p, s, size)
    assert s.reuse[1024] == [a] and s.reuse[2048] == [b] and s.held == 3072
    assert calls.frees == [c]                          # 512 more would pass the total: freed
    assert rt.malloc(2048, s) == b and s.held == 1024  # taking one gives its bytes back
    d = rt.malloc(512, s)
    rt.free(d, s, 512)                                 # so a new size is kept again
    assert s.reuse[512] == [d] and s.held == 1536 and calls.frees == [c]


def test_a_buffer_goes_back_to_its_streams_list_and_is_reused(pool):
    calls, s = pool
    b = Buffer(4096, s)
    ptr = b.ptr
    del b
    assert s.reuse[4096] == [ptr] and calls.frees == []
    c = Buffer(4096, s)
    assert c.ptr == ptr and s.reuse[4096] == [] and len(calls.mallocs) == 1
    del c
    assert s.reuse[4096] == [ptr]


def test_a_buffer_used_on_another_stream_waits_for_it_then_frees(pool, monkeypatch):
    calls, s = pool
    waits = []
    monkeypatch.setattr(rt, "stream_wait", lambda waiter, on: waits.append((waiter, on)))
    other = rt.RawStream.__new__(rt.RawStream)
    other.cu, other.handle, other.ordinal = 0x77, 0x77, 0
    b = Buffer(4096, s)
    ptr = b.ptr
    b.used_on(other)
    assert waits == [(other, s)]                       # the use waits for the allocation's stream
    b.used_on(other)
    assert len(waits) == 1                             # once
    del b
    assert waits == [(other, s), (s, other)]           # the free waits for the use
    assert s.reuse.get(4096) == [ptr]                  # then kept: the wait orders the next user


def test_large_frees_are_kept_too(pool):
    calls, s = pool
    size = 256 << 20                                   # a 2^26-element float32 array
    a = rt.malloc(size, s)
    rt.free(a, s, size)
    assert s.reuse[size] == [a] and s.held == size and calls.frees == []
    assert rt.malloc(size, s) == a and s.held == 0 and len(calls.mallocs) == 1


def test_out_of_memory_gives_the_kept_buffers_back_then_tries_again(pool):
    calls, s = pool
    kept = {rt.malloc(4096, s): 4096, rt.malloc(1 << 24, s): 1 << 24}
    for p, size in kept.items():
        rt.free(p, s, size)
    assert s.held == 4096 + (1 << 24)
    calls.out_of_memory = 1
    p = rt.malloc(1 << 26, s)
    assert sorted(calls.frees) == sorted(kept)         # every kept buffer went back to the pool
    assert calls.syncs == [s.cu]                          # and its frees finished before the retry
    assert (p, 1 << 26) == calls.mallocs[-1] and s.held == 0
    assert all(not v for v in s.reuse.values())


def test_out_of_memory_with_nothing_kept_raises_without_a_retry(pool):
    calls, s = pool
    calls.out_of_memory = 1
    n = len(calls.mallocs)
    with pytest.raises(CudaError, match="out of GPU memory allocating 1024 bytes"):
        rt.malloc(1024, s)
    assert calls.out_of_memory == 0 and len(calls.mallocs) == n and calls.syncs == []
    a = rt.malloc(512, s)
    rt.free(a, s, 512)
    calls.out_of_memory = 2                            # a kept buffer, but the retry fails too
    with pytest.raises(CudaError, match="out of GPU memory"):
        rt.malloc(1024, s)
    assert calls.frees == [a] and s.reuse[512] == [] and s.held == 0


def test_trim_pool_gives_the_kept_buffers_back_first(pool):
    calls, s = pool
    a = rt.malloc(1 << 24, s)
    rt.free(a, s, 1 << 24)
    rt.trim_pool()
    assert calls.frees == [a] and calls.syncs == [s.cu] and calls.trims == [0] and s.held == 0
    rt.trim_pool(keep_bytes=5)                         # nothing kept now: the pool alone
    assert calls.frees == [a] and calls.syncs == [s.cu] and calls.trims == [0, 5]
