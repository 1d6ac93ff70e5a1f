"""Every stage file, of every family: it compiles and exports the one vocabulary (common/export.cuh),
with values that agree with the rest of what the cubin and the source say (evidence: compiled)."""
import re
import struct
from pathlib import Path

import pytest

from pelib import build as B
from pelib import stages
from pelib.paths import KERNELS

VOCABULARY = ("smem_bytes", "smem_limit", "num_threads", "cluster_x", "cluster_in_kernel", "grid_kind",
              "tile_m", "tile_n", "block_k", "pipeline_stages", "epi_warps", "barrier_bytes", "wait_kind")
TMAP_FIELDS = ("box_rows", "box_cols", "swizzle", "elem_bytes")
from pelib.isa.limits import SMEM_LIMIT  # common/limits.cuh, checked against the CUDA guide in test_evidence

STAGE_FILES = stages.all_stages()
IDS = [str(p.relative_to(KERNELS)) for p in STAGE_FILES]


def arch_of(path) -> str:
    return "sm_90a" if path.relative_to(KERNELS).parts[0] == "sm90" else "sm_100a"


@pytest.fixture(scope="module", params=STAGE_FILES, ids=IDS)
def stage(request):
    path = request.param
    return path, B.build(path, arch_of(path))


# ---- what the cubin and the source say besides the exports ----------------------------------------

def _sections(cubin: bytes) -> dict[str, bytes]:
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = secs[shstrndx]
    out = {}
    for s in secs:
        end = cubin.index(b"\0", names[4] + s[0])
        out[cubin[names[4] + s[0]:end].decode()] = cubin[s[4]:s[4] + s[5]]
    return out


# .nv.info.<kernel> attributes (format byte, attribute byte, u16; format 4 carries u16 bytes of data).
# Codes as nvdisasm/cuobjdump name them: EIATTR_MAX_THREADS 0x05 (the __launch_bounds__ block),
# EIATTR_CTA_PER_CLUSTER 0x3d (a __cluster_dims__ shape).
EIATTR_MAX_THREADS, EIATTR_CTA_PER_CLUSTER = 0x05, 0x3D


def nv_info(cubin: bytes, kernel: str) -> dict[int, object]:
    data = _sections(cubin)[".nv.info." + kernel]
    attrs, i = {}, 0
    while i + 4 <= len(data):
        fmt, attr, x = struct.unpack_from("<BBH", data, i)
        if fmt == 4:
            attrs[attr] = struct.unpack_from(f"<{x // 4}I", data, i + 4)
            i += 4 + x
        else:
            attrs[attr] = x
            i += 4
    return attrs


def signature(path) -> list[tuple[str, str]]:
    """(type, name) of the __global__ kernel's parameters, read from the source."""
    src = re.sub(r"//[^\n]*", "", path.read_text())
    g = src.find("__global__")
    assert g >= 0, f"{path.name}: no __global__ kernel"
    for m in re.finditer(r"(\w+)\s*\(", src[g:]):       # skip __launch_bounds__(...), __cluster_dims__(...)
        if m.group(1) not in ("__launch_bounds__", "__cluster_dims__"):
            break
    start = g + m.end()
    depth, i = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(src[i], 0)
        i += 1
    params = []
    for p in src[start:i - 1].split(","):
        words = re.findall(r"[A-Za-z_]\w*", p)
        params.append((" ".join(w for w in words[:-1] if w not in ("const", "__grid_constant__", "__restrict__")),
                       words[-1]))
    return params


# ---- the tests ------------------------------------------------------------------------------------

def test_every_family_has_stages():
    fams = {p.relative_to(KERNELS).parts[0] for p in STAGE_FILES}
    assert fams == {"nvfp4", "fp8", "sm90"} and any("variants" in str(p) for p in STAGE_FILES)
    on_disk = set(KERNELS.glob("*/[0-9][0-9]*.cu")) | set(KERNELS.glob("*/*/[0-9][0-9]*.cu"))
    assert on_disk == set(STAGE_FILES), "every numbered .cu is a stage of a listed family"


