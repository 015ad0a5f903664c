"""Report sections of the wall-clock suites: numpy in / numpy out (with the pinned bandwidth and the
transfer floor, the transfer modes, the crossover, the small calls), interop, first calls, and the
sustained map runs. Also the figures other modules derive from those rows (the transfer floor of
a call, the measured crossover, the extra cost of a foreign operand)."""
from __future__ import annotations

from .fmt import DASH, f_bytes, f_gbps, f_ms, f_size, f_us, f_x, ratio, table

NUMPY_IMPLS = ("pyew", "numpy", "numexpr", "torch", "cupy")
LABEL = {"pyew": "pyew", "numpy": "numpy", "numexpr": "numexpr", "torch": "PyTorch", "cupy": "CuPy"}


def f_n(n) -> str:
    return f_size(n)


def _index(rows, suite):
    return {(r.get("name"), r.get("dtype"), r.get("n"), r.get("impl")): r for r in rows if r.get("suite") == suite}


# ---- pinned bandwidth and the transfer floor -------------------------------------------------------------

def pcie(rows) -> dict:
    """{"H2D": row, "D2H": row, "both ways": row} of the pinned bandwidth rows measured."""
    out = {}
    for r in rows:
        if r.get("suite") == "pcie" and str(r.get("name", "")).startswith("pinned "):
            out[r["name"][len("pinned "):]] = r
    return out


def pcie_text(rows) -> str:
    p = pcie(rows)
    if not p:
        return ""
    parts = [f"{k} {f_gbps(p[k].get('gbps'))} GB/s" for k in ("H2D", "D2H", "both ways") if k in p]
    size = next(iter(p.values())).get("n")
    return ", ".join(parts) + f" (pinned, {f_bytes(size)} per direction, CUDA events)"


def transfer_floor(rows, in_bytes: int, out_bytes: int):
    """(ms, which bandwidth) the call's bytes need at the pinned rate: both directions at once when
    it moves data both ways, else the one direction; (None, None) when not measured."""
    p = pcie(rows)
    if in_bytes and out_bytes:
        kind = "both ways"
    else:
        kind = "H2D" if in_bytes else "D2H"
    r = p.get(kind)
    g = r.get("gbps") if r else None
    if not g:
        return None, None
    return (in_bytes + out_bytes) / (g * 1e6), kind


# ---- numpy in, numpy out ---------------------------------------------------------------------------------

def numpy_tables(rows) -> str:
    idx = _index(rows, "numpy")
    if not idx:
        return ""
    sizes = sorted({k[2] for k in idx})
    cases = list(dict.fromkeys((k[0], k[1]) for k in idx))
    kinds = {r.get("floor_kind") for r in rows if r.get("suite") == "numpy" and r.get("floor_kind")}
    intro = ["Wall clock per call, numpy arrays in and a new numpy array out (median after a warm-up); "
             "\"Nx\" = the other's time / pyew's time."]
    bw = pcie_text(rows)
    if bw:
        intro.append(f"Pinned bandwidth: {bw}. The floor is the call's bytes (inputs + output) over the "
                     f"{' / '.join(sorted(kinds)) or 'both ways'} figure; pyew / floor is how far the call is from it.")
    out = ["## numpy in, numpy out\n\n" + "\n".join(intro)]
    for n in sizes:
        body = []
        for op, dtype in cases:
            r = {i: idx.get((op, dtype, n, i)) for i in NUMPY_IMPLS}
            if not any(r.values()):
                continue
            ms = {i: (r[i] or {}).get("ms") for i in NUMPY_IMPLS}
            p = r["pyew"] or {}
            diff = p.get("max_abs_diff_vs_numpy")
            body.append([op, dtype, f_ms(ms["pyew"]), f_ms(p.get("floor_ms")), f_x(p.get("floor_ratio")),
                         f_ms(ms["numpy"]), f_ms(ms["numexpr"]), f_ms(ms["torch"]), f_ms(ms["cupy"]),
                         f_x(ratio(ms["numpy"], ms["pyew"])), f_x(ratio(ms["numexpr"], ms["pyew"])),
                         f_x(ratio(ms["torch"], ms["pyew"])), f_x(ratio(ms["cupy"], ms["pyew"])),
                         DASH if diff is None else f"{diff:.1e}"])
        if body:
            out.append(f"### {f_size(n)} elements\n\n" + table(
                ["op", "dtype", "pyew", "floor", "pyew / floor", "numpy", "numexpr", "PyTorch", "CuPy", "vs numpy",
                 "vs numexpr", "vs PyTorch", "vs CuPy", "max abs diff vs numpy"], body))
    return "\n\n".join(out)


