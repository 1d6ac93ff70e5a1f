"""Bad inputs, one table per module family: each input, the exception it must raise (or the FAIL verdict
it must give) and a phrase of the message that names the problem and the way out.

The ids (B03, Y02, E12, ...) are the attempts of the 2026-11-24 robustness review that found each defect;
unnamed rows cover the neighbouring cases of the same fix. The simulator, results-tree and leftover tables
hold the cases of the 2026-11-27 review (the simulator's front door, the results tree, the old leftovers).
Cache damage (stale headers, edited or truncated entries, an unwritable or missing cache folder) is a
state, not an input: tests/test_cache.py.
"""
from __future__ import annotations

import os
import textwrap
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from pelib import bench as BN
from pelib import build as B
from pelib.isa import descriptors as D
from pelib import device as V
from pelib.isa import elf
from pelib import emulate as E
from pelib import gonogo as G
from pelib import launch as L
from pelib import problems as P
from pelib import records as RC
from pelib import reference as R
from pelib import results as RS
from pelib.sim import engine as SIM
from pelib.sim import budget as SB
from pelib.sim import host as sim_host
from pelib import stage as stage_mod
from pelib import timing as TM
from pelib import tma as T
from pelib import verify as Y
from pelib.models import pipeline as MP
from pelib.isa.limits import SMEM_LIMIT
from pelib.paths import KERNELS
from pelib.stage import Stage

FAIL = "FAIL"   # the call returns a verdict, and it must be a failing one


def _run(call, expect, phrase, tmp_path):
    """Run one row: the exception type and message phrase, or a failing verdict that says the phrase."""
    if expect is FAIL:
        out = call(tmp_path)
        if isinstance(out, Y.VerifyReport):
            assert not out.ok, f"verification passed:\n{out}"
            text = str(out)
        else:   # an emulate_check dict
            assert out.get("ok") is False or out.get("within_1ulp") is False, out
            text = repr(out)
        assert phrase in text, text
        return
    with pytest.raises(expect) as ei:
        call(tmp_path)
    assert phrase in str(ei.value), f"{type(ei.value).__name__}: {ei.value}"


def _table(rows):
    return pytest.mark.parametrize("call, expect, phrase", [pytest.param(c, e, p, id=i) for i, c, e, p in rows])


# =================================================================================================
# pelib.build: paths, sources, defines, options (B, S, D attempts)
# =================================================================================================
TINY = 'extern "C" __global__ void k(int* p) { *p = 1; }\n'


def _file(tmp, name, text=TINY, data=None):
    p = tmp / name
    if data is not None:
        p.write_bytes(data)
    else:
        p.write_text(text)
    return p


def _zero_cu(tmp):
    p = tmp / "zero.cu"
    p.symlink_to("/dev/zero")
    return p


def _fifo_cu(tmp):
    p = tmp / "fifo.cu"
    os.mkfifo(p)
    return p


def _header_latin1(tmp):
    _file(tmp, "bad.cuh", data=b"// \xb5s per tile\n")
    return _file(tmp, "uses_bad.cu", '#include "bad.cuh"\n' + TINY)


def _two_kernels(tmp):
    return B.build(_file(tmp, "two.cu", TINY + 'extern "C" __global__ void k2(int* p) { *p = 2; }\n'),
                   "sm_90a", cache=False)


BUILD = [
    ("B03", lambda t: B.build("../../README.md"), B.BuildError, "not a CUDA source file (.cu)"),
    ("B09", lambda t: B.build(None), TypeError, "stage must be a path or a name under src/kernels"),
    ("B10", lambda t: B.build("fp8"), B.BuildError, "is a folder: pass one stage file"),
    ("B11", lambda t: B.build(_zero_cu(t)), B.BuildError, "is a character device, not a source file"),
    ("B12", lambda t: B.build(_fifo_cu(t)), B.BuildError, "is a FIFO, not a source file"),
    ("S12", lambda t: B.build(_file(t, "latin1.cu", data=b"// 5 \xb5s\n" + TINY.encode())), B.BuildError,
     "latin1.cu is not UTF-8 text: byte 0xb5 at offset 5 (line 1); save the file as UTF-8"),
    ("S12-header", lambda t: B.build(_header_latin1(t)), B.BuildError, "bad.cuh is not UTF-8 text"),
    ("S06", lambda t: B.build(_file(t, "k.cu"), "sm_100a", extra_options={"arch": "sm_80"}), ValueError,
     "extra_options['arch'] is set by build() itself and may not be replaced (use build()'s arch=)"),
    ("S06-std", lambda t: B.build(_file(t, "k.cu"), extra_options={"std": "c++20"}), ValueError,
     "extra_options['std'] is set by build() itself"),
    ("S06-defines", lambda t: B.build(_file(t, "k.cu"), extra_options={"define_macro": ["X=1"]}), ValueError,
     "use build()'s defines="),
    ("S06-include", lambda t: B.build(_file(t, "k.cu"), extra_options={"include_path": ["/"]}), ValueError,
     "extra_options['include_path'] is set by build() itself"),
    ("D07", lambda t: B.build("fp8/06_stages.cu", defines={"NUM_STAGE": 6}), ValueError,
     "headers it includes, so it would change nothing; did you mean NUM_STAGES?"),
    ("D07-no-near-name", lambda t: B.build(_file(t, "k.cu"), defines={"QQQ_ZZZ": 1}), ValueError,
     "define 'QQQ_ZZZ' occurs nowhere in k.cu"),
    ("D09", lambda t: B.build("fp8/06_stages.cu", defines={"NUM_STAGES": ""}), ValueError,
     "define NUM_STAGES='' has no value: give one (e.g. NUM_STAGES=4), or leave NUM_STAGES out for 06_stages.cu's "
     "default"),
    ("D09-ptx-blank", lambda t: B.ptx("fp8/06_stages.cu", defines={"NUM_STAGES": "  "}), ValueError,
     "define NUM_STAGES='  ' has no value"),
    ("S04", lambda t: B.build(_file(t, "nok.cu", "__device__ int f() { return 1; }\n"), "sm_90a", cache=False).facts,
     ValueError, "nok.cu defines no __global__ kernel"),
    ("S05", lambda t: _two_kernels(t).summary(), ValueError,
     "has kernels ['k', 'k2']: read b.ptxas[name] for one kernel's facts, and pass kernel=name"),
    ("elf-empty", lambda t: elf.read_exports(b""), ValueError, "not an ELF64 cubin (0 B"),
    ("elf-truncated", lambda t: elf.read_exports(B.build(_file(t, "k.cu"), "sm_90a", cache=False).cubin[:3000]),
     ValueError, "is truncated or corrupt"),
]


@_table(BUILD)
def test_build_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


