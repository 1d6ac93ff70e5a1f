"""The Blackwell tensor core's accumulation, to be collected bit for bit on a B200: tcgen05.mma kind::f8f6f4 and kind::mxf4nvf4 probes.

    PYTHONPATH=src python3 -m pelib.measure.tcprobe_sm100 collect --out DIR                    # on a B200 (about a minute)
    PYTHONPATH=src python3 -m pelib.measure.tcprobe_sm100 collect --out DIR --device sim --quick   # the same on the CPU
    PYTHONPATH=src python3 -m pelib.measure.tcprobe_sm100 score DIR                             # the models, offline

collect compiles src/kernels/probes/tcgen05_numerics.cu with NVRTC for sm_100a (kind::f8f6f4 E4M3 and E5M2
with N = 256; kind::mxf4nvf4 block16 with N = 128), builds the vectors on the host and launches one CTA per
tile. The FP8 classes are pelib.numerics.tcvectors' own (the Hopper probe's directed and random vectors, chains up
to 4 instructions); a tile's 64 rows fill TMEM lanes 0-63 and again 64-127, so the two halves must agree.
The mxf4nvf4 classes (MXF4_CLASSES) are built here: packed E2M1 with UE4M3 scales per 16 elements. Every
output is scored against the modelled rules of pelib.numerics.blockfma (B200_F8F6F4 and B200_MXF4NVF4: MMA-Sim's
hardware-validated rules, arXiv 2511.10909, not yet run on a B200 here) and their alternatives (MXF4_MODELS:
MMA-Sim's neighbours and the project's earlier kind::mxf4nvf4 candidate; every pair told apart by some class):
each model's mismatch count says which one the B200 follows. Writes DIR/tcprobe_sm100.json and one npz per
kind. --device sim runs the same launches in pelib.sim, whose tcgen05.mma computes the modelled rules, so
they must agree on every output there (tests/test_tcprobe_sm100.py). Evidence: measured (a B200) /
simulated; until a B200 runs it, the book's Blackwell arithmetic is "modelled".
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import bench, build as _build, clock, emulate as E, launch
from ..numerics import blockfma as F
from ..sim import engine as sim
from ..numerics import tcvectors as V
from ..paths import KERNELS
from .tcprobe import collect_parser, command, probe_device   # what both probes' commands share

PROBE = KERNELS / "probes" / "tcgen05_numerics.cu"
KERNEL = "tcgen05_numerics"
ARCH = "sm_100a"
SUMMARY = "tcprobe_sm100.json"
FILES = {"f8f6f4": "tcprobe_sm100-f8f6f4.npz", "e5m2": "tcprobe_sm100-e5m2.npz", "mxf4nvf4": "tcprobe_sm100-mxf4nvf4.npz"}
KINDS = {"f8f6f4": 0, "e5m2": 1, "mxf4nvf4": 2}     # the kernel's PROBE_KIND
MAX_STEPS = 4
POISON = 0x7FA5A5A5
MAX_FILE_BYTES = 16 << 20
# The models each output is scored against: the modelled rules first, then the alternatives a B200 may show.
F8_MODELS = (F.B200_F8F6F4, F.B200_F8F6F4.with_(name="b200_f8_24bits", frac_bits=24),
             F.B200_F8F6F4.with_(name="b200_f8_26bits", frac_bits=26),
             F.B200_F8F6F4.with_(name="b200tcrn_16_rn", k=16, out_round="rn"),
             F.H100TC_MATLAB, F.EXACT_SUM)
# kind::mxf4nvf4: MMA-Sim's rule first, its one-knob neighbours (the second level's fraction bits; a group whose
# products sum to zero dropped; windows with the elements' exponents), then the earlier candidate and its own.
MXF4_MODELS = (F.B200_MXF4NVF4,
               *(F.B200_MXF4NVF4.with_(name=f"mxf4_groups_{f}bits", frac_bits2=f) for f in (34, 36)),
               F.B200_MXF4NVF4.with_(name="mxf4_groups_zero_sum_dropped", empty_group="sum_zero"),
               F.B200_MXF4NVF4.with_(name="mxf4_groups_element_windows", scale_window="with_elements"),
               F.B200_MXF4NVF4_GUESS,
               *(F.B200_MXF4NVF4_GUESS.with_(name=f"mxf4_{f}bits", frac_bits=f) for f in (25, 34, 36, 37)),
               F.B200_MXF4NVF4_GUESS.with_(name="mxf4_block16", k=16), F.ExactSum(k=64))


class ProbeError(RuntimeError):
    """The probe could not run as asked."""


# ---- the kind::mxf4nvf4 vectors ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Mxf4Class:
    """Packed E2M1 A [T, 128, 32 s], B [T, 128, 32 s], UE4M3 scales per 16 elements sfa [T, 128, 4 s],
    sfb [T, 128, 4 s], D [T, 128, 128] FP32 bits."""

    name: str
    tiles: int
    steps: int
    make: object
    pins: str
    first_zero: bool = False
    quick_tiles: int = 1

    def generate(self, seed: int = 0, tiles: int | None = None):
        t = self.tiles if tiles is None else tiles
        rng = np.random.default_rng([seed, zlib.crc32(self.name.encode())])
        codes_a, codes_b, sfa, sfb, d = self.make(rng, t, self.steps)
        return pack_e2m1(codes_a), pack_e2m1(codes_b), sfa.astype(np.uint8), sfb.astype(np.uint8), d.astype(np.uint32)


def pack_e2m1(codes) -> np.ndarray:
    """E2M1 codes [..., K] (0..15) -> bytes [..., K/2], the lower K index in the low nibble (PTX ISA packed E2M1)."""
    c = np.asarray(codes, np.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def ue4m3(exp, mant=0):
    """UE4M3 bytes of (1 + mant/8) 2^exp, exp in -6..8 (below: subnormal, mant/8 2^-6)."""
    return V.e4m3(0, exp, mant)


def _mx_random(rng, t, steps, lo=-4, hi=4, dscale=True):
    k = 64 * steps
    ca, cb = rng.integers(0, 16, (t, 128, k)), rng.integers(0, 16, (t, 128, k))
    sfa = ue4m3(rng.integers(lo, hi + 1, (t, 128, 4 * steps)), rng.integers(0, 8, (t, 128, 4 * steps)))
    sfb = ue4m3(rng.integers(lo, hi + 1, (t, 128, 4 * steps)), rng.integers(0, 8, (t, 128, 4 * steps)))
    d = np.zeros((t, 128, 128), np.uint32)
    if dscale:
        d = np.where(rng.random(d.shape) < 0.5, V.rand_f32(rng, d.shape, rng.integers(-4, 12, d.shape)), d)
    return ca, cb, sfa, sfb, d


def _mx_spread(rng, t, steps):
    return _mx_random(rng, t, steps, lo=-9, hi=8)


def _mx_two_products(rng, t, steps):
    """One product at element 0 with both scales large, one at element j (any scale group) whose scales put it
    8..41 binades below: how many fraction bits survive below the window, and whether the four scale groups
    of an instruction are aligned together or apart."""
    ca, cb = np.zeros((t, 128, 64), np.int64), np.zeros((t, 128, 64), np.int64)
    sfa, sfb = np.full((t, 128, 4), 0x38, np.int64), np.full((t, 128, 4), 0x38, np.int64)   # 1.0
    js = [1, 15, 16, 31, 32, 47, 48, 63]
    for i in range(t):
        j = js[i % len(js)]
        ca[i, :, 0], cb[i, :, 0] = rng.integers(1, 16, 128), rng.integers(1, 16, 128)
        ca[i, :, j], cb[i, :, j] = rng.integers(1, 16, 128), rng.integers(1, 16, 128)
        sfa[i, :, 0], sfb[i, :, 0] = ue4m3(rng.integers(6, 9, 128)), ue4m3(rng.integers(6, 9, 128))
        g = j // 16
        if g:   # 2^-9..2^2 against 2^6..2^8 per factor: 8 to 41 binades below
            sfa[i, :, g], sfb[i, :, g] = ue4m3(rng.integers(-9, 3, 128), rng.integers(0, 8, 128)), ue4m3(
                rng.integers(-9, 3, 128), rng.integers(0, 8, 128))
        else:   # the same group: the small one's own codes make the offset (at most a few binades)
            ca[i, :, j] = rng.integers(1, 4, 128)
    return ca, cb, sfa, sfb, np.zeros((t, 128, 128), np.uint32)


def _mx_d_vs_product(rng, t, steps):
    """One product and D from 2^-40 to 2^40 times it: D's part in the window and how many of its bits survive."""
    ca, cb = np.zeros((t, 128, 64), np.int64), np.zeros((t, 128, 64), np.int64)
    sfa, sfb = np.full((t, 128, 4), 0x38, np.int64), np.full((t, 128, 4), 0x38, np.int64)
    for i in range(t):
        k = (7 * i + 2) % 64
        ca[i, :, k], cb[i, :, k] = rng.integers(1, 16, 128), rng.integers(1, 16, 128)
    d = V.rand_f32(rng, (t, 128, 128), rng.integers(-40, 41, (t, 128, 128)))
    return ca, cb, sfa, sfb, d