def transfer_section(rows) -> str:
    idx = _index(rows, "transfer")
    if not idx:
        return ""
    out = []
    modes = sorted({(k[0], k[1], k[2]) for k, r in idx.items() if k[3] in ("stage", "register")},
                   key=lambda k: (k[0], k[2]))
    body = []
    for op, dtype, n in modes:
        s, g = idx.get((op, dtype, n, "stage")), idx.get((op, dtype, n, "register"))
        sm, gm = (s or {}).get("ms"), (g or {}).get("ms")
        body.append([op, dtype, f_size(n), f_ms(sm), f_ms(gm), f_x(ratio(gm, sm))])
    if body:
        out.append("## Transfer modes: stage vs register (numpy in, numpy out)\n\n"
                   "\"stage\" copies through pyew's pinned ring; \"register\" page-locks the caller's arrays "
                   "(cudaHostRegister) and copies straight from and to them.\n\n"
                   + table(["op", "dtype", "n", "stage", "register", "register time / stage time"], body))
    lines = []
    for name in ("cudaHostRegister", "cudaHostUnregister"):
        r = next((r for k, r in idx.items() if k[0] == name), None)
        if r:
            lines.append(f"{name} of {f_bytes(r['n'])}: {f_ms(r['ms'])} ({f_gbps(r.get('gbps'))} GB/s)")
    copies = {}
    for k, r in idx.items():
        if k[0].startswith("np.copyto"):
            copies.setdefault(k[0], {})[r.get("threads")] = r
    threads = sorted({t for v in copies.values() for t in v if t is not None})
    body = []
    for name, by in copies.items():
        size = next(iter(by.values()))["n"]
        body.append([f"{name}, {f_bytes(size)}"]
                    + [f"{f_ms(by[t]['ms'])} ({f_gbps(by[t].get('gbps'))} GB/s)" if t in by else DASH for t in threads])
    if lines or body:
        text = "## Raw transfer costs\n\n"
        if lines:
            text += "; ".join(lines) + "."
        if body:
            text += ("\n\n" if lines else "") + table(["copy"] + [f"{t} threads" for t in threads], body)
        out.append(text)
    return "\n\n".join(out)


def crossover_point(rows):
    """(elements, bytes moved) from which the streamed path is at least as fast as the one-shot
    path at every larger size measured, or None (one shot faster at the largest size, or no data)."""
    idx = _index(rows, "crossover")
    sizes = sorted({k[2] for k in idx
                    if (k[0], k[1], k[2], "one shot") in idx and (k[0], k[1], k[2], "streamed") in idx})
    point = None
    for n in reversed(sizes):
        one = idx[("sigmoid", "float32", n, "one shot")]["us_per_call"]
        st = idx[("sigmoid", "float32", n, "streamed")]["us_per_call"]
        if st <= one:
            point = n
        else:
            break
    if point is None:
        return None
    return point, idx[("sigmoid", "float32", point, "streamed")].get("bytes", 8 * point)


def crossover_text(rows, small_bytes=None) -> str:
    idx = _index(rows, "crossover")
    if not idx:
        return ""
    now = f"; small_bytes is {f_bytes(small_bytes)} now" if small_bytes is not None else ""
    p = crossover_point(rows)
    if p is None:
        top = max(k[2] for k in idx)
        return f"the one-shot path is faster up to {f_size(top)} elements, the largest measured{now}"
    n, moved = p
    return (f"the streamed path is as fast or faster from {f_size(n)} elements ({f_bytes(moved)} moved: "
            f"inputs + output) on{now}")


def crossover_section(rows, small_bytes=None) -> str:
    idx = _index(rows, "crossover")
    if not idx:
        return ""
    body = []
    for n in sorted({k[2] for k in idx}):
        one = (idx.get(("sigmoid", "float32", n, "one shot")) or {}).get("us_per_call")
        st = (idx.get(("sigmoid", "float32", n, "streamed")) or {}).get("us_per_call")
        faster = DASH if one is None or st is None else ("one shot" if one < st else "streamed")
        body.append([f_size(n), f_bytes(8 * n), f_us(one), f_us(st), faster])
    return ("## Crossover: one shot vs streamed (sigmoid float32, numpy in and out)\n\n"
            + table(["n", "bytes moved", "one shot µs", "streamed µs", "faster"], body)
            + f"\n\nMeasured crossover: {crossover_text(rows, small_bytes)}.")


def small_section(rows) -> str:
    rs = [r for r in rows if r.get("suite") == "small"]
    if not rs:
        return ""
    idx = _index(rows, "small")
    body = []
    for op, dtype, n in dict.fromkeys((r["name"], r["dtype"], r["n"]) for r in rs):
        cells = [(idx.get((op, dtype, n, i)) or {}).get("us_per_call") for i in ("pyew", "torch", "cupy")]
        body.append([op, dtype, str(n)] + [f_us(c) for c in cells])
    return ("## Small calls: numpy in, numpy out (µs per call, wall clock; target ≤ 50 µs)\n\n"
            + table(["op", "dtype", "n", "pyew", "PyTorch", "CuPy"], body))


