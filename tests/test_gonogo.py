"""pelib.gonogo: cards as data, rules, and the evaluator's GO / NO-GO / ABORT / PENDING."""
import pytest

from pelib import gonogo as G


def _f(metric, value, kind="measured", device=None):
    return G.Fact(metric, value, kind, "test", device)


def test_cards_are_data():
    cs = G.cards()
    assert [c.id for c in cs] == ["F25", "F21", "F22", "F23", "F24", "F26", "F27", "F28"]
    for c in cs:
        assert c.title and c.hypothesis and c.change and c.rollback and c.max_effort_h
        assert c.success, c.id
        assert c.source.startswith("fp8-megakernel-future-proposals-F21-F28.md § ")
        for r in c.success + c.fail_fast:
            assert isinstance(r, G.Rule) and r.evidence
    assert G.card("F28").depends_on == ("F22",)


def test_dependency_graph():
    e = {(x.src, x.dst, x.kind) for x in G.edges()}
    assert e == {("F25", "F23", "informs"), ("F25", "F27", "gates"), ("F21", "F26", "gates"),
                 ("F22", "F24", "precedes"), ("F22", "F28", "pairs_with")}
    for c in G.cards():
        for d in c.depends_on:
            assert any(x.src == d and x.dst == c.id for x in G.edges()), (d, c.id)


def test_recorded_outcomes_follow_from_the_rules():
    d = dict((c.id, dec) for c, dec in G.dashboard())
    f25, f27 = d["F25"], d["F27"]
    assert f25.status == G.GO and f25.evidence == "recorded"
    assert set(f25.labels) == {"A: symmetric", "C: fat tail"}
    assert f27.status == G.ABORT and f27.evidence == "recorded"
    assert f27.rule.metric == "f25.phase1_spread_avg_cycles" and f27.rule.threshold == 200
    assert "172" in f27.reason
    for c, dec in G.dashboard():
        want = G.RECORDED_STATUS.get(c.recorded.get("status"))
        if want:
            assert dec.status == want, c.id
        else:
            assert dec.status == G.PENDING and dec.needs_b200, c.id
    assert "F27: ABORT" in G.summary()


def test_f25_result_b_when_asymmetric():
    dec = G.evaluate(G.card("F25"), [_f("f25.phase1_spread_avg_cycles", 260, "measured"),
                                     _f("f25.tile_spread_p95_over_avg", 1.4, "measured")])
    assert dec.status == G.GO and dec.labels == ("B: one warp slower",)
    assert G.evaluate(G.card("F27"), [_f("f25.phase1_spread_avg_cycles", 260)]).status == G.PENDING


def test_f28_static_fail_fast_from_ptxas():
    c = G.card("F28")
    dec = G.evaluate(c, [_f("f28.registers", 241, "compiled")])
    assert dec.status == G.ABORT and dec.evidence == "compiled" and dec.rule.metric == "f28.registers"
    assert G.evaluate(c, [_f("f28.registers", 240, "compiled")]).status == G.PENDING   # > 240, not >=
    assert G.evaluate(c, [_f("f28.registers", 236, "compiled"), _f("f28.spills", 8, "compiled")]).status == G.ABORT
    # a register count only counts as compiled evidence, not as a recorded or modelled guess
    assert G.evaluate(c, [_f("f28.registers", 250, "modelled")]).status == G.PENDING


def test_f28_go_and_no_go_with_b200_measurements():
    c = G.card("F28")
    base = [_f("f28.registers", 238, "compiled"), _f("f28.spills", 0, "compiled")]
    go = G.evaluate(c, base + [_f("f28.kloop_delta_cycles", -200), _f("f28.wall_clock_improvement_pct", 0.7)])
    assert go.status == G.GO and go.evidence == "measured"
    nogo = G.evaluate(c, base + [_f("f28.kloop_delta_cycles", -100), _f("f28.wall_clock_improvement_pct", 0.7)])
    assert nogo.status == G.NO_GO and nogo.rule.metric == "f28.kloop_delta_cycles"
    flat = G.evaluate(c, base + [_f("f28.kloop_delta_cycles", -3)])
    assert flat.status == G.ABORT and flat.rule.op == "abs_lt"


def test_h100_measurement_does_not_decide_a_b200_rule():
    c = G.card("F28")
    on_h100 = [_f("f28.kloop_delta_cycles", -200, device="NVIDIA H100 80GB HBM3"),
               _f("f28.wall_clock_improvement_pct", 2.0, device="NVIDIA H100 80GB HBM3")]
    assert G.evaluate(c, on_h100).status == G.PENDING
    on_b200 = [G.Fact(f.metric, f.value, f.kind, f.source, "NVIDIA B200") for f in on_h100]
    assert G.evaluate(c, on_b200).status == G.GO


def test_f22_precision_abort_needs_no_b200():
    c = G.card("F22")
    dec = G.evaluate(c, [_f("f22.max_abs_err", 24.0, "modelled")])
    assert dec.status == G.ABORT and dec.evidence == "modelled"
    assert not dec.rule.needs_b200
    ok = G.evaluate(c, [_f("f22.max_abs_err", 8.0, "modelled")])
    assert ok.status == G.PENDING and ok.needs_b200
    dec = G.evaluate(c, [_f("f22.phase1_delta_cycles", 30)])
    assert dec.status == G.ABORT and dec.rule.metric == "f22.phase1_delta_cycles"
    half = G.evaluate(c, [_f("f22.phase1_delta_cycles", -250)])
    assert half.status == G.PENDING and half.rule.metric == "f22.wall_clock_improvement_pct"


def test_f21_unchanged_skips_f26():
    facts = [_f("f21.tma0_wait_delta_cycles", 2)]
    assert G.evaluate(G.card("F21"), facts).status == G.ABORT
    assert G.evaluate(G.card("F26"), facts).status == G.ABORT
    facts = [_f("f21.tma0_wait_delta_cycles", -80)]
    assert G.evaluate(G.card("F21"), facts).status == G.GO
    assert G.evaluate(G.card("F26"), facts).status == G.PENDING


def test_rules_are_validated():
    with pytest.raises(ValueError, match="comparator"):
        G.Rule("x", "between", 1)
    with pytest.raises(ValueError, match="needs a threshold"):
        G.Rule("x", "gt")
    with pytest.raises(ValueError, match="evidence kinds"):
        G.Rule("x", "gt", 1, evidence=("guessed",))
    with pytest.raises(ValueError, match="evidence kind"):
        G.Fact("x", 1, "guessed")
    r = G.Rule.from_dict({"metric": "m", "op": "ge", "threshold": 2, "evidence": ["compiled"], "needs_b200": False})
    assert r.holds(2) and not r.holds(1.9) and r.evidence == ("compiled",) and not r.needs_b200
    assert str(r) == "m >= 2"
