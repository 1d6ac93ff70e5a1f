"""What a GPU does with a setmaxnreg.inc its CTA's register pool cannot satisfy (src/kernels/probes/regpool.cu).

    python -m pelib.measure.regpool_probe            # every case, each in its own process, a JSON line per case

The PTX ISA (setmaxnreg) keeps a register pool per CTA: .dec gives registers back to it, .inc "blocks the
execution until enough registers are available in the CTA's register pool". It does not say what an
over-request does in practice (the simulator has to model it: pelib.sim's register pool), so each case
below launches one CTA of three warpgroups at the entry cap of 168 registers a thread (65,536 / 384,
rounded down to 8: 64,512 of the SM's 65,536), lowers the producer warpgroup to `dec` (0: no .dec) and
raises both consumer warpgroups to `inc`. The launch is bounded: the producer holds its registers at most
RP_HOLD_CYCLES and then exits, and each case runs in a child process with a host-side timeout, so a hang
is a verdict, not a stuck session.

Verdicts (per case): "granted" (both consumers' .inc returned while the producer still held its
registers), "blocked-until-exit" (a consumer's .inc returned only after the producer exited), "hang"
(the launch did not finish within the timeout), "trap" (the launch faulted), plus "corrupt" when a
consumer's register-heavy checksum differs from the host's (registers not really granted).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from .. import build as _build
from ..paths import KERNELS

ARCH = "sm_90a"
SOURCE = KERNELS / "probes" / "regpool.cu"
ENTRY_REGS = (65536 // 384) & ~7          # ptxas's cap under __launch_bounds__(384, 1): 168
FIELDS = ("t0", "t1", "t2", "held", "check", "smid", "done")   # regpool.cu's enum regpool_field, in order
ROUNDS = 64
SEED = 0x1234567
LIVE = 160

# (name, producer .dec count (0: none), consumers' .inc count, producer holds its registers)
# Need per consumer: 128 * (inc - 168); the pool gets 128 * (168 - dec); the SM has 1,024 registers the
# launch left unallocated (65,536 - 64,512).
CASES = (
    ("fit", 40, 232, 1),             # 40 + 2 x 232 = 504 = 3 x 168: exactly what the CTA has (CUTLASS 40 / 232)
    ("sm-spare", 48, 232, 1),        # 8 a thread short for the CTA, within the SM's unallocated 1,024
    ("over", 40, 240, 1),            # 16 a thread short: beyond the CTA and the SM
    ("no-dec", 0, 232, 1),           # the producer gives nothing back
    ("no-dec-exit", 0, 232, 0),      # ... and exits at once: does an exited warpgroup refill the pool?
    ("over-exit", 40, 240, 0),
)


def defines(dec: int, inc: int, hold: int) -> dict:
    return {"RP_DEC": dec, "RP_INC": inc, "RP_HOLD": hold, "RP_LIVE": LIVE}


def expected_check(tid: int, seed: int = SEED, rounds: int = ROUNDS, live: int = LIVE) -> int:
    """Thread `tid`'s checksum of regpool.cu's register-heavy loop (u32 arithmetic, the kernel's order)."""
    m = 0xFFFFFFFF
    v = [((tid + 1) * 0x9E3779B9 + i * 0x85EBCA6B + seed) & m for i in range(live)]
    for r in range(rounds):
        for i in range(live):
            v[i] = (v[i] * 0x2C1B3C6D + (v[(i + 1) % live] ^ ((r + i) & m))) & m
    s = 0
    for x in v:
        s = ((s ^ x) * 0x01000193) & m
    return s


def verdict(recs: list[dict], dec: int, inc: int, hold: int) -> str:
    """The case's verdict from the three warpgroups' records (warpgroup 2 the producer)."""
    prod, cons = recs[2], recs[:2]
    if not all(r["done"] for r in recs):
        return "incomplete"
    bad = [w for w, r in enumerate(cons) if r["check"] != expected_check(128 * w)]
    late = [w for w, r in enumerate(cons) if r["t1"] > prod["t2"]]
    v = "blocked-until-exit" if late else "granted"
    if hold and prod["held"] == 2 and not late:
        v = "granted-late"   # the producer gave up, yet no consumer's .inc returned after its exit
    return v + (" corrupt" if bad else "")


def run_case(name: str, timeout_s: float) -> dict:
    """One case in this process: build, launch, read the records."""
    import numpy as np  # the GPU side only: the parent process never touches CUDA
    import torch  # the GPU side only

    from .. import launch  # launch needs a GPU
    case = next(c for c in CASES if c[0] == name)
    _, dec, inc, hold = case
    b = _build.build(SOURCE, ARCH, defines(dec, inc, hold))
    out = torch.zeros(3 * len(FIELDS), dtype=torch.int64, device="cuda")
    t0 = time.time()
    launch.launch(b, (out, np.uint32(SEED), np.uint32(ROUNDS)), grid=(1, 1, 1), block=(384, 1, 1), smem=0,
                  timeout_s=timeout_s)
    wall = time.time() - t0
    raw = out.cpu().numpy().reshape(3, len(FIELDS)).astype(np.uint64)
    recs = [{f: int(raw[w, i]) for i, f in enumerate(FIELDS)} for w in range(3)]
    res = {"case": name, "dec": dec, "inc": inc, "hold": hold, "regs": b.ptxas[b.kernel].registers
           if hasattr(b.ptxas[b.kernel], "registers") else None, "wall_s": round(wall, 3), "records": recs}
    p = recs[2]
    res["inc_cycles"] = [r["t1"] - r["t0"] for r in recs[:2]]
    res["inc_after_producer_exit_cycles"] = [int(r["t1"]) - int(p["t2"]) for r in recs[:2]]
    res["checks_ok"] = [r["check"] == expected_check(128 * w) for w, r in enumerate(recs[:2])]
    res["verdict"] = verdict(recs, dec, inc, hold)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", help="run one case in this process (the parent runs each in a child)")
    ap.add_argument("--timeout", type=float, default=15.0, help="seconds a launch may take (default 15)")
    args = ap.parse_args(argv)
    if args.case:
        if args.case not in [c[0] for c in CASES]:
            ap.error(f"no case {args.case!r}; the cases are {[c[0] for c in CASES]}")
        try:
            print(json.dumps(run_case(args.case, args.timeout)), flush=True)
        except Exception as e:  # a hang or trap is the verdict
            kind = type(e).__name__
            v = "hang" if kind == "KernelHang" else "trap" if kind == "KernelFault" else "error"
            print(json.dumps({"case": args.case, "verdict": v, "error": f"{kind}: {e}"[:800]}), flush=True)
        return 0
    for name, dec, inc, hold in CASES:   # build in the parent: a build error names its case
        _build.build(SOURCE, ARCH, defines(dec, inc, hold))
    for name, dec, inc, hold in CASES:
        cmd = [sys.executable, "-m", "pelib.measure.regpool_probe", "--case", name, "--timeout", str(args.timeout)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 60, env=os.environ.copy())
            line = (p.stdout.strip().splitlines() or [""])[-1]
            if not line.startswith("{"):
                line = json.dumps({"case": name, "verdict": "error", "rc": p.returncode,
                                   "stderr": p.stderr[-800:]})
        except subprocess.TimeoutExpired:
            line = json.dumps({"case": name, "dec": dec, "inc": inc, "hold": hold, "verdict": "hang",
                               "error": f"the child process did not finish in {args.timeout + 60:g} s"})
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
