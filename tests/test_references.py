"""Every file the book, the kernels and pelib cite is a file a reader has: one of this repository, or a
public source named with its project beside it. The lab notes are the one exception, named as external
sources in the lab-record chapter (book/data/lab_notes.yaml)."""
import re
from pathlib import Path

import pytest

from pelib import records
from pelib.paths import ROOT

# What is scanned: chapters, stage files and headers, the simulator, pelib, the README and CONTRIBUTING;
# in tests, only paths that start at a folder of the repository (tests name many temporary files).
SCANNED = ("book/chapters/*.md", "src/kernels/**/*.cu", "src/kernels/**/*.cuh", "src/kernels/**/*.h",
           "src/kernels/**/*.cpp", "src/kernels/**/*.md", "src/pelib/**/*.py", "README.md", "CONTRIBUTING.md")
REPO_FOLDERS = ("book/", "src/", "tests/", "results/", ".ci/")
EXT = r"(?:md|py|cu|cuh|json|ipynb|npz|yml|yaml)"
TOKEN = re.compile(rf"(?<![\w/.\-])((?:\.?[\w\-]+/)*[\w\-.]*\w\.{EXT})(?![\w/])")

# A public source's file is cited with its project on the same line or within two lines of it.
PROJECTS = re.compile(r"CUTLASS|cutlass|DeepGEMM|deep_gemm|learn-cuda|gau-nernst|fast\.cu|hopperian|"
                      r"ThunderKittens|MATLAB-tensor-core|CCCL|PTX ISA|CuAssembler|MMA-Sim|github\.com/[\w\-.]+/[\w\-.]+")

# Names of files pelib writes or a command's argument (not citations): each with what it is.
WRITTEN = {
    "out_dir/sim_proof_random.npz": "the random-input bytes pelib.measure.energy writes beside its report",
    "edit.cu": "an exercise answer's file, the argument of Exercise.check",
    "energy-headline.json": "the report pelib.measure.energy headline writes",
    "DIR/tcprobe_sm100.json": "the summary python -m pelib.measure.tcprobe_sm100 collect --out DIR writes",
    "meta.json": "the compile cache's entry metadata (pelib.cache)",
    "run.json": "a cached simulated run (pelib.sim.runs)",
    "record.json": "a cached simulated random-input job (pelib.sim.proof.simulate_random)",
    "jobs.json": "sim_proof's job list, written for its workers",
    "out.json": "the --trace / -o argument of a command",
    "OUT.json": "the --trace argument's metavar",
    "trace.json": "a Chrome trace a command writes",
    "records.npz": "a TIMING run's records beside its trace",
    ".records.npz": "the suffix of those records",
    "agreement.cu": "the temporary file how_we_know.md compiles its descriptor static_asserts from",
    "tcprobe.json": "the summary pelib.measure.tcprobe collect writes",
    "tcprobe-directed.npz": "a data file pelib.measure.tcprobe collect writes (directed vector classes)",
    "tcprobe-random.npz": "a data file pelib.measure.tcprobe collect writes (random vector classes)",
    "tcprobe-chains.npz": "a data file pelib.measure.tcprobe collect writes (chained instructions)",
    "tcprobe-shapes.npz": "a data file pelib.measure.tcprobe collect writes (N = 128 and 192)",
    "tcprobe-e5m2.npz": "a data file pelib.measure.tcprobe collect writes (E5M2 operands)",
    "predictions-sm90.json": "the blind predictions python -m pelib.predict --all-sm90 writes",
    "prediction-vs-measured.json": "the comparison python -m pelib.predict --compare writes",
    "DIR/prediction-vs-measured.json": "the same, in the folder python -m pelib.predict.first_hour's --out names",
    "DIR/predictions-b200.json": "the predictions python -m pelib.predict.first_hour writes before its first launch",
    "DIR/measured-b200.json": "the measurement python -m pelib.predict.first_hour writes",
    "measured-b200.json": "the same, by its name",
    "PRED.json": "python -m pelib.predict --compare's metavar (a predictions file)",
    "MEAS.json": "python -m pelib.predict --measured's metavar (a measurement)",
    "numerics.json": "the summary pelib.measure.numerics_proof writes",
    "DIR/numerics.json": "the same, in the folder its --out names",
    "sim_proof_random.npz": "the random-input stage outputs pelib.sim.proof's random jobs write",
    "tcprobe_sm100.json": "the summary pelib.measure.tcprobe_sm100 collect writes",
    "tcprobe_sm100-f8f6f4.npz": "a data file pelib.measure.tcprobe_sm100 collect writes (kind::f8f6f4, E4M3)",
    "tcprobe_sm100-e5m2.npz": "a data file pelib.measure.tcprobe_sm100 collect writes (kind::f8f6f4, E5M2)",
    "tcprobe_sm100-mxf4nvf4.npz": "a data file pelib.measure.tcprobe_sm100 collect writes (kind::mxf4nvf4)",
}


