"""pelib.views.plots: every figure draws and names its evidence kind (and a recorded one its note)."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pelib import gonogo  # noqa: E402
from pelib.views import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _texts(fig) -> str:
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out.append(ax.get_title())
        out += [t.get_text() for t in ax.texts]
        leg = ax.get_legend()
        if leg is not None:
            out.append(leg.get_title().get_text())
            out += [t.get_text() for t in leg.get_texts()]
    if fig._suptitle is not None:
        out.append(fig._suptitle.get_text())
    return "\n".join(out)


RECORDED = {
    "waterfall": "recorded (fp8-megakernel-experiment-log.md",
    "failed_experiments": "recorded (fp8-megakernel-experiment-log.md)",
    "smem_budget_bar": "recorded (fp8-megakernel-experiment-log.md)",
    "clock64_phase_bars": "recorded (fp8-megakernel-w1-stall-isolation.md)",
    "f25_bars": "recorded (fp8-megakernel-future-proposals-F21-F28.md)",
    "stage_sweep": "recorded (nvfp4-gemm-optimization-log.md)",
    "epilogue_estimates": "recorded (nvfp4-dual-gemm-tma-store-epilogue-pitch.md)",
    "gonogo_dashboard": "recorded (fp8-megakernel-future-proposals-F21-F28.md)",
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_figures_name_their_note(name):
    fig = getattr(plots, name)()
    assert RECORDED[name] in _texts(fig)


def test_waterfall_has_the_cublas_lines():
    t = _texts(plots.waterfall())
    assert "0.365 ms" in t and "0.835 ms" in t


def test_smem_bar_shows_the_unaccounted_bytes():
    assert "unaccounted in the note's total: 128 B" in _texts(plots.smem_budget_bar())


def test_sol_and_roofline_say_modelled():
    t = _texts(plots.sol_bars())
    assert "modelled" in t and "recorded (fp8-megakernel-experiment-log.md" in t
    assert "modelled" in _texts(plots.roofline("B200", "fp8"))
    with pytest.raises(ValueError, match="no nvfp4"):
        plots.roofline("H100 SXM", "nvfp4")


def test_phase_bars_is_generic():
    data = {"W1": {"wait": 100, "work": 400}, "W2": {"work": 300, "drain": 50}}
    fig = plots.phase_bars(data, "measured", "H100 SXM, 2026-05-01", title="t")
    t = _texts(fig)
    assert "measured (H100 SXM, 2026-05-01)" in t
    assert {"wait", "work", "drain"} <= set(t.split("\n"))

    class Frame:  # the DataFrame protocol phase_bars relies on
        def to_dict(self, orient):
            assert orient == "index"
            return data

    assert "modelled" in _texts(plots.phase_bars(Frame(), "modelled"))
    with pytest.raises(ValueError, match="must name its source"):
        plots.phase_bars(data, "recorded")
    with pytest.raises(ValueError, match="not one of"):
        plots.phase_bars(data, "guessed")
    with pytest.raises(TypeError):
        plots.phase_bars([1, 2], "modelled")


def test_dashboard_reflects_new_facts():
    facts = [gonogo.Fact("f28.registers", 250, "compiled", "ptxas")]
    fig = plots.gonogo_dashboard(facts)
    t = _texts(fig)
    assert "F28  ABORT [compiled]" in t and "compiled" in t.split("\n")[0] + fig.axes[0].get_title()


def test_evidence_label():
    assert plots.evidence_label("modelled") == "modelled"
    assert plots.evidence_label("recorded", "x.md") == "recorded (x.md)"
    with pytest.raises(ValueError):
        plots.evidence_label("measured")


def test_a_title_wrapped_earlier_is_reflowed_not_broken_again():
    from pelib.notebook import _wrap
    t = "stage — cluster 0 — predicted (the event graph replayed with provisional costs\n  for a GPU): predicted cycles"
    out = _wrap(t, 60).split("\n")
    assert all(len(ln) <= 60 for ln in out) and len(out) == 2, out          # no ragged third line
    assert " ".join(w.strip() for w in out) == " ".join(t.replace("\n  ", " ").split())
    assert _wrap("stopped: x\nblocked: y", 40) == "stopped: x\nblocked: y"    # separate lines stay separate
