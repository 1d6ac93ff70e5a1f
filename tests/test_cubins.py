"""The device builds, byte for byte: every stage file's device code (and every sm90 stage's TIMING=1 build) against
what tests/cubins.json recorded under the same NVRTC: the sha256 of the PTX that NVRTC hands ptxas, and ptxas's
facts of each kernel (registers, spills, stack, static shared memory).

Why the PTX and not the cubin: under NVRTC 13.5 ptxas is not deterministic. The same PTX compiled in two
processes gives, for a few stages (nvfp4/02, 03, 05), cubins that differ in some register numbers (34 bytes of
nvfp4/03's 41,904), so a cubin digest would fail on a change that did nothing. The PTX is all of the device code
our sources decide; what ptxas makes of it is the toolchain's.

A change of pelib or of a comment leaves every build as it was; a kernel change shows here by name, and its
commit re-records the list on purpose:

    PYTHONPATH=src python tests/test_cubins.py --write

Under another NVRTC the bytes may differ for reasons that are not ours, so the comparison is skipped (and says
which version it wants); the list of stages is still checked.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from pelib import build
from pelib.stage import all_stages

MANIFEST = Path(__file__).with_name("cubins.json")


def builds() -> dict:
    """{name: Build}: every stage file at its defaults and every sm90 stage's TIMING=1 build."""
    out = {s.key: (lambda s=s: s.build) for s in all_stages()}
    out.update({f"{s.key} TIMING": (lambda s=s: s.timing_build()) for s in all_stages(families=("sm90",), variants=False)})
    return out


def digest(b) -> dict:
    """The sha256 of the build's PTX and ptxas's facts of each of its kernels."""
    facts = {k: [f.registers, f.spill_stores, f.spill_loads, f.stack, f.smem_static] for k, f in sorted(b.ptxas.items())}
    text = build.ptx(b.source, b.arch, b.defines)
    return {"ptx_sha256": hashlib.sha256(text.encode()).hexdigest(), "ptxas": facts}


def record() -> dict:
    return {"toolchain": build.toolchain_version(),
            "ptxas facts": ["registers", "spill stores", "spill loads", "stack", "static shared memory"],
            "cubins": {name: digest(make()) for name, make in sorted(builds().items())}}


def _manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def test_every_stage_is_recorded():
    names, recorded = set(builds()), set(_manifest()["cubins"])
    assert names == recorded, (f"tests/cubins.json lists {sorted(recorded - names)} that no stage builds and misses "
                               f"{sorted(names - recorded)}: re-record it (PYTHONPATH=src python tests/test_cubins.py --write)")


def test_every_cubin_is_the_recorded_one():
    want = _manifest()
    if build.toolchain_version() != want["toolchain"]:
        pytest.skip(f"the cubins were recorded under {want['toolchain']}, this NVRTC is {build.toolchain_version()}")
    moved = [name for name, make in sorted(builds().items()) if digest(make()) != want["cubins"].get(name)]
    assert not moved, (f"{len(moved)} device builds differ from tests/cubins.json: {moved}. A kernel change "
                       "re-records them in its own commit (PYTHONPATH=src python tests/test_cubins.py --write); "
                       "a change of pelib or of the kernels' comments must leave them as they are")


def test_the_comparison_can_fail():
    """A build with one define changed is another cubin: the digest tells them apart."""
    want = _manifest()
    if build.toolchain_version() != want["toolchain"]:
        pytest.skip(f"recorded under {want['toolchain']}")
    s = next(s for s in all_stages(families=("sm90",), variants=False) if s.key.endswith("00a_smem_ring"))
    assert digest(s.with_defines(NUM_STAGES=2).build)["ptx_sha256"] != want["cubins"][s.key]["ptx_sha256"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: PYTHONPATH=src python tests/test_cubins.py --write   (re-records tests/cubins.json)")
    doc = record()
    lines = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in doc.pop("cubins").items()]
    head = json.dumps(doc, indent=1, sort_keys=True)[:-2]
    MANIFEST.write_text(head + ',\n "cubins": {\n' + ",\n".join(lines) + "\n }\n}\n")
    print(f"wrote {MANIFEST} ({len(_manifest()['cubins'])} cubins)")
