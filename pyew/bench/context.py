"""The state of one benchmark run: options, results, notes, progress line and time limit.

Rows are plain dicts (they go to JSON as they are). A row is identified by (suite, name, dtype, n,
impl): a measurement another suite already made is reused, not repeated (the naive-vs-template and
cast rows of the template suite are map rows, which the map sweep reads at the largest size).
"""
from __future__ import annotations

import sys
import time

from . import traffic

ROW_KEYS = ("suite", "name", "dtype", "n", "impl")
# CUDA errors that poison the context: every later call would fail too, so the run stops there
# and writes what it has instead of noting one failure per remaining measurement.
STICKY = {"cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
          "cudaErrorMisalignedAddress", "cudaErrorHardwareStackError", "cudaErrorInvalidAddressSpace",
          "cudaErrorInvalidPc", "cudaErrorAssert", "cudaErrorECCUncorrectable", "cudaErrorLaunchTimeout"}


class StopRun(RuntimeError):
    """The GPU context is unusable; the run ends and the report is written."""


def row_key(row: dict) -> tuple:
    return tuple(row.get(k) for k in ROW_KEYS)


class Progress:
    """One line on stderr: rewritten in place on a terminal; on a pipe or log (a remote GPU
    machine's output), a line at most every `every` seconds, so the final table stays in the log's
    tail."""

    def __init__(self, stream=None, every: float = 10.0):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every
        self._last = float("-inf")
        self._width = 0
        self.t0 = time.monotonic()

    def update(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        line = f"[{now - self.t0:6.1f}s] {text}"
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
            self.stream.flush()
        elif force or now - self._last >= self.every:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last = now

    def line(self, text: str) -> None:
        """A line that stays (notes, suite boundaries)."""
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0


class Run:
    """Results and bookkeeping of one `python -m pyew bench`."""

    def __init__(self, args, progress: Progress | None = None, clock=time.monotonic):
        self.args = args
        self.rows: list[dict] = []
        self.notes: list[str] = []
        self.meta: dict = {}
        self.copy_gbps: float | None = None
        self.progress = progress or Progress()
        self._index: dict[tuple, dict] = {}
        self._clock = clock
        self.t0 = clock()
        self.max_time = getattr(args, "max_time", None)
        self.skipped_for_time = 0
        self.suite = ""
        # set by cli.run once the GPU is open
        self.lib = self.dev = self.timer = None
        self.peers: dict = {}
        self.rng = None
        self.seed = None
        self.on_checkpoint = None      # cli sets it: writes the partial report (JSON and table)
        self.l2_bytes = 50 << 20
        self.warmed: set = set()       # (suite, key) of what a suite's warm-up already called

    # -- notes and progress ----------------------------------------------------------------------
    def note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)
            self.progress.line(f"note: {msg}")

    def checkpoint(self) -> None:
        """Save what is measured so far, so a run killed from outside still leaves its results."""
        if self.on_checkpoint is not None:
            self.on_checkpoint(self)

    def failed(self, what: str, exc: BaseException) -> None:
        """Note a failed measurement; stop the run if the CUDA context is poisoned."""
        first = str(exc).splitlines()[0] if str(exc) else ""
        self.note(f"{what} failed: {type(exc).__name__}: {first}")
        text = f"{getattr(exc, 'name', '')} {exc}"
        if any(code in text for code in STICKY):
            raise StopRun(f"{what}: {first}") from exc

    def status(self, text: str, force: bool = False) -> None:
        self.progress.update(f"{self.suite}: {text} ({len(self.rows)} measured)", force)

    # -- time limit ------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self._clock() - self.t0

    def out_of_time(self, reserve: float = 0.0, why: str = "") -> bool:
        """True once the run is past --max-time (less `reserve` seconds kept for later suites):
        what is left is skipped, with one note, so the report is still written within the time
        the run was given."""
        if self.max_time is None:
            return False
        limit = self.max_time - reserve
        if self.elapsed() < limit:
            return False
        self.skipped_for_time += 1
        if reserve > 0 and self.elapsed() < self.max_time:
            self.note(f"{self.suite}: the remaining measurements were skipped to leave {reserve:.0f} s of "
                      f"--max-time {self.max_time:.0f} s for {why or 'later suites'}")
        else:
            self.note(f"past --max-time {self.max_time:.0f} s: the remaining measurements were skipped")
        return True

    # -- rows ------------------------------------------------------------------------------------
    def has(self, suite, name, dtype, n, impl) -> bool:
        return (suite, name, dtype, n, impl) in self._index

    def get(self, suite, name, dtype, n, impl) -> dict | None:
        return self._index.get((suite, name, dtype, n, impl))

    def add(self, **row) -> dict:
        """Record one measurement; GB/s from its bytes and median ms."""
        row.setdefault("dtype", None)
        row.setdefault("n", None)
        if "bytes" in row and "ms" in row:
            row["gbps"] = traffic.gbps(row["bytes"], row["ms"])
        self.rows.append(row)
        self._index[row_key(row)] = row
        return row

    def select(self, **match) -> list[dict]:
        return [r for r in self.rows if all(r.get(k) == v for k, v in match.items())]

    def with_pct(self) -> list[dict]:
        """Rows with % of the copy ceiling measured in this run (None without a copy row)."""
        out = []
        for r in self.rows:
            r = dict(r)
            if r.get("gbps") is not None and r.get("suite") != "copy":
                r["pct_copy"] = traffic.pct(r["gbps"], self.copy_gbps)
            out.append(r)
        return out
