"""Compiled evidence for the go/no-go variant kernels of the FP8 megakernel (F22, F23, F24, F25, F28).

Each kernel-side card has a variant of the final megakernel (stage 09): a file of its own under
src/kernels/fp8/variants/ (kept out of fp8/ so it never counts as a stage), or the stage itself with
defines. `card_evidence(card)` compiles the variant and its base when the files exist and returns
their compiled facts (ptxas registers and spills, shared memory, SASS opcode counts, the source diff)
as go/no-go facts of kind "compiled"; when the variant file is not there yet it returns PENDING
("variant not built yet"), naming the file it looks for. Host-side cards (F21, F26: pelib.l2policy)
and the card skipped by rule (F27) have no kernel to compile and say so. Beyond ptxas, F24 adds its
modelled Phase 1 bank-conflict ratio (pelib.banks) and F28 its static K-loop account (kloop_table,
pelib.sass_account). `emulate_check(card)` replays one tile of a variant from its own exports
(pelib.emulate, the variant's epilogue arithmetic and staging). On a B200, `run(card)` verifies and
times a card's kernel, `run_timing(card)` records its clock64 phases, and `measure(card)` turns a
base and a variant run into the card rules' measured facts (`gate_facts`, checked on synthetic
records here); `launch_spec(card)` is everything those launches need, checked without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from .paths import KERNELS

EVIDENCE = "compiled"
BASE = "fp8/09_persistent_megakernel.cu"
VARIANT_DIR = "fp8/variants"
COMPILED, PENDING, BUILD_FAILED, HOST_SIDE, SKIPPED = "compiled", "PENDING", "build failed", "host-side", "skipped"


@dataclass(frozen=True)
class Variant:
    """A card's variant kernel: its file (relative to src/kernels, or absolute), defines and base."""

    card: str
    path: str
    what: str
    defines: Mapping = field(default_factory=dict)
    base: str | None = BASE
    base_defines: Mapping = field(default_factory=dict)
    watch: tuple = ()        # SASS opcodes whose counts show the change

    @property
    def file(self) -> Path:
        p = Path(self.path)
        return p if p.is_absolute() else KERNELS / p

    @property
    def base_file(self) -> Path | None:
        if self.base is None:
            return None
        p = Path(self.base)
        return p if p.is_absolute() else KERNELS / p


# The variants the F21-F28 cards describe (fp8-megakernel-future-proposals-F21-F28.md).
VARIANTS: dict[str, Variant] = {
    "F22": Variant("F22", f"{VARIANT_DIR}/09_f22_bf16x2_epilogue.cu",
                   "Phase 1 math in packed BF16: cvt.rn.bf16x2.f32 on accumulator pairs, add.bf16x2 with comb",
                   watch=("HADD2", "HFMA2", "F2FP", "FADD", "PRMT", "LDTM", "STS")),
    "F23": Variant("F23", f"{VARIANT_DIR}/09_f23_two_epilogue_warps.cu",
                   "option C made feasible: two TMEM readers at a time (waves of two lane-quarter warps "
                   "handed over on named barriers); the card's 2 warps x 2 row groups cannot reach TMEM "
                   "lanes 0-63 (a warp reads only lanes 32*(warp%4)..+31)",
                   watch=("LDTM", "STS", "STG", "BAR")),
    "F24": Variant("F24", f"{VARIANT_DIR}/09_f24_swizzled_staging.cu",
                   "unpadded 128B-swizzled staging rows, one cp.async.bulk.tensor store per half",
                   watch=("UTMASTG", "UBLKCP", "STS", "LDS", "STG")),
    "F25": Variant("F25", BASE, "per-warp TIMING build (Phase 1 start/end on every epilogue warp)",
                   defines={"TIMING": 1}, watch=("CS2R", "S2UR", "STG")),
    "F28": Variant("F28", f"{VARIANT_DIR}/09_f28_kloop_unroll.cu",
                   "descriptors precomputed per stage before the tile loop; 6 K-iterations unrolled by hand",
                   watch=("UTCQMMA", "R2UR", "ELECT", "PLOP3", "IMAD", "LOP3", "SHF", "STL")),
}
HOST_ONLY = {
    "F21": "B's tensor map: L2 promotion NONE -> L2_256B (or L2_128B), host side built in "
           "pelib.l2policy.f21_specs (a cuTensorMapEncodeTiled argument); the kernel is stage 09 unchanged, "
           "only a B200 run measures TMA0_wait",
    "F26": "a persisting L2 access-policy window over B on the launch stream, host side built in "
           "pelib.l2policy (b_window, AccessPolicyWindow.stream_attr, apply: cuCtxSetLimit + "
           "cuStreamSetAttribute); the kernel is stage 09 unchanged, only a B200 run measures TMA0_wait",
}
SKIPPED_BY_RULE = {"F27": "skipped by rule: F25's Phase 1 spread (172 cycles) is below the 200-cycle threshold"}


