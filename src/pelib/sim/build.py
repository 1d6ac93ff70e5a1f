"""The simulator's host side: find the host C++ compiler, build the engine and stage libraries (cached), load them."""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import cache as _cache
from ..paths import KERNELS

SIM_DIR = KERNELS / "sim"
RUNTIME_SOURCES = ("runtime/engine.cpp", "runtime/fiber.cpp", "model/abi.cpp")   # abi: the models' C ABI
# -O1 for both: measured here, -O2 builds the engine in 10.9 s instead of 8.3 s and a stage in 0.85 s
# instead of 0.7 s, and runs a test-size stage no faster (0.2-0.5 s either way); the MMA arithmetic's block
# loops, where a run spends most of its time, carry their own -O3 and AVX2 (model/blockfma.h). An engine at -O3
# builds in 13 s and runs a test-size stage 3-15 % faster (2026-12-07). PELIB_SIM_OPT overrides.
OPT_ENV = "PELIB_SIM_OPT"
DEFAULT_OPT = "-O1"


def opt_level() -> str:
    """The optimisation flag of the engine and stage builds: PELIB_SIM_OPT (one -O level), else -O1."""
    raw = os.environ.get(OPT_ENV, "").strip()
    if not raw:
        return DEFAULT_OPT
    if not re.fullmatch(r"-O[0-3sgz]?|-Ofast", raw):
        raise SimBuildError(f"{OPT_ENV}={os.environ[OPT_ENV]!r}: one optimisation level of the host compiler "
                            f"(-O0, -O1, -O2, -O3, -Os, -Og); the default is {DEFAULT_OPT}: set one or unset {OPT_ENV}")
    return raw
# -ffp-contract=off: the host rounds every float multiply and add on its own, as written. NVRTC contracts
# a*b+c into one FMA by default (NVRTC guide, "Supported Compile Options": --fmad=true), but no stage's
# SASS holds an FFMA or DFMA (tests/test_sim_build.py checks every cubin), so the device rounds each one
# too; g++ would fuse at -O2 on FMA hardware (-march=native, PELIB_SIM_OPT=-O2) and at -O1 never (GCC
# manual, -ffp-contract): pinned, the simulated epilogue and the data-path models round alike on any host.
CXXFLAGS = ("-std=c++17", "-fPIC", "-shared", "-g0", "-fno-strict-aliasing", "-ffp-contract=off",
            "-Wno-unknown-pragmas", "-Wno-ignored-attributes", "-Wno-attributes")
MIN_VERSIONS = {"g++": 11, "clang++": 14}


class SimToolchainError(RuntimeError):
    """No usable host C++ compiler for the simulator."""


# ---- the host compiler -----------------------------------------------------------------------------

NEED = ("the simulator needs a host C++17 compiler driver, g++ >= 11 or clang++ >= 14: install one (Debian/Ubuntu: "
        "apt-get install g++; conda: conda install -c conda-forge gxx) or point PELIB_SIM_CXX at it")


class SimToolchainWarning(UserWarning):
    """$CXX names no usable C++ compiler, so the simulator picked another (the warning says which and why)."""


@dataclass(frozen=True)
class Compiler:
    path: str          # as found on PATH (what runs)
    kind: str          # "g++" or "clang++"
    version: str
    real: str = ""     # the resolved file (symlinks followed): two names of one compiler share it
    banner: str = ""   # the first line of --version after the program's name (vendor and patch level)

    @property
    def tool(self) -> str:
        return f"{self.kind}-{self.version}"

    @property
    def identity(self) -> str:
        """What a cache key holds of the compiler: its resolved path and full version line (the flags beside it)."""
        return f"{self.tool} {self.real or self.path} {self.banner}"


_COMPILERS: dict = {}   # (PELIB_SIM_CXX, CXX, PATH) -> Compiler: one probe per environment


