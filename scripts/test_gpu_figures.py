"""scripts/gpu-figures.py keeps only what a GPU really ran: it refuses a failed check and
binaries built from uncommitted code, and the record's tables are what its data gives:
`python3 -m unittest discover -s scripts -p 'test_*.py'`."""
import importlib.util
import json
import shutil
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("gpu_figures", HERE / "gpu-figures.py")
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)

RECORD = HERE.parent / "book" / "src" / "figures" / "data" / "gpu-h200.log"


def run_folder(log: str) -> Path:
    """A folder as a GPU check leaves it, with `log` as its log and the record's JSON files."""
    folder = Path(tempfile.mkdtemp())
    (folder / "gpu-check.log").write_text(log)
    (folder / "peer-roofs.json").write_text(json.dumps({"read_bytes_per_s": 1.0}))
    return folder


class GpuFigures(unittest.TestCase):
    def setUp(self):
        self.data = Path(tempfile.mkdtemp())
        self.saved = figures.DATA
        figures.DATA = self.data  # never write over the book's record

    def tearDown(self):
        figures.DATA = self.saved
        shutil.rmtree(self.data)

    def test_a_failed_check_is_not_recorded(self):
        log = RECORD.read_text().replace("   3. tests: PASS", "   3. tests: FAIL")
        with self.assertRaises(SystemExit) as e:
            figures.record(run_folder(log))
        self.assertIn("failure", str(e.exception))
        self.assertFalse((self.data / "gpu-h200.json").exists())

    def test_binaries_of_uncommitted_code_are_not_recorded(self):
        log = RECORD.read_text()
        commit = log.split("built from kvlab ", 1)[1].split()[0]
        log = log.replace(f"built from kvlab {commit}", f"built from kvlab {commit}+changes")
        with self.assertRaises(SystemExit) as e:
            figures.record(run_folder(log))
        self.assertIn("uncommitted", str(e.exception))

    def test_a_log_from_elsewhere_is_refused(self):
        with self.assertRaises(SystemExit):
            figures.record(run_folder("test result: ok. 3 passed; 0 failed\n"))

    def test_the_readme_lines_are_replaced_between_their_markers(self):
        figures.DATA = self.saved  # read the real record
        readme = f"before\n{figures.README_BEGIN}\nold lines\n{figures.README_END}\nafter\n"
        out = figures.with_readme_summary(readme)
        self.assertTrue(out.startswith("before\n" + figures.README_BEGIN))
        self.assertTrue(out.endswith(figures.README_END + "\nafter\n"))
        self.assertNotIn("old lines", out)
        self.assertEqual(figures.with_readme_summary(out), out, "idempotent")


if __name__ == "__main__":
    unittest.main()