@dataclass
class CardEvidence:
    """What can be said about a card at compile time: facts (kind compiled) or why there are none."""

    card: str
    status: str                       # compiled / PENDING / build failed / host-side / skipped
    reason: str
    variant: Variant | None = None
    facts: tuple = ()                 # pelib.gonogo.Fact, kind "compiled" (F24's bank ratio: "modelled")
    summary: dict | None = None       # the variant's ptxas/SMEM summary
    base_summary: dict | None = None
    opcodes: dict = field(default_factory=dict)   # watched opcode -> (base count, variant count)
    diff: object = None               # pelib.stages.Rendered diff base -> variant, when both files differ
    evidence: str | None = None

    @property
    def pending(self) -> bool:
        return self.status != COMPILED

    def table(self):
        """Variant against base, one row per compiled fact (labelled compiled)."""
        from pelib.facts import Table, evidence_label

        if self.summary is None:
            return Table([{"card": self.card, "status": self.status, "reason": self.reason}],
                         f"{self.card}: no compiled facts")
        rows = []
        for k in ("registers", "spill_stores", "spill_loads", "stack", "smem_static", "smem_dynamic"):
            b = self.base_summary.get(k) if self.base_summary else None
            v = self.summary.get(k)
            rows.append({"fact": k, "base": "" if b is None else b, "variant": v,
                         "change": "" if b is None else v - b})
        for op, (b, v) in self.opcodes.items():
            rows.append({"fact": f"SASS {op}", "base": "" if b is None else b, "variant": v,
                         "change": "" if b is None else v - b})
        return Table(rows, f"{self.card} variant vs base — {evidence_label()}")

    def __str__(self) -> str:
        head = f"{self.card}: {self.status} - {self.reason}"
        if self.summary:
            head += "\n  " + ", ".join(f"{k}={v}" for k, v in self.summary.items() if k not in ("stage", "arch"))
        return head

    def _repr_markdown_(self) -> str:
        return f"**{self.card}: {self.status}** ({self.evidence or 'no compiled facts'}) — {self.reason}"

    def _ipython_display_(self):
        """Status line, then (when compiled) the facts table and the diff base -> variant."""
        from IPython.display import Markdown, display

        display(Markdown(self._repr_markdown_()))
        if self.summary is not None:
            display(self.table())
        if self.diff is not None:
            display(self.diff)


def _label(p: Path) -> str:
    try:
        return str(p.relative_to(KERNELS))
    except ValueError:
        return str(p)


def _facts(card: str, summary: dict, source: str) -> tuple:
    from pelib.gonogo import Fact

    c = card.lower()
    return tuple(Fact(f"{c}.{k}", summary[k], EVIDENCE, source)
                 for k in ("registers", "spills", "stack", "smem_dynamic") if k in summary)


