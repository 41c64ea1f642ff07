#!/usr/bin/env python3
"""Compare the kernels of two kernel caches, by lowered kernel name.

Use: after a change that should not change the kernels (a refactor, files moved, a helper added
that only other kernels use), warm the tuning entries concerned into two caches, one with the old
build (or TILEOPS_TEMPLATE_DIR pointing at a copy of the old templates) and one with the new:

    old/tileops-tune warm --arch sm_90a --db db.json --cache-dir /tmp/a
    tileops-tune rekey db.json -o rekeyed.json
    tileops-tune warm --arch sm_90a --db rekeyed.json --cache-dir /tmp/b
    tools/compare_kernel_caches.py /tmp/a /tmp/b [--rename FROM=TO]...

Kernels whose code comes out the same keep their measured speed, so their tuning entries can be
re-keyed (`tileops-tune rekey`) instead of re-tuned. Each kernel present in both caches is:
  identical  every ELF section the same but the string and symbol tables: NVRTC names local
             symbols after the translation unit's file and a per-compilation hash, so two
             compilations of the same source differ there;
  same code  its machine code (.text.*), shared-memory (.nv.shared.*) and parameter bank
             (.nv.constant0.*) sections the same; other data may differ (a translation unit
             that includes fewer headers emits fewer unused namespace-scope constants, which
             renumbers the symbols that the kernel's .nv.info records refer to);
  different  otherwise.

--rename FROM=TO rewrites the first cache's lowered names (and so its section names) before they
are matched, FROM a Python regular expression (no '='), TO its replacement: a template parameter
added with a default value changes every lowered name of the template while the code may stay the
same (e.g. `--rename '(_mma_kernelI.*ELb[01])EEEv=\1ELb0EEEv'` for a bool appended after another).

Exit status: 0 when every kernel present in both caches has the same code, 1 otherwise.
"""
import argparse
import hashlib
import os
import re
import struct
import sys

# Cache entry (src/jit/disk_cache.cpp): magic[8] | version u32 | key length u32 | key |
# payload length u64 | SHA-256(payload)[32] | payload; payload (src/jit/kernel_builder.cpp):
# the CUDA headers' hash, '\n', lowered kernel name, '\n', cubin.
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
    _headers, newline, rest = payload.partition(b"\n")
    name, newline2, cubin = rest.partition(b"\n")
    return (name.decode(), cubin) if newline and newline2 else None


def sections(cubin):
    """{name: bytes} of an ELF64 cubin's sections (SHT_NOBITS ones empty)."""
    (section_table,) = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    table = [struct.unpack_from("<IIQQQQIIQQ", cubin, section_table + i * entry_size) for i in range(count)]
    names_offset = table[names_index][4]
    out = {}
    for section in table:
        start = names_offset + section[0]
        name = cubin[start:cubin.index(b"\0", start)].decode()
        out[name] = cubin[section[4]:section[4] + section[5]] if section[1] != 8 else b""
    return out


def digests(cubin, rename):
    """(digest of every section but the string and symbol tables, digest of the code sections)."""
    all_data, code = hashlib.sha256(), hashlib.sha256()
    for name, data in sorted((rename(name), data) for name, data in sections(cubin).items()):
        if name in (".strtab", ".symtab"):
            continue
        all_data.update(name.encode() + b"\0" + data)
        if name.startswith((".text.", ".nv.shared.", ".nv.constant0.")):
            code.update(name.encode() + b"\0" + data)
    return all_data.hexdigest(), code.hexdigest()


def scan(directory, rename=lambda name: name):
    kernels = {}
    for root, _, files in os.walk(directory):
        for file in files:
            entry = read_entry(os.path.join(root, file))
            if entry:
                kernels[rename(entry[0])] = digests(entry[1], rename)
    return kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rename", action="append", default=[], metavar="FROM=TO")
    args = parser.parse_args()
    pairs = []
    for text in args.rename:
        old, equals, new = text.partition("=")
        if not equals or not old:
            parser.error(f"--rename '{text}' is not FROM=TO")
        pairs.append((old, new))

    def rename(name):
        for old, new in pairs:
            name = re.sub(old, new, name)
        return name

    a, b = scan(args.old, rename), scan(args.new)
    common = sorted(set(a) & set(b))
    identical = [name for name in common if a[name][0] == b[name][0]]
    same_code = [name for name in common if a[name][0] != b[name][0] and a[name][1] == b[name][1]]
    different = [name for name in common if a[name][1] != b[name][1]]
    print(f"{len(a)} kernels in {args.old}, {len(b)} in {args.new}, {len(common)} in both: "
          f"{len(identical)} identical, {len(same_code)} same code, {len(different)} different")
    for name in same_code:
        print("same code:", name)
    for name in different:
        print("different:", name)
    for name in sorted(set(a) ^ set(b)):
        print(f"only in {args.old if name in a else args.new}:", name)
    return 0 if not different else 1

if __name__ == "__main__":
    sys.exit(main())
