"""pyew's performance targets, read back from a run's rows: each the worst of a figure over the rows
it selects, and whether it is met (None where they were not measured: a suite, peer or library missing)."""
from __future__ import annotations

import math

from .harness import f_ratio


class Rows:
    def __init__(self, rows):
        self.rows = rows
        self.by = {(r.get("suite"), r.get("name"), r.get("dtype"), r.get("n"), r.get("impl")): r for r in rows}
        self.nmax = max((r["n"] for r in rows if r.get("suite") == "map"), default=None)

    def of(self, suite, impl="pyew", select=lambda r: True):
        """impl's rows (any impl's for None) of a suite (map: at the largest size) that `select` keeps."""
        return [r for r in self.rows if r.get("suite") == suite and impl in (None, r.get("impl")) and select(r)
                and (suite != "map" or r["n"] == self.nmax)]

    def vs(self, r, impl, field="ms"):
        """impl's figure / r's, for r's (suite, name, dtype, n), or None."""
        o = self.by.get((r["suite"], r["name"], r["dtype"], r["n"], impl))
        return o[field] / r[field] if o and o.get(field) and r.get(field) else None


def worst(pairs, bar, low=True, what="", unit="x"):
    """(text, met): the worst value (lowest when low) of [(value, label)] against bar, and their geomean."""
    pairs = [(v, label) for v, label in pairs if v is not None]
    if not pairs:
        return "not measured", None
    v, label = min(pairs) if low else max(pairs)
    f = f_ratio if unit == "x" else f"{{:.2f}}{unit}".format
    text = f"{what}{'min' if low else 'max'} {f(v)} ({label})"
    if len(pairs) > 1 and all(x > 0 for x, _ in pairs):
        text += f", geomean {f(math.exp(sum(math.log(x) for x, _ in pairs) / len(pairs)))} over {len(pairs)}"
    return text, v >= bar if low else v <= bar


def _label(r):
    size = f" 2^{r['n'].bit_length() - 1}" if r.get("suite") == "numpy" and r.get("n") else ""
    return f"{r['name']} {r['dtype']}{size}" + (f" {'x'.join(map(str, r['shape']))}" if r.get("shape") else "")


def faster(suite, peer, bar, select=lambda r: True, every=False):
    """peer's time / pyew's over the selected rows: at least `bar`. With `every`, a pyew row without
    the peer's (not measured: skipped, out of memory) leaves the target unmet, not skipped."""
    def check(R):
        pairs = [(R.vs(r, peer), _label(r)) for r in R.of(suite, select=select)]
        lacking = [label for v, label in pairs if v is None]
        text, met = worst(pairs, bar, what=f"{peer} time / pyew time: ")
        if every and lacking and met is not None:
            return f"{text}; no {peer} row at {', '.join(lacking)}", None
        return text, met
    return check


def within(suite, peer, bar, select=lambda r: True, field="ms", base="pyew"):
    """base's time / peer's over the selected rows: at most `bar`."""
    return lambda R: worst([(1 / v if v else None, _label(r)) for r in R.of(suite, base, select)
                            for v in [R.vs(r, peer, field)]], bar, low=False, what=f"{base} time / {peer} time: ")


def value(suite, field, bar, unit, select=lambda r: True, low=False, impl="pyew"):
    return lambda R: worst([(r.get(field), _label(r) if impl else r["impl"]) for r in R.of(suite, impl, select)],
                           bar, low, unit=unit)


def both(a, b, need_b=True, what=""):
    """Two checks' (text, met) as one; b not measured counts as met unless need_b."""
    return f"{what}{a[0]}; {b[0]}", None if a[1] is None or need_b and b[1] is None else a[1] and b[1] is not False


GPU_F, OFFSET = lambda r: bool(r["n"]), lambda r: r.get("offset")                              # noqa: E731
UNARY = lambda r: r["dtype"] in ("float32", "float16", "bfloat16") and r.get("arity") == 1 \
    and r.get("out_dtype") == r["dtype"]                                                       # noqa: E731
AT_26 = lambda name=None: lambda r: (r["dtype"], r["n"]) == ("float32", 1 << 26) and name in (None, r["name"])  # noqa
SIG_ADD = lambda r: r["dtype"] == "float32" and r["name"] in ("sigmoid", "add")                  # noqa: E731


def _one_input_times(R) -> dict:
    """(n, dtype) -> pyew's times of the one-input ops in the numpy suite whose result has their
    input's dtype (the same bytes moved: a cast to float64 or to bool moves more or fewer)."""
    groups: dict = {}
    for r in R.rows:
        if r.get("suite") == "numpy" and r.get("impl") == "pyew" and r.get("arity") == 1 and r.get("ms") \
                and r.get("out_dtype", r.get("dtype")) == r.get("dtype"):
            groups.setdefault((r["n"], r["dtype"]), []).append(r["ms"])
    return groups