# =================================================================================================
# pelib.verify: tolerances, non-finite values, the inputs' maxima (Y attempts)
# =================================================================================================
def _t(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


_FP8_PROBLEM = P.PatchEmbed("bad-inputs", 256, 256, 128, positions=7)


def _fp8_inputs(m=256, n=256, k=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.empty(m, k).uniform_(-1, 1, generator=g).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=g) / k ** 0.5).to(torch.float8_e4m3fn)
    comb = (0.5 * torch.randn(7, n, generator=g)).to(torch.bfloat16)
    return {"a": a, "b": b, "comb": comb}


def _hopper_y13(t):
    """An sm90 stage's check with one NaN (E4M3 0x7F) in A and a garbage output: was PASS (atol nan)."""
    x = _fp8_inputs()
    ref = R.patch_embed_reference(x["a"], x["b"], x["comb"])
    x["a"].view(torch.uint8)[3, 5] = 0x7F
    x["out"] = _t(*ref.shape, seed=9, scale=100).to(torch.bfloat16)
    x["out"][3] = float("nan")
    return Stage("sm90/00_tma_wgmma").check(_FP8_PROBLEM, x, ref)


def _hopper_y14(t):
    """+Inf in one column of comb, that output column wrong everywhere: was PASS."""
    x = _fp8_inputs()
    x["comb"][:, 7] = float("inf")
    ref = R.patch_embed_reference(x["a"], x["b"], x["comb"])
    x["out"] = ref.clone()
    x["out"][:, 7] = 123.0
    return Stage("sm90/00_tma_wgmma").check(_FP8_PROBLEM, x, ref)


_REF = _t(64, 64, seed=1)
_INF = torch.full((64, 64), float("inf"))

VERIFY = [
    ("Y02", lambda t: Y.compare(_t(64, 64, seed=2), _INF, atol=1e-3, rtol=1e-2), FAIL, "NaN/Inf 4096"),
    ("Y03", lambda t: Y.compare(-_INF, _INF, atol=1e-3), FAIL, "bad elements 4096/4096"),
    ("Y03-nan-vs-inf", lambda t: Y.compare(torch.full((4,), float("nan")), torch.full((4,), float("inf"))),
     FAIL, "bad elements 4/4"),
    ("Y03-inf-vs-finite", lambda t: Y.compare(_INF, _REF, atol=1.0), FAIL, "bad elements 4096/4096"),
    ("Y04", lambda t: Y.verify_gemm(_t(64, 64, seed=3, scale=1e3), _REF, K=768, a_absmax=float("nan"), b_absmax=1.0),
     ValueError, "a_absmax=nan is not finite"),
    ("Y05", lambda t: Y.verify_gemm(_t(64, 64, seed=3), _REF, K=768, a_absmax=float("inf"), b_absmax=1.0),
     ValueError, "a_absmax=inf is not finite: a NaN or infinite tolerance passes every element"),
    ("Y04-atol-nan", lambda t: Y.compare(_REF, _REF, atol=float("nan")), ValueError, "atol=nan is not finite"),
    ("Y05-rtol-inf", lambda t: Y.compare(_REF, _REF, rtol=float("inf")), ValueError, "rtol=inf is not finite"),
    ("Y05-tolerance", lambda t: Y.Tolerance(float("inf"), 0.0), ValueError, "atol=inf is not finite"),
    ("Y06", lambda t: Y.compare(torch.empty(0, 768), torch.empty(0, 768)), ValueError, "nothing to compare"),
    ("Y08", lambda t: Y.gemm_tolerance(-1, 1.0, 1.0), ValueError, "K=-1 must be a positive integer"),
    ("Y10", lambda t: Y.compare(_REF, _REF, tile=(0, 0)), ValueError, "tile=(0, 0) must be one or two positive"),
    ("Y11", lambda t: Y.compare(_REF, _REF, atol=-1), ValueError, "atol=-1.0 is negative"),
    ("Y11-rtol", lambda t: Y.gemm_tolerance(768, 1.0, 1.0, safety=-2), ValueError, "safety=-2.0 is negative"),
    ("Y13", _hopper_y13, P.ProblemError, "a holds 1 NaN (first at (3, 5)): a GEMM of NaN inputs cannot be verified"),
    ("Y14", _hopper_y14, FAIL, "bad elements 256/65536"),
    ("nan-b", lambda t: Y.gemm_tolerance_from(torch.ones(4, 4), torch.tensor([[float("nan")]])), P.ProblemError,
     "b holds 1 NaN"),
    ("mixed-args", lambda t: Y.verify_gemm(_REF, _REF, a=_REF), ValueError, "pass both inputs a and b"),
]


@_table(VERIFY)
def test_verify_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


def test_no_family_derives_its_own_gemm_tolerance():
    """Every GEMM check takes its tolerance from pelib.verify (gemm_tolerance_from / finite_absmax)."""
    src = Path(B.__file__).parent
    offenders = [f"{p.name}:{i}" for p in sorted(src.rglob("*.py")) if p.name != "verify.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if "absmax=float(" in line or ("abs().max()" in line and ("verify_gemm" in line
                                                                          or "gemm_tolerance(" in line))]
    assert not offenders, offenders


# =================================================================================================
# pelib.emulate: what-if overrides, tile index, swizzle, arch, dtypes (E attempts)
# =================================================================================================
def _fp8_check(**kw):
    return Stage("fp8/00_ws_cta1").emulate_check(**kw)


def _nvfp4_check(**kw):
    return Stage("nvfp4/01_pipelined").emulate_check(**kw)


def _f32_operand(t):
    x = P.patch_embed("small").make_inputs()
    x["a"] = x["a"].float()
    return Stage("fp8/00_ws_cta1").emulate_tile(x)


_IDESC = D.umma_instr_desc(128, 128, "e4m3", "e4m3")

