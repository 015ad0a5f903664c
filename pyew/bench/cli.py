"""`python -m pyew bench`: options, the run, and its output (progress on stderr, the table on stdout,
bench.json / bench.md / bench.png under --out)."""
from __future__ import annotations

import argparse
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
from ..errors import PyewError
from . import peers as peers_mod
from . import report, targets
from .context import Progress, Run, StopRun
from .map_suites import map_cases
from .suites import SUITES, describe

DEFAULT_SIZES = "16:28"
QUICK_SIZES = "16,20,24,28"
DEFAULT_REPEAT = 25
QUICK_REPEAT = 10
DEFAULT_MAX_TIME = 450.0
DEFAULT_PEERS = "torch,cupy,numpy,numexpr"


def parse_sizes(text: str) -> list[int]:
    """Element counts from exponents: "16:28" (every exponent 16..28), "16:28:4" (step 4),
    "16-20", "2^20", "20,24,28"; a bare number above 40 is an element count, not an exponent."""
    out: list[int] = []
    for tok in (t.strip() for t in text.split(",")):
        if not tok:
            continue
        try:
            sep = ":" if ":" in tok else "-" if "-" in tok[1:] else None
            if sep:
                parts = [int(p) for p in tok.split(sep)]
                if len(parts) not in (2, 3) or parts[0] > parts[1]:
                    raise ValueError
                step = parts[2] if len(parts) == 3 else 1
                if step < 1:
                    raise ValueError
                out += [1 << e for e in range(parts[0], parts[1] + 1, step)]
            elif tok.startswith(("2^", "2**")):
                out.append(1 << int(tok.split("^")[-1].split("**")[-1]))
            else:
                v = int(tok)
                out.append(1 << v if v <= 40 else v)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"bad size {tok!r}: use exponents like 16:28, 16:28:2, 20,24,28 or 2^20, or an element count") from None
    if not out or any(n < 1 for n in out):
        raise argparse.ArgumentTypeError(f"no valid sizes in {text!r}")
    if max(out) > 1 << 34:
        raise argparse.ArgumentTypeError(f"size {max(out)} is too large for one GPU buffer set")
    return sorted(set(out))


def parse_names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_dtypes(text: str) -> list[str]:
    """dtype names (float16), tokens (f16) or groups (float, half, int)."""
    out: list[str] = []
    for tok in parse_names(text):
        names = dt.GROUPS.get(tok) or ((dt.BY_TOKEN[tok].name,) if tok in dt.BY_TOKEN else (tok,))
        for n in names:
            if n not in dt.BY_NAME:
                raise argparse.ArgumentTypeError(
                    f"unknown dtype {tok!r}: known {', '.join(dt.BY_NAME)}, tokens {', '.join(dt.BY_TOKEN)}, "
                    f"groups {', '.join(dt.GROUPS)}")
            if n not in out:
                out.append(n)
    return out


