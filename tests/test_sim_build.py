"""pelib.sim.build: the host compiler it names or finds, cache keys that hold what built a library, a cached
library that fails to load, its temporary folders, and floating-point contraction pinned off."""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pelib.isa import sass
from pelib.sim import build as sim_build, host as sim_host
from pelib.stage import Stage, all_stages

SRC = Path(__file__).resolve().parents[1] / "src"
HAVE_GXX = shutil.which("g++") is not None
HAVE_GCC = shutil.which("gcc") is not None


@pytest.fixture
def fresh_probe(monkeypatch):
    monkeypatch.setattr(sim_build, "_COMPILERS", {})
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("PELIB_SIM_CXX", raising=False)


@pytest.mark.parametrize("named, phrase", [
    ("no-such-compiler", "PELIB_SIM_CXX='no-such-compiler': not found on PATH"),
    ("/bin/false", "--version printed no compiler version (exit status 1): not a compiler"),
])
def test_a_named_compiler_that_is_not_there_is_an_error_not_a_fallback(fresh_probe, monkeypatch, named, phrase):
    """PELIB_SIM_CXX=/bin/false used to fall back to /usr/bin/g++ without a word."""
    monkeypatch.setenv("PELIB_SIM_CXX", named)
    with pytest.raises(sim_build.SimToolchainError) as ei:
        sim_build.compiler()
    assert phrase in str(ei.value) and "unset PELIB_SIM_CXX" in str(ei.value)


@pytest.mark.skipif(not (HAVE_GCC and HAVE_GXX), reason="needs gcc and g++")
def test_gcc_is_refused_as_no_cxx_driver(fresh_probe, monkeypatch):
    """gcc compiles a .cpp file but links no libstdc++: what it builds does not load, so it is refused up front."""
    monkeypatch.setenv("PELIB_SIM_CXX", "gcc")
    with pytest.raises(sim_build.SimToolchainError, match=r"is not a C\+\+ compiler driver: it links no C\+\+ "
                                                          r"standard library .* \(g\+\+, clang\+\+\)"):
        sim_build.compiler()


@pytest.mark.skipif(not HAVE_GXX, reason="needs g++")
def test_an_unusable_cxx_warns_and_the_next_compiler_is_used(fresh_probe, monkeypatch):
    monkeypatch.setenv("CXX", "/bin/false")
    with pytest.warns(sim_build.SimToolchainWarning, match="CXX='/bin/false' cannot build the simulator"):
        cc = sim_build.compiler()
    assert Path(cc.path).name in ("g++", "clang++", "c++")


@pytest.mark.skipif(not (HAVE_GCC and HAVE_GXX), reason="needs gcc and g++")
def test_the_key_holds_the_resolved_compiler_and_its_flags(fresh_probe):
    """gcc and g++ of one release used to share the key 'g++-12.2.0': a library gcc built was served to g++."""
    gxx, _ = sim_build._probe("g++")
    assert gxx is not None and gxx.real == os.path.realpath(shutil.which("g++"))
    gcc = sim_build.Compiler(shutil.which("gcc"), gxx.kind, gxx.version, os.path.realpath(shutil.which("gcc")),
                             gxx.banner)
    assert gcc.tool == gxx.tool                    # the old key: the same
    k = sim_build.build_key(gxx, "int x;", sim_build.CXXFLAGS)
    assert sim_build.build_key(gcc, "int x;", sim_build.CXXFLAGS) != k
    assert sim_build.build_key(gxx, "int x;", [*sim_build.CXXFLAGS, "-O2"]) != k
    assert sim_build.build_key(gxx, "int x;", sim_build.CXXFLAGS) == k
    if shutil.which("c++") and os.path.realpath(shutil.which("c++")) == gxx.real:
        cxx, _ = sim_build._probe("c++")           # two names of one compiler share its libraries
        assert sim_build.build_key(cxx, "int x;", sim_build.CXXFLAGS) == k


