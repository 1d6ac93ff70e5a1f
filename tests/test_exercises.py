"""The exercises the simulator grades (pelib.exercises): every solution passes and every starting point
fails with the report the exercise is about; the grading itself refuses what it should."""
from __future__ import annotations

import pytest

from pelib import exercises as X, sim_catalog as cat
from pelib import sim_runs as sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="the exercises need pelib.sim: "
                                                                 f"{sim.available()[1]}")


def test_catalog_is_well_formed():
    assert len(X.EXERCISES) >= 16
    chapters = {e.chapter for e in X.EXERCISES}
    assert sum(1 for e in X.EXERCISES if e.chapter.startswith("hopper")) >= 3
    for e in X.EXERCISES:
        assert e.start != e.solution, e.id
        assert e.goal in X.GOALS
        # the region is found in the original and in the starting copy, and holds every patched line
        assert e.compose(e.solution).count("\n") >= 10
        assert "planted" not in e.start, f"{e.id}: the starting lines give the mistake away"
    assert {"fp8_warp_specialized", "fp8_persistent", "nvfp4_single_stage"} <= chapters


@pytest.mark.parametrize("eid", [e.id for e in X.EXERCISES])
def test_solution_passes(eid):
    ex = X.get(eid)
    g = ex.check(ex.solution, price=False)      # the price (a full-problem prediction) is tested once below
    assert g.passed, f"{eid}: the solution does not pass: {g.verdict}"
    assert not g.compiled


def test_a_passed_edit_is_priced_on_the_full_problem():
    ex = X.get("fp8-ws-producer-parity")
    g = ex.check(ex.solution, seeds=(0,))
    assert g.passed and "ms on the full problem" in g.predicted and "bound by" in g.predicted
    assert "predicted" in g.predicted and "price=False" not in g.predicted


@pytest.mark.parametrize("eid", [e.id for e in X.EXERCISES])
def test_start_fails_as_intended(eid):
    ex = X.get(eid)
    g = ex.check(ex.start, seeds=(0,))
    assert not g.passed, f"{eid}: the starting point passes ({g.verdict})"
    if ex.goal == "correct":
        bad = g.runs[-1]
        ok, why = cat.matches(ex.mutation, sim.outcome(bad))
        assert ok, f"{eid}: the starting point fails, but not with the intended report: {why}"
    elif ex.goal == "report":
        assert "still verifies" in g.verdict, g.verdict
    else:
        assert "exports" in g.verdict, g.verdict


def test_a_file_copy_is_graded_like_lines(tmp_path):
    ex = X.get("fp8-ws-producer-parity")
    p = ex.write(tmp_path / "copy.cu")
    assert not ex.check(str(p), seeds=(0,)).passed
    p.write_text(ex.compose(ex.solution))
    assert ex.check(p).passed


def test_an_edit_that_does_not_compile_says_so():
    ex = X.get("fp8-ws-producer-parity")
    g = ex.check(ex.start.replace("mbarrier_wait_parity(&empty[s]", "mbarrier_wait_parity(&empty_typo[s]"))
    assert not g.passed and g.compiled and "does not compile" in g.verdict
    assert "/" not in g.compiled.split(":")[0] or g.compiled.startswith("fp8/"), g.compiled


def test_unknown_exercise_is_refused():
    with pytest.raises(X.ExerciseError, match="no exercise"):
        X.get("nope")
    with pytest.raises(X.ExerciseError, match="goal"):
        X.Exercise("x", "c", "t", "task", "fp8-00-empty-first-wait-parity0", ("a", "b"), goal="guess")


def test_a_stale_region_names_the_fix():
    ex = X.Exercise("x", "c", "t", "task", "fp8-00-empty-first-wait-parity0", ("no such line", "b"))
    with pytest.raises(X.ExerciseError, match="stage changed"):
        ex.start


def test_grade_shows_as_a_table_with_its_evidence():
    ex = X.get("fp8-ws-producer-parity")
    g = ex.check(ex.start, seeds=(0,))
    html = g._repr_html_()
    assert "Not yet" in html and "pe-table" in html and "simulated" in html and "compiled" in html
    assert "pe-exercise" in ex._repr_html_()
    assert "<details" in ex.solution_view()._repr_html_()
