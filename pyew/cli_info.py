"""`python -m pyew info` and `python -m pyew ops`: what is installed and what it can do."""
from __future__ import annotations

import argparse
import sys


def info(argv) -> int:
    argparse.ArgumentParser(prog="python -m pyew info",
                            description="pyew's version, library, ABI, build and device.").parse_args(argv)
    import pyew
    from pyew import library
    from pyew.errors import PyewError
    print(f"pyew        {pyew.__version__}")
    print(f"library     {library.library_path()}")
    try:
        lib = library.get()
    except PyewError as e:
        print(f"            not usable: {e}")
        return 1
    man = lib.manifest
    print(f"calls       {'C extension ' if lib.ext is not None else 'ctypes: '}{lib.calls_note}")
    print(f"ABI         {man.abi} (this pyew reads {library.ABI_VERSION})")
    print(f"ops         {len(man.ops)} spec ops, {len(pyew.ops())} functions, "
          f"{sum(len(o.kernels) for o in man.ops)} kernels")
    print(f"built by    {man.build_command}")
    for f in man.spec_files:
        print(f"spec        {f.path}")
    try:
        devices = [pyew.device_info(i) for i in range(pyew.device_count())] or [pyew.device_info()]
    except PyewError as e:
        print(f"device      none: {e}")
        return 0
    for d in devices:
        cc = "sm_%d%d" % d["capability"]
        resident = ("" if d["launch_threads_per_sm"] == d["threads_per_sm"]
                    else f", launches keep {d['launch_threads_per_sm']} of {d['threads_per_sm']} threads per SM")
        print(f"device      {d['ordinal']}: {d['name']} ({cc}, {d['sms']} SMs{resident}, "
              f"{d['total_memory'] / 2**30:.1f} GiB, {d['free_memory'] / 2**30:.1f} GiB free, "
              f"PCI {d['pci_bus_id']})")
    lim = pyew.transfer_limits()
    print("transfer    " + ", ".join(f"{k}={v}" for k, v in lim.items()))
    return 0


def ops(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyew ops", description="The ops of the loaded library.")
    ap.add_argument("--doc", action="store_true", help="add each op's one-line doc")
    args = ap.parse_args(argv)
    import pyew
    from pyew.errors import PyewError
    try:
        rows = pyew.ops()
    except PyewError as e:
        print(f"python -m pyew ops: {e}", file=sys.stderr)
        return 1
    table = [("op", "kind", "inputs", "params", "dtypes")]
    for o in rows:
        params = ", ".join(k if k in o["required"] else f"{k}={v}" for k, v in o["params"].items()) or "-"
        table.append((o["name"], o["kind"], ", ".join(o["inputs"]), params, ", ".join(o["dtypes"])))
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for i, r in enumerate(table):
        line = "  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4]
        print(line.rstrip())
        if args.doc and i:
            print(f"    {rows[i - 1]['doc']}")
        if i == 0:
            print("  ".join("-" * w for w in widths) + "  " + "-" * len(r[4]))
    return 0
