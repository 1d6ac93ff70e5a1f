"""Disassemble a cubin with nvdisasm (from the nvidia-cuda-nvdisasm wheel) and count opcodes."""
import re
import subprocess
import tempfile
from collections import Counter
from functools import lru_cache


@lru_cache(maxsize=1)
def nvdisasm_path() -> str:
    """Locate nvdisasm through cuda.pathfinder, never a hard-coded path."""
    try:
        import cuda.pathfinder as pf
        path = pf.find_nvidia_binary_utility("nvdisasm")
    except Exception as e:  # pragma: no cover
        raise RuntimeError(f"cuda.pathfinder is unusable ({e}): pip install cuda-pathfinder") from e
    if not path:
        raise RuntimeError("nvdisasm not found: pip install nvidia-cuda-nvdisasm")
    return path


def disassemble(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        r = subprocess.run([nvdisasm_path(), "-c", "-hex", f.name], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"nvdisasm failed: {r.stderr.strip()}")
    return r.stdout


# `/*0040*/  @!P0 UTCQMMA.2CTA gdesc[UR4], ...  ;` -> "UTCQMMA.2CTA"
_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:\{\s*)?(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def instructions(sass: str) -> list[tuple[int, str, str]]:
    """(offset, full opcode with modifiers, text) for every instruction line."""
    out = []
    for line in sass.splitlines():
        m = re.search(r"/\*([0-9a-f]{4,})\*/", line)
        if not m:
            continue
        mi = _INSTR.search(line)
        if mi:
            out.append((int(m.group(1), 16), mi.group(1), line.strip()))
    return out


def opcode_histogram(sass: str, modifiers: bool = False) -> Counter:
    """Counts by opcode (base mnemonic, or with its modifiers) over the whole SASS text."""
    c = Counter()
    for _, op, _ in instructions(sass):
        c[op if modifiers else op.split(".")[0]] += 1
    return c