EMULATE = [
    ("E01", lambda t: _fp8_check(overrides={"bogus": 1}), E.EmulationError, "unknown override bogus"),
    ("E02", lambda t: _fp8_check(overrides={"a_swizzle": 48}), E.EmulationError,
     "a_swizzle=48: a swizzle is 0, 32, 64 or 128"),
    ("E03", lambda t: _fp8_check(overrides={"mma_m": 100}), E.EmulationError,
     "override mma_m=100: no instruction descriptor encodes it"),
    ("E04", lambda t: _fp8_check(tile=(100, 0)), E.EmulationError,
     "tile=(100, 0) is out of range: the problem has 4 x 2 tiles"),
    ("E05", lambda t: _fp8_check(tile=(-1, 0)), E.EmulationError, "tile=(-1, 0) is out of range"),
    ("E09", lambda t: _nvfp4_check(tile=(5, 5)), FAIL, "tile=(5, 5) is out of range: the problem has 1 x 2 tiles"),
    ("E10-arch", lambda t: E.TileParams.from_exports({"mma_arch": 80}), E.EmulationError,
     "mma_arch=80: the emulator models [90, 100]"),
    ("E10-kind", lambda t: E.TileParams.from_exports({"mma_kind": 99}), E.EmulationError, "mma_kind=99"),
    # mma_n=64 re-encodes idesc, and the modelled hardware then refuses the 128-row B box for a 64-row tile
    # (was 'boxes 128/128 rows do not tile the per-CTA 128/64 rows', naming neither mma_n nor a fix).
    ("E12", lambda t: _fp8_check(overrides={"mma_n": 64}), E.EmulationError,
     "mma_n=64 gives 64 B rows per CTA, which the 128-row B box (b_box_n=128) does not tile: use mma_n 128 or 256, "
     "or b_box_n a divisor of 64"),
    ("E13", _f32_operand, E.EmulationError,
     "A has dtype float32 (4 B per element), but a e4m3 operand is passed as its raw bits"),
    ("E14", lambda t: _fp8_check(overrides={"a_fmt": "e5m2", "a_major": "MN"}), FAIL, "'within_1ulp': False"),
    ("E14-fmt", lambda t: _fp8_check(overrides={"a_fmt": "e5m2"}), FAIL, "'within_1ulp': False"),
    ("idesc-conflict", lambda t: E.TileParams(idesc=_IDESC, mma_n=64), E.EmulationError,
     "mma_n=64 disagrees with idesc=0x08200010, which encodes mma_n=128"),
    ("swizzle-repeat", lambda t: E.swizzle_repeat(48), E.EmulationError, "swizzle=48: one of 0, 32, 64, 128"),
    ("tile-origin", lambda t: E.emulate_tile(E.TileParams(idesc=_IDESC), np.zeros((128, 128), np.uint8),
                                            np.zeros((128, 128), np.uint8), m0=128), E.EmulationError,
     "the tile at (m0, n0) = (128, 0) of 128 x 128 lies outside the 128 x 128 output"),
]


@_table(EMULATE)
def test_emulate_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


def test_overrides_are_what_gets_emulated():
    """An explicit override re-encodes idesc (E03/E12/E14 were silently replaced by the exported idesc)."""
    p = E.TileParams.from_exports({"mma_kind": 2, "idesc": _IDESC}, mma_n=64, a_fmt="e5m2")
    assert (p.mma_n, p.a_fmt) == (64, "e5m2")
    assert D.decode_umma_instr_desc(p.idesc)["n"] == 64 and D.decode_umma_instr_desc(p.idesc)["a_fmt"] == "e5m2"
    q = p.with_(b_major="MN")
    assert q.b_major == "MN" and D.decode_umma_instr_desc(q.idesc)["b_major"] == "MN"
    r = q.with_(idesc=_IDESC)       # a new idesc decides the fields it encodes
    assert (r.mma_n, r.a_fmt, r.b_major) == (128, "e4m3", "K")


# =================================================================================================
# pelib.isa.descriptors: reserved values of the block-scaled instruction descriptor
# =================================================================================================
BS = D.umma_instr_desc_block_scaled(128, 128)      # 0x08200480: mxf4nvf4, UE4M3, M=128, N=128

DESCRIPTORS = [
    ("M64", lambda t: D.umma_instr_desc_block_scaled(64, 128), D.DescriptorError,
     "M=64: a block-scaled descriptor stores M>>7 in bits 27-28 (bits 24-26 are reserved), so M is 128 or 256"),
    ("sf-id-1", lambda t: D.umma_instr_desc_block_scaled(128, 128, scale_fmt="ue8m0", a_sf_id=1), D.DescriptorError,
     "a_sf_id=1: with scale_vec::2X (kind::mxf4nvf4, block32) the scale-factor data ID is one of [0, 2]"),
    ("sf-id-3", lambda t: D.umma_instr_desc_block_scaled(128, 128, kind="mxf4", scale_fmt="ue8m0", b_sf_id=3),
     D.DescriptorError, "b_sf_id=3: with scale_vec::2X"),
    ("sf-id-block16", lambda t: D.umma_instr_desc_block_scaled(128, 128, a_sf_id=2), D.DescriptorError,
     "a_sf_id=2: with scale_vec::4X (kind::mxf4nvf4, block16) the scale-factor data ID is one of [0]"),
    ("mxf4-block16", lambda t: D.umma_instr_desc_block_scaled(128, 128, kind="mxf4", scale_fmt="ue8m0", block=16),
     D.DescriptorError, "kind::mxf4 has no block16"),
    ("mxf8f6f4-ue4m3", lambda t: D.umma_instr_desc_block_scaled(128, 128, "e4m3", "e4m3", "ue4m3", kind="mxf8f6f4"),
     D.DescriptorError, "kind::mxf8f6f4 takes UE8M0 scales only"),
    ("mxf8f6f4-k96", lambda t: D.umma_instr_desc_block_scaled(128, 128, "e4m3", "e4m3", "ue8m0", kind="mxf8f6f4",
                                                               k_size=1), D.DescriptorError, "bit 31 is reserved"),
    ("decode-bit25", lambda t: D.decode_umma_instr_desc_block_scaled(0x08200480 | 1 << 25), D.DescriptorError,
     "0x0a200480 sets reserved bit 25 of a kind::mxf4nvf4 descriptor"),
    ("decode-bit24", lambda t: D.decode_umma_instr_desc_block_scaled(BS | 1 << 24), D.DescriptorError, "reserved bit 24"),
    ("decode-bit26", lambda t: D.decode_umma_instr_desc_block_scaled(BS | 1 << 26), D.DescriptorError, "reserved bit 26"),
    ("decode-bit12", lambda t: D.decode_umma_instr_desc_block_scaled(BS | 1 << 12), D.DescriptorError, "reserved bit 12"),
    ("decode-M0", lambda t: D.decode_umma_instr_desc_block_scaled(BS & ~(3 << 27)), D.DescriptorError,
     "M>>7 = 0 in bits 27-28 is no block-scaled shape"),
    ("decode-sf-id", lambda t: D.decode_umma_instr_desc_block_scaled(BS | 1 << 29), D.DescriptorError,
     "a_sf_id=1 is not allowed for kind::mxf4nvf4 with ue4m3 scales (one of [0])"),
    ("decode-mxf4-ue4m3", lambda t: D.decode_umma_instr_desc_block_scaled(BS, "mxf4"), D.DescriptorError,
     "kind::mxf4 takes UE8M0 scales only"),
]


@_table(DESCRIPTORS)
def test_descriptor_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


# =================================================================================================
# pelib.gonogo: facts, rules and cards it cannot evaluate (G attempts)
# =================================================================================================
F22 = "F22"


def _f22():
    return G.card(F22)


