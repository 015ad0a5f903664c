"""One run's results: markdown (stdout and bench.md: GitHub tables that paste into benchmarks/RESULTS.md),
bench.json and bench.png. "vs X" = X's time / pyew's time, so "1.30x" is pyew 1.3 times as fast."""
from __future__ import annotations

import json
import math
from pathlib import Path

from . import targets
from .harness import Table, f_ratio, f_size

DASH = "—"
LABEL = {"torch": "PyTorch", "cupy": "CuPy"}


def f_ms(v) -> str:
    return f"{v * 1e3:.1f} µs" if v < 0.1 else f"{v:.3f} ms" if v < 100 else f"{v:.0f} ms"


# column labels and formats where a field's own name and the default format (by magnitude) won't do
LABELS = {"gbps": "GB/s", "burst_gbps": "burst GB/s", "pct_copy": "% copy", "pct_aligned": "% of aligned", "ms": "time",
          "us_per_call": "µs", "name": "op", "floor_ratio": "pyew / floor", "extra_us": "extra µs per foreign operand"}
FORMATS = {"ms": f_ms, "floor_ms": f_ms, "pct_copy": "{:.1f}%".format, "pct_aligned": "{:.1f}%".format, "n": f_size,
           "floor_ratio": "{:.2f}x".format, "extra_us": "{:+.2f}".format, "shape": lambda v: "x".join(map(str, v))}


def label(field) -> str:
    return LABELS.get(field, field.replace("_us", " µs").replace("_ms", " ms").replace("_", " "))


def cell(field, v) -> str:
    default = ("{:.0f}" if abs(v) >= 100 else "{:.2f}").format if isinstance(v, float) else str
    return DASH if v is None else FORMATS.get(field, default)(v)


def table(head, body) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] +
                     ["| " + " | ".join(r) + " |" for r in body])


def render_table(t: Table, rows, order=()) -> str:
    rs = [r for r in rows if r.get("suite") == t.suite and (not t.impls or r.get("impl") in t.impls)
          and (t.where is None or t.where(r))]
    if t.largest and rs:
        rs = [r for r in rs if r["n"] == max(x["n"] for x in rs)]
    key = lambda r: tuple(tuple(v) if isinstance(v, list) else v for v in map(r.get, t.keys))   # noqa: E731
    at = {(key(r), r.get(t.across)): r for r in rs}                           # (line, column) -> row
    rank = {tuple(k): i for i, k in enumerate(order)}                        # map ops in the library's order
    lines = [k for k in sorted(dict.fromkeys(k for k, _ in at), key=lambda k: rank.get(k[:2], len(rank)))
             if not t.needs or (k, t.needs) in at]
    by_impl, name = t.across == "impl", (lambda c: LABEL.get(c, c)) if t.across == "impl" else f_size
    cols = list(t.impls or dict.fromkeys(r["impl"] for r in rs)) if by_impl else sorted({c for _, c in at})
    cols = [c for c in cols if any((k, c) in at for k in lines)]
    others = [c for c in cols if c != t.base] if by_impl else []
    head = [label(k) for k in t.keys] + [f"{name(c)} {label(v)}" if len(t.value) > 1 or by_impl else name(c)
                                         for c in cols for v in t.value]
    head += [f"vs {name(c)}" for c in others] + [label(f) for f in t.fields]
    body = []
    for k in lines:
        get = lambda c, f, k=k: at.get((k, c), {}).get(f)                     # noqa: E731
        row = [cell(f, v) for f, v in zip(t.keys, k)] + [cell(v, get(c, v)) for c in cols for v in t.value]
        row += [f_ratio(get(c, t.ratio) / get(t.base, t.ratio)) if get(c, t.ratio) and get(t.base, t.ratio)
                else DASH for c in others]
        body.append(row + [cell(f, get(t.base, f)) for f in t.fields])
    return "" if not lines else f"## {t.title}\n\n" + (f"{t.text}\n\n" if t.text else "") + table(head, body)


