"""`python -m pyew bench`: options, the run, and its output (progress on stderr, the table on stdout,
bench.json / bench.md / bench.png under --out)."""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np

from .. import dtypes as dt
from .. import library
from .. import runtime as rt
from ..errors import PyewError
from ..transfer import transfer_limits
from . import peers as peers_mod
from . import report, targets
from .harness import GpuTimer, Run, StopRun, map_cases
from .suites import SUITES

DEFAULT_SIZES, QUICK_SIZES, DEFAULT_REPEAT, QUICK_REPEAT = "16:28", "16,20,24,28", 25, 10
DEFAULT_MAX_TIME, DEFAULT_PEERS = 450.0, "torch,cupy,numpy,numexpr"


def parse_sizes(text: str) -> list[int]:
    """Exponents of 2: "16:28" (16..28), "16:28:4" (step 4), "16-20", "2^20", "20,24,28"; above 40 a count."""
    out: list[int] = []
    for tok in filter(None, (t.strip() for t in text.split(","))):
        try:
            sep = ":" if ":" in tok else "-" if "-" in tok[1:] else None
            if sep:
                lo, hi, *step = (int(p) for p in tok.split(sep))
                if len(step) > 1 or lo > hi or (step and step[0] < 1):
                    raise ValueError
                out += [1 << e for e in range(lo, hi + 1, step[0] if step else 1)]
            elif tok.startswith(("2^", "2**")):
                e = int(tok.split("^")[-1].split("**")[-1])
                if not 0 <= e <= 40:        # checked before the shift: 2^99999999999 would take all memory
                    raise argparse.ArgumentTypeError(f"size {tok!r} is too large for one GPU buffer set")
                out.append(1 << e)
            else:
                out.append(1 << int(tok) if int(tok) <= 40 else int(tok))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"bad size {tok!r}: use exponents like 16:28, 16:28:2, 20,24,28 or 2^20, or an element count") from None
    if not out or any(n < 1 for n in out):
        raise argparse.ArgumentTypeError(f"no valid sizes in {text!r}")
    if max(out) > 1 << 34:
        raise argparse.ArgumentTypeError(f"size {max(out)} is too large for one GPU buffer set")
    return sorted(set(out))


def parse_size(text: str) -> int:
    if len(parse_sizes(text)) != 1:
        raise argparse.ArgumentTypeError(f"give one size, not {text!r}")
    return parse_sizes(text)[0]


def parse_names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_dtypes(text: str) -> list[str]:
    out: list[str] = []
    for tok in parse_names(text):
        for n in dt.GROUPS.get(tok) or ((dt.BY_TOKEN[tok].name,) if tok in dt.BY_TOKEN else (tok,)):
            if n not in dt.BY_NAME:
                raise argparse.ArgumentTypeError(f"unknown dtype {tok!r}: known {', '.join(dt.BY_NAME)}, tokens "
                                                 f"{', '.join(dt.BY_TOKEN)}, groups {', '.join(dt.GROUPS)}")
            out += [n] if n not in out else []
    return out


