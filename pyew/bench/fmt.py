"""Number formats and markdown tables shared by the report modules."""
from __future__ import annotations

DASH = "—"


def f_gbps(v):
    return DASH if v is None else f"{v:.0f}"


def f_pct(v):
    return DASH if v is None else f"{v:.1f}%"


def f_x(v):
    return DASH if v is None else f"{v:.2f}x"


def f_ms(v):
    if v is None:
        return DASH
    return f"{v * 1e3:.1f} µs" if v < 0.1 else f"{v:.3f} ms" if v < 100 else f"{v:.0f} ms"


def f_us(v):
    if v is None:
        return DASH
    return f"{v:.2f}" if v < 100 else f"{v:.0f}"


def f_size(n):
    if n and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return str(n)


def f_bytes(n):
    if n is None:
        return DASH
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


def ratio(num, den):
    if num is None or den is None or den == 0:
        return None
    return num / den


def table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
