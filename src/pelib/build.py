"""Compile a kernel stage with NVRTC (through cuda.core) and report what ptxas and nvdisasm say."""
from __future__ import annotations

import difflib
import functools
import inspect
import io
import os
import re
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from . import cache as _cache
from .isa import elf, sass as _sass
from .paths import KERNELS

ARCHS = ("sm_100a", "sm_90a")
# An explicit cache folder (tests set it); None: PELIB_CACHE, XDG_CACHE_HOME or ~/.cache, at each build.
CACHE_DIR: Path | None = None
# Options build() sets itself; extra_options may not replace them (use build()'s own arguments).
OWNED_OPTIONS = {"arch": "arch=", "std": None, "define_macro": "defines=", "include_path": None,
                 "ptxas_options": None, "name": "the file's name", "no_cache": None}
# NVRTC 12.9 and later keep a compile cache of their own (NVRTC guide, "Caching (CUDA 12.9+)"); a program it
# serves from there skips ptxas, so `-v` reports nothing (NVIDIA/Fuser PRs 4684 and 4694; NVIDIA/cuda-python
# issue 1124). Every build here reads its facts from that report, and pelib.cache caches the result itself:
# `--no-cache` from this version on.
NVRTC_CACHE_FROM = (12, 9)
MAX_SOURCE_BYTES = 8 << 20      # a kernel source or header larger than this is not one
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>|([A-Za-z_]\w*))', re.M)
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


class BuildError(RuntimeError):
    """NVRTC rejected a kernel; the message carries the log and the offending lines."""


class ToolchainError(RuntimeError):
    """NVRTC or nvdisasm could not be found or loaded."""


class MissingFacts(BuildError):
    """NVRTC returned a cubin whose entry functions its log gives no ptxas facts for."""


@dataclass(frozen=True)
class PtxasFacts:
    """One kernel's resource report from `ptxas -v`."""

    kernel: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    smem_static: int
    barriers: int = 0

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclass
class Build:
    """A compiled stage: cubin, ptxas facts, exported constants and (lazily) its SASS."""

    source: Path
    arch: str
    defines: dict
    cubin: bytes
    log: str
    ptxas: dict[str, PtxasFacts]
    exports: dict[str, int] = field(default_factory=dict)
    cached: bool = False
    entry: object = field(default=None, repr=False, compare=False)   # its pelib.cache.Entry, if cached

    @property
    def kernel(self) -> str:
        """The single __global__ entry (error if the file has none or several)."""
        if not self.ptxas and len(entries := elf.entry_functions(self.cubin)) == 1:
            return entries[0]   # a log without ptxas facts: the cubin still names its one kernel
        if not self.ptxas:
            raise ValueError(f"{self.source.name} defines no __global__ kernel (ptxas compiled no entry "
                             "function): add one, or check the #if around it")
        if len(self.ptxas) != 1:
            raise ValueError(f"{self.source.name} has kernels {sorted(self.ptxas)}: read b.ptxas[name] "
                             "for one kernel's facts, and pass kernel=name to pelib.launch.prepare")
        return next(iter(self.ptxas))

    @property
    def facts(self) -> PtxasFacts:
        return self.ptxas[self.kernel]

    @property
    def dynamic_smem(self) -> int:
        """Dynamic shared memory the stage declares (its `PELIB_EXPORT(smem_bytes, ...)`)."""
        if "smem_bytes" not in self.exports:
            raise KeyError(f"{self.source.name} exports no smem_bytes (PELIB_EXPORT(smem_bytes, ...))")
        return self.exports["smem_bytes"]

    @property
    def smem_total(self) -> int:
        return self.facts.smem_static + self.exports.get("smem_bytes", 0)

    @cached_property
    def sass(self) -> str:
        """nvdisasm's listing, kept in the cache entry next to the cubin (checked like it)."""
        if self.entry is not None and self.entry.has(SASS_FILE):
            data = self.entry.read(SASS_FILE)
            if data is not None:
                return data.decode()
        text = _sass.disassemble(self.cubin)
        if self.entry is not None:
            self.entry.add(SASS_FILE, text.encode())
        return text

    @cached_property
    def histogram(self):
        return _sass.opcode_histogram(self.sass)

    def summary(self) -> dict:
        f = self.facts
        return {
            "stage": self.source.stem,
            "arch": self.arch,
            "registers": f.registers,
            "spill_stores": f.spill_stores,
            "spill_loads": f.spill_loads,
            "stack": f.stack,
            "smem_static": f.smem_static,
            "smem_dynamic": self.exports.get("smem_bytes", 0),
        }


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?"
                         r"(?:, \d+ bytes cumulative stack size)?(?:, (\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, PtxasFacts]:
    """Parse `ptxas -v` output into facts per entry function (mangled names kept)."""
    out: dict[str, PtxasFacts] = {}
    current = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current, frame = m.group(1), (0, 0, 0)
        elif current and (m := _PTXAS_FRAME.search(line)):
            frame = tuple(int(x) for x in m.groups())
        elif current and (m := _PTXAS_USED.search(line)):
            regs, bars, smem = (int(x) if x else 0 for x in m.groups())
            out[current] = PtxasFacts(current, regs, frame[1], frame[2], frame[0], smem, bars)
            current = None
    return out


