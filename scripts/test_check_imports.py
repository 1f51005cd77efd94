"""scripts/check-imports.py finds a planted circle, and ignores what is not a dependency:
`python3 -m unittest discover -s scripts -p 'test_*.py'`."""
import importlib.util
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("check_imports", HERE / "check-imports.py")
imports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(imports)


def crate(files: dict) -> Path:
    root = Path(tempfile.mkdtemp())
    for name, text in files.items():
        path = root / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def names(root: Path):
    return [[str(p.relative_to(root)) for p in comp] for comp, _ in imports.find(root)]


class CheckImports(unittest.TestCase):
    def test_a_use_circle_between_two_files_is_found(self):
        root = crate({
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::{a::A, c};\npub struct B;\n",
        })
        self.assertEqual(names(root), [["src/a.rs", "src/b.rs"]])

    def test_inline_paths_super_and_nested_modules_count(self):
        root = crate({
            "lib.rs": "pub mod cache;\npub mod attention;\n",
            "attention.rs": "pub fn f(x: crate::cache::quant::Rows) {}\n",
            "cache/mod.rs": "pub mod quant;\n",
            "cache/quant.rs": "pub struct Rows;\nfn g() { super::super::attention::f(Rows) }\n",
        })
        self.assertEqual(names(root), [["src/attention.rs", "src/cache/quant.rs"]])

    def test_a_parent_calling_its_child_relatively_counts_but_a_facade_does_not(self):
        root = crate({
            "lib.rs": "pub mod simd;\n",
            "simd/mod.rs": "mod portable;\npub use portable::tile;\npub const PANEL: usize = 32;\n",
            "simd/portable.rs": "use super::PANEL;\npub fn tile() -> usize { PANEL }\n",
        })
        self.assertEqual(names(root), [])
        root = crate({
            "lib.rs": "pub mod simd;\n",
            "simd/mod.rs": "mod portable;\npub const PANEL: usize = 32;\nfn rows() -> usize { portable::ROWS }\n",
            "simd/portable.rs": "use super::PANEL;\npub const ROWS: usize = PANEL / 8;\n",
        })
        self.assertEqual(names(root), [["src/simd/mod.rs", "src/simd/portable.rs"]])

    def test_doc_links_comments_strings_and_test_modules_do_not(self):
        root = crate({
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "use crate::b::B;\n",
            "b.rs": (
                "//! See [`crate::a`].\n"
                "// crate::a::x in a comment\n"
                "const S: &str = \"crate::a::y\";\n"
                "#[cfg(test)]\nmod tests {\n    use crate::a::*;\n    fn t() { { } }\n}\n"
                "pub struct B;\n"
            ),
        })
        self.assertEqual(names(root), [])

    def test_the_repository_has_only_the_known_circles(self):
        found = {" ".join(c) for c in names(HERE.parent)}
        self.assertEqual(found - imports.KNOWN, set())


if __name__ == "__main__":
    unittest.main()