BROKEN_ENGINE = textwrap.dedent("""
    import os, subprocess, sys, warnings, ctypes
    from pathlib import Path
    from pelib import cache
    from pelib.sim import build as sim_build, host as sim_host
    root = Path(sys.argv[1])
    sim_build._CACHE_DIR = root / "cache"
    # 1. what the issue did: PELIB_SIM_CXX=gcc. Now refused before anything is built.
    os.environ["PELIB_SIM_CXX"] = "gcc"
    try:
        sim_build.compiler()
        raise SystemExit("gcc was accepted")
    except sim_build.SimToolchainError as e:
        assert "not a C++ compiler driver" in str(e), e
    del os.environ["PELIB_SIM_CXX"]
    # 2. an engine gcc built (no libstdc++ linked: it does not load) left in the default g++'s entry, as the
    #    shared key 'g++-12.2.0' used to serve it
    good = sim_build.engine_build()
    lib = root / "gcc_built.so"
    (root / "t.cpp").write_text('#include <string>\\nextern "C" int pe_sim_event_size() '
                                '{ std::string s(100, 0x41); return int(s.size()); }\\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", str(root / "t.cpp"), "-o", str(lib)], check=True)
    try:
        ctypes.CDLL(str(lib), mode=os.RTLD_NOW)
        raise SystemExit("the gcc-built library loads here: the test would prove nothing")
    except OSError:
        pass
    base = good.path.parent.name.split("-")[2]
    entry = cache.Cache(root / "cache").lookup("pesim-engine", base, require=("libpesim.so",))
    assert entry.add("libpesim.so", lib.read_bytes())     # checksums updated: the cache serves it as good
    sim_build._MEMO.clear()
    assert sim_build.engine_build().path.read_bytes() == lib.read_bytes()
    # 3. the default g++ loads it: discarded with a warning, rebuilt, loaded
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        eng = sim_build.load_engine()
    assert eng.pe_sim_event_size() > 0
    assert any("does not load" in str(x.message) and "discarded, rebuilding" in str(x.message) for x in w), \\
        [str(x.message) for x in w]
    assert sim_build.engine_build().path.read_bytes() != lib.read_bytes()
    # 4. a stage simulated: its slot copies leave nothing in the temporary folder
    from pelib.stage import Stage
    assert sim_host.run(Stage("nvfp4/00_single_stage"), "sim")["ok"]
    left = sorted(p.name for p in Path(os.environ["TMPDIR"]).glob("pelib-sim-*"))
    assert not left, left
    print("OK")
""")


@pytest.mark.skipif(not (HAVE_GCC and HAVE_GXX), reason="needs gcc and g++")
def test_a_cached_engine_that_fails_to_load_is_discarded_and_rebuilt(tmp_path):
    """The issue's case: PELIB_SIM_CXX=gcc built an engine that failed to load, and the shared key served it to
    the default g++ too, until someone deleted the entry by hand. In a fresh process (an engine loads once)."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "cache").mkdir()
    # the libraries the simulator tests build anyway, copied in: only the rebuild is this test's own
    warm = [sim_build.engine_build().path.parent,
            sim_build.stage_build(Stage("nvfp4/00_single_stage").path, Stage("nvfp4/00_single_stage").build.kernel)
            .path.parent]
    for e in warm:
        shutil.copytree(e, tmp_path / "cache" / e.name)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / "tmp" / f"pelib-sim-slots-{dead.pid}-left"   # what a killed run left: the next removes it
    stale.mkdir()
    (stale / "0.so").write_bytes(b"\0" * 4096)
    env = {**os.environ, "PYTHONPATH": str(SRC), "TMPDIR": str(tmp_path / "tmp")}
    env.pop("PELIB_SIM_CXX", None)
    p = subprocess.run([sys.executable, "-c", BROKEN_ENGINE, str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=900)
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), p.stdout[-3000:] + p.stderr[-6000:]
    assert not list((tmp_path / "tmp").glob("pelib-sim-*")), "a temporary folder outlived its process"


def test_stale_slot_folders_are_removed_by_the_next_run(tmp_path):
    """625 pelib-sim-slots-* folders (78 MB) after one afternoon: each process's go with it; a killed one's
    (its process id gone) and the old unnamed ones (older than an hour) are removed by the next."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = tmp_path / f"pelib-sim-slots-{os.getpid()}-abc"
    gone = tmp_path / f"pelib-sim-slots-{dead.pid}-abc"
    legacy_old, legacy_new = tmp_path / "pelib-sim-slots-k2j4h5", tmp_path / "pelib-sim-slots-zz9x8y"
    parent = tmp_path / f"pelib-sim-uncached-{os.getppid()}-q"
    other = tmp_path / "pelib-sim-other"
    for d in (mine, gone, legacy_old, legacy_new, parent, other):
        d.mkdir()
        (d / "x.so").write_bytes(b"\0" * 100)
    old = time.time() - 2 * sim_build.STALE_S
    os.utime(legacy_old, (old, old))
    removed = sim_build.remove_stale(str(tmp_path))
    assert sorted(removed) == sorted([gone, legacy_old])
    assert all(d.is_dir() for d in (mine, legacy_new, parent, other))


