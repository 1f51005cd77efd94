#!/usr/bin/env python3
"""Finds circles in the file-level import graph of `src/` (issue 18's check).

Every `.rs` file is its own node (a folder is not folded into one). An edge `a -> b` is
any path into `b` that `a`'s code names: `use crate::...` (braces and all), an inline
`crate::x::y`, `super::...` or `child::...` (a module the file declares) in an
expression, a type or an `impl`. A parent's `pub use child::X` is a facade, not an edge. Comments and doc
comments are dropped first (a doc link is not a dependency), and so are `#[cfg(test)]`
modules (a test may reach anywhere). A path resolves to the deepest module file it
names: `crate::cache::paged::prefix::Foo` is `src/cache/paged/prefix.rs`.

    python3 scripts/check-imports.py          # prints every circle; exit 1 if one is new
    python3 scripts/check-imports.py --all    # also the edges of each circle

KNOWN lists the circles that were there when the check came in (issue 18 removes them):
the check fails on any circle that is not in it, and on a KNOWN one that has gone (so
that the list only ever shrinks).
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Each entry: the files of one circle, sorted, as `src/...` paths joined by " ". The
# seven issue 18 counted are gone: the cache views moved from attention.rs to
# cache/rows.rs and cache/view.rs (the policy's constructor to cache/build.rs), the
# loop's contract with storage from batch.rs to cache/source.rs, the engine's import
# and export from transfer.rs to engine.rs (transfer.rs is the rows and their wire
# format), q8's weight-format impl to simd/elem.rs, and the three of the last session.
KNOWN: set = set()


def module_of(path: Path, crate_root: Path) -> tuple:
    rel = path.relative_to(crate_root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip(code: str) -> str:
    """Drops comments, string literals and #[cfg(test)] modules."""
    code = re.sub(r"/\*.*?\*/", "", code, flags=re.S)
    code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)
    code = re.sub(r"//[^\n]*", "", code)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", code):
        if m.start() < i:
            continue
        out.append(code[i : m.start()])
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        i = j
    out.append(code[i:])
    return "".join(out)


def use_paths(code: str):
    """Every path a `use` names (braces expanded) and every inline crate::/super:: path."""
    for m in re.finditer(r"(\bpub(?:\([^)]*\))?\s+)?\buse\s+([^;]+);", code):
        for path in expand(re.sub(r"\s+", "", m.group(2))):
            # `pub use child::X` in a parent is a facade (the child's item, shown one
            # level up), not the parent using the child; a child naming its parent's
            # own items is still an edge.
            if m.group(1) and path.split("::")[0] not in ("crate", "super", "self"):
                continue
            yield path
    code = re.sub(r"\buse\s+[^;]+;", "", code)
    # Inline paths: `crate::`, `super::`, `self::`, or a child module's name
    # (`portable::TILE_ROWS` in `simd/mod.rs`); other first segments (`std::`, a
    # crate, a type's `Self::`) resolve to no file and are dropped in `graph`.
    for m in re.finditer(r"(?<![\w:])([A-Za-z_]\w*(?:::\w+)+)", code):
        yield m.group(1)


def expand(tree: str):
    """`a::{b, c::{d, e}}` -> a::b, a::c::d, a::c::e."""
    i = tree.find("{")
    if i < 0:
        yield tree.split(" as ")[0]
        return
    prefix, inner = tree[:i], tree[i + 1 : tree.rindex("}")]
    depth, start = 0, 0
    for k, ch in enumerate(inner + ","):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            part = inner[start:k]
            start = k + 1
            if part:
                yield from expand(prefix + part)


def graph(crate_root: Path, files):
    modules = {module_of(f, crate_root): f for f in files}
    edges = {f: set() for f in files}
    for f in files:
        here = module_of(f, crate_root)
        # `super` of a file module is its parent folder's module; of mod.rs, the same.
        parent = here[:-1]
        for path in use_paths(strip(f.read_text())):
            parts = path.split("::")
            if parts[0] == "crate":
                target = parts[1:]
            elif parts[0] == "super":
                base = list(parent)
                parts = parts[1:]
                while parts and parts[0] == "super":
                    base, parts = base[:-1], parts[1:]
                target = base + parts
            elif parts[0] == "self":
                target = list(here) + parts[1:]
            elif tuple(list(here) + [parts[0]]) in modules:
                target = list(here) + parts  # a child module, named relatively
            else:
                continue
            for n in range(len(target), 0, -1):
                dest = modules.get(tuple(target[:n]))
                if dest is not None:
                    if dest != f:
                        edges[f].add(dest)
                    break
    return edges


def circles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def find(root: Path):
    """Every circle of the crate at `root` (its `src/`, and `src/bin/kvlab/` apart)."""
    src = root / "src"
    lib_files = sorted(p for p in src.rglob("*.rs") if "bin" not in p.relative_to(src).parts)
    bin_root = src / "bin" / "kvlab"
    out = []
    for crate_root, files in ((src, lib_files), (bin_root, sorted(bin_root.rglob("*.rs")))):
        edges = graph(crate_root, files)
        for comp in circles(edges):
            out.append((comp, edges))
    return out


def main():
    show_edges = "--all" in sys.argv
    found = []
    for comp, edges in find(ROOT):
        found.append(" ".join(str(p.relative_to(ROOT)) for p in comp))
        if show_edges:
            for a in comp:
                for b in sorted(edges[a] & set(comp)):
                    print(f"    {a.relative_to(ROOT)} -> {b.relative_to(ROOT)}")
    problems = 0
    for c in found:
        tag = "known" if c in KNOWN else "NEW"
        problems += tag == "NEW"
        print(f"{tag} circle: {c}")
    for c in sorted(KNOWN - set(found)):
        problems += 1
        print(f"gone: {c}: remove it from KNOWN in scripts/check-imports.py")
    print(f"imports: {len(found)} circle(s), {problems} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