def _mx_chain(rng, t, steps):
    return _mx_random(rng, t, steps, dscale=False)


def _mx_group_sums_zero(rng, t, steps):
    """One scale group under a large scale whose 16 products cancel to exactly 0 (its elements 8..15 the negated
    copies of 0..7, in A and B alike), the others under small scales or zero, D small: does a group that sums
    to zero keep its window (MMA-Sim) or drop out?"""
    ca, cb, sfa, sfb, _ = _mx_random(rng, t, steps, lo=-9, hi=-3, dscale=False)
    for i in range(t):   # tile i cancels in group i % 4, in every row of A and B (so in every output)
        g = i % 4
        ks = slice(16 * g, 16 * g + 8)
        ca[i, :, 16 * g + 8:16 * g + 16], cb[i, :, 16 * g + 8:16 * g + 16] = ca[i, :, ks] ^ 8, cb[i, :, ks]
        sfa[i, :, g], sfb[i, :, g] = ue4m3(rng.integers(5, 9, 128), rng.integers(0, 8, 128)), ue4m3(
            rng.integers(5, 9, 128), rng.integers(0, 8, 128))
        others = [j for j in range(4) if j != g]
        sfa[i][:, others] = np.where(rng.random((128, 3)) < 0.5, 0, sfa[i][:, others])
    d = np.where(rng.random((t, 128, 128)) < 0.8, V.rand_f32(rng, (t, 128, 128), rng.integers(-30, -5, (t, 128, 128))), 0)
    return ca, cb, sfa, sfb, d


