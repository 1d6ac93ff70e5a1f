"""pelib.build: NVRTC compiles, caches, reports ptxas facts and SASS, and fails clearly."""
import multiprocessing as mp
import textwrap

import pytest

from pelib import build as B
from pelib.isa import elf, sass

KERNEL = textwrap.dedent("""
    #include "common/types.cuh"
    #include "common/export.cuh"
    #ifndef SCALE
    #define SCALE 2
    #endif
    PELIB_EXPORT(smem_bytes, 1024 * SCALE);
    PELIB_EXPORT(scale, SCALE);
    extern "C" __global__ void axpy(float* y, const float* x, int n) {
      __shared__ float tile[64];
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      tile[threadIdx.x % 64] = i < n ? x[i] : 0.f;
      __syncthreads();
      if (i < n) y[i] = SCALE * tile[(threadIdx.x + 1) % 64] + y[i];
    }
""")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(B, "CACHE_DIR", tmp_path / "cache")
    return tmp_path / "cache"


@pytest.fixture
def kernel_file(tmp_path):
    p = tmp_path / "axpy.cu"
    p.write_text(KERNEL)
    return p


@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_build_reports_facts_and_exports(kernel_file, cache, arch):
    b = B.build(kernel_file, arch, {"SCALE": 3})
    assert b.cubin[:4] == b"\x7fELF"
    assert b.kernel == "axpy"
    f = b.facts
    assert 4 <= f.registers <= 64 and f.spills == 0
    assert f.smem_static == 256  # 64 floats
    assert b.exports == {"smem_bytes": 3072, "scale": 3}
    assert b.dynamic_smem == 3072
    assert not b.cached


def test_cache_hit_and_key(kernel_file, cache):
    first = B.build(kernel_file, "sm_100a", {"SCALE": 2})
    again = B.build(kernel_file, "sm_100a", {"SCALE": 2})
    other = B.build(kernel_file, "sm_100a", {"SCALE": 5})
    assert not first.cached and again.cached and not other.cached
    assert again.cubin == first.cubin and again.facts == first.facts
    assert other.exports["scale"] == 5
    # Editing an included header invalidates the entry (the key covers includes).
    hdr = kernel_file.parent / "extra.cuh"
    hdr.write_text("#define EXTRA 1\n")
    kernel_file.write_text('#include "extra.cuh"\n' + KERNEL)
    assert not B.build(kernel_file, "sm_100a", {"SCALE": 2}).cached
    hdr.write_text("#define EXTRA 2\n")
    assert not B.build(kernel_file, "sm_100a", {"SCALE": 2}).cached


def _build_in_child(path, cache_dir):
    B.CACHE_DIR = cache_dir
    return B.build(path, "sm_100a", {"SCALE": 7}).facts.registers


def test_concurrent_builders_share_one_valid_entry(kernel_file, cache):
    with mp.get_context("spawn").Pool(2) as pool:
        regs = pool.starmap(_build_in_child, [(kernel_file, cache)] * 4)
    assert len(set(regs)) == 1
    entries = [p for p in cache.iterdir() if not p.name.startswith(".tmp-")]
    assert len(entries) == 1 and not list(cache.glob(".tmp-*"))
    assert B.build(kernel_file, "sm_100a", {"SCALE": 7}).cached


def test_ptxas_parsing_of_a_real_log():
    log = textwrap.dedent("""\
        ptxas info    : 0 bytes gmem
        ptxas info    : Compiling entry function 'patch_embed' for 'sm_100a'
        ptxas info    : Function properties for patch_embed
        ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
        ptxas info    : Used 222 registers, used 1 barriers, 1024 bytes smem
        ptxas info    : Compiling entry function 'other' for 'sm_100a'
        ptxas info    : Function properties for other
        ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 10 registers
        ptxas info    : Compiling entry function 'waits' for 'sm_90a'
        ptxas info    : Function properties for waits
        ptxas         .     32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 26 registers, used 1 barriers, 32 bytes cumulative stack size, 4104 bytes smem
        """)
    facts = B.parse_ptxas(log)
    assert facts["patch_embed"] == B.PtxasFacts("patch_embed", 222, 8, 12, 16, 1024, 1)
    assert facts["patch_embed"].spills == 20
    assert facts["other"].registers == 10 and facts["other"].smem_static == 0
    # printf in a bounded mbarrier wait adds a 'cumulative stack size' clause before smem.
    assert facts["waits"] == B.PtxasFacts("waits", 26, 0, 0, 32, 4104, 1)


