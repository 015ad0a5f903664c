"""python -m pyew COMMAND [ARGS]: pyew's command line. Commands are modules imported on use, so
`--help` works without the library, a GPU or the benchmark's optional peers."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "info": ("pyew.cli_info:info", "version, library path, ABI, op count, build command, device"),
    "ops": ("pyew.cli_info:ops", "a table of the loaded library's ops, their dtypes and params"),
    "bench": ("pyew.bench.cli:main", "benchmark every op against the copy ceiling, a naive kernel, "
                                     "PyTorch, CuPy, numpy and numexpr"),
    "cache": ("pyew.jit:cli", "show the kernel cache of fused formulas (PYEW_CACHE_DIR); --clear deletes "
                              "what pyew wrote there"),
    "bench-dask": ("pyew.bench.dask_scaling:main", "gelu(x * w + b) over a dask array on 1, 2, 4... GPUs "
                                                   "(dask-cuda), numpy and CuPy chunks"),
}


def _usage() -> str:
    lines = ["usage: python -m pyew COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<10} {doc}" for name, (_, doc) in COMMANDS.items()]
    lines += ["", "python -m pyew COMMAND --help describes a command's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    cmd = COMMANDS.get(argv[0])
    if cmd is None:
        print(f"python -m pyew: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module, func = cmd[0].split(":")
    try:
        return getattr(importlib.import_module(module), func)(argv[1:])
    except BrokenPipeError:          # `python -m pyew ops | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
