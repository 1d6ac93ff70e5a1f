"""pelib.cache and build()'s use of it: a cache that cannot return a stale, edited or broken build.

Each test reproduces a way the old cache lied (stale headers, tampered or truncated entries, an
unwritable location, no home directory, unbounded growth, interrupted stores) and checks that the
entry is dropped, rebuilt and reported once with its path, or that the build goes on uncached.
"""
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from pelib import build as B
from pelib import cache as C
from pelib.isa import elf, sass

SRC = Path(__file__).resolve().parents[1] / "src"

KERNEL = textwrap.dedent("""
    #include "common/export.cuh"
    #ifndef SCALE
    #define SCALE 2
    #endif
    PELIB_EXPORT(smem_bytes, 1024 * SCALE);
    PELIB_EXPORT(scale, SCALE);
    extern "C" __global__ void k(float* y) { y[threadIdx.x] *= SCALE; }
""")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache folder for build() (and a fresh warn-once state)."""
    root = tmp_path / "cache"
    monkeypatch.setattr(B, "CACHE_DIR", root)
    monkeypatch.setattr(B, "_CACHES", {})
    return root


@pytest.fixture
def kfile(tmp_path):
    p = tmp_path / "stage" / "k.cu"
    p.parent.mkdir()
    p.write_text(KERNEL)
    return p


def _entry(root: Path) -> Path:
    (e,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    return e


def _bad_entry_warning(rec, entry: Path) -> str:
    msgs = [str(w.message) for w in rec if issubclass(w.category, C.CacheWarning)]
    assert len(msgs) == 1, msgs
    assert str(entry) in msgs[0] and "rebuilding" in msgs[0]
    return msgs[0]


# --- stale: every header NVRTC can open is in the key (C19, C20) ------------------------------
@pytest.mark.parametrize("how", ["stage folder (-I)", "angle brackets"])
def test_edited_header_reached_through_the_include_path_rebuilds(cache, tmp_path, how):
    d = tmp_path / "stage"
    (d / "sub").mkdir(parents=True)
    (d / "lib").mkdir()
    if how == "angle brackets":
        inc = '#include <lib/val.cuh>'
        header = d / "lib" / "val.cuh"
    else:   # sub/h.cuh includes deep.cuh, which lives in the stage's folder, found through -I
        inc = '#include "sub/h.cuh"'
        (d / "sub" / "h.cuh").write_text('#include "deep.cuh"\n')
        header = d / "deep.cuh"
    header.write_text("#define VAL 111\n")
    k = d / "k.cu"
    k.write_text(f'{inc}\n#include "common/export.cuh"\nPELIB_EXPORT(val, VAL);\n'
                 'extern "C" __global__ void k() {}\n')
    first = B.build(k, "sm_90a")
    assert first.exports["val"] == 111 and not first.cached
    assert B.build(k, "sm_90a").cached
    header.write_text("#define VAL 222\n")
    again = B.build(k, "sm_90a")
    assert not again.cached and again.exports["val"] == 222


def test_include_resolution_follows_nvrtc_order(tmp_path):
    """Quoted: next to the including header first, then the include path; <...>: include path only."""
    inc1, inc2 = tmp_path / "i1", tmp_path / "i2"
    for d in (inc1, inc2, inc1 / "x"):
        d.mkdir(parents=True, exist_ok=True)
    (inc1 / "x" / "a.cuh").write_text('#include "b.cuh"\n#include <c.cuh>\n')
    (inc1 / "x" / "b.cuh").write_text("// next to a.cuh\n")
    (inc1 / "b.cuh").write_text("// on the include path: not taken\n")
    (inc2 / "c.cuh").write_text("// c\n")
    (inc1 / "x" / "c.cuh").write_text("// next to a.cuh, but <...> ignores it\n")
    k = inc1 / "k.cu"
    k.write_text('#include "x/a.cuh"\n#include <cuda_fp16.h>\n')
    found = {p for _, p, _ in B.expand_sources(k, [inc1, inc2])}
    assert found == {k.resolve(), (inc1 / "x" / "a.cuh").resolve(), (inc1 / "x" / "b.cuh").resolve(),
                     (inc2 / "c.cuh").resolve()}


# --- tampered or broken entries: dropped, rebuilt, reported once (C01-C07, C03b) --------------
def _tamper_export(entry: Path) -> None:
    """Overwrite the 8 bytes of the exported smem_bytes in the cached cubin (C03b)."""
    cub = bytearray((entry / B.CUBIN_FILE).read_bytes())
    off, size = elf.export_locations(bytes(cub))["smem_bytes"]
    cub[off:off + size] = (1000).to_bytes(size, "little")
    assert elf.read_exports(bytes(cub))["smem_bytes"] == 1000
    (entry / B.CUBIN_FILE).write_bytes(bytes(cub))


BREAKS = {
    "cubin emptied": lambda e: (e / B.CUBIN_FILE).write_bytes(b""),
    "cubin truncated to half": lambda e: (e / B.CUBIN_FILE).write_bytes((e / B.CUBIN_FILE).read_bytes()[:5000]),
    "cubin deleted": lambda e: (e / B.CUBIN_FILE).unlink(),
    "cubin bytes flipped": lambda e: (e / B.CUBIN_FILE).write_bytes(
        (lambda b: b[:3000] + bytes(x ^ 0xFF for x in b[3000:3064]) + b[3064:])((e / B.CUBIN_FILE).read_bytes())),
    "an export edited in the cubin": _tamper_export,
    "meta.json invalid JSON": lambda e: (e / "meta.json").write_text('{"log": "unterminated'),
    "meta.json of the old layout": lambda e: (e / "meta.json").write_text(json.dumps({"log": ""})),
    "meta.json without artifacts": lambda e: (e / "meta.json").write_text(json.dumps({"format": C.FORMAT})),
    "meta.json deleted": lambda e: (e / "meta.json").unlink(),
    "ptxas log emptied": lambda e: (e / B.LOG_FILE).write_text(""),
}


@pytest.mark.parametrize("how", list(BREAKS))
def test_broken_entry_is_dropped_rebuilt_and_reported_once(cache, kfile, how):
    good = B.build(kfile, "sm_100a")
    entry = _entry(cache)
    BREAKS[how](entry)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        again = B.build(kfile, "sm_100a")
    _bad_entry_warning(rec, entry)
    assert not again.cached
    assert again.cubin == good.cubin and again.exports == good.exports and again.facts == good.facts
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        third = B.build(kfile, "sm_100a")
    assert third.cached and not [w for w in rec if issubclass(w.category, C.CacheWarning)]


def test_sass_is_cached_with_the_cubin_and_checked(cache, kfile, monkeypatch):
    first = B.build(kfile, "sm_100a")
    text = first.sass
    assert (_entry(cache) / B.SASS_FILE).read_text() == text
    calls = []
    real = sass.disassemble
    monkeypatch.setattr(sass, "disassemble", lambda c: calls.append(1) or real(c))
    assert B.build(kfile, "sm_100a").sass == text and calls == []      # served from the entry
    (_entry(cache) / B.SASS_FILE).write_text(text.replace("EXIT", "NOP"))  # edited: dropped, disassembled again
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        b = B.build(kfile, "sm_100a")
        assert b.sass == text and calls == [1]
    assert any("kernel.sass" in str(w.message) for w in rec)


# --- where the cache is, and when it cannot be written (C08, C10, C13, C14) --------------------
def test_unwritable_cache_warns_once_and_builds_uncached(tmp_path, kfile, monkeypatch):
    monkeypatch.setattr(B, "_CACHES", {})
    monkeypatch.setattr(B, "CACHE_DIR", None)
    not_a_dir = tmp_path / "cache_is_a_file"
    not_a_dir.write_text("x")
    monkeypatch.setenv("PELIB_CACHE", str(not_a_dir))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        a = B.build(kfile, "sm_100a")
        b = B.build(kfile, "sm_100a", {"SCALE": 3})
    msgs = [str(w.message) for w in rec if issubclass(w.category, C.CacheWarning)]
    assert len(msgs) == 1 and "not writable" in msgs[0] and "uncached" in msgs[0]
    assert not a.cached and a.exports["scale"] == 2 and b.exports["scale"] == 3


def test_read_only_cache_warns_once_and_builds_uncached(cache, kfile, monkeypatch):
    def refuse(*a, **k):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(C.tempfile, "mkdtemp", refuse)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        a = B.build(kfile, "sm_100a")
        b = B.build(kfile, "sm_100a")
    msgs = [str(w.message) for w in rec if issubclass(w.category, C.CacheWarning)]
    assert len(msgs) == 1 and "Read-only" in msgs[0]
    assert not a.cached and not b.cached and a.cubin == b.cubin


def test_cache_location_is_resolved_lazily(tmp_path, monkeypatch):
    monkeypatch.delenv("PELIB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert C.cache_dir() == tmp_path / "xdg" / "pelib"
    monkeypatch.setenv("PELIB_CACHE", str(tmp_path / "mine"))
    assert C.cache_dir() == tmp_path / "mine"
    from pelib import paths
    assert paths.CACHE_DIR == tmp_path / "mine"
    monkeypatch.delenv("PELIB_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")

    def no_home():
        raise RuntimeError("Could not determine home directory.")
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    with pytest.raises(C.CacheUnavailable, match="PELIB_CACHE"):
        C.cache_dir()


_NO_HOME = textwrap.dedent("""
    import pathlib, os, sys
    def no_home():
        raise RuntimeError("Could not determine home directory.")
    pathlib.Path.home = staticmethod(no_home)
    os.environ.pop("HOME", None)
    import pelib.build, pelib.stage, pelib.paths        # importing never needs a home directory
    import warnings
    warnings.simplefilter("always")
    b = pelib.build.build(sys.argv[1], "sm_100a")
    print("OK", b.cached, pelib.build._cache_for(None).root if os.environ.get("PELIB_CACHE") else "-")
