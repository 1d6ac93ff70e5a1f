"""The simulator's host side: find the host C++ compiler, build the engine and stage libraries (cached), load them."""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import cache as _cache
from .paths import KERNELS

SIM_DIR = KERNELS / "sim"
RUNTIME_SOURCES = ("runtime/engine.cpp", "runtime/fiber.cpp")
# -O1 for both: measured here, -O2 builds the engine in 10.9 s instead of 8.3 s and a stage in 0.85 s
# instead of 0.7 s, and runs a test-size stage no faster (0.2-0.5 s either way). PELIB_SIM_OPT overrides.
ENGINE_OPT = os.environ.get("PELIB_SIM_OPT", "-O1")
STAGE_OPT = os.environ.get("PELIB_SIM_OPT", "-O1")
CXXFLAGS = ("-std=c++17", "-fPIC", "-shared", "-g0", "-fno-strict-aliasing", "-Wno-unknown-pragmas",
            "-Wno-ignored-attributes", "-Wno-attributes")
MIN_VERSIONS = {"g++": 11, "clang++": 14}


class SimToolchainError(RuntimeError):
    """No usable host C++ compiler for the simulator."""


# ---- the host compiler -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Compiler:
    path: str
    kind: str          # "g++" or "clang++"
    version: str

    @property
    def tool(self) -> str:
        return f"{self.kind}-{self.version}"


_COMPILER: Compiler | None = None


def _probe(cmd: str) -> Compiler | None:
    path = shutil.which(cmd)
    if not path:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    kind = "clang++" if "clang" in out else "g++"
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out.splitlines()[0] if out else "")
    if not m:
        return None
    if int(m.group(1)) < MIN_VERSIONS[kind]:
        return None
    return Compiler(path, kind, m.group(0))


def compiler() -> Compiler:
    """The host compiler: $PELIB_SIM_CXX, $CXX, g++, clang++ or c++, the first that is new enough."""
    global _COMPILER
    if _COMPILER is None:
        tried = []
        for c in (os.environ.get("PELIB_SIM_CXX"), os.environ.get("CXX"), "g++", "clang++", "c++"):
            if not c:
                continue
            tried.append(c)
            got = _probe(c)
            if got:
                _COMPILER = got
                break
        else:
            raise SimToolchainError(
                f"the simulator needs a host C++17 compiler, g++ >= 11 or clang++ >= 14 (tried {', '.join(tried)}): "
                "install one (Debian/Ubuntu: apt-get install g++; conda: conda install -c conda-forge gxx) or "
                "point PELIB_SIM_CXX at it")
    return _COMPILER


# ---- host builds, cached -----------------------------------------------------------------------------

_CACHE_DIR: Path | None = None      # tests may set it (like pelib.build.CACHE_DIR)


def _store() -> _cache.Cache:
    return _cache.Cache(_CACHE_DIR) if _CACHE_DIR is not None else _cache.DEFAULT


@dataclass
class HostBuild:
    """A shared library the host compiler built (or the cache gave back)."""

    path: Path
    cached: bool
    seconds: float = 0.0
    log: str = ""


_MEMO: dict = {}   # (cache root, name, key) -> (HostBuild, [(dependency, mtime_ns, size)]): this process's lookups


def _stamp(paths) -> list:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((str(p), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(p), None, None))
    return out


