"""Compile a kernel stage with NVRTC (through cuda.core) and report what ptxas and nvdisasm say."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from . import elf, sass as _sass
from .paths import CACHE_DIR, KERNELS

ARCHS = ("sm_100a", "sm_90a")
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


class BuildError(RuntimeError):
    """NVRTC rejected a kernel; the message carries the log and the offending lines."""


class ToolchainError(RuntimeError):
    """NVRTC or nvdisasm could not be found or loaded."""


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

    @property
    def kernel(self) -> str:
        """The single __global__ entry (error if the file has several: name one)."""
        if len(self.ptxas) != 1:
            raise ValueError(f"{self.source.name} has kernels {sorted(self.ptxas)}: pass a name")
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
        return _sass.disassemble(self.cubin)

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


def _expand_sources(path: Path, seen=None) -> list[Path]:
    """The file and every quoted include it reaches under src/kernels (for the cache key)."""
    seen = [] if seen is None else seen
    if path in seen:
        return seen
    seen.append(path)
    for inc in _INCLUDE_RE.findall(path.read_text()):
        for base in (path.parent, KERNELS):
            cand = (base / inc).resolve()
            if cand.exists():
                _expand_sources(cand, seen)
                break
    return seen


def toolchain_version() -> str:
    """NVRTC's version, part of the cache key."""
    try:
        from cuda.bindings import nvrtc
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # pragma: no cover - depends on the machine
        raise ToolchainError(
            f"NVRTC could not be loaded ({e}). Install it: pip install nvidia-cuda-nvrtc "
            "(make test / make book do this in .venv)") from e
    if int(err) != 0:
        raise ToolchainError(f"nvrtcVersion failed: {err}")
    return f"nvrtc-{major}.{minor}"


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


def build(stage: str | Path, arch: str = "sm_100a", defines: dict | None = None,
          *, name_expressions=(), cache: bool = True, extra_options: dict | None = None) -> Build:
    """Compile `stage` (a path, or a name relative to src/kernels) for `arch` and return a Build."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: the book builds for {', '.join(ARCHS)}")
    path = Path(stage)
    if not path.is_absolute():
        path = KERNELS / path
    if not path.exists():
        raise FileNotFoundError(f"no kernel file {path}")
    defines = dict(defines or {})
    srcs = _expand_sources(path.resolve())
    version = toolchain_version()
    opts = {"arch": arch, "std": "c++17", "define_macro": _format_defines(defines) or None,
            "include_path": _include_paths(path.parent), "ptxas_options": ["-v"], **(extra_options or {})}
    key_src = hashlib.sha256()
    for p in srcs:
        key_src.update(p.name.encode() + b"\0" + p.read_bytes())
    key_src.update(json.dumps({k: v for k, v in opts.items() if k != "include_path"}, sort_keys=True,
                              default=str).encode())
    key_src.update(json.dumps(list(name_expressions)).encode() + version.encode())
    key = key_src.hexdigest()[:32]
    entry = CACHE_DIR / f"{path.stem}-{arch}-{key}"
    if cache and (entry / "meta.json").exists():
        meta = json.loads((entry / "meta.json").read_text())
        return _make_build(path, arch, defines, (entry / "kernel.cubin").read_bytes(), meta["log"], True)

    cubin, log = _compile(path, srcs, opts, name_expressions)
    if cache:
        _atomic_store(entry, cubin, log)
    return _make_build(path, arch, defines, cubin, log, False)


def _make_build(path, arch, defines, cubin, log, cached) -> Build:
    return Build(source=path, arch=arch, defines=defines, cubin=cubin, log=log,
                 ptxas=parse_ptxas(log), exports=elf.read_exports(cubin), cached=cached)


def _compile(path: Path, srcs: list[Path], opts: dict, name_expressions) -> tuple[bytes, str]:
    try:
        from cuda.core import Program, ProgramOptions
    except ImportError:  # older cuda-core
        try:
            from cuda.core.experimental import Program, ProgramOptions
        except ImportError as e:
            raise ToolchainError("cuda.core is missing: pip install cuda-core") from e
    source = path.read_text()
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
        lines = _offending_lines(text, {p.name: p.read_text() for p in srcs} | {path.name: source})
        raise BuildError(f"NVRTC could not compile {path.name} for {opts['arch']} "
                         f"with defines {opts['define_macro'] or []}:\n{text.strip()}\n\nOffending lines:\n{lines}") from None
    return bytes(obj.code), log.getvalue()


def _atomic_store(entry: Path, cubin: bytes, log: str) -> None:
    """Write into a temp dir and rename it, so concurrent builders never see half an entry."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".tmp-"))
    (tmp / "kernel.cubin").write_bytes(cubin)
    (tmp / "meta.json").write_text(json.dumps({"log": log}))
    try:
        os.rename(tmp, entry)
    except OSError:  # another process won the race: its entry is identical
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