def card_evidence(card_id: str, *, variant: Variant | None = None, arch: str = "sm_100a",
                  with_diff: bool = True) -> CardEvidence:
    """Compiled facts of a card's variant kernel, or PENDING with the reason (file missing, host-side...)."""
    card_id = card_id.upper()
    if variant is None:
        if card_id in HOST_ONLY:
            return CardEvidence(card_id, HOST_SIDE, HOST_ONLY[card_id])
        if card_id in SKIPPED_BY_RULE:
            return CardEvidence(card_id, SKIPPED, SKIPPED_BY_RULE[card_id])
        if card_id not in VARIANTS:
            raise KeyError(f"no variant kernel is defined for card {card_id}; cards with one: {sorted(VARIANTS)}")
        variant = VARIANTS[card_id]
    if not variant.file.is_file():
        return CardEvidence(card_id, PENDING,
                            f"variant not built yet: {_label(variant.file)} does not exist "
                            f"({variant.what}); compiled facts follow once it does", variant)
    from pelib import build as _build

    try:
        vb = _build.build(variant.file, arch=arch, defines=dict(variant.defines))
    except _build.ToolchainError as e:
        return CardEvidence(card_id, PENDING, f"cannot compile here: {e}", variant)
    except _build.BuildError as e:
        first = str(e).strip().splitlines()
        return CardEvidence(card_id, BUILD_FAILED, f"{_label(variant.file)} does not compile for {arch}: "
                            + " ".join(first[:3])[:400], variant, evidence=EVIDENCE)
    summary = _summary(vb)
    bb, base_summary = None, None
    base = variant.base_file
    if base is not None and base.is_file():
        try:
            bb = _build.build(base, arch=arch, defines=dict(variant.base_defines))
            base_summary = _summary(bb)
        except _build.BuildError:
            bb = None
    opcodes = {}
    for op in variant.watch:
        v = _count(vb.histogram, op)
        b = _count(bb.histogram, op) if bb is not None else None
        opcodes[op] = (b, v)
    diff = None
    if with_diff and bb is not None and base.resolve() != variant.file.resolve():
        from pelib import stages

        diff = stages.diff(base, variant.file, skip_header=True)
    defs = f" {dict(variant.defines)}" if variant.defines else ""
    src = f"{_label(variant.file)}{defs} ({arch}, NVRTC)"
    what = f"compiled {_label(variant.file)}" + (f" with {dict(variant.defines)}" if variant.defines else "")
    if base_summary is not None:
        what += f" against {_label(base)}"
    elif base is not None:
        what += f" (base {_label(base)} not built yet: no deltas)"
    facts = _facts(card_id, summary, src) + _extra_facts(card_id, vb, bb, src)
    return CardEvidence(card_id, COMPILED, what, variant, facts, summary, base_summary, opcodes, diff, EVIDENCE)


def _extra_facts(card: str, vb, bb, source: str) -> tuple:
    """Facts a card's variant adds beyond ptxas: F24's modelled bank-conflict ratio, F28's K-loop account."""
    from pelib.gonogo import Fact

    out = []
    if card == "F24" and bb is not None and vb.exports.get("staging_tma_store"):
        from pelib import banks

        out.append(banks.f24_fact(bb.exports, vb.exports))
    if card == "F28" and bb is not None and "k_iters" in vb.exports:
        before, after = kloop_accounts(vb, bb)
        out.append(Fact("f28.kloop_instructions_per_tile", after.per_tile["total"], EVIDENCE,
                        f"{source}: pelib.sass_account static fast path"))
        out.append(Fact("f28.kloop_instructions_delta", after.per_tile["total"] - before.per_tile["total"], EVIDENCE,
                        f"{source} against {BASE}: pelib.sass_account static fast path"))
    return tuple(out)


def kloop_accounts(f28_build=None, base_build=None):
    """The MMA warp's static instruction account per tile: stage 09 (6 passes of its K-loop plus the
    rest of the tile loop) and F28 (one pass of the tile loop, which holds the unrolled K-loop)."""
    from pelib import build as _build, sass_account

    v = VARIANTS["F28"]
    fb = f28_build or _build.build(v.file, arch="sm_100a", defines=dict(v.defines))
    bb = base_build or _build.build(v.base_file, arch="sm_100a")
    before = sass_account.account(bb.sass, fb.exports["k_iters"])
    after = sass_account.account(fb.sass, 1)
    if after.tile_loop is not None:
        raise sass_account.AccountError("F28's UTCQMMAs sit in a loop inside the tile loop: the K-loop is not unrolled")
    return before, after


def kloop_table(f28_build=None, base_build=None):
    """F28's K-loop account beside stage 09's, instructions per tile by class (compiled, static fast path)."""
    from pelib.facts import Table, evidence_label

    before, after = kloop_accounts(f28_build, base_build)
    b, a = before.per_tile, after.per_tile
    rows = [{"class": k, "stage 09 per tile": b[k], "F28 per tile": a[k], "change": a[k] - b[k]}
            for k in ("UTCQMMA", "R2UR", "SYNCS", "UTCBAR", "other", "total")]
    return Table(rows, "MMA warp, instructions per tile (one fast-path pass: every try_wait passes at once) — "
                       f"{evidence_label()}")