def parse_suites(text: str) -> list[str]:
    names = parse_names(text)
    bad = [n for n in names if n not in SUITES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown suite(s) {', '.join(bad)}; known: {', '.join(SUITES)}")
    return [n for n in SUITES if n in names]       # always in run order


def parse_size(text: str) -> int:
    """One size, as parse_sizes reads it."""
    sizes = parse_sizes(text)
    if len(sizes) != 1:
        raise argparse.ArgumentTypeError(f"give one size, not {text!r}")
    return sizes[0]


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pyew bench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmark the loaded libew (PYEW_LIB or build/libew.so) on the current GPU: the copy "
                    "ceiling, every map op x dtype x size for pyew, the naive kernel, PyTorch and CuPy, "
                    "OneFlow's comparison (naive vs template, casts vs PyTorch), the special kernels, host "
                    "costs per call, and numpy in / numpy out against numpy, numexpr, PyTorch and CuPy; then "
                    "pyew's performance targets. Progress goes to stderr, the table to stdout, and bench.json, "
                    "bench.md and bench.png to --out.",
        epilog="suites (run in this order):\n" + describe() + "\n\nexamples:\n"
               "  python -m pyew bench --out bench-out --sizes 16:28:2\n"
               "  python -m pyew bench --quick --suites copy,map --ops gelu,add --dtypes f16,bf16\n"
               "  python -m pyew bench --suites numpy --ops sigmoid,add --numpy-sizes 24,26\n"
               "  python -m pyew bench --suites copy,map --sizes 28 --sustained --sustained-seconds 2\n"
               "  python -m pyew bench --sizes 20:28:2 --repeat 50 --peers torch")
    ap.add_argument("--ops", type=parse_names, default=None, help="map ops to measure, comma-separated (default: all)")
    ap.add_argument("--dtypes", type=parse_dtypes, default=None,
                    help="input dtypes: names, tokens or groups, e.g. float16,bf16 or half (default: all)")
    ap.add_argument("--sizes", type=parse_sizes, default=None,
                    help=f"element counts as exponents of 2 (default {DEFAULT_SIZES}; --quick {QUICK_SIZES}); "
                         "for the numpy suite a range that its sizes must lie in")
    ap.add_argument("--suites", type=parse_suites, default=list(SUITES),
                    help=f"comma-separated subset of: {', '.join(SUITES)} (default: all)")
    ap.add_argument("--repeat", type=int, default=None,
                    help=f"timed calls per measurement, median reported (default {DEFAULT_REPEAT}; "
                         f"--quick {QUICK_REPEAT})")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats: a smoke run of every suite")
    ap.add_argument("--out", type=Path, default=Path("bench-out"),
                    help="folder for bench.json, bench.md and bench.png (default: bench-out)")
    ap.add_argument("--peers", type=parse_names, default=parse_names(DEFAULT_PEERS),
                    help=f"libraries to compare with: {DEFAULT_PEERS} (default; numpy and numexpr only in the "
                         "numpy suite), or none")
    ap.add_argument("--max-time", type=float, default=DEFAULT_MAX_TIME,
                    help="seconds after which remaining measurements are skipped and the report is written "
                         f"(default {DEFAULT_MAX_TIME:.0f})")
    ap.add_argument("--seed", type=int, default=None, help="random seed for the inputs (default: fresh each run)")
    ap.add_argument("--no-png", action="store_true", help="skip the plot")
    g = ap.add_argument_group("numpy suite")
    g.add_argument("--numpy-sizes", type=parse_sizes, default=None,
                   help="sizes of the numpy suite's main table (default 20,24,26,28 within the range of --sizes; "
                        "--quick 20,24)")
    g.add_argument("--numpy-repeat", type=int, default=None,
                   help="timed calls per point, median reported; fewer (at least 3) where a call takes long "
                        "(default 5; --quick 3)")
    g.add_argument("--cpu-peers-max", type=parse_size, default=None,
                   help="largest size the CPU peers (numpy, numexpr) run at (default 26, i.e. 2^26)")
    g = ap.add_argument_group("map suite")
    g.add_argument("--sustained", action="store_true",
                   help="also run pyew and PyTorch alternating (A B A B) at the largest size, each segment "
                        "--sustained-seconds of back-to-back calls: GB/s under a sustained load (power-capped "
                        "clocks) beside the burst figures; adds about 4 x that many seconds per (op, dtype)")
    g.add_argument("--sustained-seconds", type=positive_float, default=1.0,
                   help="seconds of back-to-back calls per segment of --sustained (default 1)")
    return ap


def parse_args(argv) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.sizes is None:
        args.sizes = parse_sizes(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.repeat is None:
        args.repeat = QUICK_REPEAT if args.quick else DEFAULT_REPEAT
    if args.repeat < 1:
        build_parser().error("--repeat must be at least 1")
    if args.numpy_repeat is not None and args.numpy_repeat < 1:
        build_parser().error("--numpy-repeat must be at least 1")
    if args.peers == ["none"]:
        args.peers = []
    args.sizes_given = any(a == "--sizes" or a.startswith("--sizes=") for a in argv)
    args.argv = list(argv)
    return args


# ---- the run ---------------------------------------------------------------------------------------

def _git_rev() -> str | None:
    try:
        root = Path(__file__).resolve().parents[2]
        r = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"],
                           capture_output=True, text=True, timeout=5)
        return r.stdout.strip() or None
    except Exception:
        return None