# ---- the header grammar (pelib.stages) --------------------------------------------------------------

def family_of(path) -> str:
    return str(path.parent.relative_to(KERNELS))


@pytest.mark.parametrize("path", STAGE_FILES, ids=IDS)
def test_header_grammar(path):
    h = stages.read_header(path)
    assert h.number == path.name.split("_")[0] and h.idea and h.what and h.why and (h.recorded or h.measured)
    assert h.run.split()[:4] == ["python", "-m", "pelib.stage", stages.name(path)], \
        f"the Run line names the stage itself: {h.run!r}"
    assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=[\w.,]+", a) for a in h.run.split()[5::2]), h.run


@pytest.mark.parametrize("path", STAGE_FILES, ids=IDS)
def test_parent_is_an_earlier_existing_stage(path):
    h = stages.read_header(path)
    fam = stages.family_stages(family_of(path))
    if family_of(path) != "fp8/variants" and path == fam[0]:
        assert h.parent is None, f"{path.name} is its family's first stage: it declares no parent"
        return
    assert h.parent, f"{path.name} declares no Parent line"
    parent = stages.parent_of(path)
    assert parent.is_file() and stages.name(parent) == h.parent
    if family_of(parent) == family_of(path):
        assert fam.index(parent) < fam.index(path), "a parent sorts before its child"


def test_diff_defaults_to_the_declared_parent():
    one = stages.diff("fp8/03_x32_loads.cu", skip_header=True)
    assert one == stages.diff("fp8/02_tn256.cu", "fp8/03_x32_loads.cu", skip_header=True)
    assert one.title == "fp8/02_tn256.cu → fp8/03_x32_loads.cu"
    assert stages.diff_stats("fp8/03_x32_loads.cu") == stages.diff_stats("fp8/02_tn256.cu", "fp8/03_x32_loads.cu")
    with pytest.raises(stages.HeaderError, match="first stage"):
        stages.diff("fp8/00_ws_cta1.cu")


GOOD = """// Stage 03 — an idea.
// Parent: fp8/02_tn256
//
// What changes: a thing,
//   continued.
// Why: a reason.
// Recorded: a-note.md, commit abc: 1 ms.
// Run: python -m pelib.stage fp8/03_x32_loads -D NUM_STAGES=4
#include "common/types.cuh"
"""


def test_header_parser_reads_and_refuses():
    h = stages.Header.parse(GOOD)
    assert (h.number, h.idea, h.parent, h.what, h.why) == ("03", "an idea.", "fp8/02_tn256", "a thing, continued.",
                                                           "a reason.")
    assert h.recorded == "a-note.md, commit abc: 1 ms." and h.measured is None
    bad = {
        "em dash": GOOD.replace(" — ", " - "),
        "order": GOOD.replace("// Why: a reason.\n", "").replace("// Run:", "// Why: a reason.\n// Run:", 1)
                     .replace("// Recorded:", "// Run: x\n// Recorded:"),
        "no Why": GOOD.replace("// Why: a reason.\n", ""),
        "no evidence": GOOD.replace("// Recorded: a-note.md, commit abc: 1 ms.\n", ""),
        "Run": GOOD.replace("python -m pelib.stage", "make"),
        "twice": GOOD.replace("// Why: a reason.", "// Why: a reason.\n// Why: again."),
        "text before a key": GOOD.replace("// Parent: fp8/02_tn256\n", "// Parent: fp8/02_tn256\n// stray\n").replace(
            "// Parent: fp8/02_tn256", "// stray first"),
    }
    for what, text in bad.items():
        with pytest.raises(stages.HeaderError):
            stages.Header.parse(text, what)


def test_exports_the_whole_vocabulary(stage):
    path, b = stage
    missing = [k for k in VOCABULARY if k not in b.exports]
    assert not missing, f"{path.name} does not export {missing} (common/export.cuh lists the vocabulary)"