GONOGO = [
    ("G02", lambda t: G.Fact("f22.phase1_delta_cycles", "0.71", "measured"), ValueError,
     "fact f22.phase1_delta_cycles: value '0.71' (str) is not a number; pass a finite int or float (float('0.71'))"),
    ("G03", lambda t: G.Fact("f22.phase1_delta_cycles", None, "measured"), ValueError, "value None (NoneType) is not a number"),
    ("G04", lambda t: G.Fact("f22.phase1_delta_cycles", float("nan"), "measured"), ValueError,
     "value nan is not finite; a NaN or infinite measurement cannot decide a card"),
    ("G04-inf", lambda t: G.Fact("x", float("-inf"), "measured"), ValueError, "value -inf is not finite"),
    ("G05", lambda t: G.Rule.from_dict({"op": "lt", "threshold": 1}), ValueError, "a rule lacks required key 'metric'"),
    ("G06", lambda t: G.Rule("x", "lt", "5"), ValueError, "rule on x: threshold: value '5' (str) is not a number"),
    ("G07", lambda t: G.Card.from_dict({"id": "F99"}), ValueError, "a card (F99) lacks required key 'title'"),
    ("G08", lambda t: G.evaluate(_f22(), [{"metric": "f22.phase1_delta_cycles", "value": 1, "kind": "measured"}]),
     TypeError, "facts must be pelib.gonogo.Fact(metric, value, kind) objects, got dict"),
    ("G11", lambda t: G.Rule("x", "lt", float("nan")), ValueError, "rule on x: threshold: value nan is not finite"),
    ("G13", lambda t: G.evaluate(_f22(), {"x": 1.0}), TypeError, "got float 1.0: wrap each number as Fact("),
    ("G14", lambda t: G.Rule.from_dict({"metric": "x", "op": "lt", "threshold": 1, "evidence": "measured"}),
     ValueError, "evidence must be a list of kinds such as ['measured'], got 'measured'"),
    ("G14-kinds", lambda t: G.Rule("x", "lt", 1, evidence=("measured", "guessed")), ValueError,
     "unknown evidence kinds ['guessed']"),
    ("card-rules", lambda t: G.Card.from_dict({"id": "F98", "title": "t", "success": {"metric": "x"}}), ValueError,
     "card F98: 'success' must be a list of rules"),
    # the cards' records (pelib.records.load): a name that climbs out of book/data read any file as YAML
    ("G12", lambda t: RC.load("../../README.md"), ValueError,
     f"record name '../../README.md' points outside {RC.paths.DATA}: name a file there (fp8_experiments.yaml, "),
]


@_table(GONOGO)
def test_gonogo_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


# =================================================================================================
# pelib.launch: the launch shape, and launches after a fault or hang (L attempts)
# =================================================================================================
B200 = V.DeviceInfo(True, name="Fake B200", cc=(10, 0), sm_count=148, smem_optin_bytes=SMEM_LIMIT, ordinal=0)
_BUILD = B.Build(source=Path("k.cu"), arch="sm_100a", defines={}, cubin=b"", log="",
                 ptxas={"k": B.PtxasFacts("k", 10, 0, 0, 0, 0)}, exports={"smem_bytes": 0})


def _prep(**kw):
    args = dict(grid=1, block=32, info=B200)
    args.update(kw)
    return L.prepare(_BUILD, (), **args)


@contextmanager
def _launch_state(fault=None, hang_status=None):
    with mock.patch.dict(L._STATE, {"fault": fault, "hang": ("k [sm_100a] grid=(8, 1, 1) CTAs, block=(32, 1, 1)",
                                                             "event") if hang_status else None}), \
            mock.patch.object(L, "_event_status", lambda ev: hang_status), \
            mock.patch.object(L, "_event_destroy", lambda ev: None):
        yield


def _run_after(fault=None, hang_status=None):
    with _launch_state(fault, hang_status):
        _prep(grid=(4,)).run()


LAUNCH = [
    ("L04", lambda t: _prep(grid=(1.5,)), L.LaunchError,
     "grid.x=1.5 is a float, not an integer (use // for the division, or math.ceil)"),
    ("L04-block", lambda t: _prep(block=(32.9,)), L.LaunchError, "block.x=32.9 is a float, not an integer"),
    ("L04-whole-float", lambda t: _prep(grid=2.0), L.LaunchError, "grid=2.0 must be an integer or a tuple"),
    ("L05", lambda t: _prep(grid="abc"), L.LaunchError, "grid='abc' must be an integer or a tuple of 1 to 3 integers"),
    ("L05-bool", lambda t: _prep(block=(True,)), L.LaunchError, "block.x=True is a bool, not an integer"),
    ("L08", lambda t: _prep(smem=-5), L.LaunchError, "smem=-5: dynamic shared memory is a whole number of bytes >= 0"),
    ("L08-float", lambda t: _prep(smem=1024.5), L.LaunchError, "smem=1024.5"),
    ("L09-kernel", lambda t: _prep(kernel="kk"), L.LaunchError, "k.cu has no kernel 'kk'; it has ['k']"),
    ("after-fault", lambda t: _run_after(fault=("rt_fault [sm_90a] grid=(1, 1, 1) CTAs", "CUDA_ERROR_ILLEGAL_ADDRESS")),
     L.KernelFault, "the CUDA context has been unusable since rt_fault [sm_90a] grid=(1, 1, 1) CTAs failed with "
                    "CUDA_ERROR_ILLEGAL_ADDRESS. Restart the Python process"),
    ("after-hang", lambda t: _run_after(hang_status="running"), L.KernelHang,
     "k [sm_100a] grid=(8, 1, 1) CTAs, block=(32, 1, 1) is still running past its watchdog"),
    ("hang-then-fault", lambda t: _run_after(hang_status="CUDA_ERROR_LAUNCH_FAILED"), L.KernelFault,
     "failed on the device: CUDA_ERROR_LAUNCH_FAILED"),
]


@_table(LAUNCH)
def test_launch_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


def test_launch_after_a_hang_that_ended_goes_ahead():
    """A kernel past its watchdog that has since finished does not block the next launch."""
    with _launch_state(hang_status="done"):
        L.check_context("k [sm_100a] grid=(4, 1, 1)")
        assert L._STATE["hang"] is None and L._STATE["fault"] is None


# =================================================================================================
# pelib.problems and pelib.reference: dims, dtypes, ranks (P, R attempts)
# =================================================================================================
def _uint8_bits():
    small = P.patch_embed("small")
    x = small.make_inputs()
    x["a"] = x["a"].view(torch.uint8)
    return small.validate(x)


PROBLEMS = [
    ("P05", lambda t: P.PatchEmbed("x", m="512", n=768, k=768), P.ProblemError,
     "x: m='512' is a str; problem dimensions are integers (int('512'))"),
    ("P06", lambda t: P.PatchEmbed("x", m=512.0, n=256, k=128), P.ProblemError, "x: m=512.0 is a float"),
    ("P06-positions", lambda t: P.PatchEmbed("x", 512, 256, 128, positions=2.5), P.ProblemError,
     "positions=2.5 is a float"),
    ("P06-nvfp4", lambda t: P.NvFp4Gemm("x", 128, 128.0, 256), P.ProblemError, "x: n=128.0 is a float"),
    ("P21", lambda t: _uint8_bits(), P.ProblemError,
     "a has dtype torch.uint8, expected torch.float8_e4m3fn (if it holds torch.float8_e4m3fn bits (the TMA view), "
     "reinterpret them with .view(torch.float8_e4m3fn); .to(torch.float8_e4m3fn) would convert the integer values"),
    ("R02", lambda t: R.patch_embed_reference(*_abc(positions=0)), ValueError, "comb has 0 positions"),
    ("R05", lambda t: R.patch_embed_reference(_abc()[0][0], *_abc()[1:]), ValueError,
     "a must be 2-D (M, K), got shape (128,)"),
]