# ---- interop and first calls -----------------------------------------------------------------------------

def foreign_extra(rows) -> list[tuple[float, str]]:
    """[(extra µs per foreign operand over DeviceArray operands, label)] from the interop rows."""
    idx = _index(rows, "interop")
    base = idx.get(("pyew.add", "float32", 1, "DeviceArray"))
    if not base:
        return []
    out = []
    for k, r in idx.items():
        if k[0] == "pyew.add" and r.get("foreign"):
            out.append(((r["us_per_call"] - base["us_per_call"]) / r["foreign"], k[3]))
    return out


def interop_section(rows) -> str:
    rs = [r for r in rows if r.get("suite") == "interop" and r.get("name") == "pyew.add"]
    if not rs:
        return ""
    extra = {label: v for v, label in foreign_extra(rows)}
    body = [[f"`pyew.add` on {r['impl']}", str(r.get("foreign", 0)), f_us(r["us_per_call"]),
             f_us(r.get("min_us_per_call")), DASH if r["impl"] not in extra else f"{extra[r['impl']]:+.2f}"]
            for r in rs]
    text = ("## Interop: GPU arrays of other libraries as operands (1-element float32, wall clock)\n\n"
            + table(["call", "foreign operands", "µs per call (median)", "µs per call (best)",
                     "extra µs per foreign operand"], body))
    smoke = next((r for r in rows if r.get("suite") == "interop" and r.get("name") == "bfloat16 round trip"), None)
    if smoke:
        verdict = "equal to torch.relu" if smoke.get("ok") else "**wrong**"
        text += f"\n\nbfloat16 round trip ({smoke.get('check')}): {verdict}."
    return text


def firstcall_section(rows) -> str:
    rs = [r for r in rows if r.get("suite") == "firstcall"]
    if not rs:
        return ""
    body = [[r["name"], r["dtype"], f_size(r["n"]), f_us(r["first_us"]), f_us(r["second_us"]),
             f_us(r.get("third_us")), f_us(r.get("lazy_us"))] for r in rs]
    r0 = rs[0]
    mode = r0.get("module_loading")
    lines = [f"CUDA_MODULE_LOADING: {mode if mode else 'not set (LAZY, the default since CUDA 12.2)'}."]
    if r0.get("import_ms") is not None:
        lines.append(f"In each fresh process: import pyew {r0['import_ms']:.0f} ms; library load, device open and "
                     f"first upload {r0.get('setup_ms', 0):.0f} ms"
                     + (f"; the first call of another kernel ({r0['primer']}, paying the library's CUDA runtime "
                        f"start-up) {r0['primer_first_us'] / 1e3:.1f} ms" if r0.get("primer_first_us") else "") + ".")
    return ("## First call of an op in a fresh process (µs, wall clock, synchronized)\n\n"
            + table(["op", "dtype", "n", "first call", "second", "third", "first - second"], body)
            + "\n\n" + " ".join(lines))


def sustained_section(rows) -> str:
    rs = [r for r in rows if r.get("suite") == "sustained"]
    if not rs:
        return ""
    idx = _index(rows, "sustained")
    body = []
    for op, dtype, n in dict.fromkeys((r["name"], r["dtype"], r["n"]) for r in rs):
        p, t = idx.get((op, dtype, n, "pyew")) or {}, idx.get((op, dtype, n, "torch")) or {}
        segs = " / ".join(f_gbps(g) for g in (p.get("segment_gbps") or [])) or DASH
        tsegs = " / ".join(f_gbps(g) for g in (t.get("segment_gbps") or [])) or DASH
        body.append([op, dtype, f_size(n), f_gbps(p.get("burst_gbps")), f_gbps(p.get("gbps")), segs,
                     f_gbps(t.get("burst_gbps")), f_gbps(t.get("gbps")), tsegs, f_x(ratio(t.get("ms"), p.get("ms")))])
    secs = max((r.get("seconds") or 0) for r in rs)
    return ("## Sustained: pyew and PyTorch alternating (A B A B), GB/s\n\n"
            f"Each side: back-to-back calls in two segments (up to {secs:.1f} s of GPU time in all per side); "
            "burst = the map table's median of short bursts.\n\n"
            + table(["op", "dtype", "n", "pyew burst", "pyew sustained", "pyew segments", "PyTorch burst",
                     "PyTorch sustained", "PyTorch segments", "sustained: torch time / pyew time"], body))


# ---- layouts: bias adds and offset views ------------------------------------------------------------