def _scanned() -> list[Path]:
    return sorted({p for pat in SCANNED for p in ROOT.glob(pat) if "_build" not in p.parts})


def _names() -> set[str]:
    return {p.name for p in ROOT.rglob("*") if not ({".venv", "_build", ".git"} & set(p.parts))}


def _exists(token: str, where: Path) -> bool:
    bases = (ROOT, ROOT / "src", ROOT / "src" / "kernels", ROOT / "src" / "pelib", ROOT / "book",
             ROOT / "book" / "chapters", ROOT / "results", where.parent)
    return any((b / token).exists() for b in bases)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def dangling(paths, names=None, lab_notes=None) -> list[str]:
    """'file:line: token' for every cited file that is neither here, nor a named public source, nor a lab note."""
    names = _names() if names is None else names
    lab_notes = {n.file for n in records.lab_notes()} if lab_notes is None else lab_notes
    out = []
    for path in paths:
        lines = path.read_text(errors="replace").splitlines()
        in_tests = path.is_relative_to(ROOT / "tests")
        for i, line in enumerate(lines):
            for m in TOKEN.finditer(line):
                tok = m.group(1)
                if in_tests and not tok.startswith(REPO_FOLDERS):
                    continue
                if (_exists(tok, path) if "/" in tok else tok in names) or tok in lab_notes or tok in WRITTEN:
                    continue
                near = " ".join(lines[max(0, i - 2):i + 3])
                if "/" in tok and tok.startswith(REPO_FOLDERS) and not re.search(r"github\.com/[\w\-.]+/[\w\-.]+|MMA-Sim", near):
                    out.append(f"{_rel(path)}:{i + 1}: {tok}")   # a repo path that is not there
                    continue
                if not PROJECTS.search(" ".join(lines[max(0, i - 2):i + 3])):
                    out.append(f"{_rel(path)}:{i + 1}: {tok}")
    return out


def test_every_cited_file_exists_or_names_its_public_source():
    files = _scanned() + sorted(p for p in (ROOT / "tests").glob("*.py") if p.name != "test_references.py")
    assert len(files) > 100
    assert dangling(files) == []


def test_a_planted_dangling_reference_is_found(tmp_path):
    """The scan fails on what issue readers met: a guide that is not in the repository, a test file that
    does not exist, a repository path that is not there; a cited public file passes with its project."""
    planted = tmp_path / "k.cu"
    planted.write_text("// the fence (READING.md trap 4)\n"
                       "// tests/test_fp8_stages.py checks both\n"
                       "// see src/kernels/fp8/99_missing.cu\n"
                       "// CUTLASS include/cute/arch/mma_sm100_desc.hpp and DeepGEMM ptx/tcgen05.cuh\n"
                       "// src/kernels/fp8/09_persistent_megakernel.cu is the final stage\n")
    found = dangling([planted])
    assert [f.split(": ")[-1] for f in found] == ["READING.md", "tests/test_fp8_stages.py",
                                                   "src/kernels/fp8/99_missing.cu"], found


def test_lab_notes_are_named_as_external_sources_in_the_lab_record():
    """Each lab note the records cite is described (date, what it holds) and shown in the lab-record chapter."""
    notes = records.lab_notes()
    assert len(notes) == 5 and all(n.date and n.holds for n in notes)
    cited = {s for f in records.FILES.values() if f != "lab_notes.yaml"
             for s in re.findall(r"[\w\-]+\.md", (ROOT / "book" / "data" / f).read_text())}
    assert cited <= {n.file for n in notes} | {"EXPERIMENTS.md"}, cited
    assert "lab_notes_table()" in (ROOT / "book" / "chapters" / "lab_record.md").read_text()


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_written_names_are_written_somewhere(name):
    """A name on the WRITTEN list is one pelib or a chapter really writes or takes, not a stale citation."""
    src = "\n".join(p.read_text() for p in [*(ROOT / "src" / "pelib").rglob("*.py"),
                                            *(ROOT / "book" / "chapters").glob("*.md")])
    assert name in src