CHECKS = (
    ("unary ops f32/f16/bf16 at the largest size: >= 97% of the copy ceiling",
     value("map", "pct_copy", 97.0, "%", UNARY, low=True)),
    ("binary ops: at least PyTorch's speed", faster("map", "torch", 1.0, lambda r: r.get("arity") == 2)),
    ("cast f16->f32: <= 0.55x PyTorch's time", within("map", "torch", 0.55, lambda r: (r["dtype"], r.get("out_dtype"))
                                                       == ("float16", "float32"))),
    (">= 1.7x CuPy on float32", faster("map", "cupy", 1.7, lambda r: r["dtype"] == "float32")),
    (">= 3.4x CuPy on float16", faster("map", "cupy", 3.4, lambda r: r["dtype"] == "float16")),
    ("template >= 2x naive on float16", faster("map", "naive", 2.0, lambda r: r["dtype"] == "float16")),
    ("upsample 2x forward <= 0.5x torch", within("upsample", "torch", 0.5, lambda r: r["name"] == "forward")),
    ("upsample 2x backward <= 0.75x torch", within("upsample", "torch", 0.75, lambda r: r["name"] == "backward")),
    ("relu-mask backward <= 0.72x torch threshold_backward", within("relu_mask", "torch", 0.72)),
    ("pyew.dot f16 (fast) <= 1.1x torch.dot", within("dot", "torch", 1.1, base="fast")),
    ("dot: fast >= 3x half_atomic", lambda R: worst([(R.vs(r, "half_atomic"), "float16") for r in R.of("dot", "fast")],
                                                   3.0, what="half_atomic time / fast time: ")),
    ("host time per call: pyew <= PyTorch's same call (DeviceArrays, a number, a row bias, torch operands)",
     within("overhead", "torch", 1.0, field="us_per_call")),
    ("numpy in/out: sigmoid float32 2^26 <= 15 ms", value("numpy", "ms", 15.0, " ms", AT_26("sigmoid"))),
    ("numpy in/out: add float32 2^26 <= numexpr's time", faster("numpy", "numexpr", 1.0, AT_26("add"))),
    ("numpy in/out: sigmoid and add float32 from 2^20: within 2x of the pageable floor",
     value("numpy", "floor_ratio", 2.0, "x", lambda r: SIG_ADD(r) and r["n"] >= 1 << 20)),
    ("numpy in/out: sigmoid and add float32 faster than PyTorch's and CuPy's round trips at every size",
     lambda R: both(faster("numpy", "torch", 1.0, SIG_ADD, every=True)(R),
                    faster("numpy", "cupy", 1.0, SIG_ADD, every=True)(R))),
    ("numpy in/out: no one-input op over 1.5x another's time (same size, dtype and output dtype)", lambda R: worst(
        [(max(g) / min(g), f"{d} 2^{n.bit_length() - 1}") for (n, d), g in _one_input_times(R).items() if len(g) > 1],
        1.5, low=False, what="slowest / fastest: ")),
    ("numpy in/out: every one-input default op faster than numexpr (float32, 2^26)",
     faster("numpy", "numexpr", 1.0 + 1e-9, lambda r: AT_26()(r) and r.get("arity") == 1 and r.get("default"))),
    ("small calls (16 float32 elements, numpy in/out) <= 50 µs", value("small", "us_per_call", 50.0, " µs")),
    ("a torch operand <= 1 µs extra over a DeviceArray",
     value("interop", "extra_us", 1.0, " µs", lambda r: r["impl"].startswith("torch"), impl=None)),
    ("a CuPy operand <= 2 µs extra over a DeviceArray",
     value("interop", "extra_us", 2.0, " µs", lambda r: r["impl"].startswith("cupy"), impl=None)),
    ("row and channel bias add/mul/add_relu: >= 95% of the copy ceiling (f32/f16/bf16)",
     value("layouts", "pct_copy", 95.0, "%", lambda r: "offset" not in r, low=True)),
    ("views offset 1..7 elements: >= 95% of aligned and no slower than torch",
     lambda R: both(value("layouts", "pct_aligned", 95.0, "%", OFFSET, low=True)(R),
                    faster("layouts", "torch", 1.0, OFFSET)(R), need_b=False, what="% of aligned: ")),
    ("fused formulas on the GPU: <= 1.02x the floor of their bytes", value("fusion", "x_floor", 1.02, "x", GPU_F)),
    ("fused formulas: >= 1.9x PyTorch eager", faster("fusion", "torch", 1.9, GPU_F)),
    ("fused gelu(x*w+b), numpy in/out, float32 2^26: <= 30 ms", value("fusion numpy", "ms", 30.0, " ms")),
    ("... within 1.5x of its pageable floor", value("fusion numpy", "floor_ratio", 1.5, "x")),
    ("... >= 7x numexpr and >= 2.8x pyew op by op", lambda R: both(faster("fusion numpy", "numexpr", 7.0)(R),
                                                                 faster("fusion numpy", "pyew op by op", 2.8)(R))),
    ("first call of a new formula <= 150 ms", value("fusion", "ms", 150.0, " ms", lambda r: r["name"] == "first call")),
    ("... in a new process, from the disk cache, <= 5 ms",
     value("fusion", "ms", 5.0, " ms", lambda r: r["name"] == "first call, new process")),
    ("cached formula on 1-element arrays: <= 2x a single op's host time",
     within("fusion host", "pyew.add", 2.0, field="us_per_call", base="pyew.evaluate")),
)


def evaluate(rows) -> list[dict]:
    look, out = Rows(rows), []
    for target, check in CHECKS:
        try:
            measured, met = check(look)
        except (KeyError, TypeError, ZeroDivisionError) as e:   # a malformed row: say so, don't crash
            measured, met = f"could not evaluate ({type(e).__name__})", None
        out.append({"target": target, "measured": measured, "met": met})
    return out