def _abc(positions=7):
    x = _fp8_inputs(64, 32, 128)
    return x["a"], x["b"], x["comb"][:positions]


@_table(PROBLEMS)
def test_problem_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


def test_following_the_fp8_hint_keeps_the_values():
    """P21b: the hinted .view() keeps E4M3 bits as they are (the old .to() hint turned max|a| 1.0 into 192)."""
    small = P.patch_embed("small")
    x = small.make_inputs()
    bits = x["a"].view(torch.uint8)
    x["a"] = bits.view(torch.float8_e4m3fn)
    small.validate(x)
    assert float(x["a"].float().abs().max()) <= 1.0


# =================================================================================================
# pelib.device and pelib.tma (V, X attempts)
# =================================================================================================
DEVICE = [
    ("V05", lambda t: V.mode("sm_100", info=V.DeviceInfo(False, "no CUDA GPU here")), ValueError,
     "unknown arch 'sm_100': the book builds for sm_100a, sm_90a"),
    ("V05-can-run", lambda t: V.can_run("SM_100A", info=V.DeviceInfo(False, "no CUDA GPU here")), ValueError,
     "unknown arch 'SM_100A'"),
    ("tma-float-dim", lambda t: T.make_spec("float8_e4m3fn", (512, 768.5), (128, 128)), T.TensorMapError,
     "shape[1]=768.5 is a float, not an integer"),
    ("tma-str-box", lambda t: T.make_spec("float8_e4m3fn", (512, 768), (128, "a")), T.TensorMapError,
     "box[1]='a' is a str, not an integer"),
]


@_table(DEVICE)
def test_device_and_tma_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


@pytest.mark.parametrize("value, forced", [("0", False), ("false", False), ("", False), ("no", False),
                                           ("1", True), ("yes", True)])
def test_force_compile_only_reads_its_value(monkeypatch, value, forced):
    """V09: PELIB_FORCE_COMPILE_ONLY=0 means off (any non-empty value used to force compile-only)."""
    monkeypatch.setenv(V.FORCE_ENV, value)
    assert (B200.mode == V.COMPILE_ONLY) is forced


# =================================================================================================
# The simulator's front door: the run's size, its inputs and its launch shape (2026-11-27 review)
# =================================================================================================


@contextmanager
def _env(**env):
    """The front door's budgets pinned (the host's free memory would otherwise decide the message)."""
    keep = {k: os.environ.get(k) for k in ("PELIB_SIM_BUDGET_STEPS", "PELIB_SIM_MAX_MB", *env)}
    try:
        for k in ("PELIB_SIM_BUDGET_STEPS", "PELIB_SIM_MAX_MB"):
            os.environ.pop(k, None)
        os.environ.update({k: str(v) for k, v in env.items()})
        yield
    finally:
        for k, v in keep.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _sim_run(key, problem, **env):
    with _env(**env):
        return sim_host.run(Stage(key), problem)


def _sim_timing(key, problem):
    with _env():
        return sim_host.run_timing(Stage(key), problem)


def _sm90_inputs(change):
    s = Stage("sm90/00_tma_wgmma")
    t = s.inputs("sim", 0, "sim")
    change(t)
    return s, t


def _sim_inputs(change):
    s, t = _sm90_inputs(change)
    with _env():
        return sim_host.run(s, "sim", inputs=t)


def _gpu_plan_with_cpu_inputs(t):
    """The GPU path validates too: CPU tensors for a launch on cuda:0 (a test stand-in H100)."""
    s = Stage("sm90/00_tma_wgmma")
    info = V.DeviceInfo(True, name="H100 (stand-in)", cc=(9, 0), sm_count=132, smem_optin_bytes=SMEM_LIMIT, ordinal=0)
    return s.plan("sim", s.inputs("sim", 0, "sim"), "gpu", info=info)


def _short_view(t):
    big = torch.empty(t["out"].shape[0], t["out"].shape[1], dtype=torch.bfloat16)
    t["out"] = big[:-64]                       # a view into a larger buffer, 64 rows short


def _strided_view(t):
    big = torch.empty(t["out"].shape[0], t["out"].shape[1] + 64, dtype=torch.bfloat16)
    t["out"] = big[:, :-64]


def _prepare(**kw):
    args = dict(grid=(1,), block=(128,), cluster=(1,), smem=1024)
    args.update(kw)
    return SIM.prepare(KERNELS / "sm90" / "00_tma_wgmma.cu", (), kernel="k", arch="sm_90a", **args)


