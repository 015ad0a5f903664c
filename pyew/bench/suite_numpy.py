"""The numpy suite: numpy arrays in, a new numpy array out, host time per call (copies, transfers,
the kernel, the new output's page faults); a call's floor is its bytes over the pinned bandwidth."""
from __future__ import annotations

import ctypes
import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import dtypes as dt
from .. import kinds, pinned, transfer
from .. import runtime as rt
from .harness import Suite, Table, f_size, gpu, host, map_cases, random_host_n, release

NUMPY_SIZES, QUICK_NUMPY_SIZES = (1 << 20, 1 << 24, 1 << 26, 1 << 28), (1 << 20, 1 << 24)
TARGET_N, CPU_PEERS_MAX = 1 << 26, 1 << 26   # the size the targets read (measured first); numpy's, numexpr's largest
POINT_BUDGET_S, CALL_BUDGET_S = 1.0, 0.5     # host seconds per point: an op's, a small call's or crossover's
HOST_RAM_FACTOR = 3                  # a point's inputs + output, x this for the peers' temporaries
MAP_RESERVE_S = 120.0                # of --max-time (at most 30% of it) left for the map sweep after
BW_BYTES, SMALL_N, CROSSOVER_SIZES = 256 << 20, 16, tuple(1 << e for e in range(8, 25, 2))


def numpy_sizes(args) -> list[int]:
    """--numpy-sizes, else the defaults within --sizes when given; TARGET_N first, the rest ascending."""
    sizes = args.numpy_sizes or (QUICK_NUMPY_SIZES if args.quick else NUMPY_SIZES)
    if not args.numpy_sizes and args.sizes_given:
        sizes = [n for n in sizes if min(args.sizes) <= n <= max(args.sizes)]
    return sorted(set(sizes), key=lambda n: (n != TARGET_N, n))


def host_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None


def _reserve(run):                   # seconds of --max-time left for the map sweep after this suite
    return (min(MAP_RESERVE_S, 0.3 * (run.max_time or 1e9)), "the map sweep") if "map" in run.args.suites else (0.0, "")


def run_numpy(run) -> None:
    table = kinds.table()
    if "numexpr" in run.peers:
        run.note(f"numexpr computes with {run.peers['numexpr'].threads} threads (os.cpu_count() = {os.cpu_count()}); "
                 "numpy with one")
    pcie(run)
    for case in map_cases(run.lib.manifest, ("sigmoid", "add"), ["float32"]):        # the small calls
        xs = [random_host_n(run.rng, d, SMALL_N) for d in case.ins]
        fns = {"pyew": table[case.name]} | {p.name: p.round_trip(p.op(case)[0]) for p in run.peers.values()
                                            if p.gpu and p.op(case)[0]}
        for impl, fn in fns.items():
            run.measure("small", case.name, "float32", SMALL_N, impl,
                        functools.partial(host, functools.partial(fn, *xs), budget_s=CALL_BUDGET_S))
    if "sigmoid" in table:                                                            # the crossover
        pinned = max(transfer.transfer_limits()["pinned_bytes"], 4 * (8 * max(CROSSOVER_SIZES) + (1 << 20)))
        for label, limits in (("one shot", {"small_bytes": 1 << 50, "pinned_bytes": pinned}),
                              ("streamed", {"small_bytes": 0})):
            old = transfer.set_transfer_limits(**limits)
            try:
                for n in CROSSOVER_SIZES:
                    x = random_host_n(run.rng, "float32", n)
                    run.measure("crossover", "sigmoid", "float32", n, label, functools.partial(
                        host, functools.partial(table["sigmoid"], x), budget_s=CALL_BUDGET_S), bytes=8 * n)
            finally:
                transfer.set_transfer_limits(**old)
    run.checkpoint()
    main(run, table)