def _probe(cmd: str) -> tuple[Compiler | None, str]:
    """(the compiler `cmd` names, "") or (None, why it cannot build the simulator)."""
    path = shutil.which(cmd)
    if not path:
        return None, "not found" + ("" if os.sep in cmd else " on PATH")
    try:
        p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{path} does not run ({e})"
    lines = (p.stdout or "").strip().splitlines()
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", lines[0]) if lines else None
    if p.returncode != 0 or not m:
        return None, f"{path} --version printed no compiler version (exit status {p.returncode}): not a compiler"
    kind = "clang++" if "clang" in p.stdout else "g++"
    if int(m.group(1)) < MIN_VERSIONS[kind]:
        return None, f"{path} is {kind} {m.group(0)}, older than {kind} {MIN_VERSIONS[kind]}"
    # A C++ driver links the C++ standard library into a shared object; gcc and cc compile a .cpp file
    # but link none, so what they build fails to load (undefined std:: symbols). `-###` prints the
    # commands the driver would run without running them (GCC manual, "Overall Options"; clang accepts it).
    try:
        d = subprocess.run([path, "-###", "-shared", "-x", "c++", os.devnull, "-o", os.devnull],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{path} does not run ({e})"
    if not re.search(r"-l(stdc|c)\+\+(?![\w+])", d.stderr + d.stdout):
        return None, (f"{path} ({lines[0].strip()}) is not a C++ compiler driver: it links no C++ standard library "
                      "(-lstdc++ or -lc++) into a shared object, so the libraries it builds would not load; name "
                      "the C++ driver of the same compiler (g++, clang++)")
    # the version line without the name it was called by (g++ and c++ print the same line after it)
    return Compiler(path, kind, m.group(0), os.path.realpath(path), re.sub(r"^\S+\s+", "", lines[0].strip())), ""


def compiler() -> Compiler:
    """The host compiler: $PELIB_SIM_CXX if set (it or an error, never another), else $CXX, g++, clang++ or c++,
    the first that is a C++ driver new enough ($CXX skipped with a warning that says why)."""
    named = os.environ.get("PELIB_SIM_CXX", "").strip()
    cxx = os.environ.get("CXX", "").strip()
    env = (named, cxx, os.environ.get("PATH", ""))
    if env in _COMPILERS:
        return _COMPILERS[env]
    if named:
        got, why = _probe(named)
        if got is None:
            raise SimToolchainError(f"PELIB_SIM_CXX={named!r}: {why}. {NEED[0].upper() + NEED[1:]}, or unset "
                                    "PELIB_SIM_CXX to let pelib find one")
    else:
        tried = []
        for c in (cxx, "g++", "clang++", "c++"):
            if not c:
                continue
            got, why = _probe(c)
            if got is not None:
                break
            tried.append(f"{c}: {why}")
            if c == cxx:
                warnings.warn(f"CXX={cxx!r} cannot build the simulator ({why}); trying g++, clang++, c++ "
                              "(set PELIB_SIM_CXX to name the compiler)", SimToolchainWarning, stacklevel=2)
        else:
            raise SimToolchainError(f"{NEED} (tried {'; '.join(tried)})")
    _COMPILERS[env] = got
    return got


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


_MEMO: dict = {}     # (cache root, name, key) -> (HostBuild, [(dependency, mtime_ns, size)]): this process's lookups
_RECIPES: dict = {}   # library path -> the _compile arguments that made it, so a library that fails to load is rebuilt


def _stamp(paths) -> list:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((str(p), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(p), None, None))
    return out


def build_key(cc: Compiler, source_text: str, flags, files=()) -> str:
    """The cache key of one host build: the translation unit, the flags and the compiler's identity (its
    resolved path and full version line), so gcc and g++ of one release never share a library."""
    return _cache.key(files=list(files) + [("tu.cpp", source_text.encode())], options={"flags": list(flags)},
                      tool=cc.identity)


def _compile(name: str, source_text: str, files: list[tuple[str, bytes]], flags: list[str], out_name: str,
             *, fresh: bool = False, beside: dict | None = None) -> HostBuild:
    """Compile one translation unit (given as text) into a shared library, through the cache (fresh=True:
    build even where the cache has an entry, and replace it). The key holds the compiler's resolved path and
    full version line and the flags: a library is served only to the compiler and flags that built it.
    `beside`: more files ({name: bytes}) the cache entry keeps next to the output."""
    import time
    cc = compiler()
    base = build_key(cc, source_text, flags, files)
    store = _store()
    memo_key = (str(store.root), name, base)
    recipe = (name, source_text, files, flags, out_name)
    hit = None if fresh else _MEMO.get(memo_key)
    if hit is not None and hit[0].path.is_file() and _stamp(p for p, _, _ in hit[1]) == hit[1]:
        return HostBuild(hit[0].path, True)
    entry = None if fresh else store.lookup(name, base, require=(out_name,))
    if entry is not None and entry.read(out_name) is not None:
        deps = json.loads((entry.path / "meta.json").read_text()).get("deps") or []
        _MEMO[memo_key] = (HostBuild(entry.path / out_name, True), _stamp(d for d, _ in deps))
        _RECIPES[str(entry.path / out_name)] = recipe
        return HostBuild(entry.path / out_name, True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}build-{os.getpid()}-") as tmp:
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
        e = store.store(name, base, deps, {out_name: data, **(beside or {})},
                        {"compiler": cc.tool, "compiler_path": cc.real, "compiler_version": cc.banner, "flags": flags})
        if e is not None:
            _MEMO.pop(memo_key, None)
            _RECIPES[str(e.path / out_name)] = recipe
            return HostBuild(e.path / out_name, False, secs, p.stderr)
        keep = _scratch("uncached") / f"{name}-{base}-{out_name}"
        keep.write_bytes(data)
        _RECIPES[str(keep)] = recipe
        return HostBuild(keep, False, secs, p.stderr)


class SimBuildError(RuntimeError):
    """The host compiler rejected the stage, a twin header or the engine; the message has its log."""


def _includes() -> list[str]:
    return [f"-I{SIM_DIR}", f"-I{KERNELS}"]


def engine_build() -> HostBuild:
    """The engine + models library (src/kernels/sim/runtime and model), cached."""
    text = "".join(f'#include "{SIM_DIR / s}"\n' for s in RUNTIME_SOURCES)
    # -lrt: timer_create (the watchdog, runtime/memory.cpp) lives there before glibc 2.34
    return _compile("pesim-engine", text, [], [*CXXFLAGS, opt_level(), *_includes(), "-lrt"], "libpesim.so")


def _define_flags(defines: dict) -> list[str]:
    out = []
    for k, v in sorted((defines or {}).items()):
        out.append(f"-D{k}" if v is None or v is True else f"-D{k}={int(v) if isinstance(v, bool) else v}")
    return out


# Every load and store of a stage's own code calls the engine first (runtime/memory.cpp): the compiler's
# kernel-address instrumentation in outline mode, which links no runtime library; no stack or global redzones;
# large frames probe their pages (a stack overflow hits the guard page). -g1: line tables only, so a report
# about a plain pointer access names its source line; -gdwarf-4: binutils 2.40's addr2line names some lines of
# a DWARF 5 table by the translation unit's file (the build's deleted tu.cpp) instead of the stage's .cu.
INSTRUMENT = {"g++": ("-g1", "-gdwarf-4", "-fstack-clash-protection", "-fsanitize=kernel-address",
                      "--param=asan-instrumentation-with-call-threshold=0", "--param=asan-globals=0",
                      "--param=asan-stack=0"),
              "clang++": ("-g1", "-gdwarf-4", "-fstack-clash-protection", "-fsanitize=kernel-address", "-mllvm",
                          "-asan-instrumentation-with-call-threshold=0", "-mllvm", "-asan-globals=0", "-mllvm",
                          "-asan-stack=0")}


# The host calls that would end the process (runtime/memory.cpp's __wrap_*): a stage library's references to
# them bind to the engine's wrappers, which turn a call from a simulated thread into a report.
WRAPPED = ("abort", "exit", "_exit", "_Exit", "quick_exit", "pthread_exit", "__assert_fail", "raise", "kill")
# The C library's block copies, whose own accesses the instrumentation does not see: the wrappers check both
# ranges as the stage's accesses first.
CHECKED = ("memcpy", "memmove", "memset")
LINK_WRAP = ("-Wl," + ",".join(f"--wrap={w}" for w in WRAPPED + CHECKED),)


# The system headers every stage library includes (runtime/api.h, runtime/entry.h), parsed once into a precompiled
# header (g++ only): a stage builds in 0.25 s instead of 0.36 s, into the same machine code (measured here on
# sm90/06, 2026-12-07). The library includes it first; the headers' own include guards make their later
# inclusions empty, and no stage macro reaches them (a stage's defines are its own, pelib.build.check_defines).
PRELUDE_HEADERS = ("cmath", "cstddef", "cstdint", "cstdio", "cstring", "type_traits", "utility", "link.h", "dlfcn.h")


def prelude_dir(flags: list[str]) -> Path | None:
    """The cached folder holding prelude.h and its precompiled prelude.h.gch for these compile flags (the stage
    build's, less its linking and its defines), or None where there is none to use (clang++, no writable cache,
    a compiler that cannot make one): the stage then builds without it, the same library a little slower."""
    if compiler().kind != "g++":
        return None
    text = "".join(f"#include <{h}>\n" for h in PRELUDE_HEADERS)
    pch_flags = [f for f in flags if f != "-shared" and not f.startswith(("-Wl,", "-D"))] + ["-x", "c++-header"]
    try:
        b = _compile("pesim-prelude", text, [], pch_flags, "prelude.h.gch", beside={"prelude.h": text.encode()})
    except SimBuildError:
        return None
    d = b.path.parent
    return d if b.path.name == "prelude.h.gch" and (d / "prelude.h").is_file() else None


def stage_build(source: Path, kernel: str, defines: dict | None = None) -> HostBuild:
    """The stage file, unchanged, plus the entry point (runtime/entry.h), as a host shared library whose every
    memory access the engine checks."""
    source = Path(source).resolve()
    text = f'#include "{source}"\n#include "runtime/entry.h"\nPE_SIM_ENTRY({kernel})\n'
    flags = [*CXXFLAGS, opt_level(), *INSTRUMENT[compiler().kind], *LINK_WRAP, *_includes(),
             *_define_flags(defines or {})]
    pre = prelude_dir(flags)
    if pre is not None:
        text = '#include "prelude.h"\n' + text
        flags = [f"-I{pre}", "-Winvalid-pch", *flags]   # a header it cannot use says so in the build log
    return _compile(f"{source.stem}-sim", text, [], flags, "stage.so")


# ---- temporary folders -----------------------------------------------------------------------------
# Loaded copies of a stage library (one per CTA slot), a build in progress and builds an unwritable cache
# could not keep live in folders named pelib-sim-<what>-<pid>-*: removed when they are done with (copies,
# a build) or at exit (uncached builds), and by the next process where the one that made them is gone.

SCRATCH_PREFIX = "pelib-sim-"
_SCRATCH: dict[str, Path] = {}
STALE_S = 3600.0   # a folder without a process id, from before they carried one, older than this is stale


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:      # another user's process (EPERM): alive
        return True
    return True


def remove_stale(tmp: str | None = None) -> list[Path]:
    """Remove the pelib-sim-slots-*, -uncached-* and -build-* folders whose process has ended; returns them."""
    import time
    root = Path(tmp or tempfile.gettempdir())
    gone = []
    try:
        cands = [p for w in ("slots", "uncached", "build") for p in root.glob(f"{SCRATCH_PREFIX}{w}-*")]
    except OSError:
        return gone
    for p in cands:
        m = re.fullmatch(rf"{SCRATCH_PREFIX}(?:slots|uncached|build)-(\d+)-.*", p.name)
        try:
            if not p.is_dir() or p.is_symlink() or p.stat().st_uid != os.getuid():
                continue
            stale = (not _pid_alive(int(m.group(1)))) if m else time.time() - p.stat().st_mtime > STALE_S
        except OSError:
            continue
        if stale and (not m or int(m.group(1)) != os.getpid()):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
    return gone


_SWEPT: list = []   # remove_stale() has run in this process


def _sweep_once() -> None:
    if not _SWEPT:
        _SWEPT.append(remove_stale())


def _scratch(what: str) -> Path:
    """This process's pelib-sim-<what>-<pid>-* folder (made once; stale ones of ended processes go first)."""
    d = _SCRATCH.get(what)
    if d is None or not d.is_dir():
        _sweep_once()
        d = _SCRATCH[what] = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{what}-{os.getpid()}-"))
        if len(_SCRATCH) == 1:
            atexit.register(_remove_scratch)
    return d


def _remove_scratch() -> None:
    for d in _SCRATCH.values():
        shutil.rmtree(d, ignore_errors=True)
    _SCRATCH.clear()


# ---- loading ---------------------------------------------------------------------------------------

_ENGINE: dict[str, ctypes.CDLL] = {}
_COPIES: dict[str, list[ctypes.CDLL]] = {}


def _rebuild(path: Path, err: OSError, what: str) -> Path:
    """A library this module built that fails to load (a cached library another compiler built, a damaged
    file): its cache entry discarded, then built fresh by this process's compiler; the new path."""
    recipe = _RECIPES.get(str(path))
    if recipe is None:
        raise SimBuildError(f"{what} {path} does not load ({err})")
    cc = compiler()
    if (path.parent / "meta.json").is_file():
        _store().drop(path.parent, f"{path.name} does not load: {err}")
    for k in [k for k, (b, _) in _MEMO.items() if b.path == path]:
        del _MEMO[k]
    warnings.warn(f"{what} {path} does not load ({err}): discarded, rebuilding it with {cc.tool} ({cc.path})",
                  _cache.CacheWarning, stacklevel=3)
    return _compile(*recipe, fresh=True).path


def _load(path: Path, mode: int, what: str) -> ctypes.CDLL:
    """dlopen a library this module built, rebuilt once (_rebuild) if it fails to load."""
    try:
        return ctypes.CDLL(str(path), mode=mode)
    except OSError as first:
        fresh = _rebuild(path, first, what)
    try:
        return ctypes.CDLL(str(fresh), mode=mode)
    except OSError as again:
        raise SimBuildError(_unloadable(what, again)) from None


def _unloadable(what: str, err: OSError) -> str:
    cc = compiler()
    return (f"{what}, built fresh by {cc.tool} ({cc.path}), does not load either ({err}): this compiler does not "
            "build loadable C++ shared objects here; point PELIB_SIM_CXX at another C++ compiler")


def load_engine() -> ctypes.CDLL:
    """The engine library, built or cached, loaded once per process (RTLD_GLOBAL: stage libraries bind to it)."""
    b = engine_build()
    key = str(b.path)
    if _ENGINE and key not in _ENGINE:
        raise SimBuildError("the simulator's engine (src/kernels/sim/runtime, model) changed after this process "
                            "loaded it: stage libraries bind to the first engine loaded, so restart Python")
    if key not in _ENGINE:
        lib = _load(b.path, os.RTLD_NOW | os.RTLD_GLOBAL, "the simulator's engine")
        lib.pe_sim_run.argtypes = [ctypes.c_void_p]
        lib.pe_sim_run.restype = ctypes.c_int
        lib.pe_sim_report_json.restype = ctypes.c_char_p
        lib.pe_sim_events.argtypes = [ctypes.POINTER(ctypes.c_int64)]
        lib.pe_sim_events.restype = ctypes.c_void_p
        lib.pe_sim_event_size.restype = ctypes.c_int
        lib.pe_sim_max_ctas.restype = ctypes.c_uint64
        _ENGINE[key] = lib
    return _ENGINE[key]


def load_copies(lib: Path, n: int) -> list[ctypes.CDLL]:
    """n loaded copies of one stage library: each copy's thread-local block is one CTA's shared memory. Each
    copy's file is removed once loaded (the mapping stays), so no copy outlives the call."""
    key = str(lib)
    have = _COPIES.setdefault(key, [])
    if len(have) < n:
        _sweep_once()   # what killed or crashed processes left behind
        d = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}slots-{os.getpid()}-"))
        try:
            for i in range(len(have), n):
                dst = d / f"{abs(hash(key)):x}-{i}.so"
                shutil.copyfile(lib, dst)
                try:
                    have.append(ctypes.CDLL(str(dst), mode=os.RTLD_NOW | os.RTLD_LOCAL))
                except OSError as e:
                    if have:   # a copy of a library whose first copy loaded: nothing to rebuild
                        raise SimBuildError(f"a copy of the stage library {lib} does not load ({e})") from None
                    lib = _rebuild(Path(lib), e, f"the stage library {Path(lib).name}")
                    shutil.copyfile(lib, dst)
                    try:
                        have.append(ctypes.CDLL(str(dst), mode=os.RTLD_NOW | os.RTLD_LOCAL))
                    except OSError as again:
                        raise SimBuildError(_unloadable("the stage library", again)) from None
                dst.unlink()   # the mapping stays; nothing of the copy is left on disk
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return have[:n]
