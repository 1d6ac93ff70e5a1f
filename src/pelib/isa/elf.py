"""Read a cubin's ELF symbol table: the constants a stage exports (PELIB_EXPORT) and its kernel entry functions."""
import struct

PREFIX = "pelib_"
STT_FUNC = 2
# st_other of a __global__ function's symbol (NVIDIA/cuda-gdb, gdb/cuda/cuda-tdep.c: STO_CUDA_ENTRY 0x10).
STO_CUDA_ENTRY = 0x10


def read_exports(cubin: bytes) -> dict[str, int]:
    """{name: value} for every `pelib_<name>` integer object in the cubin (ELF64, little endian)."""
    out = {}
    for name, (off, size) in export_locations(cubin).items():
        out[name] = 0 if off is None else int.from_bytes(cubin[off:off + size], "little")
    return out


def export_locations(cubin: bytes) -> dict[str, tuple]:
    """{name: (file offset, size)} of every export; offset None for a zero-initialised (.bss) one."""
    _check(cubin)
    try:
        return _locations(cubin)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"the cubin ({len(cubin)} B) is truncated or corrupt: {e}") from None


def entry_functions(cubin: bytes) -> list[str]:
    """The names (mangled as in the cubin) of its kernel entry functions: function symbols marked STO_CUDA_ENTRY."""
    _check(cubin)
    try:
        return sorted(name for name, info, other, *_ in _symbols(cubin)
                      if (info & 0xF) == STT_FUNC and other & STO_CUDA_ENTRY)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"the cubin ({len(cubin)} B) is truncated or corrupt: {e}") from None


def _check(cubin: bytes) -> None:
    if len(cubin) < 0x40 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError(f"not an ELF64 cubin ({len(cubin)} B starting {bytes(cubin[:4])!r})")


def _sections(cubin: bytes) -> list[tuple]:
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    return [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]


def _symbols(cubin: bytes):
    """(name, st_info, st_other, st_shndx, st_value, st_size) of every symbol of every SHT_SYMTAB section."""
    secs = _sections(cubin)
    for sec in secs:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        strtab = secs[sec[6]]
        for off in range(sec[4], sec[4] + sec[5], 24):
            st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", cubin, off)
            end = cubin.index(b"\0", strtab[4] + st_name)
            yield cubin[strtab[4] + st_name:end].decode(), st_info, st_other, st_shndx, st_value, st_size


def _locations(cubin: bytes) -> dict[str, tuple]:
    secs = _sections(cubin)
    out = {}
    for name, st_info, _, st_shndx, st_value, st_size in _symbols(cubin):
        if not name.startswith(PREFIX) or (st_info & 0xF) != 1 or st_size not in (4, 8):
            continue
        data_sec = secs[st_shndx]
        if data_sec[1] == 8:  # SHT_NOBITS: zero-initialised
            out[name[len(PREFIX):]] = (None, st_size)
            continue
        at = data_sec[4] + st_value
        if at + st_size > len(cubin):
            raise ValueError(f"symbol {name} lies past the end of the file")
        out[name[len(PREFIX):]] = (at, st_size)
    return out


def entry_functions(cubin: bytes) -> list[str]:
    """The kernels a cubin holds: the names of its `.text.<name>` sections (one per function; a kernel's
    `.nv.info.<name>` marks it an entry), read from the section header string table."""
    if len(cubin) < 0x40 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError(f"not an ELF64 cubin ({len(cubin)} B starting {bytes(cubin[:4])!r})")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    base = secs[shstrndx][4]

    def name(sec) -> str:
        return cubin[base + sec[0]:cubin.index(b"\0", base + sec[0])].decode()
    names = [name(s) for s in secs]
    info = {n[len(".nv.info."):] for n in names if n.startswith(".nv.info.")}
    return [n[len(".text."):] for n in names if n.startswith(".text.") and n[len(".text."):] in info]