def _compile(name: str, source_text: str, files: list[tuple[str, bytes]], flags: list[str], out_name: str) -> HostBuild:
    """Compile one translation unit (given as text) into a shared library, through the cache."""
    import time
    cc = compiler()
    base = _cache.key(files=files + [("tu.cpp", source_text.encode())], options={"flags": flags}, tool=cc.tool)
    store = _store()
    memo_key = (str(store.root), name, base)
    hit = _MEMO.get(memo_key)
    if hit is not None and hit[0].path.is_file() and _stamp(p for p, _, _ in hit[1]) == hit[1]:
        return HostBuild(hit[0].path, True)
    entry = store.lookup(name, base, require=(out_name,))
    if entry is not None and entry.read(out_name) is not None:
        deps = json.loads((entry.path / "meta.json").read_text()).get("deps") or []
        _MEMO[memo_key] = (HostBuild(entry.path / out_name, True), _stamp(d for d, _ in deps))
        return HostBuild(entry.path / out_name, True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pelib-sim-") as tmp:
        src = Path(tmp) / "tu.cpp"
        src.write_text(source_text)
        out = Path(tmp) / out_name
        dep = Path(tmp) / "tu.d"
        cmd = [cc.path, *flags, "-MD", "-MF", str(dep), str(src), "-o", str(out)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SimBuildError(f"the host compiler could not build {name} for the simulator:\n"
                                f"{' '.join(cmd)}\n{p.stderr.strip()[-6000:]}")
        deps = [d for d in _cache.parse_depfile(dep.read_text()) if d.resolve() != src.resolve()]
        data = out.read_bytes()
        secs = time.perf_counter() - t0
        e = store.store(name, base, deps, {out_name: data}, {"compiler": cc.tool, "flags": flags})
        if e is not None:
            return HostBuild(e.path / out_name, False, secs, p.stderr)
        keep = Path(tempfile.mkdtemp(prefix="pelib-sim-uncached-")) / out_name
        keep.write_bytes(data)
        return HostBuild(keep, False, secs, p.stderr)


class SimBuildError(RuntimeError):
    """The host compiler rejected the stage, a twin header or the engine; the message has its log."""


def _includes() -> list[str]:
    return [f"-I{SIM_DIR}", f"-I{KERNELS}"]


def engine_build() -> HostBuild:
    """The engine + models library (src/kernels/sim/runtime and model), cached."""
    text = "".join(f'#include "{SIM_DIR / s}"\n' for s in RUNTIME_SOURCES)
    return _compile("pesim-engine", text, [], [*CXXFLAGS, ENGINE_OPT, *_includes()], "libpesim.so")


def _define_flags(defines: dict) -> list[str]:
    out = []
    for k, v in sorted((defines or {}).items()):
        out.append(f"-D{k}" if v is None or v is True else f"-D{k}={int(v) if isinstance(v, bool) else v}")
    return out


def stage_build(source: Path, kernel: str, defines: dict | None = None) -> HostBuild:
    """The stage file, unchanged, plus the entry point (runtime/entry.h), as a host shared library."""
    source = Path(source).resolve()
    text = f'#include "{source}"\n#include "runtime/entry.h"\nPE_SIM_ENTRY({kernel})\n'
    flags = [*CXXFLAGS, STAGE_OPT, *_includes(), *_define_flags(defines or {})]
    return _compile(f"{source.stem}-sim", text, [], flags, "stage.so")


# ---- loading ---------------------------------------------------------------------------------------

_ENGINE: dict[str, ctypes.CDLL] = {}
_COPIES: dict[str, list[ctypes.CDLL]] = {}
_COPY_DIR: Path | None = None


def load_engine() -> ctypes.CDLL:
    """The engine library, built or cached, loaded once per process (RTLD_GLOBAL: stage libraries bind to it)."""
    b = engine_build()
    key = str(b.path)
    if _ENGINE and key not in _ENGINE:
        raise SimBuildError("the simulator's engine (src/kernels/sim/runtime, model) changed after this process "
                            "loaded it: stage libraries bind to the first engine loaded, so restart Python")
    if key not in _ENGINE:
        lib = ctypes.CDLL(key, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        lib.pe_sim_run.argtypes = [ctypes.c_void_p]
        lib.pe_sim_run.restype = ctypes.c_int
        lib.pe_sim_report_json.restype = ctypes.c_char_p
        lib.pe_sim_events.argtypes = [ctypes.POINTER(ctypes.c_int64)]
        lib.pe_sim_events.restype = ctypes.c_void_p
        lib.pe_sim_event_size.restype = ctypes.c_int
        _ENGINE[key] = lib
    return _ENGINE[key]


def load_copies(lib: Path, n: int) -> list[ctypes.CDLL]:
    """n loaded copies of one stage library: each copy's thread-local block is one CTA's shared memory."""
    global _COPY_DIR
    key = str(lib)
    have = _COPIES.setdefault(key, [])
    if len(have) < n:
        if _COPY_DIR is None:
            _COPY_DIR = Path(tempfile.mkdtemp(prefix="pelib-sim-slots-"))
        for i in range(len(have), n):
            dst = _COPY_DIR / f"{abs(hash(key)):x}-{i}.so"
            shutil.copyfile(lib, dst)
            have.append(ctypes.CDLL(str(dst), mode=os.RTLD_NOW | os.RTLD_LOCAL))
    return have[:n]