def toolchain_version() -> str:
    """NVRTC's version, part of the cache key."""
    major, minor = _nvrtc_version()
    return f"nvrtc-{major}.{minor}"


def _nvrtc_version() -> tuple[int, int]:
    try:
        from cuda.bindings import nvrtc
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # pragma: no cover - depends on the machine
        raise ToolchainError(
            f"NVRTC could not be loaded ({e}). Install it: pip install nvidia-cuda-nvrtc "
            "(make test / make book do this in .venv)") from e
    if int(err) != 0:
        raise ToolchainError(f"nvrtcVersion failed: {err}")
    return int(major), int(minor)


def _include_paths(source_dir: Path) -> list[str]:
    """The stage's own folder (NVRTC compiles from a string, so it has none), then src/kernels."""
    paths = [str(source_dir), str(KERNELS)]
    try:
        import cuda.pathfinder as pf
        cccl = pf.find_nvidia_header_directory("cccl")
        if cccl:
            paths.append(cccl)
    except Exception:
        pass  # CCCL is optional: the kernels include none of it
    return paths


def _format_defines(defines: dict) -> list[str]:
    out = []
    for k, v in sorted(defines.items()):
        if not re.fullmatch(r"[A-Za-z_]\w*", k):
            raise ValueError(f"bad macro name {k!r}")
        out.append(k if v is True else f"{k}={int(v) if isinstance(v, bool) else v}")
    return out


def _offending_lines(log: str, sources: dict[str, str], context: int = 1) -> str:
    """Pull `file(line): error` locations out of an NVRTC log and show those source lines."""
    shown = []
    for fname, lineno in re.findall(r"^(.+?)\((\d+)\): (?:error|catastrophic error)", log, re.M):
        text = sources.get(Path(fname).name)
        if text is None:
            continue
        lines = text.splitlines()
        n = int(lineno)
        lo, hi = max(1, n - context), min(len(lines), n + context)
        block = [f"{Path(fname).name}:{i:>5}{' >' if i == n else '  '} {lines[i - 1]}" for i in range(lo, hi + 1)]
        shown.append("\n".join(block))
    return "\n---\n".join(shown)


CUBIN_FILE, LOG_FILE, SASS_FILE = "kernel.cubin", "ptxas.log", "kernel.sass"
_CACHES: dict = {}


def _cache_for(root) -> _cache.Cache:
    """One Cache per folder (None: resolved at each use), so each warns once per process."""
    if root not in _CACHES:
        _CACHES[root] = _cache.Cache(root)
    return _CACHES[root]


