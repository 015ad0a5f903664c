"""Writing one run's results: markdown tables (stdout and bench.md), bench.json, bench.png.

The tables are GitHub markdown so they paste into benchmarks/RESULTS.md as they are. Ratios are
written as speedups (other's time / pyew's time, "1.30x" = pyew 1.3 times as fast) except where a
target is a time ratio (pyew time / torch time), which the column header then says. The sections
of the wall-clock suites (numpy, interop, firstcall, sustained) are in report_host.py.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from . import report_host, targets
from .fmt import f_gbps, f_ms, f_pct, f_size, f_x, table
from .fmt import ratio as _ratio

IMPL_ORDER = ("pyew", "naive", "torch", "cupy")
IMPL_LABEL = {"pyew": "pyew", "naive": "naive", "torch": "PyTorch", "cupy": "CuPy"}


# ---- sections ---------------------------------------------------------------------------------------

class _View:
    def __init__(self, rows, copy_gbps, order=()):
        self.rows = rows
        self.order = order
        self.copy = copy_gbps
        self.idx = {(r.get("suite"), r.get("name"), r.get("dtype"), r.get("n"), r.get("impl")): r for r in rows}
        self.map_sizes = sorted({r["n"] for r in rows if r.get("suite") == "map"})
        self.nmax = self.map_sizes[-1] if self.map_sizes else None

    def get(self, suite, name, dtype, n, impl):
        return self.idx.get((suite, name, dtype, n, impl))

    def val(self, key, field):
        r = self.get(*key)
        return None if r is None else r.get(field)

    def pct(self, gbps):
        return None if gbps is None or not self.copy else 100 * gbps / self.copy

    def map_cases(self):
        """(op, dtype) pairs measured, in the library's order (op by op) when `order` gives it, else
        in the order first measured."""
        seen = list(dict.fromkeys((r["name"], r["dtype"]) for r in self.rows if r.get("suite") == "map"))
        rank = {tuple(k): i for i, k in enumerate(self.order)}
        return sorted(seen, key=lambda k: rank.get(k, len(rank)))


def header(meta: dict, copy_gbps) -> str:
    dev = meta.get("device", {})
    lines = [f"# pyew benchmark: {dev.get('name', '?')}", ""]
    lines.append(f"- date: {meta.get('date', '?')}; command: `{meta.get('command', '?')}`")
    resident = dev.get("launch_threads_per_sm")
    resident = "" if resident in (None, dev.get("threads_per_sm")) else f" ({resident} resident threads per SM)"
    lines.append(f"- device: {dev.get('name', '?')}, {dev.get('sms', '?')} SMs{resident}, "
                 f"L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB, "
                 f"compute capability {'.'.join(map(str, dev.get('capability', []))) or '?'}")
    lines.append(f"- library: {meta.get('library', '?')}; peers: {meta.get('peers', {}) or 'none'}; "
                 f"seed {meta.get('seed')}")
    if copy_gbps:
        lines.append("- copy ceiling (device-to-device cudaMemcpyAsync, bytes read + written): "
                     f"**{copy_gbps:.0f} GB/s**")
    lines.append("- times are medians of CUDA-event-timed calls after warm-up (every kernel is called once on a "
                 "tiny array before timing starts); GB/s counts each input read once and each output written "
                 "once; \"Nx\" = the other's time / pyew's time")
    lines.append("- numpy, interop, small-call and first-call tables are host wall clock")
    return "\n".join(lines)


def map_headline(v: _View) -> str:
    if v.nmax is None:
        return ""
    n = v.nmax
    rows = []
    for op, dtype in v.map_cases():
        g = {i: v.val(("map", op, dtype, n, i), "gbps") for i in IMPL_ORDER}
        ms = {i: v.val(("map", op, dtype, n, i), "ms") for i in IMPL_ORDER}
        if g["pyew"] is None and not any(g.values()):
            continue
        tuning = v.val(("map", op, dtype, n, "pyew"), "tuning") or "—"
        rows.append([op, dtype, tuning, f_gbps(g["pyew"]), f_pct(v.pct(g["pyew"])), f_gbps(g["naive"]),
                     f_gbps(g["torch"]), f_pct(v.pct(g["torch"])), f_gbps(g["cupy"]), f_pct(v.pct(g["cupy"])),
                     f_x(_ratio(ms["naive"], ms["pyew"])), f_x(_ratio(ms["torch"], ms["pyew"])),
                     f_x(_ratio(ms["cupy"], ms["pyew"]))])
    head = ["op", "dtype", "tuning", "pyew GB/s", "pyew % copy", "naive GB/s", "torch GB/s", "torch % copy",
            "CuPy GB/s", "CuPy % copy", "vs naive", "vs torch", "vs CuPy"]
    return f"## Map ops at {f_size(n)} elements\n\n" + table(head, rows)


def map_sweep(v: _View, impl: str = "pyew") -> str:
    if len(v.map_sizes) < 2:
        return ""
    use_pct = bool(v.copy)
    rows = []
    for op, dtype in v.map_cases():
        cells = []
        for n in v.map_sizes:
            g = v.val(("map", op, dtype, n, impl), "gbps")
            cells.append(f"{v.pct(g):.0f}" if use_pct and g is not None else f_gbps(g))
        rows.append([op, dtype] + cells)
    what = "% of the copy ceiling" if use_pct else "GB/s"
    return (f"## {IMPL_LABEL[impl]} by size ({what})\n\n"
            + table(["op", "dtype"] + [f_size(n) for n in v.map_sizes], rows))


def template(v: _View) -> str:
    """OneFlow's comparison of its elementwise template: naive vs template, casts vs PyTorch."""
    if v.nmax is None:
        return ""
    n = v.nmax
    out = []
    rows = []
    for dtype in ("float32", "float16"):
        p, nv = v.get("map", "mul", dtype, n, "pyew"), v.get("map", "mul", dtype, n, "naive")
        if p or nv:
            pg, ng = (p or {}).get("gbps"), (nv or {}).get("gbps")
            rows.append([f"mul {dtype}", f_size(n), f"{f_gbps(ng)} ({f_pct(v.pct(ng))})",
                         f"{f_gbps(pg)} ({f_pct(v.pct(pg))})", f_x(_ratio((nv or {}).get("ms"), (p or {}).get("ms")))])
    if rows:
        out.append("## Naive vs template (OneFlow's comparison)\n\n" + table(
            ["kernel", "n", "naive GB/s (% copy)", "template GB/s (% copy)", "template speedup"], rows))
    rows = []
    for op, dtype, label in (("to_float16", "float32", "float32 -> float16"),
                             ("to_float32", "float16", "float16 -> float32")):
        k = ("map", op, dtype, n)
        p, t, c = (v.val(k + (i,), "ms") for i in ("pyew", "torch", "cupy"))
        if p is None and t is None:
            continue
        rows.append([label, f_size(n), f_ms(p), f_pct(v.pct(v.val(k + ("pyew",), "gbps"))), f_ms(t),
                     f_x(_ratio(p, t)), f_ms(c)])
    if rows:
        out.append("## Casts vs PyTorch (OneFlow's comparison)\n\n" + table(
            ["cast", "n", "pyew", "pyew % copy", "torch", "pyew time / torch time", "CuPy"], rows))
    return "\n\n".join(out)