def test_tensor_map_parameters_have_boxes(stage):
    path, b = stage
    params = signature(path)
    maps = [n for t, n in params if t == "CUtensorMap"]
    assert maps and all(n.startswith("tmap_") for n in maps), params
    assert not [t for t, _ in params if "TensorMap" in t and t != "CUtensorMap"], "tensor maps are CUtensorMap"
    declared = {k.rsplit("_box_rows", 1)[0] for k in b.exports if k.startswith("tmap_") and k.endswith("_box_rows")}
    assert declared == set(maps), f"{path.name}: maps {maps}, exported boxes for {sorted(declared)}"
    for m in maps:
        ex = {f: b.exports[f"{m}_{f}"] for f in TMAP_FIELDS}
        inner = ex["box_cols"] * ex["elem_bytes"]
        assert ex["swizzle"] in (0, 32, 64, 128), (m, ex)
        assert 1 <= ex["box_cols"] <= 256 and ex["box_rows"] >= 1, (m, ex)   # cuTensorMapEncodeTiled: boxDim <= 256
        assert inner % 16 == 0, f"{m}: the inner box must be a multiple of 16 bytes ({inner})"
        if ex["swizzle"]:
            assert inner <= ex["swizzle"], f"{m}: inner box {inner} B exceeds the {ex['swizzle']}-B swizzle span"


def test_values_agree_with_the_cubin(stage):
    path, b = stage
    ex, info = b.exports, nv_info(b.cubin, b.kernel)
    assert ex["smem_limit"] == SMEM_LIMIT
    assert ex["smem_bytes"] + b.facts.smem_static <= ex["smem_limit"], \
        f"{path.name}: {ex['smem_bytes']} B dynamic + {b.facts.smem_static} B static exceed the limit"
    assert (ex["num_threads"], 1, 1) == info[EIATTR_MAX_THREADS], "num_threads must be the __launch_bounds__ block"
    cluster = info.get(EIATTR_CTA_PER_CLUSTER)
    assert ex["cluster_in_kernel"] == (cluster is not None)
    if cluster is not None:
        assert cluster == (ex["cluster_x"], 1, 1)
    assert ex["cluster_x"] >= 1 and ex["grid_kind"] in (0, 1, 2)
    assert 1 <= ex["epi_warps"] and 32 * ex["epi_warps"] <= ex["num_threads"]
    assert ex["pipeline_stages"] >= 1 and ex["barrier_bytes"] >= 8
    # sm90 waits are the call-free ones (kind 1 by default), the sm_100a stages' the printf ones (kind 0)
    assert ex["wait_kind"] == (1 if arch_of(path) == "sm_90a" else 0)


def test_values_agree_with_each_other(stage):
    path, b = stage
    ex = b.exports
    # A streams through the ring in every family: its box is one tile's rows by one stage's K.
    assert ex["tmap_a_box_rows"] == ex["tile_m"]
    operand_bits = 4 if path.relative_to(KERNELS).parts[0] == "nvfp4" else 8     # E2M1 or E4M3
    assert ex["tmap_a_box_cols"] * ex["tmap_a_elem_bytes"] * 8 == ex["block_k"] * operand_bits
    a_stage = ex["tmap_a_box_rows"] * ex["tmap_a_box_cols"] * ex["tmap_a_elem_bytes"]
    assert ex["smem_bytes"] >= ex["pipeline_stages"] * a_stage + ex["barrier_bytes"], \
        "the dynamic shared memory must hold the A ring and the barriers"


# ---- one idea per diff ---------------------------------------------------------------------------

WITH_PARENT = [p for p in STAGE_FILES if stages.read_header(p).parent]


@pytest.mark.parametrize("path", WITH_PARENT, ids=[str(p.relative_to(KERNELS)) for p in WITH_PARENT])
def test_one_idea_per_diff(path):
    """Each stage differs from its declared parent by at most 100 changed code lines on either side of
    the diff (header excluded; a block that only moved one level deeper is not changed code)."""
    d = stages.diff_stats(path, ignore_indent=True)
    assert max(d.values()) <= 100, f"{stages.name(path)} changes +{d['added']}/-{d['removed']} lines against " \
        f"{stages.read_header(path).parent}: split the idea into sub-versions (NNa, NNb)"