def _kernel_path(stage) -> Path:
    """The stage's file: a path, or a name relative to src/kernels; refuse what is not a CUDA source file."""
    if not isinstance(stage, (str, os.PathLike)):
        raise TypeError(f"stage must be a path or a name under src/kernels (e.g. 'fp8/06_stages.cu'), "
                        f"got {type(stage).__name__} {stage!r}")
    path = Path(stage)
    if not path.is_absolute():
        path = KERNELS / path
    if not path.exists():
        raise FileNotFoundError(f"no kernel file {path}")
    if path.is_dir():
        raise BuildError(f"{path} is a folder: pass one stage file in it, e.g. "
                         f"{next(iter(sorted(path.glob('*.cu'))), path / 'NN_<idea>.cu')}")
    if path.suffix != ".cu":
        raise BuildError(f"{path} is not a CUDA source file (.cu): build() compiles one kernel stage")
    return path


def read_source(path: Path) -> str:
    """A source or header as text: a regular file, at most MAX_SOURCE_BYTES, UTF-8; errors name the file."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise BuildError(f"cannot read {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        what = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode)
                else "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "not a regular file")
        raise BuildError(f"{path} is {what}, not a source file: pass a regular .cu/.cuh file")
    if st.st_size > MAX_SOURCE_BYTES:
        raise BuildError(f"{path} has {st.st_size} B, more than {MAX_SOURCE_BYTES} B: not a kernel source")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise BuildError(f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} "
                         f"(line {line}); save the file as UTF-8") from None


def expand_sources(path: Path, include_dirs: list[Path]) -> list[tuple[str, Path, str]]:
    """(name it was included as, file, text) for the stage and every header it reaches, as NVRTC resolves them.

    Quoted includes are looked up next to the including header, then on the include path; `<...>` ones
    on the include path only (the stage itself has no folder to NVRTC, which compiles a string, so its
    folder is the first include directory). A `<...>` include found nowhere is one of NVRTC's built-in
    headers (covered by the toolchain version). An include through a macro cannot be followed: then
    every header under the stage's folder and src/kernels counts.
    """
    out: list[tuple[str, Path, str]] = []
    seen: set[Path] = set()

    def visit(name: str, p: Path, top: bool) -> None:
        p = p.resolve()
        if p in seen:
            return
        seen.add(p)
        text = read_source(p)
        out.append((name, p, text))
        for quoted, angled, macro in _INCLUDE_RE.findall(text):
            if macro:
                for d in include_dirs[:2]:
                    for h in sorted(Path(d).rglob("*")):
                        if h.suffix in (".cuh", ".h", ".hpp", ".inc") and h.is_file():
                            visit(str(h.relative_to(d)), h, False)
                continue
            inc = quoted or angled
            bases = ([] if top or angled else [p.parent]) + list(include_dirs)
            for base in bases:
                cand = Path(base) / inc
                if cand.is_file():
                    visit(inc, cand, False)
                    break

    visit(path.name, path, True)
    return out


def check_defines(defines: dict, sources: list[tuple[str, Path, str]], stage: Path) -> None:
    """Refuse a define whose name occurs in none of the sources (a typo would build the default kernel), or
    whose value is empty (NVRTC would expand the macro to nothing and fail on every use of it)."""
    texts = [t for _, _, t in sources]
    words = None
    for name, value in defines.items():
        if isinstance(value, str) and not value.strip():
            raise ValueError(f"define {name}={value!r} has no value: give one (e.g. {name}=4), or leave {name} "
                             f"out for {stage.name}'s default")
        pat = re.compile(rf"\b{re.escape(name)}\b")
        if any(pat.search(t) for t in texts):
            continue
        if words is None:
            words = sorted({w for t in texts for w in _IDENT_RE.findall(t) if len(w) > 2})
        near = difflib.get_close_matches(name, words, n=3, cutoff=0.75)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        raise ValueError(f"define {name!r} occurs nowhere in {stage.name} or the {len(sources) - 1} headers it "
                         f"includes, so it would change nothing{hint}")


def _program(stage, arch: str, defines: dict | None) -> tuple[Path, dict, list, dict]:
    """What build() and ptx() compile: the stage's path, its defines (checked against its sources), the
    sources it includes, and the NVRTC options both share (arch, C++17, defines, include paths)."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: the book builds for {', '.join(ARCHS)}")
    path = _kernel_path(stage)
    defines = dict(defines or {})
    include_dirs = _include_paths(path.parent)
    srcs = expand_sources(path, [Path(d) for d in include_dirs])
    check_defines(defines, srcs, path)
    return path, defines, srcs, {"arch": arch, "std": "c++17", "define_macro": _format_defines(defines) or None,
                                 "include_path": include_dirs}