SIMULATOR = [
    ("full-fp8", lambda t: _sim_run("fp8/09_persistent_megakernel", "full"), SB.SimTooLarge,
     "fp8/09_persistent_megakernel on siglip2 (928256 x 768 x 768) is too large for the simulator: ~33,939,360 "
     "scheduler steps at least (21,756 CTA tiles x (192 threads x 8 + 6 K blocks x 4)), over the budget of "
     "20,000,000 (PELIB_SIM_BUDGET_STEPS)"),
    ("full-fp8-fix", lambda t: _sim_run("fp8/09_persistent_megakernel", "full"), SB.SimTooLarge,
     "Simulate a test-size problem: --problem sim (768 x 512 x 384; pelib.sim.host.run(stage, 'sim'))"),
    ("full-sm90", lambda t: _sim_run("sm90/00_tma_wgmma", "full", PELIB_SIM_MAX_MB=16384), SB.SimTooLarge,
     # the event log's size follows the event schema (sim.EVENT_DTYPE); the rest is fixed by the problem
     "of host memory at least (inputs and output 2.0 GB, reference and verification 31.9 GB, engine "
     "state of 43,512 CTAs 12.4 GB, event log "),
    ("full-sm90-limit", lambda t: _sim_run("sm90/00_tma_wgmma", "full", PELIB_SIM_MAX_MB=16384), SB.SimTooLarge,
     "), over the 16.0 GB PELIB_SIM_MAX_MB"),
    ("timing-full", lambda t: _sim_timing("fp8/09_persistent_megakernel", "full"), SB.SimTooLarge,
     "fp8/09_persistent_megakernel on siglip2 (928256 x 768 x 768) is too large for the simulator"),
    ("memory-only", lambda t: _sim_run("fp8/09_persistent_megakernel", "medium", PELIB_SIM_MAX_MB=512),
     SB.SimTooLarge, "over the 512 MB PELIB_SIM_MAX_MB"),
    ("persistent-grid", lambda t: _grid_too_big(), SB.SimTooLarge,
     "or give the persistent grid fewer resident CTAs (--grid, a multiple of 2; now 20,000)"),
    ("budget-env", lambda t: _sim_run("fp8/09_persistent_megakernel", "sim", PELIB_SIM_BUDGET_STEPS="lots"),
     SB.SimTooLarge, "PELIB_SIM_BUDGET_STEPS='lots' is not a whole number (0 turns the check off)"),
    ("out-64-rows-short", lambda t: _sim_inputs(lambda x: x.update(out=x["out"][:-64].clone())), P.ProblemError,
     "sim: out has shape (328, 768), expected (392, 768)"),
    ("out-view-short", lambda t: _sim_inputs(_short_view), P.ProblemError,
     "sim: out has shape (328, 768), expected (392, 768)"),
    ("out-strided-view", lambda t: _sim_inputs(_strided_view), P.ProblemError,
     "sim: out is not contiguous (strides (832, 1)); pass .contiguous()"),
    ("out-dtype", lambda t: _sim_inputs(lambda x: x.update(out=x["out"].float())), P.ProblemError,
     "out has dtype torch.float32, expected torch.bfloat16 (convert with .to(torch.bfloat16))"),
    ("not-on-cpu", lambda t: _sim_inputs(lambda x: x.update({k: v.to("meta") for k, v in x.items()})),
     P.ProblemError, "sim: a is on meta, expected cpu; move it with .to('cpu')"),
    ("gpu-path-validates", _gpu_plan_with_cpu_inputs, P.ProblemError,
     "sim: a is on cpu, expected cuda:0; move it with .to('cuda:0')"),
    ("block-0", lambda t: _prepare(block=(0,)), L.LaunchError, "block (0,) must be 1 to 3 positive integers"),
    ("block-2048", lambda t: _prepare(block=(2048,)), L.LaunchError,
     "block (2048, 1, 1) has 2048 threads, more than 1024"),
    ("block-z-65", lambda t: _prepare(block=(1, 1, 65)), L.LaunchError, "block.z=65 is over the 64 every GPU allows"),
    ("grid-0", lambda t: _prepare(grid=(0,)), L.LaunchError, "grid (0,) must be 1 to 3 positive integers"),
    ("grid-y", lambda t: _prepare(grid=(1, 70000)), L.LaunchError, "grid.y=70,000 is over the 65,535 every GPU allows"),
    ("smem-over", lambda t: _prepare(smem=300_000), L.LaunchError,
     "k needs 300000 B dynamic + 0 B static shared memory per CTA; the simulated SM (common/limits.cuh "
     f"PE_SMEM_LIMIT) allows {SMEM_LIMIT} B"),
    ("cluster-grid", lambda t: _prepare(grid=(3,), cluster=(2,)), L.LaunchError,
     "grid.x=3 CTAs is not a multiple of cluster.x=2"),
]


def _grid_too_big():
    s = Stage("fp8/09_persistent_megakernel")
    with _env(PELIB_SIM_MAX_MB=4096):
        return sim_host.check(s, "sim", sim_host.config(s, "sim", grid=20_000))


@_table(SIMULATOR)
def test_simulator_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


def test_front_door_lets_the_simulators_own_problems_in():
    """Every stage's 'sim' problem (what the tests and the book simulate) passes the front door."""
    from pelib.kinds.base import KindError
    from pelib.stage import all_stages
    with _env(PELIB_SIM_MAX_MB=4096):
        for s in all_stages():
            try:
                cfg = sim_host.config(s, "sim")
            except KindError:     # a variant built for one K (F28's unrolled K-loop): not simulated at 'sim'
                continue
            est = sim_host.check(s, "sim", cfg)
            assert est.steps < SB.DEFAULT_BUDGET_STEPS // 20, (s.key, est)


@pytest.mark.parametrize("key", ["fp8/09_persistent_megakernel", "sm90/11_a_half_slices", "nvfp4/00_single_stage"])
def test_the_estimate_is_a_floor_of_what_the_engine_takes(key):
    """The steps the front door counts are at most what a run takes (it refuses only what cannot fit)."""
    s = Stage(key)
    est = sim_host.estimate(s, "sim")
    with _env():
        res = sim_host.run(s, "sim")
    assert res["ok"] and est.steps <= res["report"].stats["steps"] <= 8 * est.steps, (est, res["report"].stats)


# =================================================================================================
# pelib.results and pelib.bench: the results tree stays inside its root
# =================================================================================================
def _report(**env):
    e = {"date": "2026-11-24T10:31:02+0000", "device": "NVIDIA H100 80GB HBM3", "git": "abc1234def"}
    e.update(env)
    return {"env": e, "results": [], "skipped": {}}


def _write_in(t, report, out=True):
    with mock.patch.object(RS, "RESULTS", t / "results"):
        return BN.write(report, (t / "out") if out else None)


def _symlinked_run(t):
    (t / "results").mkdir()
    (t / "elsewhere").mkdir()
    (t / "results" / "2026-11-24-h100").symlink_to(t / "elsewhere")
    return _write_in(t, _report(), out=False)


RESULTS_TREE = [
    ("date-escape", lambda t: RS.run_dir({"date": "../escape", "device": "h100"}, t), RS.ResultsPathError,
     "date='../escape' is not an ISO date (YYYY-MM-DD, or a timestamp that starts with one)"),
    ("date-root-escape", lambda t: RS.run_dir({"date": "../../../escape", "device": "h100"}, t), RS.ResultsPathError,
     "date='../../../escape' is not an ISO date"),
    ("date-None", lambda t: RS.run_dir({"date": None, "device": "h100"}, t), RS.ResultsPathError,
     "date=None is not an ISO date"),
    ("date-not-a-day", lambda t: RS.run_dir({"date": "2026-13-45", "device": "h100"}, t), RS.ResultsPathError,
     "date='2026-13-45' is not an ISO date"),
    ("device-escape", lambda t: RS.run_dir({"date": "2026-11-24", "device": "../../etc"}, t), RS.ResultsPathError,
     "device='../../etc' names no device: a device name has no path separators or '..'"),
    ("write-date-escape", lambda t: _write_in(t, _report(date="../../../escape")), RS.ResultsPathError,
     "env['date']='../../../escape' is not an ISO date"),
    ("write-default-escape", lambda t: _write_in(t, _report(date="../escape"), out=False), RS.ResultsPathError,
     "env['date']='../escape' is not an ISO date"),
    ("write-git-escape", lambda t: _write_in(t, _report(git="../../x")), RS.ResultsPathError,
     "env['git']='../../x' cannot be part of a result file's name: use letters, digits and . _ + - only"),
    ("write-device-escape", lambda t: _write_in(t, _report(device="a/../../b")), RS.ResultsPathError,
     "device='a/../../b' names no device"),
    ("write-through-symlink", _symlinked_run, RS.ResultsPathError, "outside"),
]


