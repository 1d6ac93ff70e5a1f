"""The timing model's blind error, read from the committed comparison of its newest blind round of Hopper
predictions with measurements (COMPARISONS): what a printed B200 prediction says beside it. The numbers are
read from those files, never typed; a missing file is an error that names it.

    blind_error.clause()    # "the model's blind error: MAE 30 % on H200 (its predictions of 51 Hopper ...)"
"""
from __future__ import annotations

from functools import lru_cache

from .. import results
from ..paths import ROOT

# The newest blind round of the model as it is (the predictions committed before the measurement): the sixth,
# on the H200, with no constant fitted on a stage's time (the third to fifth, results/2026-12-02-h200/round3/ to
# round5/, priced without the simulator's store and prefetch counts, the L2 floor or the L2's queueing). The first two rounds (results/2026-11-27-{h100,h200}/,
# results/2026-12-02-h200/prediction-vs-measured-blind.json) priced with constants fitted on sm90/06: they are
# the history the chapter "Predicted, then measured" shows, not this model's error bar.
COMPARISONS = {"H200": "results/2026-12-03-h200/round6/prediction-vs-measured-blind6.json"}


class BlindErrorMissing(FileNotFoundError):
    """A committed comparison is not where the book reads it; the message names the file."""


@lru_cache(maxsize=None)
def errors() -> dict[str, dict]:
    """Per chip: {"mae", "worst", "stages", "device", "date", "path"} from the committed comparison."""
    out = {}
    for chip, rel in COMPARISONS.items():
        p = ROOT / rel
        if not p.is_file():
            raise BlindErrorMissing(f"the blind comparison {rel} is not in the repository; it holds the model's "
                                    "error bar (pelib.predict.blind writes it on a Hopper GPU)")
        d = results.load(p, named=False)
        m = d.get("measurement") or {}
        out[chip] = {"mae": float(d["summary"]["mae"]), "worst": float(d["summary"]["worst"]),
                     "stages": int(d["summary"]["stages"]), "device": m.get("device", chip),
                     "date": str(m.get("date") or "")[:10], "path": rel}
    return out


def clause() -> str:
    """One clause for beside a printed prediction: the mean absolute error of the model's blind
    predictions on each Hopper chip (measured there), e.g. 'MAE 30 % on H200'."""
    e = errors()
    chips = ", ".join(f"{e[c]['mae']:.0%} on {c}".replace("%", " %") for c in e)
    dates = sorted({e[c]["date"] for c in e if e[c]["date"]})
    when = f", measured {dates[0]}" if dates else ""
    n = max(e[c]["stages"] for c in e)
    return (f"the model's blind error: MAE {chips} (its predictions of {n} Hopper stages against their "
            f"measured times{when}; never calibrated on a B200)")


def short() -> str:
    """The clause in brief: 'the model's blind error on Hopper: MAE 30 % (H200), measured 2026-12-02'."""
    e = errors()
    chips = " and ".join(f"{e[c]['mae']:.0%} ({c})".replace("%", " %") for c in e)
    dates = sorted({e[c]["date"] for c in e if e[c]["date"]})
    return f"the model's blind error on Hopper: MAE {chips}, measured{' ' + dates[0] if dates else ''}"


def beside(line: str) -> str:
    """A printed prediction with the model's blind error beside it."""
    return f"{line.rstrip()} — {short()}; never calibrated on a B200."