def parse_suites(text: str) -> list[str]:
    if bad := [n for n in parse_names(text) if n not in SUITES]:
        raise argparse.ArgumentTypeError(f"unknown suite(s) {', '.join(bad)}; known: {', '.join(SUITES)}")
    if not parse_names(text):
        raise argparse.ArgumentTypeError(f"no suite given; known: {', '.join(SUITES)}")
    return [n for n in SUITES if n in parse_names(text)]       # always in run order


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pyew bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmark the loaded libew (PYEW_LIB or build/libew.so) on this GPU against the copy ceiling, "
                    "PyTorch, CuPy, numpy, numexpr and libew_bench.so's kernels (`make bench`); then pyew's targets.",
        epilog="suites (run in this order):\n" + "\n".join(f"  {n:<10} {s.doc}" for n, s in SUITES.items())
               + "\n\nexamples:\n"
               "  python -m pyew bench --quick --suites copy,map --ops gelu,add --dtypes f16,bf16\n"
               "  python -m pyew bench --suites copy,map --sizes 28 --sustained --sustained-seconds 2")
    add = ap.add_argument
    add("--ops", type=parse_names, help="map ops to measure, comma-separated (default: all)")
    add("--dtypes", type=parse_dtypes, help="dtypes: names, tokens or groups, e.g. float16,bf16 or half (default: all)")
    add("--sizes", type=parse_sizes, help=f"element counts as exponents of 2 (default {DEFAULT_SIZES}; --quick "
        f"{QUICK_SIZES}); for the numpy suite a range its sizes must lie in")
    add("--suites", type=parse_suites, default=list(SUITES), help=f"a subset of: {', '.join(SUITES)} (default: all)")
    add("--repeat", type=int, help=f"timed calls per measurement (default {DEFAULT_REPEAT}; --quick {QUICK_REPEAT})")
    add("--quick", action="store_true", help="fewer sizes and repeats: a smoke run of every suite")
    add("--out", type=Path, default=Path("bench-out"), help="folder for bench.json, .md and .png (default: bench-out)")
    add("--peers", type=parse_names, default=parse_names(DEFAULT_PEERS),
        help=f"libraries to compare with: {DEFAULT_PEERS} (default), or none")
    add("--max-time", type=float, default=DEFAULT_MAX_TIME, help="seconds after which what is left is skipped and "
        f"the report written (default {DEFAULT_MAX_TIME:.0f})")
    add("--seed", type=int, help="random seed for the inputs (default: fresh each run)")
    add("--no-png", action="store_true", help="skip the plot")
    g = ap.add_argument_group("numpy suite").add_argument
    g("--numpy-sizes", type=parse_sizes, help="its sizes (default 20,24,26,28 within --sizes; --quick 20,24)")
    g("--numpy-repeat", type=int, help="runs per point, fewer (at least 3) for a slow call (default 5; --quick 3)")
    g("--cpu-peers-max", type=parse_size, help="largest size numpy and numexpr run at (default 26, i.e. 2^26)")
    g = ap.add_argument_group("map suite").add_argument
    g("--sustained", action="store_true", help="also pyew and PyTorch alternating (A B A B) at the largest size in "
      "segments of --sustained-seconds of back-to-back calls: GB/s at sustained-load clocks; 4x that per (op, dtype)")
    g("--sustained-seconds", type=float, default=1.0, help="seconds per segment of --sustained (default 1)")
    return ap


def parse_args(argv) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    args.sizes = args.sizes or parse_sizes(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    args.repeat = args.repeat if args.repeat is not None else QUICK_REPEAT if args.quick else DEFAULT_REPEAT
    for flag, v, least in (("--repeat", args.repeat, 1), ("--numpy-repeat", args.numpy_repeat, 3),
                           ("--sustained-seconds", args.sustained_seconds, 1e-9), ("--max-time", args.max_time, 1e-9),
                           ("--seed", args.seed, 0)):
        if v is not None and not v >= least:           # NaN too
            build_parser().error(f"{flag} must be more than 0" if 0 < least < 1 else f"{flag} must be at least {least}")
    for flag, given in (("--ops", args.ops), ("--dtypes", args.dtypes)):
        if given is not None and not given:
            build_parser().error(f"{flag}: nothing given (leave it out for all)")
    if bad := [p for p in args.peers if p not in (*peers_mod.LOADERS, "none")]:
        build_parser().error(f"--peers: unknown {', '.join(bad)}; choose from {', '.join(peers_mod.LOADERS)}, or none")
    if why := unwritable(args.out):      # a bad --out fails now, not after the first suite has run
        build_parser().error(f"--out {args.out}: {why}")
    args.peers = [] if args.peers == ["none"] else args.peers
    args.sizes_given = any(a == "--sizes" or a.startswith("--sizes=") for a in argv)
    args.argv = list(argv)
    return args


def unwritable(folder: Path) -> str | None:
    """Why the bench could not write its reports into `folder` (made when it does not exist), or None."""
    if folder.exists():
        return None if folder.is_dir() and os.access(folder, os.W_OK) else \
            ("not a folder" if not folder.is_dir() else "not writable")
    parent = next((p for p in folder.absolute().parents if p.exists()), None)
    return None if parent is not None and parent.is_dir() and os.access(parent, os.W_OK) else \
        f"cannot be made ({parent} is not a writable folder)"


def check_ops(args, manifest) -> None:
    known = [o.name for o in manifest.ops if o.kind == "map"]
    if bad := [o for o in args.ops or () if o not in known]:
        print(f"python -m pyew bench: unknown map op(s) {', '.join(bad)}; the library has: {', '.join(known)}",
              file=sys.stderr)
        sys.exit(2)


def _meta(run: Run, info: dict) -> dict:
    try:
        git = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[2]), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        git = ""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(["python", "-m", "pyew", "bench", *run.args.argv]), "git": git or None,
        "device": {k: info.get(k) for k in ("name", "capability", "sms", "threads_per_sm", "l2_bytes", "total_memory")},
        "library": str(run.lib.path), "seed": run.seed, "python": platform.python_version(), "numpy": np.__version__,
        "peers": {n: getattr(p.mod, "__version__", "?") for n, p in run.peers.items()}, "cpu_count": os.cpu_count(),
        "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"), "transfer_limits": transfer_limits(),
        **{k: getattr(run.args, k) for k in ("sizes", "repeat", "suites", "sustained", "sustained_seconds")},
        "map_order": [[c.name, c.dtype] for c in map_cases(run.lib.manifest)],    # the tables' order of map ops
    }


