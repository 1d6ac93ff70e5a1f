"""The one evidence vocabulary of the book: what kind every number is, and how its label is written.

Every table caption, figure title and banner names one of these kinds, with its provenance:

    compiled (NVRTC 13.5, sm_100a, 2026-11-24)
    emulated (pelib.emulate, one tile from the exports)
    simulated (pelib.sim, the stage's own source on the CPU model)
    predicted (the stage's event graph replayed with costs calibrated on NVIDIA H100 80GB HBM3, 2026-11-28)
    measured (NVIDIA H100 80GB HBM3, 2026-11-23)
    recorded (fp8-megakernel-experiment-log.md, F6)
    modelled (pelib.models.pipeline, calibrated on recorded clock64 phases)

The Preface prints `table()`; tests/test_evidence.py checks that pelib speaks no other word.
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

KINDS = ("compiled", "emulated", "simulated", "predicted", "measured", "recorded", "modelled")

DEFINITIONS = {
    "compiled": "what the compiler made of a stage (ptxas registers, spills, shared memory, SASS) and the "
                "launch set-up pelib derives from its exports (grid, tensor maps, schedule); produced live by "
                "NVRTC and nvdisasm on any machine",
    "emulated": "one output tile replayed by pelib.emulate from the layouts and descriptors the cubin "
                "exports, against the torch reference; no GPU",
    "simulated": "ran the stage's own source on the CPU model (pelib.sim): protocol, indexing and data path; "
                 "no time",
    "predicted": "the stage's own event graph (a simulated run) replayed by pelib.predict with costs measured on "
                 "a named GPU on a named date; a time no GPU produced, validated blind on Hopper before it is "
                 "trusted for a B200, and never shown as measured",
    "measured": "produced by pelib on a GPU, with the device and the date (and clocks where they matter)",
    "recorded": "a number from the lab notes, with the note and section; never shown as live",
    "modelled": "a prediction of a pelib model (the pipeline-equilibrium model, speed-of-light floors), "
                "including the model's calibrated parameters and assumptions",
}

# Words older captions used, and the kind each one is. 'calibrated' and 'assumption' are parts of a
# model; 'derived' is arithmetic on recorded numbers (the note's own).
ALIASES = {"calibrated": "modelled", "assumption": "modelled", "fitted": "modelled",
           "derived": "recorded", "emulator": "emulated"}


class EvidenceError(ValueError):
    """A label names no kind of the vocabulary, or lacks the provenance its kind needs."""


def _check(kind: str) -> str:
    if kind not in KINDS:
        raise EvidenceError(f"evidence kind {kind!r} is not one of {KINDS}"
                            + (f"; {kind!r} is {ALIASES[kind]!r}" if kind in ALIASES else ""))
    return kind


def label(kind: str, source: str | None = None) -> str:
    """'<kind> (<source>)', e.g. 'recorded (fp8-megakernel-experiment-log.md, F6)'.

    measured needs its device and date, recorded its note: both refuse an empty source.
    """
    _check(kind)
    if kind in ("recorded", "measured") and not source:
        raise EvidenceError(f"a {kind} label must name its source "
                            + ("(lab note and section)" if kind == "recorded" else "(device and date)"))
    return f"{kind} ({source})" if source else kind


def compiled(toolchain: str, arch: str | None = None, date: str | _dt.date | None = None) -> str:
    """'compiled (NVRTC 13.5, sm_100a, 2026-11-24)'; without a date, 'compiled (NVRTC 13.5, sm_100a)' (what
    committed text carries: the toolchain names the result, a day does not)."""
    parts = [toolchain] + ([arch] if arch else []) + ([str(date)] if date else [])
    return label("compiled", ", ".join(parts))


def emulated(what: str = "pelib.emulate") -> str:
    return label("emulated", what)


def simulated(what: str = "pelib.sim") -> str:
    return label("simulated", what)


def predicted(device: str, date: str | _dt.date | None = None, provisional: bool = False) -> str:
    """'predicted (the stage's event graph replayed with costs calibrated on <device>, <date>)'; a
    provisional calibration (not yet measured) says so instead of a date. The label never uses the word
    of the measured kind: a prediction is not shown as a measurement (kinds_in finds 'predicted' only)."""
    if not device:
        raise EvidenceError("a predicted label names the GPU whose costs replayed the graph")
    if provisional or not date:
        return label("predicted", f"the stage's event graph replayed with provisional costs for {device}, "
                                  "not yet calibrated on it")
    return label("predicted", f"the stage's event graph replayed with costs calibrated on {device}, {date}")


def measured(device: str, date: str | _dt.date, extra: str | None = None) -> str:
    """'measured (H100, 2026-11-23)'; extra adds e.g. clocks or the results file."""
    if not device or not date:
        raise EvidenceError("a measured label needs its device and its date")
    return label("measured", ", ".join([device, str(date)] + ([extra] if extra else [])))


def recorded(note: str, section: str | None = None) -> str:
    """'recorded (fp8-megakernel-experiment-log.md, F6)'."""
    if not note:
        raise EvidenceError("a recorded label needs its lab note")
    return label("recorded", f"{note}, {section}" if section else note)


def modelled(what: str | None = None) -> str:
    return label("modelled", what)


def kind_of(word: str) -> str:
    """The vocabulary's kind for a word, old aliases included ('calibrated' -> 'modelled')."""
    w = word.strip().lower()
    if w in KINDS:
        return w
    if w in ALIASES:
        return ALIASES[w]
    raise EvidenceError(f"{word!r} is not an evidence kind; use one of {KINDS}")


_WORD = re.compile(r"\b(" + "|".join(KINDS) + r")\b", re.IGNORECASE)


def kinds_in(text: str) -> list[str]:
    """The kinds a caption or title names, in order of first appearance."""
    return list(dict.fromkeys(m.group(1).lower() for m in _WORD.finditer(text or "")))


@dataclass(frozen=True)
class Kind:
    name: str
    definition: str


def vocabulary() -> list[Kind]:
    return [Kind(k, DEFINITIONS[k]) for k in KINDS]