def _meta(run: Run, info: dict) -> dict:
    from ..transfer import transfer_limits
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m pyew bench" + ("" if not run.args.argv else " " + shlex.join(run.args.argv)),
        "device": {k: info.get(k) for k in ("name", "capability", "sms", "threads_per_sm", "launch_threads_per_sm",
                                             "l2_bytes", "total_memory")},
        "library": str(run.lib.path), "git": _git_rev(), "seed": run.seed,
        "python": platform.python_version(), "numpy": np.__version__,
        "peers": {name: getattr(p.mod, "__version__", "?") for name, p in run.peers.items()},
        "cpu_count": os.cpu_count(),
        "numexpr_threads": getattr(run.peers.get("numexpr"), "threads", None),
        "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
        "transfer_limits": transfer_limits(),
        "sizes": run.args.sizes, "repeat": run.args.repeat, "suites": run.args.suites,
        "sustained_seconds": run.args.sustained_seconds if run.args.sustained else None,
        # the tables list map ops in the library's order, whatever order they were measured in
        "map_order": [[c.op, c.dtype] for c in map_cases(run.lib.manifest)],
    }


def check_ops(args, manifest) -> str | None:
    """An error message when --ops names something that is not a map op of the library."""
    if not args.ops:
        return None
    known = [o.name for o in manifest.ops if o.kind == "map"]
    bad = [o for o in args.ops if o not in known]
    return f"unknown map op(s) {', '.join(bad)}; the library has: {', '.join(known)}" if bad else None


def run_bench(args, progress: Progress | None = None) -> Run:
    from .. import library
    from .. import runtime as rt
    from .timing import GpuTimer

    run = Run(args, progress)
    run.lib = library.get()
    err = check_ops(args, run.lib.manifest)
    if err:
        raise SystemExit(f"python -m pyew bench: {err}")
    run.dev = rt.device()
    info = rt.device_info()
    run.l2_bytes = info["l2_bytes"] or (50 << 20)
    run.seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % 2**32)
    run.rng = np.random.default_rng(run.seed)
    run.progress.line(f"pyew bench on {info['name']} ({info['sms']} SMs, L2 {info['l2_bytes'] >> 20} MiB), "
                      f"library {run.lib.path}")
    run.suite = "setup"
    run.status("importing peers", force=True)
    run.peers = peers_mod.load(args.peers, run.note)
    run.timer = GpuTimer(max_reps=max(args.repeat, 10))
    run.meta = _meta(run, info)
    if args.out:                      # partial results survive a run killed from outside
        run.on_checkpoint = lambda r: report.write_all(args.out, r.with_pct(), r.copy_gbps, r.meta, r.notes,
                                                       png=False)
    if "copy" not in args.suites:
        run.note("copy suite not run: no % of copy ceiling")
    try:
        for name in args.suites:
            run.suite = name
            run.progress.line(f"== {name} ({run.elapsed():.0f} s)")
            try:
                SUITES[name][0](run)
            except KeyboardInterrupt:
                run.note(f"interrupted during suite {name}: the report holds what was measured before")
                break
            except StopRun as e:
                run.note(f"run stopped, the CUDA context is unusable after: {e}")
                break
            except PyewError as e:
                run.note(f"suite {name} stopped: {e}")
            except Exception as e:        # one broken suite must not lose the others' results
                traceback.print_exc(file=sys.stderr)
                run.note(f"suite {name} stopped: {type(e).__name__}: {e}")
            run.checkpoint()
    finally:
        try:
            run.timer.close()
        except PyewError:             # a poisoned context fails here too; the results are kept
            pass
        run.progress.done()
    run.meta["elapsed_s"] = round(run.elapsed(), 1)
    return run


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run = run_bench(args)
    except PyewError as e:
        print(f"python -m pyew bench: {e}", file=sys.stderr)
        return 1
    rows = run.with_pct()
    notes = list(run.notes)
    written = ""
    if args.out:
        paths = report.write_all(args.out, rows, run.copy_gbps, run.meta, notes, png=not args.no_png)
        if "png_note" in paths:
            notes.append(paths["png_note"])
        written = ", ".join(str(p) for k, p in paths.items() if k != "png_note")
    sys.stdout.write(report.render(rows, run.copy_gbps, run.meta, notes))
    sys.stdout.flush()
    # The summary comes last, so a log's tail (where only the end of the output is kept) holds the
    # ceiling and the targets even when the full table is long.
    ceiling = f"{run.copy_gbps:.0f} GB/s" if run.copy_gbps else "not measured"
    print(f"\nsummary: {run.meta.get('device', {}).get('name', '?')}, copy ceiling {ceiling}, "
          f"{len(rows)} rows, {len(notes)} notes, {run.meta['elapsed_s']} s", file=sys.stderr)
    print(report.targets_table(targets.evaluate(rows, run.copy_gbps)), file=sys.stderr)
    if written:
        print(f"wrote {written}", file=sys.stderr)
    return 0
