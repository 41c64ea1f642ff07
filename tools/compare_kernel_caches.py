#!/usr/bin/env python3
"""Compare the kernels of two kernel caches, by lowered kernel name.

Use: after a template change that should not change some kernels (a refactor, a helper added that
only other kernels use), warm the tuning entries concerned into two caches, one with the old
templates (TILEOPS_TEMPLATE_DIR pointing at a copy of them) and one with the new:

    TILEOPS_TEMPLATE_DIR=/tmp/old/kernel_templates tileops-tune warm --arch sm_90a --db db.json --cache-dir /tmp/a
    tileops-tune warm --arch sm_90a --db db.json --cache-dir /tmp/b
    tools/compare_kernel_caches.py /tmp/a /tmp/b

Kernels that come out identical keep their measured speed, so their tuning entries can be re-keyed
to the new template hash (`tileops-tune explain --json` gives it) instead of re-tuned. The ELF
string table is left out of the comparison: NVRTC names some local symbols with a hash that differs
from one compilation to the next, so two compilations of the same source differ there. Every other
section (the code, its metadata, the symbol table) must match byte for byte.

Exit status: 0 when every kernel present in both caches is identical, 1 otherwise.
"""
import hashlib
import os
import struct
import sys

# Cache entry (src/jit/disk_cache.cpp): magic[8] | version u32 | key length u32 | key |
# payload length u64 | SHA-256(payload)[32] | payload; payload (src/jit/kernel_builder.cpp):
# lowered kernel name, '\n', cubin.
MAGIC = b"TOPSKRNL"


def read_entry(path):
    """(lowered name, cubin) of a cache file, or None when it is not a cache entry."""
    data = open(path, "rb").read()
    if not data.startswith(MAGIC) or len(data) < 16:
        return None
    _version, key_size = struct.unpack_from("<II", data, 8)
    offset = 16 + key_size
    (payload_size,) = struct.unpack_from("<Q", data, offset)
    offset += 8 + 32
    payload = data[offset:offset + payload_size]
    name, newline, cubin = payload.partition(b"\n")
    return (name.decode(), cubin) if newline else None


def code_digest(cubin):
    """SHA-256 over the ELF64 sections' names and contents, the string table excepted."""
    (section_table,) = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, section_table + i * entry_size) for i in range(count)]
    names_offset = sections[names_index][4]

    def name_of(section):
        start = names_offset + section[0]
        return cubin[start:cubin.index(b"\0", start)].decode()

    digest = hashlib.sha256()
    for section in sections:
        name = name_of(section)
        if name == ".strtab":
            continue
        digest.update(name.encode())
        if section[1] != 8:  # SHT_NOBITS has no bytes in the file
            digest.update(cubin[section[4]:section[4] + section[5]])
    return digest.hexdigest()


def scan(directory):
    kernels = {}
    for root, _, files in os.walk(directory):
        for file in files:
            entry = read_entry(os.path.join(root, file))
            if entry:
                kernels[entry[0]] = code_digest(entry[1])
    return kernels


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    a, b = scan(sys.argv[1]), scan(sys.argv[2])
    common = sorted(set(a) & set(b))
    different = [name for name in common if a[name] != b[name]]
    print(f"{len(a)} kernels in {sys.argv[1]}, {len(b)} in {sys.argv[2]}, {len(common)} in both: "
          f"{len(common) - len(different)} identical, {len(different)} different")
    for name in different:
        print("different:", name)
    for name in sorted(set(a) ^ set(b)):
        print(f"only in {sys.argv[1] if name in a else sys.argv[2]}:", name)
    return 0 if not different else 1


if __name__ == "__main__":
    sys.exit(main())