def pcie(run) -> None:
    s, n, hosts, devs, lanes = rt.DEFAULT_STREAM, BW_BYTES, [], [], []
    try:
        hosts, devs = [rt.host_alloc(n) for _ in range(2)], [rt.malloc(n, s) for _ in range(2)]
        lanes = [rt.new_stream(s.ordinal) for _ in range(2)]
        ctypes.memset(hosts[0], 0x3C, n)
        rt.memset(devs[1], 0x3C, n, s.cu)

        def both():
            start = rt.Event()
            start.record(s.cu)
            for lane in lanes:
                rt.wait_event(lane, start)
            rt.copy_htod(devs[0], hosts[0], n, lanes[0])
            rt.copy_dtoh(hosts[1], devs[1], n, lanes[1])
            for lane in lanes:
                rt.stream_wait(s, rt.RawStream(lane, s.ordinal))
        for name, moved, fn in (("H2D", n, lambda: rt.copy_htod(devs[0], hosts[0], n, s.cu)),
                                ("D2H", n, lambda: rt.copy_dtoh(hosts[1], devs[1], n, s.cu)),
                                ("both ways", 2 * n, both)):
            run.measure("pcie", f"pinned {name}", None, n, "cudaMemcpyAsync", functools.partial(gpu, run, [fn], 1),
                        bytes=moved)
    except Exception as e:
        run.failed("numpy: pinned bandwidth", e)
    finally:
        rt.synchronize()
        for free, items in ((rt.host_free, hosts), (lambda d: rt.free(d, s), devs), (rt.destroy_stream, lanes)):
            list(map(free, items))
    host_copy(run)