def api_table(v: _View, suite: str, title: str) -> str:
    rows = []
    for r in v.rows:
        if r.get("suite") != suite or r.get("impl") != "pyew":
            continue
        t = v.get(suite, r["name"], r["dtype"], r["n"], "torch")
        shape = "x".join(map(str, r.get("shape") or [r["n"]]))
        rows.append([r["name"], r["dtype"], shape, f_ms(r["ms"]), f_gbps(r.get("gbps")),
                     f_ms(t and t["ms"]), f_gbps(t and t.get("gbps")), f_x(_ratio(r["ms"], t and t["ms"]))])
    if not rows:
        return ""
    return f"## {title}\n\n" + table(["pass", "dtype", "shape", "pyew", "pyew GB/s", "torch", "torch GB/s",
                                      "pyew time / torch time"], rows)


def dot(v: _View) -> str:
    rs = [r for r in v.rows if r.get("suite") == "dot"]
    if not rs:
        return ""
    torch_ms = next((r["ms"] for r in rs if r["impl"] == "torch"), None)
    atomic_ms = next((r["ms"] for r in rs if r["name"] == "half_atomic"), None)
    rows = [[r["name"] if r["impl"] == "pyew" else "torch.dot", r["dtype"], f_size(r["n"]), f_ms(r["ms"]),
             f_gbps(r.get("gbps")), f_x(_ratio(r["ms"], torch_ms)), f_x(_ratio(atomic_ms, r["ms"]))] for r in rs]
    return "## pyew.dot methods\n\n" + table(
        ["method", "dtype", "n", "time", "GB/s", "time / torch.dot", "speedup vs half_atomic"], rows)


def overhead(v: _View) -> str:
    rs = [r for r in v.rows if r.get("suite") == "overhead"]
    if not rs:
        return ""
    rows = [[f"`{r['name']}`", f"{r['us_per_call']:.2f}", f"{r['min_us_per_call']:.2f}"] for r in rs]
    return "## Host overhead per call (1-element float32 arrays, wall clock)\n\n" + table(
        ["call", "µs per call (median)", "µs per call (best)"], rows)


def targets_table(items) -> str:
    mark = {True: "met", False: "**missed**", None: "not measured"}
    rows = [[t["target"], t["measured"], mark[t["met"]]] for t in items]
    return "## pyew's performance targets\n\n" + table(["target", "measured", "status"], rows)


