"""Read the constants a stage exports (PELIB_EXPORT) from its cubin's ELF symbol table."""
import struct

PREFIX = "pelib_"


def read_exports(cubin: bytes) -> dict[str, int]:
    """{name: value} for every `pelib_<name>` integer object in the cubin (ELF64, little endian)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    out = {}
    for sec in secs:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        strtab = secs[sec[6]]
        for off in range(sec[4], sec[4] + sec[5], 24):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", cubin, off)
            end = cubin.index(b"\0", strtab[4] + st_name)
            name = cubin[strtab[4] + st_name:end].decode()
            if not name.startswith(PREFIX) or (st_info & 0xF) != 1 or st_size not in (4, 8):
                continue
            data_sec = secs[st_shndx]
            if data_sec[1] == 8:  # SHT_NOBITS: zero-initialised
                val = 0
            else:
                val = int.from_bytes(cubin[data_sec[4] + st_value:data_sec[4] + st_value + st_size], "little")
            out[name[len(PREFIX):]] = val
    return out
