"""python -m generator [--out build] SPEC.toml [SPEC.toml ...]
python -m generator [--out build] --spec-list 'a.toml "my ops/b.toml"'

Each positional argument is one spec file, spaces and all. --spec-list takes make's SPEC as one
string: paths separated by spaces, a path that holds spaces in double (or single) quotes or with
its spaces escaped by a backslash, as a POSIX shell splits words.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def _make_var(text: str):
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    return name, value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m generator",
                                 description="Generate libew's CUDA sources from spec files.")
    ap.add_argument("spec", nargs="*", help="spec files (TOML); their ops form one library")
    ap.add_argument("--spec-list", default=None, metavar="SPECS",
                    help="more spec files as one string, split like shell words (make's SPEC)")
    ap.add_argument("--out", default="build", help="output folder (default: build)")
    ap.add_argument("--make-var", action="append", default=[], type=_make_var, metavar="NAME=VALUE",
                    help="a make variable given on make's command line, recorded in the manifest's "
                         "build_command (repeatable)")
    ap.add_argument("--bench", default=None, metavar="NAIVE_OPS",
                    help="also the benchmark library's sources (OUT/gen/bench): the naive twins of these map "
                         "ops (separated by spaces or commas; make's BENCH_NAIVE) and dot's atomic methods")
    args = ap.parse_args(argv)
    paths = list(args.spec)
    if args.spec_list is not None:
        try:
            paths += shlex.split(args.spec_list)
        except ValueError as e:
            print(f"generator: error: SPEC={args.spec_list!r}: {e}; separate spec files by spaces and put "
                  "a path that holds spaces in double quotes", file=sys.stderr)
            return 1
    if not paths:
        print("generator: error: no spec files given", file=sys.stderr)
        return 1
    try:
        from .render import GeneratorError, build_command, generate, generate_bench
        from .spec import SpecError, load
    except ImportError as e:
        print(f"generator: error: cannot import {e.name or e}: the generator needs mako, numpy and "
              "ml_dtypes (pip install mako numpy ml_dtypes)", file=sys.stderr)
        return 1
    try:
        spec = load(paths)
        out = Path(args.out)
        counts = generate(spec, out, build_command(spec, out, args.make_var))
        if args.bench is not None:
            bench = generate_bench(spec, out, args.bench.replace(",", " ").split())
    except (SpecError, GeneratorError) as e:
        print(f"generator: error: {e}", file=sys.stderr)
        return 1
    n = len(spec.kernels())
    print(f"generator: {len(spec.ops)} ops, {n} kernels; {counts['written']} files written, "
          f"{counts['unchanged']} unchanged, {counts['removed']} removed")
    if args.bench is not None:
        print(f"generator: benchmark library: {bench['written']} files written, {bench['unchanged']} unchanged, "
              f"{bench['removed']} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