def header(meta: dict, copy_gbps) -> str:
    dev, cc = meta.get("device", {}), ".".join(map(str, meta.get("device", {}).get("capability") or []))
    return "\n".join([
        f"# pyew benchmark: {dev.get('name')}", "", f"- date: {meta.get('date')}; command: `{meta.get('command')}`",
        f"- device: {dev.get('name')}, {dev.get('sms')} SMs, L2 {(dev.get('l2_bytes') or 0) >> 20} MiB, compute "
        f"capability {cc}", f"- library: {meta.get('library')}; peers: {meta.get('peers') or 'none'}; seed "
        f"{meta.get('seed')}", *([f"- copy ceiling (device-to-device cudaMemcpyAsync, read + written): **"
                                  f"{copy_gbps:.0f} GB/s**"] if copy_gbps else []),
        "- GPU times are medians of CUDA-event-timed calls after warm-up; GB/s counts each input read once and each "
        "output written once; numpy, small-call, overhead, interop and first-call figures are host time"])


def targets_table(items) -> str:
    mark = {True: "met", False: "**missed**", None: "not measured"}
    return "## pyew's performance targets\n\n" + table(["target", "measured", "status"],
                                                       [[t["target"], t["measured"], mark[t["met"]]] for t in items])


def render(rows, copy_gbps, meta, notes, target_items=None) -> str:
    from .suites import SUITES
    parts = [header(meta, copy_gbps), targets_table(target_items or targets.evaluate(rows))]
    parts += [render_table(t, rows, meta.get("map_order", ())) for suite in SUITES.values() for t in suite.report]
    parts.append("## Notes\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")
    return "\n\n".join(p for p in parts if p) + "\n"


def _clean(o):
    """JSON-safe: NaN/inf become null."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(x) for k, x in o.items()}
    return [_clean(x) for x in o] if isinstance(o, (list, tuple)) else o


def write_png(path: Path, rows, copy_gbps, title: str) -> str | None:
    """GB/s against size, a panel per (op, dtype), a line per library; else why not (no matplotlib, one size)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"no PNG: matplotlib does not import ({type(e).__name__})"
    rs = [r for r in rows if r.get("suite") == "map" and r.get("gbps")]
    if len({r["n"] for r in rs}) < 2:
        return "no PNG: the map sweep has fewer than two sizes"
    cases = list(dict.fromkeys((r["name"], r["dtype"]) for r in rs))
    fig, axes = plt.subplots(-(-len(cases) // 4), 4, figsize=(13, 2.4 * -(-len(cases) // 4) + 1), squeeze=False)
    for ax, case in zip(axes.flat, cases):
        for impl in dict.fromkeys(r["impl"] for r in rs if (r["name"], r["dtype"]) == case):
            pts = sorted((math.log2(r["n"]), r["gbps"]) for r in rs if (r["name"], r["dtype"], r["impl"]) ==
                         (*case, impl))
            ax.plot(*zip(*pts), marker=".", label=LABEL.get(impl, impl))
        ax.axhline(copy_gbps or 0, color="k", linewidth=0.8, label="copy ceiling")
        ax.set_title(" ".join(case), fontsize=9)
        ax.legend(fontsize=6)
    fig.suptitle(f"{title}: GB/s (bytes read + written) against log2(elements)")
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)


def write_all(out_dir: Path, rows, copy_gbps, meta, notes: list, png: bool = True) -> dict:
    """bench.png (png=True), bench.json and bench.md under out_dir: {kind: path}; why no PNG, in `notes`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    if png:
        try:
            why = write_png(out_dir / "bench.png", rows, copy_gbps, f"pyew on {meta.get('device', {}).get('name')}")
        except Exception as e:        # a plotting failure must not lose the JSON and the table
            why = f"no PNG: {type(e).__name__}: {e}"
        if why:
            notes.append(why)
        else:
            paths["png"] = out_dir / "bench.png"
    items, tmp = targets.evaluate(rows), out_dir / "bench.tmp"
    paths["json"], paths["table"] = out_dir / "bench.json", out_dir / "bench.md"
    doc = {"meta": meta, "copy_gbps": copy_gbps, "rows": rows, "targets": items, "notes": notes}
    tmp.write_text(json.dumps(_clean(doc), indent=1, default=str) + "\n")
    tmp.replace(paths["json"])
    paths["table"].write_text(render(rows, copy_gbps, meta, notes, items))
    return paths