def build(stage: str | Path, arch: str = "sm_100a", defines: dict | None = None,
          *, name_expressions=(), cache: bool = True, extra_options: dict | None = None) -> Build:
    """Compile `stage` (a path, or a name relative to src/kernels) for `arch` and return a Build.

    The result is cached (pelib.cache): the key covers the stage and every header it includes, the
    defines and options, and the NVRTC version; each cached artifact is checked against its sha256.
    """
    extra = dict(extra_options or {})
    for k in extra:
        if k in OWNED_OPTIONS:
            how = f" (use build()'s {OWNED_OPTIONS[k]})" if OWNED_OPTIONS[k] else ""
            raise ValueError(f"extra_options[{k!r}] is set by build() itself and may not be replaced{how}")
    path, defines, srcs, base = _program(stage, arch, defines)
    version = toolchain_version()
    opts = {**base, "ptxas_options": ["-v"], **nvrtc_cache_options(), **extra}
    key = _cache.key(files=[(n, t.encode()) for n, _, t in srcs],
                     options={k: v for k, v in opts.items() if k != "include_path"},
                     tool=f"{version} cuda-core-{_cuda_core_version()}",
                     extra={"name_expressions": list(name_expressions), "source": path.name})
    store = _cache_for(CACHE_DIR) if cache else None
    name = f"{path.stem}-{arch}"
    if store is not None:
        entry = store.get(name, key, require=(CUBIN_FILE, LOG_FILE))
        if entry is not None:
            cubin, log = entry.read(CUBIN_FILE), entry.read(LOG_FILE).decode()
            missing = facts_missing(cubin, log)
            if not missing:
                return _make_build(path, arch, defines, cubin, log, True, entry)
            store.drop(entry.path, f"its ptxas log has no facts for the entry function(s) {missing}")

    cubin, log = _compile(path, srcs, opts, name_expressions)
    missing = facts_missing(cubin, log)
    if missing:
        raise MissingFacts(
            f"NVRTC ({version}) compiled {path.name} for {arch} with defines {_format_defines(defines)}, but its log "
            f"has no ptxas facts for the entry function(s) {missing} (was the cubin served from a compile cache "
            f"that skips ptxas?); nothing was cached. Set CUDA_CACHE_DISABLE=1, or install a cuda-core whose "
            f"ProgramOptions has no_cache. Log:\n{log.strip() or '(empty)'}")
    entry = store.put(name, key, {CUBIN_FILE: cubin, LOG_FILE: log.encode()},
                      {"source": str(path), "arch": arch, "defines": _format_defines(defines)}) if store else None
    return _make_build(path, arch, defines, cubin, log, False, entry)


def nvrtc_cache_options() -> dict:
    """ProgramOptions that keep NVRTC's own compile cache out of a build: ptxas runs and reports every time
    (none where NVRTC has no cache, or where cuda.core's ProgramOptions cannot say no_cache)."""
    return {"no_cache": True} if _nvrtc_version() >= NVRTC_CACHE_FROM and _can_say_no_cache() else {}


