"""Every instruction wrapper of src/kernels/common has its simulated twin in src/kernels/sim/common, and
no twin lacks its wrapper: the host build of a stage resolves `#include "common/<family>.cuh"` to the twin,
so a wrapper without one fails only when some stage first calls it, and a twin without one simulates an
instruction the kernels cannot issue. Function names are read from each header as the host C++ compiler's
preprocessor expands it (macros that define a family of wrappers included); without one the test skips."""
from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from pelib.sim import build as sim_build

KERNELS = Path(__file__).resolve().parents[1] / "src" / "kernels"
COMMON, TWINS = KERNELS / "common", KERNELS / "sim" / "common"
OWN = "pe_sim"     # a twin's own helpers (the engine's names) need no wrapper
MARK = "PE_DEVICE_DEFINED_HERE"


@pytest.fixture(scope="module", autouse=True)
def cxx():
    try:
        return sim_build.compiler().path
    except sim_build.SimToolchainError as e:
        pytest.skip(str(e))


@lru_cache(maxsize=None)
def code(path: Path, arch: int | None = None) -> str:
    """The header as the preprocessor expands it (PE_DEVICE marked; for a real wrapper, as the device pass
    for `arch` sees it), only the lines that come from it."""
    twin = TWINS in path.parents or "sim" in path.parent.parts
    feature = {900: "__CUDA_ARCH_FEAT_SM90_ALL", 1000: "__CUDA_ARCH_FEAT_SM100_ALL"}   # sm_90a, sm_100a
    flags = [f"-I{TWINS.parent}"] if twin else [f"-D__CUDA_ARCH__={arch}", f"-D{feature[arch]}"] if arch else []
    tu = f'#include "common/types.cuh"\n#undef PE_DEVICE\n#define PE_DEVICE {MARK}\n#include "{path}"\n'
    p = subprocess.run([sim_build.compiler().path, "-E", "-x", "c++", "-std=c++17", *flags, f"-I{KERNELS}", "-"],
                       input=tu, capture_output=True, text=True)
    if p.returncode != 0 and "#error" in p.stderr and arch:
        return ""                     # a family of the other arch (its #error names the arch it needs)
    assert p.returncode == 0, p.stderr[-2000:]
    out, keep = [], False
    for line in p.stdout.splitlines():
        m = re.match(r'# \d+ "([^"]+)"', line)
        if m:
            keep = Path(m.group(1)).resolve() == path.resolve()
        elif keep:
            out.append(line)
    return "\n".join(out)


def functions(path: Path) -> set[str]:
    """The device functions a header defines (PE_DEVICE or __device__ ...) for sm_90 or sm_100 (a wrapper
    may be guarded by __CUDA_ARCH__); a __host__ __device__ helper compiles on both sides and is no
    instruction wrapper."""
    decl = rf"(__host__\s+)?\b(?:{MARK}|__device__)\b[^;{{(=]*?\b(\w+)\s*\("
    twin = TWINS in path.parents or "sim" in path.parent.parts
    texts = [code(path)] if twin else [code(path, arch) for arch in (900, 1000)]
    assert any(texts), f"{path}: the preprocessor gives nothing for sm_90 or sm_100"
    return {m.group(2) for t in texts for m in re.finditer(decl, t) if not m.group(1)}


def families() -> list[Path]:
    """The wrapper families: headers of common/ with device functions and inline PTX, and those with a twin."""
    return [p for p in sorted(COMMON.glob("*.cuh"))
            if (TWINS / p.name).exists() or (functions(p) and re.search(r"\basm\b", p.read_text()))]


def parity() -> dict:
    """{header: (wrappers without a twin, twins without a wrapper)} where the two differ."""
    out = {}
    for p in families():
        twin = TWINS / p.name
        real = functions(p)
        sim = {f for f in functions(twin) if not f.startswith(OWN)} if twin.exists() else set()
        if twin.exists():   # a twin may be a function-like macro that forwards to its pe_sim_ function (names the barrier)
            sim |= {m for m in re.findall(r"^#define\s+(\w+)\(", twin.read_text(), re.M) if m in real}
        if not twin.exists() or real != sim:
            out[p.name] = (sorted(real - sim), sorted(sim - real))
    for t in sorted(TWINS.glob("*.cuh")):
        if not (COMMON / t.name).exists():
            out[t.name] = ([], sorted(functions(t)))
    return out


def test_every_wrapper_has_its_twin_and_every_twin_its_wrapper():
    bad = parity()
    assert bad == {}, "\n".join(f"{h}: wrappers without a twin in sim/common: {a}; twins without a wrapper: {b}"
                                for h, (a, b) in bad.items())
    n = sum(len(functions(p)) for p in families())
    assert n >= 95, f"only {n} wrapper functions found: the parser lost some"


def test_the_parity_check_can_fail(tmp_path, monkeypatch):
    common, twins = tmp_path / "common", tmp_path / "sim" / "common"   # headers that include nothing
    common.mkdir()
    twins.mkdir(parents=True)
    (common / "fence.cuh").write_text('// fence.proxy.async\nPE_DEVICE void fence_proxy() { asm volatile("fence;"); }\n'
                                      '__device__ __noinline__ void slow_path(u32 tag) { asm volatile("trap;"); }\n')
    (twins / "fence.cuh").write_text("#define PE_TWIN(name) PE_DEVICE void name(PE_SIM_SITE) {}\n"
                                     "PE_DEVICE void fence_proxy(PE_SIM_SITE) { pe_sim::yield(site); }\n"
                                     "PE_DEVICE void pe_sim_helper() {}\nPE_TWIN(fence_extra)\n")
    (twins / "orphan.cuh").write_text("PE_DEVICE void lonely(PE_SIM_SITE) {}\n")
    monkeypatch.setattr(__import__(__name__), "COMMON", common)
    monkeypatch.setattr(__import__(__name__), "TWINS", twins)
    assert parity() == {"fence.cuh": (["slow_path"], ["fence_extra"]), "orphan.cuh": ([], ["lonely"])}
