"""pelib.measure.variants: compiled facts when a variant kernel exists, PENDING when it does not."""
from pathlib import Path

import pytest

from pelib import gonogo
from pelib.measure import variants as V
from pelib.paths import KERNELS

HERE = Path(__file__).resolve().parent / "kernels"
STANDIN = HERE / "variant_standin.cu"
STANDIN_BASE = HERE / "variant_standin_base.cu"


def _standin(card="F22", path=STANDIN, **kw):
    return V.Variant(card, str(path), "stand-in: FP32 add -> packed BF16 add", base=str(STANDIN_BASE),
                     watch=("FADD", "HFMA2", "HADD2", "F2FP"), **kw)


def test_missing_variant_is_pending_and_names_the_file(tmp_path):
    ev = V.card_evidence("F28", variant=_standin("F28", tmp_path / "09_f28_not_here.cu"))
    assert ev.status == V.PENDING and ev.pending
    assert "variant not built yet" in ev.reason and "09_f28_not_here.cu" in ev.reason
    assert ev.facts == () and ev.summary is None and ev.evidence is None
    # no compiled facts: the F28 card stays PENDING (its measured rules need a B200 anyway)
    d = gonogo.evaluate(gonogo.card("F28"), list(ev.facts))
    assert d.status == gonogo.PENDING


def test_existing_variant_gives_compiled_facts_against_its_base():
    ev = V.card_evidence("F22", variant=_standin())
    assert ev.status == V.COMPILED and not ev.pending and ev.evidence == "compiled"
    facts = {f.metric: f for f in ev.facts}
    assert {"f22.registers", "f22.spills", "f22.stack", "f22.smem_dynamic"} <= set(facts)
    assert all(f.kind == "compiled" for f in ev.facts)
    assert facts["f22.registers"].value == ev.summary["registers"] > 0
    assert facts["f22.spills"].value == 0
    # the packed add replaces the two FP32 adds
    assert ev.opcodes["FADD"] == (2, 0)
    assert ev.opcodes["HFMA2"][1] + ev.opcodes["HADD2"][1] >= 1
    assert "add.rn.bf16x2" in ev.diff and ev.diff.lang == "diff"
    rows = {r["fact"]: r for r in ev.table().rows}
    assert rows["registers"]["variant"] == ev.summary["registers"]
    assert rows["registers"]["base"] == ev.base_summary["registers"]


def test_compiled_facts_feed_the_card_rules():
    ev = V.card_evidence("F28", variant=_standin("F28"))
    d = gonogo.evaluate(gonogo.card("F28"), list(ev.facts))
    assert d.status == gonogo.PENDING and d.needs_b200          # registers <= 240, no spills: no ABORT
    over = [f if f.metric != "f28.registers" else gonogo.Fact(f.metric, 250, "compiled", f.source) for f in ev.facts]
    assert gonogo.evaluate(gonogo.card("F28"), over).status == gonogo.ABORT


def test_variant_without_its_base_has_no_deltas(tmp_path):
    v = V.Variant("F22", str(STANDIN), "stand-in", base=str(tmp_path / "missing_base.cu"), watch=("FADD",))
    ev = V.card_evidence("F22", variant=v)
    assert ev.status == V.COMPILED and ev.base_summary is None and ev.diff is None
    assert ev.opcodes["FADD"] == (None, 0)
    assert "not built yet" in ev.reason


def test_define_variant_of_the_same_file_has_no_diff():
    v = V.Variant("F25", str(STANDIN_BASE), "stand-in TIMING build", defines={"TIMING": 1}, base=str(STANDIN_BASE))
    ev = V.card_evidence("F25", variant=v)
    assert ev.status == V.COMPILED and ev.diff is None and "TIMING" in ev.facts[0].source


def test_broken_variant_reports_the_build_failure(tmp_path):
    bad = tmp_path / "broken.cu"
    bad.write_text('#include "common/types.cuh"\nextern "C" __global__ void k() { this is not C++; }\n')
    ev = V.card_evidence("F24", variant=_standin("F24", bad))
    assert ev.status == V.BUILD_FAILED and "does not compile" in ev.reason and ev.facts == ()


def test_cards_without_a_kernel():
    assert V.card_evidence("F21").status == V.HOST_SIDE
    assert V.card_evidence("f26").status == V.HOST_SIDE
    assert V.card_evidence("F27").status == V.SKIPPED
    with pytest.raises(KeyError, match="no variant kernel"):
        V.card_evidence("F99")


def test_variants_are_stages_whose_parent_is_09():
    """Each variant file is a stage of its own (fp8/variants/, never in the line's numbered list), its card
    taken from its name and its base from its header's Parent."""
    from pelib import stages
    from pelib.stage import Stage
    line = stages.family_stages("fp8")
    for card, v in V.VARIANTS.items():
        assert v.card == card
        if v.path == V.BASE:
            continue
        assert v.file.parent == KERNELS / V.VARIANT_DIR and v.file not in line, card
        assert Stage(v.file).header.parent == "fp8/09_persistent_megakernel" and v.base_file == KERNELS / V.BASE


@pytest.mark.parametrize("card", sorted(V.VARIANTS))
def test_registered_variants_compile_once_they_exist(card):
    v = V.VARIANTS[card]
    ev = V.card_evidence(card, with_diff=False)
    if not v.file.is_file():
        assert ev.status == V.PENDING and "variant not built yet" in ev.reason
        pytest.skip(f"{v.path} is not written yet")
    assert ev.status == V.COMPILED, ev.reason


def test_card_sheet_and_overview():
    from pelib.views import gonogo as G
    sheet = G.card_sheet("F22")
    fields = [r["field"] for r in sheet.rows]
    assert fields.count("fail-fast") == 2 and "rollback" in fields
    ov = G.overview()
    rows = {r["card"]: r for r in ov.rows}
    assert set(rows) == {"F21", "F22", "F23", "F24", "F25", "F26", "F27", "F28"}
    assert rows["F27"]["status"] == gonogo.ABORT and rows["F27"]["decided on"] == "recorded"
    assert rows["F21"]["variant kernel"] == V.HOST_SIDE