def _layout_gbps(r) -> float | None:
    nbytes = r.get("counted_bytes") or r.get("bytes")
    return nbytes / (r["ms"] * 1e6) if r.get("ms") else None


def _view_groups(rs):
    """Per (op, dtype) of the offset-view rows: the aligned GB/s, then per offset 1..7 pyew's GB/s
    and torch's time over pyew's (None without a torch row). Groups without an aligned run are left
    out."""
    views = [r for r in rs if "offset" in r and r["impl"] == "pyew"]
    for name, dtype in dict.fromkeys((r["op"], r["dtype"]) for r in views):
        mine = {r["offset"]: r for r in views if r["op"] == name and r["dtype"] == dtype}
        theirs = {r["offset"]: r for r in rs if r.get("op") == name and r["dtype"] == dtype and r["impl"] == "torch"}
        if 0 not in mine or len(mine) < 2:
            continue
        offsets = {k: (_layout_gbps(r), theirs[k]["ms"] / r["ms"] if k in theirs else None)
                   for k, r in mine.items() if k}
        yield name, dtype, _layout_gbps(mine[0]), offsets


def layouts_section(rows, copy_gbps) -> str:
    rs = [r for r in rows if r.get("suite") == "layouts"]
    if not rs:
        return ""
    pct = lambda g: f"{100 * g / copy_gbps:.1f}%" if (g and copy_gbps) else "—"      # noqa: E731
    out = ["## Layouts: broadcast bias and offset views (pyew vs PyTorch)", "",
           "Bias adds count the big input and the output (the bias is read from cache); views count "
           "what they read and write. GB/s = 1e9 bytes/s; % of this run's copy ceiling.", "",
           "| op | dtype | shape | pyew GB/s | pyew % copy | torch GB/s | torch % copy | torch time / pyew time |",
           "|---|---|---|---|---|---|---|---|"]
    bias = [r for r in rs if "bias" in r["name"] and r["impl"] == "pyew"]
    for r in bias:
        t = next((x for x in rs if x["name"] == r["name"] and x["dtype"] == r["dtype"] and x["impl"] == "torch"), None)
        g, tg = _layout_gbps(r), (_layout_gbps(t) if t else None)
        ratio = f"{t['ms'] / r['ms']:.2f}x" if t else "—"
        theirs = f"{tg:.0f} | {pct(tg)} | {ratio}" if tg else "— | — | —"
        out.append(f"| {r['name']} | {r['dtype']} | {'x'.join(map(str, r['shape']))} | {g:.0f} | {pct(g)} | {theirs} |")
    groups = list(_view_groups(rs))
    if groups:
        out += ["", "Views offset by k elements from a 256-byte aligned buffer (2^26 elements; the output is an "
                "aligned array, the same for both libraries): the worst offset of 1..7 against the aligned run, "
                "and against torch on the same views; each view's timings alternate between the libraries "
                "over rounds, and each figure is the median of its rounds.", "",
                "| op | dtype | aligned GB/s | worst offset GB/s (k) | worst / aligned | min torch time / pyew time |",
                "|---|---|---|---|---|---|"]
        for name, dtype, aligned, offsets in groups:
            worst = min(offsets, key=lambda k: offsets[k][0])
            w = offsets[worst][0]
            ratios = [vs for _, vs in offsets.values() if vs is not None]
            rt = f"{min(ratios):.3f}x" if ratios else "—"
            out.append(f"| {name} | {dtype} | {aligned:.0f} | {w:.0f} ({worst}) | {100 * w / aligned:.1f}% | {rt} |")
    return "\n".join(out)


def layout_targets(rows, copy_gbps):
    """(bias text, met), (views text, met) for the targets table."""
    rs = [r for r in rows if r.get("suite") == "layouts"]
    bias = [r for r in rs if "bias" in r["name"] and r["impl"] == "pyew"]
    if bias and copy_gbps:
        worst = min(bias, key=_layout_gbps)
        p = 100 * _layout_gbps(worst) / copy_gbps
        b = (f"min {p:.1f}% of copy ({worst['name']} {worst['dtype']})", p >= 95.0)
    else:
        b = ("not measured", None)
    groups = list(_view_groups(rs))
    if groups:
        worst_pct = min(100 * g / aligned for _, _, aligned, offsets in groups for g, _ in offsets.values())
        ratios = [vs for _, _, _, offsets in groups for _, vs in offsets.values() if vs is not None]
        vs = f"{min(ratios):.3f}x" if ratios else "not measured"
        v = (f"worst {worst_pct:.1f}% of aligned; torch time / pyew time min {vs}",
             worst_pct >= 95.0 and (not ratios or min(ratios) >= 1.0))
    else:
        v = ("not measured", None)
    return b, v
