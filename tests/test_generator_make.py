"""The Makefile around the generator, without compiling anything: a clear message when nvcc is
missing, spec paths with spaces, the build command the manifest records, and the build lock."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mako", reason="mako (the generator's template engine) is not installed")
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make not found")

ROOT = Path(__file__).resolve().parent.parent


def make(*args, env=None, **kw):
    e = dict(os.environ, **(env or {}))
    for var in ("CUDA_HOME", "NVCC", "SPEC", "BUILD", "ARCH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        if var not in (env or {}):
            e.pop(var, None)
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True, env=e,
                          **kw)


def test_missing_nvcc_says_what_to_install(tmp_path):
    r = make("all", f"BUILD={tmp_path / 'b'}", "NVCC=/nonexistent/bin/nvcc")
    assert r.returncode != 0
    assert "error: nvcc not found (NVCC=/nonexistent/bin/nvcc): install the CUDA toolkit" in r.stderr
    assert "CUDA_HOME" in r.stderr and "Error 127" not in r.stderr
    assert not (tmp_path / "b").exists()          # checked before anything is generated


def test_wrong_cuda_home_says_what_to_set(tmp_path):
    r = make("all", f"BUILD={tmp_path / 'b'}", env={"CUDA_HOME": str(tmp_path / "cuda")})
    assert r.returncode != 0
    assert f"error: CUDA_HOME={tmp_path / 'cuda'} has no bin/nvcc" in r.stderr
    assert not (tmp_path / "b").exists()


def test_spec_path_with_spaces_and_the_recorded_build_command(tmp_path):
    spaced = tmp_path / "my ops" / "extra ops.toml"
    spaced.parent.mkdir()
    spaced.write_text((ROOT / "examples/my_ops.toml").read_text())
    build = tmp_path / "b"
    r = make("generate", f'SPEC=libew/ops.toml "{spaced}"', f"BUILD={build}",
             "ARCH=-gencode arch=compute_90,code=sm_90", "JOBS=1")
    assert r.returncode == 0, r.stderr
    man = json.loads((build / "manifest.json").read_text())
    assert [f["path"] for f in man["spec_files"]] == ["libew/ops.toml", spaced.resolve().as_posix()]
    assert man["build_command"] == (f"make all SPEC='libew/ops.toml \"{spaced.resolve().as_posix()}\"' "
                                    f"BUILD={build.resolve().as_posix()} ARCH=\"-gencode arch=compute_90,code=sm_90\"")
    assert (build / "gen/ew_softplus_f16.cu").exists()


def test_a_second_build_into_the_same_folder_waits_for_the_first(tmp_path):
    build = tmp_path / "b"
    holder = subprocess.Popen([sys.executable, "-m", "generator.lock", str(build / ".lock"), "--", sys.executable,
                               "-c", "import time; print('held', flush=True); time.sleep(2)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"      # the lock is taken
        t0 = time.monotonic()
        r = make("generate", f"BUILD={build}")
        waited = time.monotonic() - t0
    finally:
        holder.communicate()
    assert r.returncode == 0, r.stderr
    assert f"waiting for another build in {build} to finish" in r.stderr
    assert waited >= 0.5 and (build / "manifest.json").exists()


def test_lock_is_not_taken_twice_by_a_nested_make(tmp_path):
    lock = tmp_path / ".lock"
    r = subprocess.run([sys.executable, "-m", "generator.lock", str(lock), "--", sys.executable, "-m",
                        "generator.lock", str(lock), "--", "echo", "inner"], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "inner" and "waiting" not in r.stderr


def test_concurrent_builds_with_different_specs_take_turns(tmp_path):
    """Each `make generate` holds the lock from generating to the end: the folder always holds one
    spec's complete output, never a mix."""
    build = tmp_path / "b"
    mine = tmp_path / "mine.toml"
    mine.write_text((ROOT / "examples/my_ops.toml").read_text())
    env = dict(os.environ)
    for var in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(var, None)
    procs = [subprocess.Popen(["make", "--no-print-directory", "generate", f"BUILD={build}", spec], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for spec in ("SPEC=libew/ops.toml", f"SPEC=libew/ops.toml {mine}")]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    man = json.loads((build / "manifest.json").read_text())
    has_mine = any(o["name"] == "softplus" for o in man["ops"])
    assert (build / "gen/ew_softplus_f32.cu").exists() == has_mine
    assert ("softplus" in (build / "gen/sources.mk").read_text()) == has_mine


def test_another_arch_or_flags_compiles_every_object_again(tmp_path):
    """Objects depend on the compile command and nvcc's version (a stamp rewritten only when they
    change): the same build again compiles nothing, another ARCH or NVCCFLAGS everything."""
    log = tmp_path / "nvcc.log"
    fake = tmp_path / "nvcc"
    fake.write_text(f"""#!/bin/sh
case "$*" in *--version*) echo "release 99.9"; exit 0;; *--help*) exit 0;; esac
echo "$*" >> {log}
prev=""; for a in "$@"; do [ "$prev" = "-o" ] && : > "$a"; prev="$a"; done
""")
    fake.chmod(0o755)
    spec = tmp_path / "one.toml"
    spec.write_text('[[op]]\nname = "twice"\ninputs = ["x"]\ndtypes = ["float32"]\nexpr = "x + x"\n'
                    'ref = "x + x"\ndoc = "x + x."\n')
    build = tmp_path / "b"
    common = (f"SPEC={spec}", f"BUILD={build}", f"NVCC={fake}", "JOBS=1")

    def compiles(*extra):
        log.write_text("")
        r = make("generate", *common, *extra)
        assert r.returncode == 0, r.stderr
        r = make(f"{build}/libew.so", *common, *extra)
        assert r.returncode == 0, r.stderr
        return sum(" -c " in ln for ln in log.read_text().splitlines())

    first = compiles()
    assert first >= 3                      # the op's unit, the manifest, libew's own sources
    assert compiles() == 0
    assert compiles("ARCH=-gencode arch=compute_80,code=sm_80") == first
    assert compiles("ARCH=-gencode arch=compute_80,code=sm_80") == 0
    assert compiles("ARCH=-gencode arch=compute_80,code=sm_80", "EXTRA_NVCCFLAGS=-DX=1") == first


def test_a_source_distribution_holds_what_make_all_needs(tmp_path):
    """An sdist builds through `make all` in its root: the Makefile, libew's sources and spec, the
    generator with its templates, the dependency script and the C extension must be in it."""
    import tarfile
    r = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for need in ("Makefile", "libew/ops.toml", "libew/elementwise.cuh", "libew/jit.cu", "generator/spec.py",
                 "generator/templates/map.cu.mako", "scripts/deps.py", "pyew/_ewcall.c", "examples/my_ops.toml"):
        assert need in names, need