def test_sass_histogram_counts_real_opcodes(kernel_file, cache):
    b = B.build(kernel_file, "sm_100a")
    h = b.histogram
    assert h["EXIT"] >= 1 and h["STS"] >= 1 and h["LDS"] >= 1 and h["BAR"] >= 1
    assert sum(h.values()) == len(sass.instructions(b.sass))
    # Modifiers are kept when asked: e.g. 'BAR.SYNC.DEFER_BLOCKING'.
    assert any(op.startswith("BAR.") for op in sass.opcode_histogram(b.sass, modifiers=True))


def test_tcgen05_kernel_compiles_for_sm100a_only(tmp_path, cache):
    p = tmp_path / "tmem.cu"
    p.write_text(textwrap.dedent("""
        extern "C" __global__ void tmem(unsigned* out) {
          __shared__ unsigned addr;
          if (threadIdx.x < 32)
            asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;"
                         :: "r"((unsigned)__cvta_generic_to_shared(&addr)));
          __syncthreads();
          unsigned r;
          asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];" : "=r"(r) : "r"(addr));
          asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
          out[threadIdx.x] = r;
          if (threadIdx.x < 32) {
            asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;");
            asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(addr));
          }
        }"""))
    b = B.build(p, "sm_100a")
    assert b.histogram["LDTM"] >= 1
    with pytest.raises(B.BuildError, match="tcgen05"):
        B.build(p, "sm_90a")


def test_compile_error_shows_offending_lines(tmp_path, cache):
    p = tmp_path / "broken.cu"
    p.write_text('extern "C" __global__ void k(float* y) {\n  y[0] = undefined_symbol;\n}\n')
    with pytest.raises(B.BuildError) as e:
        B.build(p, "sm_100a")
    msg = str(e.value)
    assert "undefined_symbol" in msg and "broken.cu:    2 >" in msg and "sm_100a" in msg


def test_unknown_arch_and_missing_file(kernel_file, cache):
    with pytest.raises(ValueError, match="unknown arch 'sm_89'.*sm_100a"):
        B.build(kernel_file, "sm_89")
    with pytest.raises(FileNotFoundError, match="no kernel file"):
        B.build("fp8/does_not_exist.cu")


def test_missing_nvrtc_names_the_package(kernel_file, cache, monkeypatch):
    from cuda.bindings import nvrtc

    def gone():
        raise RuntimeError("libnvrtc.so.13: cannot open shared object file")
    monkeypatch.setattr(nvrtc, "nvrtcVersion", gone)
    with pytest.raises(B.ToolchainError, match="pip install nvidia-cuda-nvrtc"):
        B.build(kernel_file, "sm_100a")


def test_exports_reader_rejects_non_elf():
    with pytest.raises(ValueError, match="not an ELF64"):
        elf.read_exports(b"not a cubin")


def test_a_build_whose_log_has_no_ptxas_facts_still_names_its_kernel():
    """A compile log without ptxas info (seen on a GPU machine's NVRTC) leaves Build.ptxas empty; the kernel's
    name then comes from the cubin's .text/.nv.info sections, and launch.prepare checks nothing it lacks."""
    import dataclasses

    from pelib import build as B
    from pelib.isa import elf

    b = B.build("sm90/00_tma_wgmma.cu", "sm_90a")
    bare = dataclasses.replace(b, log="", ptxas={})
    assert elf.entry_functions(b.cubin) == [b.kernel] == [bare.kernel]
    with pytest.raises(ValueError, match="not an ELF64 cubin"):
        elf.entry_functions(b"\0" * 64)


def test_entry_functions_are_the_kernels_only(tmp_path, cache):
    """pelib.isa.elf.entry_functions: the __global__ functions (C and C++ names), not a __noinline__ device function,
    and every one of them has its ptxas facts (pelib.build.facts_missing is empty)."""
    p = tmp_path / "three.cu"
    p.write_text(textwrap.dedent("""
        __device__ __noinline__ int helper(int x) { return x * 3 + 1; }
        extern "C" __global__ void plain(int* p) { p[threadIdx.x] = helper(p[threadIdx.x]); }
        template <int N> __global__ void scaled(int* p) { p[threadIdx.x] *= N; }
        template __global__ void scaled<4>(int*);
    """))
    b = B.build(p, "sm_90a")
    assert elf.entry_functions(b.cubin) == sorted(b.ptxas) == ["_Z6scaledILi4EEvPi", "plain"]
    assert B.facts_missing(b.cubin, b.log) == [] and B.facts_missing(b.cubin, "") == ["_Z6scaledILi4EEvPi", "plain"]
    with pytest.raises(ValueError, match="not an ELF64 cubin"):
        elf.entry_functions(b"not a cubin")