def emulate_check(card_id: str, problem="small", seed: int = 0, tile: tuple[int, int] = (1, 0), acc_buf: int = 0,
                  variant: Variant | None = None) -> dict:
    """One cluster tile of a card's variant replayed from its own exports (emulated), against the torch reference.

    pelib.emulate replays TMA, descriptors, K-advance and TMEM from the exports; the epilogue adds comb
    as the variant does (FP32, or F22's rn_bf16(rn_bf16(acc) + comb) when it exports epi_add_bf16x2) and
    sends every BF16 through the variant's staging (pelib.staging's padded rows, or pelib.banks's
    swizzled blocks and TMA stores for F24). FP32-add variants must match within one BF16 ULP; F22 must
    equal pelib.precision's BF16x2 path on the same accumulators bit for bit.
    """
    import numpy as np
    import torch

    from pelib import banks, emulate, fp8_persistent as P, precision, problems, reference, staging
    from pelib import build as _build

    v = variant or VARIANTS[card_id.upper()]
    b = _build.build(v.file, arch="sm_100a", defines=dict(v.defines))
    ex = b.exports
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    inputs = prob.make_inputs(seed=seed)
    rows_c = ex["tile_m"] * ex["cta_group"]
    m0, n0 = tile[0] * rows_c, tile[1] * ex["tile_n"]
    acc_col = ex["tmem_acc_col"] + acc_buf * ex.get("tmem_acc_stride", 0)
    params = emulate.TileParams.from_exports(ex, tmem_acc_col=acc_col, epilogue_map=P.epilogue_map(ex, acc_col))
    acc, rep = emulate.emulate_tile(params, inputs["a"], inputs["b"], m0=m0, n0=n0, return_report=True)
    rep.issues.extend(P.check_epi_map(ex))
    pos = inputs["comb"].shape[0]
    comb = inputs["comb"][(m0 + torch.arange(acc.shape[0])) % pos][:, n0:n0 + acc.shape[1]].contiguous()
    acc32 = torch.from_numpy(acc.astype(np.float32))
    bf16x2 = bool(ex.get("epi_add_bf16x2"))
    fused_t = precision.bf16x2_add_path(acc32, comb) if bf16x2 else precision.fp32_add_path(acc32, comb)
    fused = fused_t.view(torch.int16).numpy().view(np.uint16)
    parts, sreps = [], []
    for c in range(acc.shape[0] // ex["tile_m"]):
        part = fused[c * ex["tile_m"]:(c + 1) * ex["tile_m"]]
        if ex.get("staging_tma_store"):
            o, r = banks.run(ex, part)
        else:
            o, r = staging.run(staging.StagingLayout.from_exports(ex), part, ex["smem_bytes"])
        parts.append(o)
        sreps.append(r)
        rep.issues.extend(f"CTA {c}: {i}" for i in r.issues)
    out_bits = np.concatenate(parts)
    got = (out_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    ref = reference.patch_embed_reference(inputs["a"][m0:m0 + rows_c], inputs["b"][n0:n0 + ex["tile_n"]].contiguous(),
                                          comb).float().numpy()
    err = np.abs(got - ref)
    ulp = np.abs(ref) * 2.0 ** -7 + 2.0 ** -20
    out = {"card": v.card, "variant": _label(v.file), "problem": prob.name, "tile": (m0, n0), "acc_buf": acc_buf,
           "epilogue add": "BF16x2 (F22)" if bf16x2 else "FP32",
           "staging": "swizzled + TMA store (F24)" if ex.get("staging_tma_store") else "padded rows",
           "max_abs_err": float(err.max()), "within_1ulp": bool((err <= ulp).all()),
           "staged_ok": all(r.ok for r in sreps), "report_ok": rep.ok, "issues": list(rep.issues),
           "evidence": "emulated (pelib.emulate + the variant's staging model)"}
    if bf16x2:
        out["equals_bf16x2_model"] = bool((out_bits == fused).all())
    return out


def _summary(b) -> dict:
    s = b.summary()
    s["spills"] = s["spill_stores"] + s["spill_loads"]
    s["sass_instructions"] = sum(b.histogram.values())
    return s


def _count(hist, op: str) -> int:
    """Occurrences of an opcode family in a SASS histogram (UTCQMMA counts UTCQMMA.2CTA and the like)."""
    return sum(n for k, n in hist.items() if k == op or k.startswith(op + "."))


def card_sheet(card_id: str):
    """A card as the chapter shows it: hypothesis, change, rules, effort, rollback, dependencies."""
    from pelib import gonogo
    from pelib.facts import Table

    c = gonogo.card(card_id)
    h = c.max_effort_h
    rows = [{"field": "title", "value": c.title}, {"field": "hypothesis", "value": c.hypothesis},
            {"field": "change", "value": c.change}]
    rows += [{"field": "success", "value": f"{r} [{'/'.join(r.evidence)}]"} for r in c.success]
    rows += [{"field": "fail-fast", "value": f"{r} [{'/'.join(r.evidence)}]"} for r in c.fail_fast]
    rows += [{"field": "classify", "value": f"{k.label}: {k.rule}"} for k in c.classify]
    rows += [{"field": "max effort", "value": (f"{h[0]:g}-{h[1]:g} h" if len(h) == 2 and h[0] != h[1]
                                              else f"{h[0]:g} h" if h else "")},
             {"field": "rollback", "value": c.rollback},
             {"field": "depends on", "value": ", ".join(c.depends_on) or "nothing"},
             {"field": "recorded status", "value": ", ".join(f"{k}: {v}" for k, v in c.recorded.items())}]
    return Table(rows, f"Card {c.id} (recorded: {c.source})")


def all_evidence(cards=("F21", "F22", "F23", "F24", "F25", "F26", "F27", "F28"), **kw) -> dict:
    """card_evidence for every card (what the dashboard shows about compiled facts)."""
    return {c: card_evidence(c, **kw) for c in cards}


def overview(facts=(), evidence: Mapping | None = None):
    """One row per card: the evaluator's status and evidence kind, compiled evidence, the model's projection."""
    from pelib import gonogo, model
    from pelib.facts import Table

    evidence = evidence or all_evidence(with_diff=False)
    proj = {}
    for r in model.card_projections():
        proj.setdefault(r["card"], f"{r['wall-clock gain']} ({r['change (model input)'].split(' (')[0]})")
    rows = []
    for c, d in gonogo.dashboard(list(facts)):
        e = evidence.get(c.id)
        rows.append({"card": c.id, "title": c.title, "status": d.status, "decided on": d.evidence or "",
                     "needs B200": "yes" if d.needs_b200 else "", "rule": str(d.rule.label or d.rule.metric) if d.rule else "",
                     "variant kernel": e.status if e else "", "modelled projection": proj.get(c.id, "")})
    return Table(rows, "Go/no-go F21-F28: status decided on the kind in 'decided on' (recorded or measured); "
                       "variant kernels compiled; projections modelled (pelib.model)")


def status_table(evidence: Mapping | None = None):
    """One row per card: compiled-evidence status and the reason (for the proposals chapter)."""
    from pelib.facts import Table

    evidence = evidence or all_evidence(with_diff=False)
    rows = [{"card": c, "status": e.status, "evidence": e.evidence or "", "reason": e.reason}
            for c, e in evidence.items()]
    return Table(rows, "Variant kernels: compiled evidence per card")


# ---------------------------------------------------------------------------------------------
# On a B200: launch a card's variant, and turn base-vs-variant runs into the cards' measured facts
# ---------------------------------------------------------------------------------------------

# The base each card is measured against: stage 09, except F26 (its gate is "beyond F21").
MEASURE_BASE = {"F26": "F21"}


def launch_spec(card_id: str, problem="siglip2", tensors: dict | None = None, *, defines: dict | None = None,
                sm_count: int | None = None) -> dict:
    """What a launch of the card's kernel needs, checked without a GPU: build, tensor-map specs, grid, block, SMEM.

    Kernel cards use their variant file (F24 adds tmap_out, the 3D view of `out` after tmap_b); host-side
    cards use stage 09 with their host change (F21: B's map with L2 promotion; F26: the same maps plus
    an access-policy window over B, applied by `run`). Grid: stage 09's persistent rule (the variants
    keep its cluster shape); block and SMEM from the kernel's own exports.
    """
    from pelib import banks, fp8_persistent as P, l2policy, problems
    from pelib import build as _build

    card_id = card_id.upper()
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    v = VARIANTS.get(card_id)
    path, d = (v.file, {**dict(v.defines), **(defines or {})}) if v else (KERNELS / BASE, dict(defines or {}))
    b = _build.build(path, arch="sm_100a", defines=d)
    ex = b.exports
    if "k_iters" in ex and int(prob.k) != ex["k_iters"] * ex["block_k"]:
        raise ValueError(f"{card_id}'s K-loop is unrolled for K = {ex['k_iters'] * ex['block_k']}, the problem has "
                         f"K = {prob.k}: rebuild with defines={{'K_ITERS': {int(prob.k) // ex['block_k']}}}")
    specs = (l2policy.f21_specs(prob, tensors) if card_id in ("F21", "F26")
             else P.tensor_map_specs(P.FINAL_STAGE, prob, tensors))
    order = ["a", "b"]
    if ex.get("staging_tma_store"):
        addr = int(tensors["out"].data_ptr()) if tensors else 0
        specs["out"] = banks.f24_out_spec(int(prob.m), int(prob.n), ex, address=addr)
        order.append("out")
    cfg = P.launch_config(P.FINAL_STAGE, prob, None, sm_count)
    window = l2policy.b_window(tensors["b"] if tensors else None, problem=prob) if card_id == "F26" else None
    return {"card": card_id, "build": b, "specs": specs, "map_order": tuple(order), "grid": cfg.grid,
            "block": (ex["num_threads"], 1, 1), "smem": ex["smem_bytes"], "config": cfg, "window": window}


def _plan(spec: dict, prob, inputs: dict, timing=None):  # pragma: no cover - GPU
    import numpy as np

    from pelib import fp8, launch, tma

    maps = [tma.encode(spec["specs"][k], owner=inputs["out" if k == "out" else k]) for k in spec["map_order"]]
    M, N, K = int(prob.m), int(prob.n), int(prob.k)
    args = (*maps, inputs["comb"], inputs["out"], np.int32(M), np.int32(N), np.int32(K), timing)
    return launch.prepare(spec["build"], args, grid=spec["grid"], block=spec["block"], cluster=(1, 1, 1),
                          smem=spec["smem"], kernel=fp8.KERNEL)


def run(card_id: str, problem="siglip2", *, seed: int = 0, verify: bool = True, time: bool = True,
        iters: int = 20, warmup: int = 3, defines: dict | None = None) -> dict:  # pragma: no cover - GPU
    """Verify a card's kernel against the torch reference, then time it (B200 only; measured)."""
    import torch

    from pelib import device, fp8, l2policy, problems, reference
    from pelib import verify as _verify

    info = device.require("sm_100a")
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    dev = torch.device("cuda", info.ordinal)
    inputs = prob.make_inputs(seed=seed, device=dev)
    spec = launch_spec(card_id, prob, inputs, defines=defines)
    plan = _plan(spec, prob, inputs)
    out = {"card": spec["card"], "device": info.describe(), "evidence": f"measured ({info.name})", "ok": None}
    if spec["window"] is not None:
        out["l2 window"] = l2policy.apply(spec["window"])
    try:
        if verify:
            _verify.poison(inputs["out"])
            plan.run()
            plan.wait()
            ref = reference.patch_embed_reference(inputs["a"], inputs["b"], inputs["comb"])
            rep = _verify.verify_gemm(inputs["out"], ref, a=inputs["a"], b=inputs["b"], tile=(128, 256),
                                      label=f"{spec['card']} on {prob.name}")
            out.update(verify=rep, ok=rep.ok)
        if time and out["ok"] is not False:
            out.update(fp8.time_fn(plan.run, prob, wait=plan.wait, iters=iters, warmup=warmup))
    finally:
        if spec["window"] is not None:
            l2policy.reset()
    return out


def run_timing(card_id: str, problem="siglip2", *, seed: int = 0):  # pragma: no cover - GPU
    """The card's kernel built with TIMING=1, launched once; its decoded clock64 records (pelib.timing)."""
    import torch

    from pelib import device, l2policy, problems
    from pelib import timing as _timing

    info = device.require("sm_100a")
    prob = problems.patch_embed(problem) if isinstance(problem, str) else problem
    dev = torch.device("cuda", info.ordinal)
    inputs = prob.make_inputs(seed=seed, device=dev)
    spec = launch_spec(card_id, prob, inputs, defines={"TIMING": 1})
    lay = _timing.layout(spec["build"], spec["grid"][0])
    buf = _timing.alloc(lay, device=dev)
    plan = _plan(spec, prob, inputs, timing=buf)
    if spec["window"] is not None:
        l2policy.apply(spec["window"])
    try:
        plan.run()
        plan.wait()
    finally:
        if spec["window"] is not None:
            l2policy.reset()
    return _timing.decode(buf, lay)


def _avg(t, phase: str) -> float:
    return float(t.summary()[phase]["avg"])


def wave_span(t, first=(2, 3), second=(4, 5)) -> float:
    """F23: per (CTA, tile), the second wave's last Phase 1 end minus the first wave's first Phase 1 start; averaged."""
    import numpy as np

    from pelib import timing as _timing

    p = _timing.phase_id("epi_phase1")
    s = t.start[:, list(first), :, p].astype(np.float64)
    e = t.end[:, list(second), :, p].astype(np.float64)
    ok = (s != 0).all(axis=1) & (e != 0).all(axis=1)
    span = e.max(axis=1) - s.min(axis=1)
    return float(span[ok].mean())


def gate_facts(card_id: str, base: dict, variant: dict, device: str) -> list:
    """The card's measured facts from a base and a variant measurement, each {"ms": wall clock, "timing": Timing}.

    Metric names are the card rules' (book/data/fp8_proposals.yaml): wall-clock gains in % of the base,
    phase deltas in clock64 cycles (variant - base; negative = faster), F23's ratio of the two-wave
    Phase 1 span to the base's per-warp Phase 1, F24's K-loop gain in %.
    """
    from pelib.gonogo import Fact

    c = card_id.upper()
    src = f"{c} variant vs {MEASURE_BASE.get(c, 'stage 09')}: pelib.variants.measure"
    out = []

    def fact(metric, value):
        out.append(Fact(f"{c.lower()}.{metric}", float(value), "measured", src, device))

    bt, vt = base.get("timing"), variant.get("timing")
    if "ms" in base and "ms" in variant and c in ("F22", "F23", "F28"):
        fact("wall_clock_improvement_pct", 100.0 * (base["ms"] - variant["ms"]) / base["ms"])
        if c == "F28":      # the card's bar is F28 paired with F22; this variant is F28 alone
            out[-1] = Fact(out[-1].metric, out[-1].value, "measured", src + " (F28 alone, not paired with F22)", device)
    if bt is None or vt is None:
        return out
    if c == "F21":
        fact("tma0_wait_delta_cycles", _avg(vt, "tma_wait") - _avg(bt, "tma_wait"))
    elif c == "F26":
        fact("tma0_wait_delta_beyond_f21_cycles", _avg(vt, "tma_wait") - _avg(bt, "tma_wait"))
    elif c == "F22":
        fact("phase1_delta_cycles", _avg(vt, "epi_phase1") - _avg(bt, "epi_phase1"))
    elif c == "F23":
        fact("phase1_ratio_2w_over_4w", wave_span(vt) / _avg(bt, "epi_phase1"))
    elif c == "F24":
        fact("kloop_improvement_pct", 100.0 * (_avg(bt, "kloop") - _avg(vt, "kloop")) / _avg(bt, "kloop"))
        epi = ("epi_phase1", "epi_phase2")
        fact("epilogue_delta_cycles", sum(_avg(vt, p) for p in epi) - sum(_avg(bt, p) for p in epi))
    elif c == "F28":
        fact("kloop_delta_cycles", _avg(vt, "kloop") - _avg(bt, "kloop"))
    return out


def measure(card_id: str, problem="siglip2", *, iters: int = 20) -> list:  # pragma: no cover - GPU
    """Run the card's base and variant (timed, and once with TIMING=1) on a B200; return its measured facts."""
    from pelib import device, fp8_persistent as P

    info = device.require("sm_100a")
    c = card_id.upper()
    b = MEASURE_BASE.get(c)
    if b is None:
        base = P.run(P.FINAL_STAGE, problem=problem, iters=iters)
        base["timing"] = P.run_timing(P.FINAL_STAGE, problem)
    else:
        base = run(b, problem, iters=iters)
        base["timing"] = run_timing(b, problem)
    var = run(c, problem, iters=iters)
    if var.get("ok") is False:
        raise RuntimeError(f"{c} does not verify on {info.name}: {var.get('verify')}")
    var["timing"] = run_timing(c, problem)
    return gate_facts(c, base, var, info.describe())