def test_host_builds_never_contract_a_multiply_and_an_add(tmp_path):
    """-ffp-contract=off holds at -O2 on FMA hardware (PELIB_SIM_OPT=-O2, -march=native would otherwise fuse)."""
    cc = sim_build.compiler()
    src = tmp_path / "f.cpp"
    src.write_text('extern "C" float f(float a, float b, float c) { return a * b + c; }\n'
                   'extern "C" float g(float a, float b, float c) { float t = a * b; return t + c; }\n')
    arch = ["-mfma"] if platform.machine() in ("x86_64", "AMD64") else []
    flags = [f for f in sim_build.CXXFLAGS if f != "-shared"]

    def asm(extra):
        p = subprocess.run([cc.path, *extra, *arch, "-O2", "-S", str(src), "-o", "-"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stdout

    fused = re.compile(r"\b(vfmadd\w*|fmadd|fmla)\b")
    assert not fused.search(asm(flags))
    # the check can fail: without the flag this compiler fuses the same code
    assert fused.search(asm([f for f in flags if f != "-ffp-contract=off"])), "no FMA without the flag either"


def test_no_stage_lets_nvrtc_contract_a_multiply_and_an_add():
    """NVRTC contracts a*b+c by default (--fmad=true); the host build never does. They round alike only while
    no stage has a float multiply feeding an add: no FFMA/DFMA in any cubin, and HFMA2 only as a move
    (-RZ * RZ + imm) or an add (x * 1 + y, PTX add.rn.bf16x2). A stage that needs one writes it as fmaf()."""
    bad = []
    for s in all_stages():
        for _, op, text in sass.instructions(s.build.sass):
            base = op.split(".")[0]
            if base in ("FFMA", "DFMA", "FFMA2"):
                bad.append(f"{s.key}: {text[:80]}")
            elif base in ("HFMA2", "HFMA") and not re.search(r"-RZ, RZ,|, 1, 1, ", text):
                bad.append(f"{s.key}: {text[:80]}")
    assert not bad, "\n".join(bad[:20])


@pytest.mark.skipif(not HAVE_GXX, reason="needs g++")
def test_a_stage_builds_through_the_precompiled_prelude_into_the_same_code(tmp_path, monkeypatch):
    """g++ builds the system headers every stage library includes once (sim.build.prelude_dir); a stage build
    uses it (-Winvalid-pch would say in its log if not) and its machine code is what it is without it."""
    if sim_build.compiler().kind != "g++":
        pytest.skip("the precompiled prelude is g++'s")
    from pelib.stage import Stage
    monkeypatch.setattr(sim_build, "_CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(sim_build, "_MEMO", {})
    b = Stage("sm90/06_permuted_b").build
    with_pch = sim_build.stage_build(b.source, b.kernel, {})
    assert not with_pch.cached and "not used because" not in with_pch.log, with_pch.log
    pch = list((tmp_path / "cache").glob("pesim-prelude-*/prelude.h.gch"))
    assert len(pch) == 1 and pch[0].stat().st_size > 1_000_000, pch
    monkeypatch.setattr(sim_build, "prelude_dir", lambda flags: None)
    plain = sim_build.stage_build(b.source, b.kernel, {})
    assert not plain.cached and plain.path != with_pch.path

    def code(p):
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(p)], capture_output=True, text=True)
        return [ln for ln in out.stdout.splitlines() if "file format" not in ln]
    if shutil.which("objdump"):
        assert code(with_pch.path) == code(plain.path)