@functools.lru_cache(maxsize=None)
def _can_say_no_cache() -> bool:
    try:
        from cuda.core import ProgramOptions
    except ImportError:
        try:
            from cuda.core.experimental import ProgramOptions
        except ImportError:
            return False
    return "no_cache" in inspect.signature(ProgramOptions).parameters


def facts_missing(cubin: bytes, log: str) -> list[str]:
    """The cubin's entry functions (pelib.isa.elf) that the ptxas log reports no facts for: a build always carries them."""
    return sorted(set(elf.entry_functions(cubin)) - set(parse_ptxas(log)))


def _cuda_core_version() -> str:
    try:
        import cuda.core
        return str(getattr(cuda.core, "__version__", "?"))
    except ImportError:
        return "none"


def _make_build(path, arch, defines, cubin, log, cached, entry=None) -> Build:
    return Build(source=path, arch=arch, defines=defines, cubin=cubin, log=log,
                 ptxas=parse_ptxas(log), exports=elf.read_exports(cubin), cached=cached, entry=entry)


def ptx(stage: str | Path, arch: str = "sm_100a", defines: dict | None = None) -> str:
    """The PTX NVRTC hands ptxas for `stage`, with build()'s options (not cached). ptxas itself is not
    deterministic under NVRTC 13.5 (the same PTX gets another register numbering from one process to the
    next in a few builds), so this, not the cubin, is what says that a change left the device code alone."""
    path, _, srcs, base = _program(stage, arch, defines)
    opts = {**base, **nvrtc_cache_options()}
    from cuda.bindings import nvrtc
    flags = _cuda_core()[1](name=path.name, **opts).as_bytes("nvrtc")
    flags = [f.replace(b"-arch=sm_", b"-arch=compute_") for f in flags]   # the virtual arch: its PTX
    err, prog = nvrtc.nvrtcCreateProgram(srcs[0][2].encode(), path.name.encode(), 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        if int(err) != 0:
            _, n = nvrtc.nvrtcGetProgramLogSize(prog)
            text = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, text)
            raise BuildError(f"NVRTC could not make the PTX of {path.name} for {arch}: {text.decode(errors='replace')}")
        _, n = nvrtc.nvrtcGetPTXSize(prog)
        out = b" " * n
        nvrtc.nvrtcGetPTX(prog, out)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return out.rstrip(b"\0").decode()


def _cuda_core():
    """cuda.core's Program and ProgramOptions (cuda.core.experimental in older cuda-core)."""
    try:
        from cuda.core import Program, ProgramOptions
    except ImportError:  # older cuda-core
        try:
            from cuda.core.experimental import Program, ProgramOptions
        except ImportError as e:
            raise ToolchainError("cuda.core is missing: pip install cuda-core") from e
    return Program, ProgramOptions


def _compile(path: Path, srcs: list[tuple[str, Path, str]], opts: dict, name_expressions) -> tuple[bytes, str]:
    Program, ProgramOptions = _cuda_core()
    source = srcs[0][2]
    log = io.StringIO()
    options = ProgramOptions(name=path.name, **opts)
    try:
        prog = Program(source, "c++", options=options)
        kw = {"name_expressions": tuple(name_expressions)} if name_expressions else {}
        obj = prog.compile("cubin", logs=log, **kw)
    except Exception as e:
        text = f"{log.getvalue()}\n{e}"
        if type(e).__name__ in ("DynamicLibNotFoundError", "RuntimeError") and "nvrtc" in text.lower() \
                and "COMPILATION" not in text:
            raise ToolchainError(f"NVRTC is not usable: {e}. Install it: pip install nvidia-cuda-nvrtc") from e
        lines = _offending_lines(text, {p.name: t for _, p, t in srcs} | {path.name: source})
        raise BuildError(f"NVRTC could not compile {path.name} for {opts['arch']} "
                         f"with defines {opts['define_macro'] or []}:\n{text.strip()}\n\nOffending lines:\n{lines}") from None
    return bytes(obj.code), log.getvalue()
