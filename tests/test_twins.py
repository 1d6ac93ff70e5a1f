"""Every instruction wrapper of src/kernels/common has its simulated twin in src/kernels/sim/common, and
no twin lacks its wrapper: the host build of a stage resolves `#include "common/<family>.cuh"` to the twin,
so a wrapper without one fails only when some stage first calls it, and a twin without one simulates an
instruction the kernels cannot issue. Function names are read from the sources (comments left out)."""
from __future__ import annotations

import re
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "src" / "kernels"
COMMON, TWINS = KERNELS / "common", KERNELS / "sim" / "common"
OWN = "pe_sim"     # a twin's own helpers (the engine's names) need no wrapper


def code(path: Path) -> str:
    """The C++ of a header without comments and preprocessor lines."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.S)
    return re.sub(r"^\s*#.*$", "", text, flags=re.M)


def functions(path: Path) -> set[str]:
    """The device functions a header defines (PE_DEVICE or __device__ ...); a __host__ __device__ helper
    compiles on both sides and is no instruction wrapper."""
    decl = r"(__host__\s+)?\b(?:PE_DEVICE|__device__)\b[^;{(=]*?\b(\w+)\s*\("
    return {m.group(2) for m in re.finditer(decl, code(path)) if not m.group(1)}


def families() -> list[Path]:
    """The wrapper families: headers of common/ with device functions and inline PTX, and those with a twin."""
    return [p for p in sorted(COMMON.glob("*.cuh"))
            if (TWINS / p.name).exists() or (functions(p) and re.search(r"\basm\b", code(p)))]


def parity() -> dict:
    """{header: (wrappers without a twin, twins without a wrapper)} where the two differ."""
    out = {}
    for p in families():
        twin = TWINS / p.name
        real = functions(p)
        sim = {f for f in functions(twin) if not f.startswith(OWN)} if twin.exists() else set()
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
    assert n >= 90, f"only {n} wrapper functions found: the parser lost some"


def test_the_parity_check_can_fail(tmp_path, monkeypatch):
    common, twins = tmp_path / "common", tmp_path / "sim" / "common"
    common.mkdir()
    twins.mkdir(parents=True)
    (common / "fence.cuh").write_text('// fence.proxy.async\nPE_DEVICE void fence_proxy() { asm volatile("fence;"); }\n'
                                      '__device__ __noinline__ void slow_path(u32 tag) { asm volatile("trap;"); }\n')
    (twins / "fence.cuh").write_text("PE_DEVICE void fence_proxy(PE_SIM_SITE) { pe_sim::yield(site); }\n"
                                     "PE_DEVICE void pe_sim_helper() {}\nPE_DEVICE void fence_extra(PE_SIM_SITE) {}\n")
    (twins / "orphan.cuh").write_text("PE_DEVICE void lonely(PE_SIM_SITE) {}\n")
    monkeypatch.setattr(__import__(__name__), "COMMON", common)
    monkeypatch.setattr(__import__(__name__), "TWINS", twins)
    assert parity() == {"fence.cuh": (["slow_path"], ["fence_extra"]), "orphan.cuh": ([], ["lonely"])}