def render(rows, copy_gbps, meta, notes, target_items=None) -> str:
    v = _View(rows, copy_gbps, meta.get("map_order", ()))
    small_bytes = (meta.get("transfer_limits") or {}).get("small_bytes")
    parts = [header(meta, copy_gbps)]
    if target_items is None:
        target_items = targets.evaluate(rows, copy_gbps)
    parts += [targets_table(target_items), map_headline(v), report_host.sustained_section(rows), template(v),
              dot(v), api_table(v, "upsample", "upsample_nearest2d 2x vs PyTorch"),
              api_table(v, "relu_mask", "relu_mask_backward vs PyTorch threshold_backward"),
              report_host.layouts_section(rows, copy_gbps),
              overhead(v), report_host.interop_section(rows), report_host.firstcall_section(rows),
              report_host.small_section(rows), report_host.numpy_tables(rows),
              report_host.crossover_section(rows, small_bytes), report_host.transfer_section(rows),
              map_sweep(v, "pyew")]
    if notes:
        parts.append("## Notes\n\n" + "\n".join(f"- {n}" for n in notes))
    return "\n\n".join(p for p in parts if p) + "\n"


# ---- files ------------------------------------------------------------------------------------------

def _clean(o):
    """JSON-safe: NaN/inf become null, tuples lists."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(x) for k, x in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(x) for x in o]
    return o


def write_json(path: Path, rows, copy_gbps, meta, notes, target_items) -> None:
    doc = {"meta": meta, "copy_gbps": copy_gbps, "rows": rows, "targets": target_items, "notes": notes}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_clean(doc), indent=1, default=str) + "\n")
    tmp.replace(path)


def write_png(path: Path, rows, copy_gbps, title: str, order=()) -> str | None:
    """GB/s vs size, one panel per (op, dtype): pyew / naive / PyTorch / CuPy lines and the copy
    ceiling. Returns a note instead of raising when matplotlib is missing or there is nothing to plot."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"no PNG: matplotlib does not import ({type(e).__name__})"
    v = _View(rows, copy_gbps, order)
    if len(v.map_sizes) < 2:
        return "no PNG: the map sweep has fewer than two sizes"
    ops = list(dict.fromkeys(op for op, _ in v.map_cases()))
    dtypes = list(dict.fromkeys(d for _, d in v.map_cases()))
    height = 2.3 * len(ops) + 0.8
    fig, axes = plt.subplots(len(ops), len(dtypes), figsize=(3.2 * len(dtypes), height), squeeze=False)
    styles = {"pyew": ("C0", "-"), "naive": ("C7", ":"), "torch": ("C3", "--"), "cupy": ("C2", "-.")}
    exps = [math.log2(n) for n in v.map_sizes]
    ticks = exps if len(exps) <= 7 else exps[::2]
    cases = set(v.map_cases())
    for i, op in enumerate(ops):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            if (op, dtype) not in cases:
                ax.axis("off")
                continue
            for impl in IMPL_ORDER:
                pts = [(math.log2(n), v.val(("map", op, dtype, n, impl), "gbps")) for n in v.map_sizes]
                pts = [(x, y) for x, y in pts if y is not None]
                if pts:
                    color, ls = styles[impl]
                    ax.plot(*zip(*pts), color=color, linestyle=ls, marker=".", label=IMPL_LABEL[impl])
            if copy_gbps:
                ax.axhline(copy_gbps, color="k", linewidth=0.8, alpha=0.6, label="copy ceiling")
            ax.set_title(f"{op} {dtype}", fontsize=9)
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{x:g}" for x in ticks])
            ax.set_ylim(bottom=0)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.suptitle(title + " - GB/s (bytes read + written) vs log2(elements)", y=1 - 0.12 / height)
    fig.legend(list(handles.values()), list(handles.keys()), loc="upper center", ncol=len(handles),
               bbox_to_anchor=(0.5, 1 - 0.35 / height))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.75 / height))
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return None


def write_all(out_dir: Path, rows, copy_gbps, meta, notes, png: bool = True) -> dict:
    """bench.png (png=True), bench.json and bench.md under out_dir; returns {kind: path}, and
    "png_note" when no PNG could be drawn (that note is in the JSON and the table too)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    notes = list(notes)
    if png:
        try:
            why = write_png(out_dir / "bench.png", rows, copy_gbps,
                            f"pyew on {meta.get('device', {}).get('name', '?')}", meta.get("map_order", ()))
        except Exception as e:        # a plotting failure must not lose the JSON and the table
            why = f"no PNG: {type(e).__name__}: {e}"
        if why is None:
            paths["png"] = out_dir / "bench.png"
        else:
            paths["png_note"] = why
            notes.append(why)
    items = targets.evaluate(rows, copy_gbps)
    paths["json"] = out_dir / "bench.json"
    write_json(paths["json"], rows, copy_gbps, meta, notes, items)
    paths["table"] = out_dir / "bench.md"
    paths["table"].write_text(render(rows, copy_gbps, meta, notes, items))
    return paths