def _mx_d_below(rng, t, steps):
    """Random products with scales 1..8 (a window R of 0..4 above the scales' exponents) and D 11-16 binades
    below it: how many of D's 24 bits the second level keeps (34, 35 or 36 fraction bits below R)."""
    ca, cb, sfa, sfb, _ = _mx_random(rng, t, steps, lo=0, hi=2, dscale=False)
    d = V.rand_f32(rng, (t, 128, 128), rng.integers(-16, -6, (t, 128, 128)))
    return ca, cb, sfa, sfb, d


MXF4_CLASSES = {c.name: c for c in [
    Mxf4Class("mxf4_random", 8, 1, _mx_random, "random E2M1 codes, scales 2^-4..2^4 with random mantissas, D zero or "
              "near the products: the statistical test of a candidate rule"),
    Mxf4Class("mxf4_spread", 8, 1, _mx_spread, "scales 2^-9..2^8: products spread over about 40 binades, so the "
              "window's width shows (34-37 bits per DeepGEMM issue #176, or fewer)"),
    Mxf4Class("mxf4_two_products", 8, 1, _mx_two_products, "a large product in scale group 0 and a small one in "
              "group 0..3 up to 41 binades below: the fraction bits kept, and one alignment per instruction or per "
              "16-element group"),
    Mxf4Class("mxf4_d_vs_product", 4, 1, _mx_d_vs_product, "one product and D from 2^-40 to 2^40 times it: D in the "
              "alignment, D's bits under a larger product"),
    Mxf4Class("mxf4_chain4", 4, 4, _mx_chain, "4 chained instructions, enable-input-d = 0 on the first: nothing but "
              "FP32 carried between them", first_zero=True),
    Mxf4Class("mxf4_group_sums_zero", 4, 1, _mx_group_sums_zero, "a group under a large scale whose products cancel "
              "to 0, the others small: whether it keeps its window (MMA-Sim) or drops out"),
    Mxf4Class("mxf4_d_below", 4, 1, _mx_d_below, "D 11-16 binades below the window: the fraction bits the "
              "second level keeps of D"),
]}


