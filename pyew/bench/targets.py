"""pyew's performance targets, read back from one run's rows: figure measured, target, met or not.

Each check is a function of the run's row lookup; it returns (measured text, met) with met None when
the rows it needs were not measured (a suite not chosen, a peer missing).
"""
from __future__ import annotations

import math

from .report_host import foreign_extra

UNARY_PCT = 97.0
HALF = ("float32", "float16", "bfloat16")


class Rows:
    """Lookup over result rows (dicts with suite/name/dtype/n/impl)."""

    def __init__(self, rows, copy_gbps):
        self.rows = rows
        self.copy_gbps = copy_gbps
        self.by_key = {(r.get("suite"), r.get("name"), r.get("dtype"), r.get("n"), r.get("impl")): r for r in rows}
        sizes = [r["n"] for r in rows if r.get("suite") == "map"]
        self.nmax = max(sizes) if sizes else None

    def map(self, op, dtype, impl, n=None):
        return self.by_key.get(("map", op, dtype, n or self.nmax, impl))

    def map_rows(self, impl, n=None):
        return [r for r in self.rows if r.get("suite") == "map" and r["impl"] == impl and r["n"] == (n or self.nmax)]

    def ms(self, *key):
        r = self.by_key.get(key)
        return r["ms"] if r else None


def _ratio_over_ops(rows: Rows, select, peer: str):
    """[(peer_ms / pyew_ms, op dtype label)] over the pyew map rows `select` keeps."""
    out = []
    for r in rows.map_rows("pyew"):
        if not select(r):
            continue
        p = rows.map(r["name"], r["dtype"], peer)
        if p:
            out.append((p["ms"] / r["ms"], f"{r['name']} {r['dtype']}"))
    return out


def _min_text(pairs, unit="x"):
    worst = min(pairs)
    geo = math.exp(sum(math.log(v) for v, _ in pairs) / len(pairs))
    return f"min {worst[0]:.2f}{unit} ({worst[1]}), geomean {geo:.2f}{unit} over {len(pairs)}"


def unary_pct(rows: Rows):
    if not rows.copy_gbps:
        return "no copy ceiling measured", None
    vals = [(100 * r["gbps"] / rows.copy_gbps, f"{r['name']} {r['dtype']}") for r in rows.map_rows("pyew")
            if r["dtype"] in HALF and r.get("arity") == 1 and r.get("out_dtype") == r["dtype"]]
    if not vals:
        return "not measured", None
    worst = min(vals)
    below = sum(v < UNARY_PCT for v, _ in vals)
    return f"min {worst[0]:.1f}% ({worst[1]}); {below} of {len(vals)} below", worst[0] >= UNARY_PCT


def binary_vs_torch(rows: Rows):
    pairs = _ratio_over_ops(rows, lambda r: r.get("arity") == 2, "torch")
    if not pairs:
        return "not measured", None
    return "torch time / pyew time: " + _min_text(pairs), min(pairs)[0] >= 1.0


def cast_f16_f32(rows: Rows):
    p, t = rows.map("to_float32", "float16", "pyew"), rows.map("to_float32", "float16", "torch")
    if not (p and t):
        return "not measured", None
    r = p["ms"] / t["ms"]
    return f"{r:.2f}x torch's time", r <= 0.55


def vs_cupy(dtype: str, bar: float):
    def check(rows: Rows):
        pairs = _ratio_over_ops(rows, lambda r: r["dtype"] == dtype, "cupy")
        if not pairs:
            return "not measured", None
        return "CuPy time / pyew time: " + _min_text(pairs), min(pairs)[0] >= bar
    return check


def template_vs_naive(rows: Rows):
    p, nv = rows.map("mul", "float16", "pyew"), rows.map("mul", "float16", "naive")
    if not (p and nv):
        return "not measured", None
    r = nv["ms"] / p["ms"]
    return f"mul float16: {r:.2f}x", r >= 2.0


def _api_ratio(suite, name, bar):
    def check(rows: Rows):
        worst = None
        for r in rows.rows:
            if r.get("suite") == suite and r.get("name") == name and r.get("impl") == "pyew":
                t = rows.by_key.get((suite, name, r["dtype"], r["n"], "torch"))
                if t:
                    v = (r["ms"] / t["ms"], f"{r['dtype']} {'x'.join(map(str, r.get('shape') or [r['n']]))}")
                    worst = v if worst is None or v > worst else worst
        if worst is None:
            return "not measured", None
        return f"worst {worst[0]:.2f}x torch's time ({worst[1]})", worst[0] <= bar
    return check


def dot_vs_torch(rows: Rows):
    p = next((r for r in rows.rows if r.get("suite") == "dot" and r["name"] == "fast"), None)
    t = next((r for r in rows.rows if r.get("suite") == "dot" and r["impl"] == "torch"), None)
    if not (p and t):
        return "not measured", None
    r = p["ms"] / t["ms"]
    return f"{r:.2f}x torch.dot's time", r <= 1.1


def dot_fast_vs_atomic(rows: Rows):
    p = next((r for r in rows.rows if r.get("suite") == "dot" and r["name"] == "fast"), None)
    a = next((r for r in rows.rows if r.get("suite") == "dot" and r["name"] == "half_atomic"), None)
    if not (p and a):
        return "not measured", None
    r = a["ms"] / p["ms"]
    return f"{r:.2f}x", r >= 3.0


