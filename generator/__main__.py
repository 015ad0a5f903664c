"""python -m generator [--out build] SPEC.toml [SPEC.toml ...]"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m generator",
                                 description="Generate libew's CUDA sources from spec files.")
    ap.add_argument("spec", nargs="+", help="spec files (TOML); their ops form one library")
    ap.add_argument("--out", default="build", help="output folder (default: build)")
    args = ap.parse_args(argv)
    # Several specs may come as one space-separated argument: make all SPEC="a.toml b.toml"
    paths = [p for s in args.spec for p in s.split()]
    try:
        from .render import GeneratorError, generate
        from .spec import SpecError, load
    except ImportError as e:
        print(f"generator: error: cannot import {e.name or e}: the generator needs mako, numpy and "
              "ml_dtypes (pip install mako numpy ml_dtypes)", file=sys.stderr)
        return 1
    try:
        spec = load(paths)
        counts = generate(spec, Path(args.out))
    except (SpecError, GeneratorError) as e:
        print(f"generator: error: {e}", file=sys.stderr)
        return 1
    n = len(spec.kernels())
    print(f"generator: {len(spec.ops)} ops, {n} kernels; {counts['written']} files written, "
          f"{counts['unchanged']} unchanged, {counts['removed']} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