def blocked_scales(sf) -> np.ndarray:
    """Scales [T, 128, 4 s] -> the kernel's [T, s, 512]: instruction s's 128 x 4 in the CUTLASS blocked atom."""
    t, rows, n = sf.shape
    out = np.zeros((t, n // 4, 512), np.uint8)
    for i in range(t):
        for s in range(n // 4):
            out[i, s] = E.sf_to_blocked(np.ascontiguousarray(sf[i, :, 4 * s:4 * s + 4]))
    return out


def mxf4_terms(packed, sf, model=None):
    """(values, window exponents) of packed E2M1 rows times their per-16 UE4M3 scales: [..., K]. The windows
    are `model`'s (pelib.numerics.blockfma.scaled_windows; None: pelib.numerics.blockfma.B200_MXF4NVF4's, the scales' alone)."""
    v = E.decode_values(packed, "e2m1") * np.repeat(E.decode_values(sf, "ue4m3"), 16, axis=-1)
    e = F.scaled_windows(F.B200_MXF4NVF4 if model is None else model, F.window_exponents(packed, "e2m1"),
                         np.repeat(F.window_exponents(sf, "ue4m3"), 16, axis=-1))
    return v, e


# ---- jobs -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    name: str
    kind: str        # f8f6f4 | e5m2 | mxf4nvf4 (the file and the PROBE_KIND)
    cls: object
    tiles: int

    @property
    def steps(self) -> int:
        return self.cls.steps

    @property
    def n(self) -> int:
        return 128 if self.kind == "mxf4nvf4" else 256

    @property
    def first_zero(self) -> bool:
        return getattr(self.cls, "first_zero", False) or V.FIRST_ZERO in getattr(self.cls, "flags", ())


def jobs(quick: bool = False, classes=None) -> list[Job]:
    """Every FP8 class of pelib.numerics.tcvectors that the tcgen05 form can run (up to 4 instructions, no wait flag),
    then the mxf4nvf4 classes."""
    out = []
    for name, c in V.CLASSES.items():
        if c.steps > MAX_STEPS or V.WAIT_EACH in c.flags:
            continue
        out.append(Job(name, "e5m2" if c.fmt == "e5m2" else "f8f6f4", c, c.quick_tiles if quick else c.tiles))
    out += [Job(name, "mxf4nvf4", c, c.quick_tiles if quick else c.tiles) for name, c in MXF4_CLASSES.items()]
    if classes is not None:
        unknown = set(classes) - {j.name for j in out}
        if unknown:
            raise ProbeError(f"unknown classes {sorted(unknown)}: {', '.join(j.name for j in out)}")
        out = [j for j in out if j.name in classes]
    return out


def job_inputs(job: Job, seed: int = 0) -> dict:
    """The kernel's arrays for a job: a [T, 128, 32 s], b [T, N, 32 s], sfa and sfb [T, 4, 512], d [T, 128, N];
    an FP8 class's 64 rows are written twice (TMEM lanes 0-63 and 64-127)."""
    if job.kind == "mxf4nvf4":
        a, b, sfa, sfb, d = job.cls.generate(seed, job.tiles)
        pad = np.zeros((job.tiles, MAX_STEPS, 512), np.uint8)
        bsa, bsb = pad.copy(), pad.copy()
        bsa[:, :job.steps], bsb[:, :job.steps] = blocked_scales(sfa), blocked_scales(sfb)
        return {"a": a, "b": b, "sfa": bsa, "sfb": bsb, "d": d, "sfa_rows": sfa, "sfb_rows": sfb}
    a, b, d = V.inputs(job.cls, seed, job.tiles)
    zeros = np.zeros((job.tiles, MAX_STEPS, 512), np.uint8)
    return {"a": np.concatenate([a, a], 1), "b": b, "sfa": zeros, "sfb": zeros, "d": np.concatenate([d, d], 1)}


def probe_build(kind: str):
    defines = {"PROBE_KIND": KINDS[kind], "PROBE_N": 128 if kind == "mxf4nvf4" else 256, "PROBE_MAX_STEPS": MAX_STEPS}
    b = _build.build(PROBE, ARCH, defines)
    if b.exports.get("probe_kind") != KINDS[kind] or b.exports.get("probe_m") != 128:
        raise ProbeError(f"{PROBE.name} built with {defines} exports probe_kind={b.exports.get('probe_kind')}")
    return b


# ---- where it runs ---------------------------------------------------------------------------------------

def _tensor(x, device):
    import torch
    x = np.ascontiguousarray(x)
    t = torch.from_numpy(np.array(x.view(np.int32) if x.dtype == np.uint32 else x, copy=True))
    return t.to(device)


def run_job(job: Job, arrays: dict, device: str, build, sim_seed: int = 0) -> np.ndarray:
    """One launch (a CTA per tile); the FP32 bits of every output [T, 128, N] (the poison where unwritten)."""
    dev = "cpu" if device in ("sim", "cpu") else "cuda"
    out = np.full(arrays["d"].shape, POISON, np.uint32)
    ts = [_tensor(arrays[k], dev) for k in ("a", "b", "sfa", "sfb", "d")] + [_tensor(out, dev)]
    args = (*ts, np.uint32(job.steps), np.uint32(int(job.first_zero)))
    if device == "sim":
        sim.prepare(build, args, grid=(job.tiles,), block=(128,), cluster=(1,), smem=build.dynamic_smem,
                    kernel=KERNEL, arch=ARCH, defines=build.defines, seed=sim_seed).run()
    else:
        launch.launch(build, args, grid=(job.tiles, 1, 1), block=(128, 1, 1))
    return ts[-1].cpu().numpy().view(np.uint32)


# ---- models ----------------------------------------------------------------------------------------------

def evaluate(model, job: Job, arrays: dict) -> np.ndarray:
    """`model` on every output of the job (lanes 0-127), the instructions chained in K order."""
    d, out = arrays["d"], np.empty(arrays["d"].shape, np.uint32)
    for t in range(job.tiles):
        if job.kind == "mxf4nvf4":
            av, ae = mxf4_terms(arrays["a"][t], arrays["sfa_rows"][t], model)
            bv, be = mxf4_terms(arrays["b"][t], arrays["sfb_rows"][t], model)
            k_instr = 64
        else:
            fmt = "e5m2" if job.kind == "e5m2" else "e4m3"
            av, ae = F.values(arrays["a"][t], fmt), F.window_exponents(arrays["a"][t], fmt)
            bv, be = F.values(arrays["b"][t], fmt), F.window_exponents(arrays["b"][t], fmt)
            k_instr = 32
        acc = d[t]
        for k0 in range(0, av.shape[-1], k_instr):
            ks = slice(k0, k0 + k_instr)
            acc = F.mma(model, av[:, ks], ae[:, ks], bv[:, ks], be[:, ks], acc, k0 > 0 or not job.first_zero)
        out[t] = acc
    return out


def models_of(job: Job):
    return MXF4_MODELS if job.kind == "mxf4nvf4" else F8_MODELS


def score(job: Job, arrays: dict, got: np.ndarray) -> dict:
    return {m.name: F.mismatches(evaluate(m, job, arrays), got) for m in models_of(job)}


# ---- the command -----------------------------------------------------------------------------------------

def collect(out_dir, device: str = "gpu", quick: bool = False, seed: int = 0, classes=None) -> dict:
    t_start = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = probe_device(device, ARCH, ProbeError, "sm_100a tcgen05.mma: run it on a B200")
    if info is not None:
        env = bench.environment(info)
    else:
        env = {"date": clock.stamp(), "git": bench.git_revision(), "device": "pelib.sim (CPU)",
               "accumulation": sim.current_accumulation()[0]}
    todo = jobs(quick, classes)
    builds = {k: probe_build(k) for k in sorted({j.kind for j in todo})}
    arrays = {k: {} for k in FILES}
    results = {}
    for job in todo:
        arr = job_inputs(job, seed)
        try:
            got = run_job(job, arr, device, builds[job.kind], seed)
        except (launch.LaunchError, sim.SimError) as e:
            results[job.name] = {"kind": job.kind, "error": f"{type(e).__name__}: {e}"[:2000]}
            print(f"tcprobe_sm100: {job.name}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            continue
        halves = None if job.kind == "mxf4nvf4" else F.mismatches(got[:, :64], got[:, 64:])
        results[job.name] = {"kind": job.kind, "n": job.n, "steps": job.steps, "tiles": job.tiles,
                             "outputs": int(got.size), "unwritten": int((got == POISON).sum()),
                             "pins": job.cls.pins, **({"lanes_0_63_vs_64_127": halves} if halves else {}),
                             "mismatch": score(job, arr, got)}
        arrays[job.kind].update({f"{job.name}.{k}": v for k, v in arr.items()} | {f"{job.name}.out": got})
    files = {}
    for kind, arr in arrays.items():
        if arr:
            p = out_dir / FILES[kind]
            np.savez_compressed(p, **arr)
            if p.stat().st_size > MAX_FILE_BYTES:
                raise ProbeError(f"{p.name} is over {MAX_FILE_BYTES >> 20} MiB: fewer tiles")
            files[p.name] = p.stat().st_size
    ran = [r for r in results.values() if "error" not in r]
    totals = {}
    for r in ran:
        for m, c in r["mismatch"].items():
            totals.setdefault(f"{r['kind']}:{m}", 0)
            totals[f"{r['kind']}:{m}"] += c["bits"]
    summary = {"what": "Blackwell tcgen05.mma accumulation probe (kind::f8f6f4, kind::mxf4nvf4): FP32 bits of every "
                       "vector class against the modelled rules (pelib.measure.tcprobe_sm100)",
               "evidence": "measured" if device == "gpu" else "simulated", "seed": seed, "quick": quick, **env,
               "kernel": str(PROBE.relative_to(KERNELS.parents[1])),
               "models": {m.name: m.source or m.name for m in (*F8_MODELS, *MXF4_MODELS)},
               "outputs": sum(r["outputs"] for r in ran), "unwritten": sum(r["unwritten"] for r in ran),
               "errors": {n: r["error"] for n, r in results.items() if "error" in r},
               "mismatch_total": totals, "seconds": round(time.monotonic() - t_start, 1), "files": files,
               "classes": results}
    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def verdict(summary: dict) -> list[str]:
    """One line per kind: the models with 0 mismatches (what the device follows), or the closest."""
    lines = []
    for kind in ("f8f6f4", "e5m2", "mxf4nvf4"):
        got = {k.split(":", 1)[1]: v for k, v in summary["mismatch_total"].items() if k.startswith(kind + ":")}
        if not got:
            continue
        exact = [m for m, v in got.items() if v == 0]
        best = min(got, key=got.get)
        lines.append(f"{kind}: " + (f"0 mismatches for {', '.join(exact)}" if exact else
                                    f"no model exact; closest {best} with {got[best]:,} mismatching outputs"))
    return lines


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pelib.measure.tcprobe_sm100", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    collect_parser(sub, "run every class through the tcgen05 probe and write DIR", classes="comma-separated subset")
    s = sub.add_parser("score", help="print the verdict of a collected folder")
    s.add_argument("dir")
    return ap


def main(argv=None) -> int:
    return command("tcprobe_sm100", _run, parser().parse_args(argv), ProbeError)


def _run(a) -> int:
    if a.cmd == "collect":
        summary = collect(a.out, a.device, a.quick, a.seed, a.classes.split(",") if a.classes else None)
        print(f"{summary['outputs']:,} outputs in {summary['seconds']} s; wrote {SUMMARY} and "
              f"{', '.join(summary['files'])} to {a.out}")
        if summary["errors"]:
            print(f"tcprobe_sm100: {len(summary['errors'])} jobs failed", file=sys.stderr)
            return 1
    else:
        summary = json.loads((Path(a.dir) / SUMMARY).read_text())
    print("\n".join(verdict(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