""")


@pytest.mark.parametrize("env", [{"PELIB_CACHE": "pc"}, {"XDG_CACHE_HOME": "xdg"}, {}])
def test_no_home_directory(tmp_path, kfile, env):
    e = {k: v for k, v in os.environ.items() if k not in ("HOME", "PELIB_CACHE", "XDG_CACHE_HOME")}
    e.update({k: str(tmp_path / v) for k, v in env.items()}, PYTHONPATH=str(SRC))
    r = subprocess.run([sys.executable, "-c", _NO_HOME, str(kfile)], capture_output=True, text=True,
                       env=e, timeout=300)
    assert r.returncode == 0 and "OK False" in r.stdout, r.stdout + r.stderr
    if env:
        assert any((tmp_path / v).rglob("meta.json") for v in env.values())
    else:   # no location at all: one warning, and the build is uncached
        assert "no cache location" in r.stderr and "set PELIB_CACHE" in r.stderr


# --- housekeeping: size cap with LRU eviction, stale temp folders (C17, C18) --------------------
def test_size_cap_evicts_least_recently_used(tmp_path):
    c = C.Cache(tmp_path / "c", max_mb=0.25)        # 256 KiB
    blob = bytes(100 * 1024)
    keys = [C.key(options={"i": i}) for i in range(4)]
    c.put("e", keys[0], {"x": blob})
    time.sleep(0.02)
    c.put("e", keys[1], {"x": blob})
    time.sleep(0.02)
    assert c.get("e", keys[0], require=("x",)) is not None     # a hit makes key 0 the most recent
    time.sleep(0.02)
    c.put("e", keys[2], {"x": blob})                             # 300 KiB > cap: key 1 goes
    assert c.get("e", keys[1]) is None
    assert c.get("e", keys[0]) is not None and c.get("e", keys[2]) is not None
    assert c.size() <= 256 * 1024


def test_stale_temp_folders_are_removed(tmp_path):
    c = C.Cache(tmp_path / "c")
    (tmp_path / "c").mkdir()
    old, fresh = tmp_path / "c" / ".tmp-old", tmp_path / "c" / ".tmp-fresh"
    for d in (old, fresh):
        d.mkdir()
        (d / "kernel.cubin").write_bytes(b"half")
    past = time.time() - 2 * C.STALE_TMP_S
    os.utime(old, (past, past))
    c.put("e", C.key(), {"x": b"1"})
    assert not old.exists() and fresh.exists()     # a fresh one may be another process's store in flight


def test_cache_size_env_and_default(tmp_path, monkeypatch):
    monkeypatch.setenv("PELIB_CACHE_MAX_MB", "2")
    assert C.Cache(tmp_path).max_bytes == 2 << 20
    monkeypatch.setenv("PELIB_CACHE_MAX_MB", "lots")
    with pytest.warns(C.CacheWarning, match="not a number"):
        assert C.Cache(tmp_path).max_bytes == C.DEFAULT_MAX_MB << 20


# --- builders whose inputs are known after compiling (a host compiler's depfile) ---------------
def test_depfile_entries_follow_their_dependencies(tmp_path):
    c = C.Cache(tmp_path / "c")
    h, src = tmp_path / "a b.h", tmp_path / "sim.cpp"
    h.write_text("int x;")
    src.write_text('#include "a b.h"')
    deps = C.parse_depfile(f"sim.o: {src} \\\n  {str(h).replace(' ', chr(92) + ' ')}\n")
    assert deps == [src, h]
    base = C.key(files=[src], options={"cxx": ["-O2"]}, tool="g++ 13")
    assert c.lookup("sim", base) is None
    c.store("sim", base, deps, {"sim.so": b"\x7fELF..."})
    hit = c.lookup("sim", base, require=("sim.so",))
    assert hit is not None and hit.read("sim.so") == b"\x7fELF..."
    h.write_text("int y;")                           # a header the compiler opened changed
    assert c.lookup("sim", base) is None


def test_key_covers_files_options_and_tool(tmp_path):
    f = tmp_path / "f.cuh"
    f.write_text("a")
    k = C.key(files=[f], options={"O": 3}, tool="t1")
    assert k == C.key(files=[("f.cuh", b"a")], options={"O": 3}, tool="t1")
    assert len({k, C.key(files=[("f.cuh", b"b")], options={"O": 3}, tool="t1"),
                C.key(files=[f], options={"O": 2}, tool="t1"), C.key(files=[f], options={"O": 3}, tool="t2")}) == 4


# --- a build always carries its ptxas facts (NVRTC's own compile cache skips ptxas) -------------
def _nvrtc_with_a_cache(monkeypatch):
    """NVRTC as 12.9 and later behave (NVRTC guide, "Caching (CUDA 12.9+)"): a program whose code it compiled
    before, in any process, comes back from its own cache without a ptxas run, so `-v` reports nothing, unless
    the options carry no_cache. Keyed here by the cubin: two builds that compile to the same code share it, as
    `{}` and `{"SCALE": 2}` do (the numerics proof's emulation kernel built with and without COMB_INIT=0)."""
    real, seen, calls = B._compile, set(), []

    def compile_(path, srcs, opts, name_expressions):
        cubin, log = real(path, srcs, opts, name_expressions)
        hit = not opts.get("no_cache") and cubin in seen
        seen.add(cubin)
        calls.append((dict(opts), hit))
        return cubin, ("" if hit else log)

    monkeypatch.setattr(B, "_compile", compile_)
    monkeypatch.setattr(B, "_nvrtc_version", lambda: (13, 0))
    return calls


def test_a_build_served_by_nvrtcs_own_cache_still_carries_its_facts(cache, kfile, monkeypatch):
    """The GPU failure ("defines no __global__ kernel", Build.ptxas empty): the second of two builds compiling to
    the same code got NVRTC's cached cubin and an empty log, and pelib.cache kept that log for every later run.
    Now NVRTC gets --no-cache, so ptxas runs and reports for every build, and both builds have their facts."""
    calls = _nvrtc_with_a_cache(monkeypatch)
    first = B.build(kfile, "sm_90a")
    second = B.build(kfile, "sm_90a", {"SCALE": 2})
    assert second.cubin == first.cubin and not second.cached
    assert first.kernel == second.kernel == "k" and second.facts == first.facts
    assert [o.get("no_cache") for o, _ in calls] == [True, True] and not any(hit for _, hit in calls)
    assert B.build(kfile, "sm_90a", {"SCALE": 2}).facts == first.facts     # and so does the cached entry


def test_a_log_without_facts_is_refused_and_never_cached(cache, kfile, monkeypatch):
    """Where NVRTC still returns a log without the facts of an entry function the cubin holds (its cache not
    turned off), build() says so, naming the entry, and stores nothing: the old code stored the empty log."""
    _nvrtc_with_a_cache(monkeypatch)
    monkeypatch.setattr(B, "nvrtc_cache_options", lambda: {})
    B.build(kfile, "sm_90a")
    with pytest.raises(B.MissingFacts, match=r"no ptxas facts for the entry function\(s\) \['k'\]"):
        B.build(kfile, "sm_90a", {"SCALE": 2})
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1


def test_a_cached_entry_without_facts_is_dropped_and_rebuilt(cache, kfile):
    """An entry an older pelib stored with an empty log (its checksums valid) is dropped with one warning naming
    it and the entry function, and rebuilt with the facts."""
    good = B.build(kfile, "sm_90a")
    entry = _entry(cache)
    (entry / B.LOG_FILE).write_text("")
    meta = json.loads((entry / "meta.json").read_text())
    meta["artifacts"][B.LOG_FILE] = {"sha256": C.sha256(b""), "size": 0}
    (entry / "meta.json").write_text(json.dumps(meta))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        again = B.build(kfile, "sm_90a")
    msg = _bad_entry_warning(rec, entry)
    assert "no facts for the entry function(s) ['k']" in msg
    assert not again.cached and again.facts == good.facts
    assert B.build(kfile, "sm_90a").cached


def test_nvrtc_gets_no_cache_from_12_9_and_the_cubin_is_unchanged(cache, kfile, monkeypatch):
    """--no-cache goes to NVRTC 12.9 and later only (older ones reject the option) where cuda.core can pass it
    (the installed one can), and changes no cubin byte
    (the 40 stage cubins stay as they are): the option only decides whether ptxas runs again."""
    from cuda.core import ProgramOptions
    assert B._can_say_no_cache()
    for version, want in (((12, 8), {}), ((12, 9), {"no_cache": True}), ((13, 2), {"no_cache": True})):
        monkeypatch.setattr(B, "_nvrtc_version", lambda v=version: v)
        assert B.nvrtc_cache_options() == want
    monkeypatch.setattr(B, "_can_say_no_cache", lambda: False)   # an older cuda-core: the facts check remains
    assert B.nvrtc_cache_options() == {}
    assert b"--no-cache" in ProgramOptions(arch="sm_90a", no_cache=True).as_bytes("nvrtc")
    monkeypatch.undo()
    monkeypatch.setattr(B, "CACHE_DIR", cache)
    with_opt = B.build(kfile, "sm_90a", cache=False)
    monkeypatch.setattr(B, "nvrtc_cache_options", lambda: {})
    without = B.build(kfile, "sm_90a", cache=False)
    assert with_opt.cubin == without.cubin and with_opt.facts == without.facts
    with pytest.raises(ValueError, match="no_cache"):
        B.build(kfile, "sm_90a", extra_options={"no_cache": False})