def run_bench(args, stream=None) -> Run:
    run = Run(args, stream)
    run.lib = library.get()
    check_ops(args, run.lib.manifest)
    run.dev, info = rt.device(), rt.device_info()
    run.l2_bytes = info["l2_bytes"] or (50 << 20)
    run.seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % 2**32)
    run.rng = np.random.default_rng(run.seed)
    run.line(f"pyew bench on {info['name']} ({info['sms']} SMs, L2 {run.l2_bytes >> 20} MiB), library {run.lib.path}")
    run.peers = peers_mod.load(args.peers, run.note)
    run.timer = GpuTimer(max_reps=max(args.repeat, 10))
    run.meta = _meta(run, info)           # partial results survive a run killed from outside
    run.on_checkpoint = lambda r: report.write_all(args.out, r.with_pct(), r.copy_gbps, r.meta, list(r.notes), False)
    try:
        for name in args.suites:
            run.suite = name
            run.line(f"== {name} ({run.elapsed():.0f} s)")
            try:
                SUITES[name].run(run)
            except (KeyboardInterrupt, StopRun) as e:
                run.note(f"run stopped, the CUDA context is unusable after: {e}" if isinstance(e, StopRun) else
                         f"interrupted during suite {name}: the report holds what was measured before")
                break
            except Exception as e:        # one broken suite must not lose the others' results
                if not isinstance(e, PyewError):
                    traceback.print_exc(file=sys.stderr)
                run.note(f"suite {name} stopped: {type(e).__name__}: {e}")
                run.stopped.append(name)
            run.checkpoint()
    finally:
        with contextlib.suppress(PyewError):      # a poisoned context fails here too; the results are kept
            run.timer.close()
    run.meta["elapsed_s"] = round(run.elapsed(), 1)
    return run


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run = run_bench(args)
    except PyewError as e:
        print(f"python -m pyew bench: {e}", file=sys.stderr)
        return 1
    rows, notes = run.with_pct(), list(run.notes)
    paths = report.write_all(args.out, rows, run.copy_gbps, run.meta, notes, png=not args.no_png)
    print(report.render(rows, run.copy_gbps, run.meta, notes), end="", flush=True)
    # The summary comes last, so a log's tail holds the ceiling and the targets even when the table is long.
    print(f"\nsummary: {run.meta['device'].get('name')}, copy ceiling {run.copy_gbps or 0:.0f} GB/s, {len(rows)} "
          f"rows, {len(notes)} notes, {run.meta['elapsed_s']} s\n{report.targets_table(targets.evaluate(rows))}"
          f"\nwrote {', '.join(map(str, paths.values()))}", file=sys.stderr)
    return 1 if run.stopped and len(run.stopped) == len(args.suites) else 0      # every suite failed: not a run