def host_copy(run) -> None:
    """Pageable numpy data copied into page-locked memory by as many threads as the transfer engine
    has workers: the staging rate, the other half of a numpy call's floor."""
    n, k, ptr = BW_BYTES // 4, transfer.transfer_limits()["threads"], 0
    try:
        src, ptr = np.ones(n, np.float32), rt.host_alloc(4 * n)
        dst = np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))
        parts = [slice(i * n // k, (i + 1) * n // k) for i in range(k)]
        with ThreadPoolExecutor(k) as pool:
            def copy():
                list(pool.map(lambda sl: np.copyto(dst[sl], src[sl]), parts))
            run.measure("pcie", "host copy into pinned", None, 4 * n, f"{k} threads", functools.partial(host, copy),
                        bytes=4 * n)
    except Exception as e:
        run.failed("numpy: host copy rate", e)
    finally:
        if ptr:
            rt.host_free(ptr)


def main(run, table) -> None:
    cases = [c for c in map_cases(run.lib.manifest, run.args.ops, run.args.dtypes)
             if c.dtype in ("float32", "float16") and (c.default or run.args.ops)]
    sizes, avail = numpy_sizes(run.args), host_available()
    if not cases or not sizes:
        return run.note("numpy: no default map op with float32/float16 kernels matches --ops/--dtypes, or no size "
                        "of 2^20, 2^24, 2^26, 2^28 lies within --sizes (--numpy-sizes chooses them)")
    for n in sizes:
        for dtype in dict.fromkeys(c.dtype for c in cases):
            group = [c for c in cases if c.dtype == dtype]
            keys = dict.fromkeys(key for c in group for key in enumerate(c.ins))      # (input index, dtype)
            need = n * (sum(dt.BY_NAME[d].itemsize for _, d in keys) + 8) * HOST_RAM_FACTOR
            if avail is not None and need > avail:
                run.note(f"numpy: {f_size(n)} {dtype} skipped: it needs about {need / 2**30:.1f} GiB of host memory, "
                         f"{avail / 2**30:.1f} GiB are available")
                continue
            if run.out_of_time(*_reserve(run)):
                return
            xs = {key: random_host_n(run.rng, key[1], n) for key in keys}
            try:
                for c in group:
                    measure_case(run, table, c, n, [xs[key] for key in enumerate(c.ins)])
            finally:
                del xs
                release(run)
            run.checkpoint()


def _rate(run, name: str) -> float | None:
    return next((r["gbps"] for r in run.rows if r["suite"] == "pcie" and r["name"] == name and r.get("gbps")), None)


def rates_measured(run) -> bool:
    return _rate(run, "pinned both ways") is not None and _rate(run, "host copy into pinned") is not None


def floor_ms(run, call_bytes: int, staged_bytes: int) -> float | None:
    """The pageable floor of a numpy call, where its rates were measured (pcie): the larger of its
    bytes (inputs and output) over PCIe both ways, and of the bytes it stages over the host's copy
    rate into pinned memory. The inputs are staged; a new result of RESULT_BYTES or more comes
    down into a pooled pinned block by DMA, unstaged."""
    both, host_copy = _rate(run, "pinned both ways"), _rate(run, "host copy into pinned")
    if not both or not host_copy:
        return None
    return max(call_bytes / (both * 1e6), staged_bytes / (host_copy * 1e6))


def staged_bytes(in_bytes: int, out_bytes: int) -> int:
    """What a numpy call stages: its inputs, and its result where that is too small for the pinned
    pool (pinned.RESULT_BYTES)."""
    return in_bytes + (out_bytes if out_bytes < pinned.RESULT_BYTES else 0)


def measure_case(run, table, case, n, xs) -> None:
    cpu_max = run.args.cpu_peers_max or CPU_PEERS_MAX
    out_bytes = n * dt.BY_NAME[case.out_dtype].itemsize
    floor = floor_ms(run, case.bytes(n), staged_bytes(case.bytes(n) - out_bytes, out_bytes))
    fns = {"pyew": functools.partial(table[case.name], **case.params)}
    for name, peer in run.peers.items():
        fn, why = peer.op(case)
        if fn is None:
            run.note(why)
        elif peer.gpu or n <= cpu_max:
            fns[name] = peer.round_trip(fn)
        else:
            run.note(f"numpy: the CPU peers run up to {f_size(cpu_max)} elements (--cpu-peers-max raises it)")
    reps = run.args.numpy_repeat or (3 if run.args.quick else 5)
    for impl, fn in fns.items():
        extra = {"floor_ms": floor} if impl == "pyew" and floor else {}
        how = functools.partial(host, functools.partial(fn, *xs), None, POINT_BUDGET_S, reps)
        row = run.measure("numpy", case.name, case.dtype, n, impl, how, _reserve(run), bytes=case.bytes(n),
                          out_dtype=case.out_dtype, arity=case.arity, default=case.default, **extra)
        if row and extra:
            row["floor_ratio"] = row["ms"] / row["floor_ms"]


SUITES = (Suite(
    "numpy", "numpy in/out wall clock: every default op f32/f16 at 2^20..2^28 vs numpy, numexpr, torch, CuPy; "
    "pinned bandwidth and floor; crossover; 16-element calls", run_numpy, (
        Table("Pinned host <-> device bandwidth (CUDA events) and the host's copy rate into pinned memory",
              "pcie", ("gbps",), keys=("name", "n")),
        Table("Small calls: numpy in, numpy out (µs per call; target ≤ 50 µs)", "small", ("us_per_call",),
              ("pyew", "torch", "cupy"), ratio="us_per_call"),
        Table("Crossover: one shot vs streamed (sigmoid float32, numpy in and out, µs per call)", "crossover",
              ("us_per_call",), ("one shot", "streamed"), base="one shot", ratio="us_per_call",
              text="The transfer engine's small_bytes (one shot below it) is chosen from where streamed wins."),
        Table("numpy in, numpy out (per call)", "numpy", ("ms",), ("pyew", "numpy", "numexpr", "torch", "cupy"),
              fields=("floor_ms", "floor_ratio"),
              text="The floor: the larger of the call's bytes (inputs + output) over the pinned both-ways "
              "bandwidth and its staged bytes (the inputs; a result of 128 KiB or more comes down into a "
              "pooled pinned block) over the host's multi-threaded copy rate into pinned memory."))),)