def test_the_size_rule_can_fail():
    """The bundles the sub-versions split apart are far over the limit, so the rule measures something."""
    assert stages.diff_stats("sm90/00_tma_wgmma.cu", "sm90/01_warp_specialized.cu", ignore_indent=True)["added"] > 100
    assert stages.diff_stats("sm90/03_staged_epilogue.cu", "sm90/04_pingpong_resident_b.cu", ignore_indent=True)["added"] > 100
    raw, flat = (stages.diff_stats("sm90/01_warp_specialized.cu", "sm90/01a_persistent.cu", ignore_indent=f)
                 for f in (False, True))
    assert raw["added"] > flat["added"], "the mainloop moved into the tile loop: re-indented, not changed"


# ---- common/: wrappers hold every asm, building blocks and stages include them by path ----------------

COMMON = KERNELS / "common"
BUILDING_BLOCKS = ("epilogue", "staging", "scheduler", "tile_map")


def _code(path) -> str:
    return re.sub(r"//[^\n]*", "", path.read_text())


@pytest.mark.parametrize("path", STAGE_FILES, ids=IDS)
def test_stage_files_hold_no_inline_ptx(path):
    assert not re.search(r"\basm\b", _code(path)), f"{path.name}: move the asm into a common/ wrapper header"


@pytest.mark.parametrize("name", BUILDING_BLOCKS)
def test_building_blocks_hold_no_inline_ptx(name):
    assert not re.search(r"\basm\b", _code(COMMON / f"{name}.cuh"))


@pytest.mark.parametrize("path", STAGE_FILES + sorted(COMMON.glob("*.cuh")), ids=lambda p: p.name)
def test_includes_name_common_headers(path):
    incs = re.findall(r'^\s*#\s*include\s*[<"]([^">]+)[">]', path.read_text(), re.M)
    assert all(re.fullmatch(r"common/\w+\.cuh", i) and (KERNELS / i).is_file() for i in incs), incs
    assert incs or path.name in ("limits.cuh", "types.cuh"), f"{path.name} includes nothing"


def test_readme_lists_every_header():
    text = (COMMON / "README.md").read_text()
    assert all(f"`{p.name}`" in text for p in COMMON.glob("*.cuh"))


# ---- Blackwell SASS hygiene ---------------------------------------------------------------------------

BLACKWELL = [p for p in STAGE_FILES if arch_of(p) == "sm_100a"]
BW_IDS = [str(p.relative_to(KERNELS)) for p in BLACKWELL]


def _calls(instrs) -> list:
    """CALLs of the kernel's own code (ptxas adds tcgen05 guardrail calls on dealloc: not ours)."""
    return [i for i in instrs if i.op.startswith("CALL") and "guardrail" not in i.text]


@pytest.mark.parametrize("path", BLACKWELL, ids=BW_IDS)
def test_steady_state_loops_hold_no_cache_invalidate_or_gpu_fence(path):
    """The K-loop, the epilogue loop and the producer's loop of every sm_100a stage: no CCTL.IVALL (a
    cluster-scope acquire's L1 invalidate) and no MEMBAR.ALL.GPU (a cluster-scope release's wait for
    every outstanding global store). Set-up and teardown (barrier.cluster) may hold them."""
    from pelib.isa import sass_account as SA

    b = B.build(path, "sm_100a")
    ins = SA.parse(b.sass)
    loops = SA.steady_loops(ins)
    assert loops["mma"], "the MMA issue loop was not found"
    for name, regions in loops.items():
        for r in regions:
            assert SA.fences(ins, r) == {"CCTL.IVALL": 0, "MEMBAR.ALL.GPU": 0}, \
                f"{path.name}: the {name} loop 0x{r[0]:x}-0x{r[1]:x} holds {SA.fences(ins, r)}"


WAIT_BUILD_STAGES = ("nvfp4/01_pipelined.cu", "fp8/00_ws_cta1.cu", "fp8/01_cta2.cu", "fp8/09_persistent_megakernel.cu")


