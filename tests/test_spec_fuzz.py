"""A fuzzer for the spec parser and generator: random mutations of libew/ops.toml's entries (fields
dropped, retyped, renamed, stuffed with odd characters and lengths, bytes that are not UTF-8). The
generator must either succeed or exit 1 with exactly one `generator: error: <file>: ...` line, never
a traceback, and must write nothing when it fails.

Fixed seed and a bounded count by default; PYEW_FUZZ_COUNT=20000 (and PYEW_FUZZ_SEED=...) for a
longer run.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import io
import json
import math
import os
import random
import re
import subprocess
import sys
import tomllib
import traceback
from pathlib import Path

import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")

from generator.__main__ import main as generator_main  # noqa: E402
from generator.spec import spec_path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SEED = int(os.environ.get("PYEW_FUZZ_SEED", "1234"))
COUNT = int(os.environ.get("PYEW_FUZZ_COUNT", "1000"))
SUBPROCESS_RUNS = 4          # the first few cases also run as `python -m generator`, output as a user sees it

BASE = tomllib.loads((ROOT / "libew/ops.toml").read_text())["op"]
FIELDS = ["name", "kind", "inputs", "dtypes", "expr", "ref", "doc", "params", "pair", "out", "rtol", "tuning"]
ODD_TEXT = [
    "", " ", "\t", "\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u202e", "\ufeff", "é", "😀", "'", '"',
    "\\", ";", "{", "}", "#", "//", "/*", "*/", "??/", ")EW_MANIFEST", 'R"(', "<%", "x;", "(", ")", "[", "]",
    "ew_f", "_x", "__init__", "int64_t", "C", "R", "f", "Fn", "n", "out", "stream", "relu", "gelu(x)",
    "elu(x)", "relu_mask(x)", "nosuchop(x)", "x +* 2", "nan", "inf", "float", "int", "float16", "half",
    "memory", "compute", "map", "dot", "asarray", "bench", "naive_relu", "upsample_nearest2d_backward",
]
ODD_VALUES = [0, -1, 1, 2**63, -2**63 - 1, 10**400, 0.5, 1e308, math.inf, -math.inf, math.nan, True, False,
              [], {}, [1], ["x", "x"], [[]], {"a": 1}, {"name": "a"}, datetime.date(2020, 1, 1),
              datetime.datetime(2020, 1, 1, 12, 0), datetime.time(1, 2, 3)]


# ---- a small TOML writer ------------------------------------------------------------------------

def _toml_str(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    return out.replace("\x7f", "\\u007f")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_str(k)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def to_toml(ops) -> str:
    parts = []
    for op in ops:
        if isinstance(op, dict):
            parts.append("[[op]]\n" + "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in op.items()))
        else:       # a non-table where an [[op]] belongs
            parts.append(f"op = {_toml_value(op)}\n")
    return "\n".join(parts)


# ---- mutations ----------------------------------------------------------------------------------

def odd_text(rng: random.Random, base: str = "") -> str:
    pick = rng.random()
    if pick < 0.3:
        return rng.choice(ODD_TEXT)
    if pick < 0.5:
        return rng.choice(ODD_TEXT) * rng.choice([2, 7, 65, 300, 5000])
    if pick < 0.8 and base:
        i = rng.randrange(len(base) + 1)
        return base[:i] + rng.choice(ODD_TEXT) + base[i:]
    return "".join(chr(rng.choice([rng.randrange(0x20), rng.randrange(0x20, 0x7f), rng.randrange(0x80, 0x3000)]))
                   for _ in range(rng.randrange(1, 12)))


def mutate_value(rng: random.Random, v):
    if isinstance(v, str) and rng.random() < 0.7:
        return odd_text(rng, v)
    if isinstance(v, list) and v and rng.random() < 0.6:
        v = list(v)
        i = rng.randrange(len(v))
        action = rng.randrange(4)
        if action == 0:
            del v[i]
        elif action == 1:
            v[i] = mutate_value(rng, v[i])
        elif action == 2:
            v.append(copy.deepcopy(v[i]))
        else:
            v.insert(i, rng.choice(ODD_VALUES + ODD_TEXT))
        return v
    if isinstance(v, dict) and v and rng.random() < 0.6:
        v = dict(v)
        k = rng.choice(list(v))
        action = rng.randrange(3)
        if action == 0:
            del v[k]
        elif action == 1:
            v[k] = mutate_value(rng, v[k])
        else:
            v[odd_text(rng, k)] = v.pop(k)
        return v
    return rng.choice(ODD_VALUES + ODD_TEXT)


def mutate_ops(rng: random.Random, ops: list) -> list:
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if not ops:
            break
        i = rng.randrange(len(ops))
        op = ops[i]
        if not isinstance(op, dict):
            continue
        action = rng.randrange(9)
        if action == 0 and op:                                      # drop a field
            del op[rng.choice(list(op))]
        elif action == 1:                                           # retype a field
            op[rng.choice(FIELDS)] = rng.choice(ODD_VALUES)
        elif action == 2 and op:                                    # rename a field
            k = rng.choice(list(op))
            op[rng.choice(FIELDS + [odd_text(rng, k)])] = op.pop(k)
        elif action in (3, 4) and op:                               # stuff a field
            k = rng.choice(list(op))
            op[k] = mutate_value(rng, op[k])
        elif action == 5:                                           # params
            op["params"] = mutate_value(rng, op.get("params", [{"name": "a", "type": "float", "default": 1.0}]))
        elif action == 6:                                           # duplicate an op
            ops.insert(rng.randrange(len(ops) + 1), copy.deepcopy(op))
        elif action == 7:                                           # call another op
            other = rng.choice(BASE)["name"]
            op["expr"] = rng.choice([f"{other}(x)", f"{other}(x, x)", f"{other}()", f"x + {other}(x, C(1))"])
        elif rng.random() < 0.3:                                    # a non-table op
            ops[i] = rng.choice(ODD_VALUES)
        else:                                                       # an odd value in a field
            op[rng.choice(FIELDS)] = odd_text(rng)
    return ops


def mutate_bytes(rng: random.Random, raw: bytes) -> bytes:
    action = rng.randrange(4)
    i = rng.randrange(len(raw) + 1)
    if action == 0:
        junk = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\x80", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf",
                           bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))])
        return raw[:i] + junk + raw[i:]
    if action == 1:
        return raw[:i] + raw[i + rng.randrange(1, 40):]
    if action == 2:
        return raw[:i]
    lines = raw.split(b"\n")
    j = rng.randrange(len(lines))
    return b"\n".join(lines[:j] + [lines[j]] + lines[j:])


def make_case(rng: random.Random) -> tuple[bytes, bool]:
    """(spec file bytes, whether the default spec comes first)."""
    ops = copy.deepcopy(rng.sample(BASE, rng.randrange(1, 5)))
    ops = mutate_ops(rng, ops)
    raw = to_toml(ops).encode("utf-8", "surrogatepass")
    if rng.random() < 0.25:
        raw = mutate_bytes(rng, raw)
    return raw, rng.random() < 0.15


# ---- the run ------------------------------------------------------------------------------------

def snapshot(out: Path) -> dict:
    if not out.exists():
        return {}
    return {p: (s.st_ino, s.st_mtime_ns, s.st_size) for p in out.rglob("*") for s in [p.stat()]}


def run_in_process(args) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            rc = generator_main(args)
        except BaseException:       # noqa: BLE001 - any escape is what the fuzzer looks for
            rc = "raised"
            traceback.print_exc()
    return rc, stdout.getvalue(), stderr.getvalue()


def run_subprocess(args) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "generator", *args], cwd=ROOT, capture_output=True, text=True,
                       errors="replace")
    return r.returncode, r.stdout, r.stderr


@pytest.mark.slow
def test_fuzz_spec(tmp_path):
    rng = random.Random(SEED)
    out = tmp_path / "out"
    spec = tmp_path / "fuzz.toml"
    shown = spec_path(spec)
    outcomes = {"ok": 0, "error": 0}
    for case in range(COUNT):
        raw, with_default = make_case(rng)
        spec.write_bytes(raw)
        args = ["--out", str(out)] + (["libew/ops.toml"] if with_default else []) + [str(spec)]
        before = snapshot(out)
        rc, stdout, stderr = (run_subprocess if case < SUBPROCESS_RUNS else run_in_process)(args)
        where = f"case {case} (PYEW_FUZZ_SEED={SEED}); spec:\n{raw[:3000]!r}\nstderr:\n{stderr[-3000:]}"
        assert "Traceback" not in stderr and rc in (0, 1), where
        if rc == 0:
            outcomes["ok"] += 1
            assert stderr == "", where
            json.loads((out / "manifest.json").read_text())
            continue
        outcomes["error"] += 1
        lines = stderr.splitlines()
        assert len(lines) == 1 and stderr.endswith("\n"), where
        assert lines[0].startswith(f"generator: error: {shown}: ") or \
            (with_default and lines[0].startswith("generator: error: libew/ops.toml")), where
        assert stdout == "", where
        assert snapshot(out) == before, "a failed run changed the output folder: " + where
    # the mutations must exercise both outcomes, or the fuzzer tests little
    assert outcomes["error"] > COUNT // 4 and outcomes["ok"] > COUNT // 20, outcomes