@_table(RESULTS_TREE)
def test_results_tree_bad_inputs(call, expect, phrase, tmp_path):
    before = sorted(p for p in tmp_path.parent.rglob("*") if "escape" in p.name)
    _run(call, expect, phrase, tmp_path)
    assert not [p for p in tmp_path.rglob("*.json")], "a refused write left a file"
    assert sorted(p for p in tmp_path.parent.rglob("*") if "escape" in p.name) == before


def test_a_folder_that_is_not_a_run_is_never_the_newest(tmp_path):
    """A run folder written with date None became what results.latest() returned as newest."""
    for name in ("2026-11-23-h100", "2026-11-24-h200", "None-h100", "2026-13-45-h100", "notes", "zz-escape"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.json").write_text("{}")
    (tmp_path / "2026-11-25-h100").write_text("a file, not a folder")
    assert [r.name for r in RS.runs(tmp_path)] == ["2026-11-23-h100", "2026-11-24-h200"]
    assert RS.latest("x.json", tmp_path) == tmp_path / "2026-11-24-h200" / "x.json"
    assert RS.files("x.json", tmp_path)[0].parent.name == "2026-11-23-h100"


def test_a_good_run_is_written_where_it_always_was(tmp_path):
    path = _write_in(tmp_path, _report(), out=False)
    assert path == tmp_path / "results" / "2026-11-24-h100" / "2026-11-24T103102Z-nvidia-h100-80gb-hbm3-abc1234.json"
    assert RS.run_dir({"date": "2026-11-24", "device": "NVIDIA H200"}, tmp_path).name == "2026-11-24-h200"


# =================================================================================================
# The old leftovers: model parameters, NVFP4 overrides and scales
# =================================================================================================
def _tiny_amax():
    x = torch.zeros(4, 32)
    x[1, 3] = 1e-37
    return R.nvfp4_quantize(x)


LEFTOVERS = [
    ("params-nan", lambda t: MP.outcome(params=MP.Params(handoff=float("nan"), stage0_after_stores=100.0)),
     MP.ModelError, "Params: handoff=nan is not finite: give a number of cycles"),
    ("params-inf", lambda t: MP.Params(handoff=1.0, stage0_after_stores=float("inf")), MP.ModelError,
     "stage0_after_stores=inf is not finite"),
    ("params-str", lambda t: MP.Params(handoff="40", stage0_after_stores=1.0), MP.ModelError,
     "Params: handoff='40' is a str, not a number of cycles"),
    ("profile-nan", lambda t: MP.Params(1.0, 1.0, warp_profile=(1.0, float("nan"))), MP.ModelError,
     "warp_profile[1]=nan is not finite"),
    ("delta-nan", lambda t: MP.outcome(phase1_delta=float("nan")), MP.ModelError, "Scenario: phase1=nan is not finite"),
    ("M03", lambda t: MP.Scenario(stages=2.5), MP.ModelError,
     "Scenario: stages=2.5 must be a whole number >= 1 (an int, e.g. stages=4, the default)"),
    ("M03-ctas", lambda t: MP.Scenario(ctas=0), MP.ModelError, "Scenario: ctas=0 must be a whole number >= 1"),
    ("nvfp4-override-typo", lambda t: _nvfp4_check(overrides={"k_advance_byte": 64}), E.EmulationError,
     "unknown override k_advance_byte (did you mean k_advance_bytes?): an NVFP4 override replaces one of "
     "01_pipelined's exports or a TileParams field"),
    ("nvfp4-override-bogus", lambda t: _nvfp4_check(overrides={"bogus": 1}), E.EmulationError,
     "unknown override bogus"),
    ("nvfp4-tiny-amax", lambda t: _tiny_amax(), ValueError,
     "nvfp4_quantize: amax(|x|) = 1e-37 is too small to scale into E2M1 x UE4M3: the encode scale 448·6/amax = "
     "2.69e+40 overflows FP32 (amax must be >= 7.9e-36)"),
    ("nvfp4-tiny-amax-fix", lambda t: _tiny_amax(), ValueError, "or pass a decode scale global_scale >= 2.94e-39"),
    ("nvfp4-zero-global-scale", lambda t: R.nvfp4_quantize(torch.ones(2, 32), global_scale=0.0), ValueError,
     "global_scale=0.0 gives no finite FP32 encode scale"),
]


@_table(LEFTOVERS)
def test_leftover_bad_inputs(call, expect, phrase, tmp_path):
    _run(call, expect, phrase, tmp_path)


def test_the_right_nvfp4_override_is_what_gets_emulated():
    """The correctly spelt key still reaches the emulator (and its wrong K-advance fails the check)."""
    out = _nvfp4_check(overrides={"k_advance_bytes": 64})
    assert out["ok"] is False and any("K-advance 64 B" in i for i in out["issues"])


def test_a_tiny_tensor_with_a_given_decode_scale_round_trips():
    x = torch.zeros(4, 32)
    x[1, 3] = 1e-37
    q = R.nvfp4_quantize(x, global_scale=3e-39)
    got = float(R.nvfp4_dequantize(q.data, q.scale, q.global_scale)[1, 3])
    assert abs(got - 1e-37) <= 0.1e-37


TABLES = {"build": BUILD, "verify": VERIFY, "emulate": EMULATE, "descriptors": DESCRIPTORS, "gonogo": GONOGO,
          "launch": LAUNCH, "problems+reference": PROBLEMS, "device+tma": DEVICE, "simulator": SIMULATOR,
          "results+bench": RESULTS_TREE, "models+nvfp4": LEFTOVERS}


def test_cli_grid_runs_the_persistent_grid_it_names_and_refuses_what_no_gpu_takes(capfd):
    """--grid on the command line: the simulated run uses that many resident CTAs; a grid that is not whole
    clusters is a refusal line (no traceback); zero or a word is an argument error naming the fix. A simulated
    run is a child process (pelib.predict.host), so its lines are read from the file descriptors."""
    assert stage_mod.main(["sm90/02_persistent_cluster", "--device", "sim", "--grid", "4"]) == 0
    assert "grid 4 CTAs = 2 clusters of 2" in capfd.readouterr().out
    assert stage_mod.main(["sm90/02_persistent_cluster", "--device", "sim", "--grid", "3"]) == 1
    assert "refused: grid.x=3 CTAs is not a multiple of cluster.x=2" in capfd.readouterr().out
    for bad in ("0", "two"):
        with pytest.raises(SystemExit):
            stage_mod.main(["sm90/02_persistent_cluster", "--device", "sim", "--grid", bad])
        assert "is not a number of CTAs: give a positive integer" in capfd.readouterr().err


def test_the_equilibrium_widget_says_which_values_its_controls_take():
    """W07: widgets['stages'].value = 50 is ipywidgets' own TraitError ('Invalid selection'), left as it is (the
    raw slider is the library's); the project's way to set a control, select(), refuses it listing the options,
    and the docstring says which values each control takes and points at select()."""
    from pelib.views import model_widgets as MW, widgets as WG
    doc = MW.equilibrium_widget.__doc__
    assert "w.select(stages=5" in doc and "stages 2-6" in doc and MW.CONTROLS["stages"] == [2, 3, 4, 5, 6]
    assert all(k in doc for k in MW.CONTROLS) and "epi_warps 2, 3, 4, 5, 6 or 8" in doc
    w = MW.equilibrium_widget(live=False, static=False)
    with pytest.raises(WG.WidgetError, match=r"stages=50 is not one of the options \[2, 3, 4, 5, 6\]"):
        w.select(stages=50)


# =================================================================================================
# python -m pelib.stage: what it is told to run, sweep and trace (N, PR attempts of the December round)
# =================================================================================================
def _no_run(*a, **k):
    pytest.fail("the run went ahead")


CLI = [
    ("N02", ["fp8", "--device", "sim"], "fp8 is a family, not a stage: name one of its stage files, e.g. "
     "fp8/00_ws_cta1 (it has 00_ws_cta1, 01_cta2, "),
    ("N02-table", ["sm90", "--device", "sim"], "13_one_prefetcher); --table lists every stage"),
    ("N02-near", ["fp8/06_stage", "--device", "sim"],
     "no stage file 'fp8/06_stage' under src/kernels; did you mean fp8/06_stages?"),
    ("N03", ["{tmp}/outside.cu", "--device", "sim"],
     "outside.cu is outside src/kernels: stage files live under src/kernels/<family>/ (the family picks the kind "
     "that builds and runs it); copy the file there to run it"),
    ("N21", ["fp8/06_stages", "--device", "compile", "--sweep", "NUM_STAGES"],
     "--sweep 'NUM_STAGES' lists no values: give the define and its values, e.g. --sweep NUM_STAGES=2,3,4"),
    ("N22", ["fp8/06_stages", "--device", "compile", "--sweep", "NUM_STAGES=4,,5"],
     "--sweep 'NUM_STAGES=4,,5' has an empty value: give the define and its values, e.g. --sweep NUM_STAGES=2,3,4"),
    ("N16", ["sm90/00_tma_wgmma", "--device", "sim", "--trace", "/proc/version"],
     "--trace: cannot write a trace to /proc/version ("),
    ("PR28", ["sm90/06_permuted_b", "--device", "predict", "--trace", "/proc/version"],
     "): give a writable file path ending in .json (e.g. ./trace.json)"),
    ("D-empty", ["fp8/06_stages", "--device", "compile", "-D", "NUM_STAGES="],     # was built as NUM_STAGES=1
     "-D 'NUM_STAGES=' gives NUM_STAGES no value: give one (-D NUM_STAGES=4) or write -D NUM_STAGES for 1"),
    ("D-noname", ["fp8/06_stages", "--device", "compile", "-D", "=4"], "-D '=4' names no define"),
    ("trace-no-folder", ["sm90/00_tma_wgmma", "--device", "sim", "--trace", "/no/such/folder/t.json"],
     "cannot write a trace to /no/such/folder/t.json (no folder /no/such/folder)"),
    # an unknown --problem was a KeyError traceback from pelib.problems on every device
    ("problem-nvfp4", ["nvfp4/07_split_k_roles", "--device", "predict", "--problem", "n7168_k2048"],
     "--problem: unknown problem 'n7168_k2048' for the nvfp4 stages: one of full, k16384, k2048, k7168, small, "
     "tiny, sim, ring"),
    ("problem-sm90", ["sm90/06_permuted_b", "--device", "sim", "--problem", "nope"],
     "unknown problem 'nope' for the sm90 stages: one of full, medium, siglip2, small, tiny, k128, tail, sim"),
    ("problem-fp8", ["fp8/06_stages", "--device", "compile", "--problem", "k2048"],
     "unknown problem 'k2048' for the fp8 stages: one of full, medium, siglip2, small, tiny, sim"),
]


@pytest.mark.parametrize("argv", [["fp8/06_stages", "--device", "sim", "--problem", "tiny"],
                                  ["nvfp4/07_split_k_roles", "--device", "predict", "--problem", "tiny"]],
                         ids=["sim-tiles", "predict-tiles"])
def test_cli_problem_the_build_does_not_take_is_one_line(argv, capfd):
    """A named problem whose dimensions the build's tiles do not divide: 'refused: ...' and exit status 1 (was a
    KindError or ProblemError traceback from the runner)."""
    assert stage_mod.main(argv) == 1   # the simulator's and the model's command lines run in a process of their own
    out = capfd.readouterr().out
    assert "refused: " in out and "Traceback" not in out and "multiple of" in out, out


@pytest.mark.parametrize("argv, phrase", [pytest.param(a, p, id=i) for i, a, p in CLI])
def test_cli_bad_inputs(argv, phrase, tmp_path, monkeypatch, capsys):
    """Refused before anything is built or run: one line on stderr, exit status 2 (was a raw traceback, a
    cut-off 'does not compile' line, or a result and then an OSError naming no path)."""
    if "/proc/version" in argv and not Path("/proc/version").is_file():
        pytest.skip("no /proc/version here")
    (tmp_path / "outside.cu").write_text(TINY)
    argv = [a.format(tmp=tmp_path) for a in argv]
    monkeypatch.setattr(Stage, "run", _no_run)
    with pytest.raises(SystemExit) as e:
        stage_mod.main(argv, runners={"sim": _no_run, "predict": _no_run})
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0 and "Traceback" not in err, err
    assert phrase in err, err


def test_cli_trace_that_fails_on_write_names_its_path(monkeypatch, capsys):
    """The write itself failing (the path passed the check before the run): one line naming the path and the
    fix, exit status 1, where it was a raw OSError: [Errno 5] Input/output error."""
    if not Path("/proc/version").is_file():
        pytest.skip("no /proc/version here")
    monkeypatch.setattr(TM, "check_trace_path", lambda path: None)
    events = [dict(kind="exit", warp=0, role="producer", cluster=0, rank=0, lane=0, seq=0, cta=0)]
    run = lambda s, a, trace: {"ok": True, "problem": a.problem, "label": s.label, "events": events}  # noqa: E731
    assert stage_mod.main(["sm90/00_tma_wgmma", "--device", "sim", "--trace", "/proc/version"],
                          runners={"sim": run}) == 1
    out = capsys.readouterr().out
    assert "--trace: cannot write a trace to /proc/version (" in out and "ending in .json" in out, out


def test_cli_sweep_position_that_does_not_compile_says_why(capsys):
    """N21: the line ended at 'with defines ['NUM_STAGES=']:'; now the compiler's first error follows it."""
    assert stage_mod.main(["fp8/06_stages", "--device", "compile", "--sweep", "NUM_STAGES=abc"]) == 1
    out = capsys.readouterr().out
    assert "06_stages NUM_STAGES=abc: does not compile: NVRTC could not compile 06_stages.cu for sm_100a with " \
           "defines ['NUM_STAGES=abc']: 06_stages.cu(" in out and 'error: identifier "abc" is undefined' in out, out
