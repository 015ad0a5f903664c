"""python -m generator.nvcc NVCC [ARGS...] -c build/gen/<file>.cu ...

Runs nvcc on one generated source. nvcc's messages pass through unchanged; when it fails, one more
line follows that names what to fix: the spec file, the op, its expression and nvcc's first error,
found through build/gen/sources.json (written by the generator next to the sources). Without that
line a typo in an expression would only show as an error in build/gen/fn/<op>.cuh. An error inside a
header (libew/*.cuh) is put on a spec expression only when nvcc's notes trace it to that
expression's line; otherwise the line names the header, not the spec.
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


# nvcc's notes under an error in a template: "instantiation of ... at line N of FILE" (FILE left
# out when it is the previous note's).
_INSTANTIATED = re.compile(r"\bat line (?P<line>\d+)(?: of (?P<file>.+?))?\s*$")


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


def instantiated_from(output: str, err_text: str) -> list[tuple[str, int]]:
    """(file, line) of each "instantiation of ... at line N of FILE" note under the first error."""
    lines = output.splitlines()
    start = next((i for i, raw in enumerate(lines) if raw.strip() == err_text), None)
    if start is None:
        return []
    found, last_file = [], None
    for raw in lines[start + 1:]:
        if _LOCATED.match(raw.strip()):
            break
        m = _INSTANTIATED.search(raw)
        if m:
            last_file = m.group("file") or last_file
            if last_file:
                found.append((last_file, int(m.group("line"))))
    return found


def _marked_field(path: str, line: int) -> tuple[str | None, str]:
    """('expr' or 'pair' when that line of a generated file carries the spec's mark, else None;
    the line's text)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, ""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    m = _MARK.search(text)
    return (m.group(1) if m else None), text


def explain(source: str, output: str) -> str | None:
    """The one line that names the spec file, op and field behind a failed compile of `source`."""
    gen = os.path.dirname(os.path.abspath(source))
    try:
        with open(os.path.join(gen, "sources.json"), encoding="utf-8") as f:
            index = json.load(f)
    except (OSError, ValueError):
        return None
    err_file, err_line, err_text = first_error(output)

    def generated(file: str) -> tuple[str, str | None]:
        path = os.path.abspath(file)
        return path, index["files"].get(os.path.relpath(path, gen).replace(os.sep, "/"))

    op = field = None
    text = ""
    outside = None          # the file of nvcc's first error, when no expression led there
    if err_file is not None:
        path, op = generated(err_file)
        if op is not None:
            field, text = _marked_field(path, err_line)
        else:
            outside = err_file
            # instantiated from a spec expression? then that expression is what to fix
            for file, line in instantiated_from(output, err_text):
                path, by = generated(file)
                if by is not None:
                    f, t = _marked_field(path, line)
                    if f is not None:
                        op, field, text, outside = by, f, t, None
                        break
    if op is None:
        op = index["files"].get(os.path.basename(source))
    if op is None:
        return None
    info = index["ops"].get(op, {})
    where = f"{info.get('source', '?')}: op '{op}'"
    detail = err_text or "nvcc failed without an error message"
    if outside is not None:
        return (f"error: {where}: nvcc's first error is in {outside}, not in code generated from this op's "
                f"expressions nor instantiated from them: {detail}")
    if field == "pair":
        expr = re.sub(r"^\s*return \((.*)\);\s*//.*$", r"\1", text)
        where += f": field 'pair': {_show(expr)}"
    elif info.get("expr"):
        where += f": field 'expr': {_show(info['expr'])}"
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
