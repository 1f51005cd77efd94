#!/usr/bin/env python3
"""Every planted kernel bug in kernels/mutants.toml must be caught by the GPU tests, run on
the CPU under kvlab's CUDA emulator (tools/cudacpu/).

    python3 scripts/kernel-mutants.py            all of them
    python3 scripts/kernel-mutants.py 3 7        only mutants 3 and 7 (1-based)
    RECORD=1 python3 scripts/kernel-mutants.py   all, and the results (commit, caught of
                                                 total, how each was caught) written to
                                                 book/src/figures/data/kernel-mutants.json

For each mutant: copy kernels/*.cu, apply the one replacement, build the emulator from the
copy (target/cudacpu-mutant/, incremental: one file recompiles), run the test binaries it
names, and require at least one test to FAIL. The test binaries are the ordinary
`--features cuda` ones, built once; only the emulator changes between mutants. Exits 1 if
any mutant survives, printing which.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nvrtc_env():
    subprocess.run(["bash", "scripts/setup-nvrtc.sh"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    site = subprocess.run([str(ROOT / ".venv/bin/python"), "-c",
                           'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                          check=True, capture_output=True, text=True).stdout.strip()
    return f"{site}/nvidia/cu13/lib", f"{site}/nvidia/cu13/include"


def test_binaries(names):
    """The path of each tests/<name>.rs binary (release, --features cuda), built if needed."""
    cmd = ["cargo", "test", "--release", "--features", "cuda", "--no-run",
           "--message-format=json"]
    for n in names:
        cmd += ["--test", n]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            found[msg["target"]["name"]] = msg["executable"]
    missing = [n for n in names if n not in found]
    if missing:
        sys.exit(f"kernel-mutants: cargo built no binary for {missing}")
    return found


def summary(output: str) -> str:
    """The line that says how the mutant was caught: the emulator's report or the assert."""
    for marker in ("cudacpu:", "differ", "panicked", "error"):
        for line in output.splitlines():
            if marker in line:
                return line.strip()[:160]
    return output.strip().splitlines()[-1][:160] if output.strip() else "(no output)"


def main():
    mutants = tomllib.loads((ROOT / "kernels/mutants.toml").read_text())["mutants"]
    pick = [int(a) for a in sys.argv[1:]] or list(range(1, len(mutants) + 1))
    binaries = test_binaries(sorted({t.split("::")[0] for m in mutants for t in m["tests"]}))
    lib, include = nvrtc_env()
    out_dir = ROOT / "target/cudacpu-mutant"
    survived = []
    results = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="kvlab-mutant-") as scratch:
        for k in pick:
            m = mutants[k - 1]
            kernels = Path(scratch) / "kernels"
            shutil.rmtree(kernels, ignore_errors=True)
            shutil.copytree(ROOT / "kernels", kernels)
            target = kernels / m["file"]
            text = target.read_text()
            if text.count(m["find"]) != 1:
                sys.exit(f"kernel-mutants: mutant {k} ({m['file']}): `find` occurs "
                         f"{text.count(m['find'])} times, not once")
            target.write_text(text.replace(m["find"], m["replace"]))
            build = subprocess.run(["bash", "scripts/build-cudacpu.sh"], cwd=ROOT,
                                   capture_output=True, text=True,
                                   env={**os.environ, "CUDACPU_KERNELS": str(kernels),
                                        "CUDACPU_OUT": str(out_dir)})
            if build.returncode != 0:
                sys.exit(f"kernel-mutants: mutant {k} does not compile:\n{build.stderr}")
            env = {**os.environ, "LD_LIBRARY_PATH": f"{out_dir}:{lib}",
                   "CUDA_INCLUDE_DIR": include, "KVLAB_REQUIRE_GPU": "1",
                   "KVLAB_NO_TIMING": "1"}
            caught = None
            for test in m["tests"]:
                binary, _, name = test.partition("::")
                args = [binaries[binary]] + ([name, "--exact"] if name else [])
                try:
                    run = subprocess.run(args, cwd=ROOT, env=env, capture_output=True,
                                         text=True, timeout=600)
                except subprocess.TimeoutExpired:
                    caught = f"{test}: timed out"  # a hang is caught too, if not nicely
                    break
                if "running 0 tests" in run.stdout:
                    sys.exit(f"kernel-mutants: mutant {k}: no test is named {test}")
                if run.returncode != 0:
                    caught = f"{test}: {summary(run.stderr + run.stdout)}"
                    break
            results.append({"file": m["file"], "wrong": m["wrong"], "caught_by": caught})
            status = "caught" if caught else "SURVIVED"
            print(f"{k:2} {status:8} {m['file']}: {m['wrong']}")
            if caught:
                print(f"   -> {caught}")
            else:
                survived.append(k)
    print(f"{len(pick) - len(survived)} of {len(pick)} planted kernel bugs caught "
          f"in {time.time() - started:.0f} s")
    if os.environ.get("RECORD") == "1" and len(pick) == len(mutants):
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "kernels", "tools", "tests"],
                          cwd=ROOT).returncode != 0:
            commit += "+dirty"
        record = {"commit": commit, "date": time.strftime("%Y-%m-%d"),
                  "total": len(mutants), "caught": len(mutants) - len(survived),
                  "seconds": round(time.time() - started), "mutants": results}
        path = ROOT / "book/src/figures/data/kernel-mutants.json"
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")
    if survived:
        sys.exit(f"kernel-mutants: mutants {survived} survived: the tests miss these bugs")


if __name__ == "__main__":
    main()