@pytest.mark.parametrize("path", [KERNELS / s for s in WAIT_BUILD_STAGES], ids=WAIT_BUILD_STAGES)
def test_wait_builds(path):
    """PE_WAIT_KIND 0 (the default) calls the printf on a timeout, 1 traps without a call, 2 spins
    unbounded; each exports the kind it was built with."""
    from pelib.isa import sass_account as SA

    builds = {k: B.build(path, "sm_100a", {"PE_WAIT_KIND": k} if k else None) for k in (0, 1, 2)}
    assert [b.exports["wait_kind"] for b in builds.values()] == [0, 1, 2]
    calls = {k: len(_calls(SA.parse(b.sass))) for k, b in builds.items()}
    assert calls[0] > 0 and calls[1] == 0 and calls[2] == 0, calls
    traps = {k: sum(1 for i in SA.parse(b.sass) if "TRAP" in i.op) for k, b in builds.items()}
    assert traps[2] < traps[1], f"the bounded call-free waits trap, the unbounded ones cannot: {traps}"
    assert B.build(path, "sm_100a", {"PE_UNBOUNDED_WAIT": 1}).exports["wait_kind"] == 2


def test_wait_kind_out_of_range_is_a_build_error():
    with pytest.raises(B.BuildError, match="PE_WAIT_KIND"):
        B.build("fp8/00_ws_cta1.cu", "sm_100a", {"PE_WAIT_KIND": 3})


def test_wait_tags_lead_to_their_barrier_and_source_line():
    """A timed-out bounded wait prints its tag; stages.wait_sites maps the tag to the barrier and the
    line (the committed H100 fault run's tag 42 is rt_hang.cu's one wait)."""
    from pelib import paths, stages
    s06 = {w.tag: w for w in stages.wait_sites("sm90/06_permuted_b")}
    assert s06[2].barrier == "full[s]" and s06[1].barrier == "empty[s]" and s06[5].barrier == "turn[wg]"
    src = (paths.KERNELS / "sm90" / "06_permuted_b.cu").read_text().splitlines()
    assert "mbarrier_wait_parity_nocall(&full[s], phase, 2)" in src[s06[2].line - 1]
    log = (paths.RESULTS / "2026-11-24-h100" / "gpu_faults.log").read_text()
    got = stages.explain_timeout(log, paths.ROOT / "tests" / "kernels" / "rt_hang.cu")
    assert got[0].startswith("timed out: tag=42 smem=0x400 parity=0")
    assert got[1].strip().startswith("tag 42 -> barrier bar (parity 0) -> rt_hang.cu:24:")
    assert stages.explain_timeout(log, "sm90/06_permuted_b")[1].strip() == "no wait in 06_permuted_b has tag 42"
    for f in ("sm90", "fp8", "nvfp4"):
        for p in stages.family_stages(f):
            assert all(w.barrier and w.line > 0 for w in stages.wait_sites(p))


def _reached(path) -> list:
    return [f for _, f, _ in B.expand_sources(path, [Path(d) for d in B._include_paths(path.parent)])]


@pytest.mark.parametrize("path", STAGE_FILES, ids=IDS)
def test_no_device_build_reaches_the_simulator(path):
    """The simulator is host code: no stage's device build (the stage and every header NVRTC reaches from
    it) includes a file under src/kernels/sim, so changing the simulator cannot change a cubin
    (results/2026-11-28-cpu/device-cubins-sha256.json compares all 40 across its restructuring)."""
    sim_dir = (KERNELS / "sim").resolve()
    files = _reached(path)
    assert len(files) > 1, f"{path.name} reaches no header: the include walk found nothing to check"
    assert not [f for f in files if sim_dir in f.parents], f"{path.name}'s device build includes the simulator"


def test_the_simulator_check_can_fail(tmp_path):
    k = tmp_path / "k.cu"
    k.write_text('#include "common/mbarrier.cuh"\n#include <sim/runtime/api.h>\n__global__ void k() {}\n')
    sim_dir = (KERNELS / "sim").resolve()
    assert [f for f in _reached(k) if sim_dir in f.parents]