def host_overhead(rows: Rows):
    r = next((r for r in rows.rows if r.get("suite") == "overhead" and r["name"] == "pyew.add(x, y)"), None)
    if not r:
        return "not measured", None
    t = next((x for x in rows.rows if x.get("suite") == "overhead" and x["impl"] == "torch"), None)
    extra = f" (torch {t['us_per_call']:.1f} µs)" if t else ""
    return f"{r['us_per_call']:.2f} µs per call{extra}", r["us_per_call"] <= 4.0


NUMPY_N = 1 << 26


def numpy_time(op: str, bar_ms: float):
    def check(rows: Rows):
        r = rows.by_key.get(("numpy", op, "float32", NUMPY_N, "pyew"))
        if not r:
            return "not measured", None
        floor = f" (transfer floor {r['floor_ms']:.1f} ms)" if r.get("floor_ms") else ""
        return f"{r['ms']:.1f} ms{floor}", r["ms"] <= bar_ms
    return check


def unary_vs_numexpr(rows: Rows):
    pairs, without = [], []
    for r in rows.rows:
        if (r.get("suite") != "numpy" or r.get("impl") != "pyew" or r.get("dtype") != "float32"
                or r.get("n") != NUMPY_N or r.get("arity") != 1 or r.get("default") is False):
            continue
        ne = rows.by_key.get(("numpy", r["name"], "float32", NUMPY_N, "numexpr"))
        if ne:
            pairs.append((ne["ms"] / r["ms"], r["name"]))
        else:
            without.append(r["name"])
    if not pairs:
        return "not measured", None
    text = "numexpr time / pyew time: " + _min_text(pairs)
    if without:
        text += f"; no numexpr row for {', '.join(without)}"
    return text, min(pairs)[0] > 1.0


def small_calls(rows: Rows):
    rs = [r for r in rows.rows if r.get("suite") == "small" and r.get("impl") == "pyew"]
    if not rs:
        return "not measured", None
    worst = max(rs, key=lambda r: r["us_per_call"])
    return (f"worst {worst['us_per_call']:.1f} µs ({worst['name']}); "
            + ", ".join(f"{r['name']} {r['us_per_call']:.1f} µs" for r in rs)), worst["us_per_call"] <= 50.0


def foreign_operand(rows: Rows):
    extra = foreign_extra(rows.rows)
    if not extra:
        return "not measured", None
    worst = max(extra)
    return (f"worst {worst[0]:+.2f} µs per foreign operand ({worst[1]}); "
            + ", ".join(f"{label} {v:+.2f}" for v, label in extra)), worst[0] <= 2.0


def add_vs_torch(rows: Rows):
    p = next((r for r in rows.rows if r.get("suite") == "overhead" and r["name"] == "pyew.add(x, y)"), None)
    t = next((r for r in rows.rows if r.get("suite") == "overhead" and r.get("impl") == "torch"), None)
    if not (p and t):
        return "not measured", None
    return (f"pyew.add {p['us_per_call']:.2f} µs, torch.add {t['us_per_call']:.2f} µs per call",
            p["us_per_call"] <= t["us_per_call"])


def _layouts(which: int):
    def check(rows: Rows):
        from .report_host import layout_targets
        return layout_targets(rows.rows, rows.copy_gbps)[which]
    return check


CHECKS = (
    ("unary ops f32/f16/bf16 at the largest size: >= 97% of the copy ceiling", unary_pct),
    ("binary ops: at least PyTorch's speed", binary_vs_torch),
    ("cast f16->f32: <= 0.55x PyTorch's time", cast_f16_f32),
    (">= 1.7x CuPy on float32", vs_cupy("float32", 1.7)),
    (">= 3.4x CuPy on float16", vs_cupy("float16", 3.4)),
    ("template >= 2x naive on float16", template_vs_naive),
    ("upsample 2x forward <= 0.5x torch", _api_ratio("upsample", "forward", 0.5)),
    ("upsample 2x backward <= 0.75x torch", _api_ratio("upsample", "backward", 0.75)),
    ("relu-mask backward <= 0.72x torch threshold_backward", _api_ratio("relu_mask", "backward", 0.72)),
    ("pyew.dot f16 (fast) <= 1.1x torch.dot", dot_vs_torch),
    ("dot: fast >= 3x half_atomic", dot_fast_vs_atomic),
    ("host overhead per call <= 4 µs", host_overhead),
    ("pyew.add on 1-element DeviceArrays <= torch.add (host time per call)", add_vs_torch),
    ("numpy in/out: sigmoid float32 2^26 <= 20 ms", numpy_time("sigmoid", 20.0)),
    ("numpy in/out: add float32 2^26 <= 25 ms", numpy_time("add", 25.0)),
    ("numpy in/out: every one-input default op faster than numexpr (float32, 2^26)", unary_vs_numexpr),
    ("small calls (16 float32 elements, numpy in/out) <= 50 µs", small_calls),
    ("a foreign GPU operand (torch, CuPy) <= 2 µs extra per operand over a DeviceArray", foreign_operand),
    ("row and channel bias add/mul/add_relu: >= 95% of the copy ceiling (f32/f16/bf16)", _layouts(0)),
    ("views offset 1..7 elements: >= 95% of aligned and no slower than torch", _layouts(1)),
)


def evaluate(rows, copy_gbps) -> list[dict]:
    look = Rows(rows, copy_gbps)
    out = []
    for target, check in CHECKS:
        try:
            measured, met = check(look)
        except (KeyError, TypeError, ZeroDivisionError) as e:   # a malformed row: say so, don't crash
            measured, met = f"could not evaluate ({type(e).__name__})", None
        out.append({"target": target, "measured": measured, "met": met})
    return out
