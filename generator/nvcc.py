"""python -m generator.nvcc NVCC [ARGS...] -c build/gen/<file>.cu ...

Runs nvcc on one generated source. nvcc's messages pass through unchanged; when it fails, one more
line follows that names what to fix: the spec file, the op, its expression and nvcc's first error,
found through build/gen/sources.json (written by the generator next to the sources). Without that
line a typo in an expression would only show as an error in build/gen/fn/<op>.cuh.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

_LOCATED = re.compile(r"^(?P<file>.+?)(?:\((?P<paren>\d+)\)|:(?P<colon>\d+)(?::\d+)?):\s*(?:fatal\s+)?error\b")
_MARK = re.compile(r"//\s*spec:\s*(expr|pair)\s*$")


def _show(text: str, limit: int = 80) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[:limit] + "..."


def first_error(output: str):
    """(file, line, text) of nvcc's first error; file and line are None when it names none."""
    fallback = None
    for raw in output.splitlines():
        line = raw.strip()
        m = _LOCATED.match(line)
        if m:
            return m.group("file"), int(m.group("paren") or m.group("colon")), line
        if fallback is None and re.search(r"\berror\b", line, re.IGNORECASE):
            fallback = line
    return None, None, fallback


def explain(source: str, output: str) -> str | None:
    """The one line that names the spec file, op and field behind a failed compile of `source`."""
    gen = os.path.dirname(os.path.abspath(source))
    try:
        with open(os.path.join(gen, "sources.json"), encoding="utf-8") as f:
            index = json.load(f)
    except (OSError, ValueError):
        return None
    err_file, err_line, err_text = first_error(output)
    op = field = None
    text = ""
    if err_file is not None:
        path = os.path.abspath(err_file)
        rel = os.path.relpath(path, gen).replace(os.sep, "/")
        op = index["files"].get(rel)
        if op is not None and err_line:
            try:
                with open(path, encoding="utf-8") as f:
                    lines = f.read().splitlines()
                text = lines[err_line - 1] if 0 < err_line <= len(lines) else ""
            except OSError:
                text = ""
            m = _MARK.search(text)
            if m:
                field = m.group(1)
    if op is None:
        op = index["files"].get(os.path.basename(source))
    if op is None:
        return None
    info = index["ops"].get(op, {})
    where = f"{info.get('source', '?')}: op '{op}'"
    if field == "pair":
        expr = re.sub(r"^\s*return \((.*)\);\s*//.*$", r"\1", text)
        where += f": field 'pair': {_show(expr)}"
    elif info.get("expr"):
        where += f": field 'expr': {_show(info['expr'])}"
    detail = err_text or "nvcc failed without an error message"
    return f"error: {where} does not compile: {detail}"


def main(argv=None) -> int:
    cmd = list(sys.argv[1:] if argv is None else argv)
    if not cmd:
        print("usage: python -m generator.nvcc NVCC ARGS...", file=sys.stderr)
        return 2
    source = next((a for a in cmd if a.endswith(".cu")), None)
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    except OSError as e:
        print(f"error: cannot run {cmd[0]}: {e.strerror or e}; install the CUDA toolkit, or set CUDA_HOME "
              "(the folder with bin/nvcc) or NVCC", file=sys.stderr)
        return 127
    if r.returncode == 0:
        sys.stdout.write(r.stdout)
        return 0
    sys.stderr.write(r.stdout)
    line = explain(source, r.stdout) if source else None
    if line:
        print(line, file=sys.stderr)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
