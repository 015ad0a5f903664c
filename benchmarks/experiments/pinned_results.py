"""One-off probe: numpy results from the pinned pool, the former way (numpy's shape check, the
block's whole byte array sliced, a search of every free size) against the current one (a result's
shape taken as checked, the array over its bytes only, a free block of the same size first), in
one process, 7 rounds alternating: pinned.for_result at 2^16 float32, and sigmoid and add float32
numpy calls at 2^15, 2^16, 2^18 and 2^20.

    python benchmarks/experiments/pinned_results.py
"""
# ruff: noqa
import time, statistics, math
import numpy as np, pyew
from pyew import pinned
new_array, new_take = pinned._array, pinned._Pool.take
def old_array(shape, info, keep_only, checked=False):
    try:
        shape = np.broadcast_shapes(shape)
    except (TypeError, ValueError) as e:
        raise type(e)(f"empty_pinned: bad shape {shape!r}: {e}") from None
    nbytes = math.prod(shape) * info.itemsize
    if nbytes == 0:
        return np.empty(shape, info.np)
    pool = pinned._pool
    ptr, size, kept = pool.take(nbytes, keep_only)
    if not ptr:
        return None
    block = pinned._Block(ptr, size, kept, pool, size)
    return np.asarray(block)[:nbytes].view(info.np).reshape(shape)
def old_take(self, nbytes, keep_only):
    size = pinned._block_bytes(nbytes)
    try:
        with self.lock:
            self._drain()
            fits = [s for s, blocks in self.free.items() if blocks and size <= s <= 2 * size]
            if fits:
                got = min(fits)
                return self.free[got].pop(), got, True
            kept = self.held + size <= self.limit or self._evict(size)
            if kept:
                self.held += size
            elif keep_only:
                return 0, 0, False
    finally:
        self._drain_if_free()
    return pinned.host_alloc(size), size, kept
def use(old):
    pinned._array = old_array if old else new_array
    pinned._Pool.take = old_take if old else new_take
rng = np.random.default_rng(0)
def med(f, R):
    for _ in range(20): f()
    ts = []
    for _ in range(R):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
res = {}
xs = {p: rng.standard_normal(1 << p).astype(np.float32) for p in (15, 16, 18, 20)}
ys = {p: rng.standard_normal(1 << p).astype(np.float32) for p in xs}
for r in range(7):
    for old in (True, False):
        use(old)
        res.setdefault(("for_result 2^16", old), []).append(med(lambda: pinned.for_result((1 << 16,), np.float32), 300))
        for p in xs:
            x, y = xs[p], ys[p]
            res.setdefault((f"sigmoid 2^{p}", old), []).append(med(lambda: pyew.sigmoid(x), 150))
            res.setdefault((f"add 2^{p}", old), []).append(med(lambda: pyew.add(x, y), 150))
use(False)
for k in dict.fromkeys(k for k, _ in res):
    print(f"{k}: former {statistics.median(res[(k, True)]):.1f} us, now {statistics.median(res[(k, False)]):.1f} us", flush=True)
