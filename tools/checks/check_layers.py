#!/usr/bin/env python3
"""Checks that the folders of src/ form one-way layers.

Each folder may include headers only from itself and from the folders below it in LAYERS; an op
family (src/ops/<family>/) may not include another family's headers. Run by CTest; prints every
include that breaks the order and exits 1 when there is one.
"""
import pathlib
import re
import sys

# Lowest first: an arrow may only point down this list.
LAYERS = ["util", "cuda", "jit", "core", "ops", "tuning", "runtime", "autotune"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]) / "src"
    rank = {name: i for i, name in enumerate(LAYERS)}
    problems = []
    folders = {p.name for p in root.iterdir() if p.is_dir()}
    for unknown in sorted(folders - set(LAYERS)):
        problems.append(f"src/{unknown}/: a folder that is in no layer (add it to LAYERS in {__file__})")
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".hpp", ".cpp", ".h"):
            continue
        rel = path.relative_to(root)
        layer = rel.parts[0]
        if layer not in rank:
            continue
        for target in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            parts = pathlib.PurePosixPath(target).parts
            if len(parts) < 2 or parts[0] not in rank:
                continue  # a public header (tileops/...), a generated file or a sibling
            if rank[parts[0]] > rank[layer]:
                problems.append(f"src/{rel}: includes {target}: {layer} may not depend on {parts[0]} "
                                f"(layers, lowest first: {' <- '.join(LAYERS)})")
            elif layer == "ops" == parts[0] and len(rel.parts) > 2 and len(parts) > 2 and rel.parts[1] != parts[1]:
                problems.append(f"src/{rel}: includes {target}: op family {rel.parts[1]} may not depend on "
                                f"family {parts[1]}")
    for problem in problems:
        print(problem)
    if not problems:
        print(f"layers ok: {' <- '.join(LAYERS)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
