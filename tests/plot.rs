//! `kvlab plot` draws figures and captions from tiny JSON fixtures (tests/fixtures/plot),
//! so the plotting code runs in CI without the long measurements of scripts/figures.sh.

use std::process::{Command, Output};

fn plot(args: &[&str], out: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvlab"))
        .arg("plot")
        .args(["--data", "tests/fixtures/plot", "--out"])
        .arg(out)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the kvlab binary runs")
}

#[test]
fn plot_draws_svgs_and_captions_from_the_fixtures() {
    let dir = tempfile::tempdir().unwrap();
    let figures = [
        "ttft_vs_prompt",
        "step_vs_context",
        "roofline",
        "capacity",
        "kv_vs_weights",
        "long_context_step",
        "long_context_total",
        "tpot_context",
        "attention_map",
        "attention_sink",
        "spec_sweep_story",
        "batch_throughput",
        "decode_stall",
        "loadtest_stalls",
        "eval_pareto",
        "evict_speed",
    ];
    let out = plot(&figures, dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in figures {
        let svg = std::fs::read_to_string(dir.path().join(format!("{name}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{name}"
        );
        let caption = std::fs::read_to_string(dir.path().join(format!("{name}.md"))).unwrap();
        // One paragraph naming the machine, the date, the commit and the command.
        assert_eq!(caption.trim().lines().count(), 1, "{caption}");
        for needle in ["Test CPU, 2 threads", "2026-01-01", "abc1234", "`kvlab "] {
            assert!(
                caption.contains(needle),
                "{name}: no {needle:?} in {caption}"
            );
        }
    }
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    // Both models' lines, each with its layers and its own step times.
    let tpot = read("tpot_context.md");
    assert!(
        tpot.contains("smollm2-135m-instruct (0 of 30 layers local)")
            && tpot.contains("gemma-3-270m (15 of 18 layers local)"),
        "{tpot}"
    );
    // The load test's stalls: each policy's figures from its own report.
    let stalls = read("loadtest_stalls.md");
    assert!(
        stalls.contains("continuous: inter-token p50 40 ms, p99 900 ms")
            && stalls.contains("continuous-chunked: inter-token p50 45 ms, p99 300 ms"),
        "{stalls}"
    );
    // Numbers come from the data: 150 ms at 16 tokens to 800 ms at 256.
    assert!(read("ttft_vs_prompt.md").contains("from 150 ms at 16 tokens to 800 ms at 256"));
    // The ridge point: 150 GFLOP/s / 26.7 GB/s = 5.6 FLOP/byte, on a log axis.
    assert!(
        read("roofline.md").contains("I = 5.6 FLOP/byte"),
        "{}",
        read("roofline.md")
    );
    assert!(read("roofline.svg").contains("arithmetic intensity"));
    // Two budgets: both commands named; the fixture's upper triangle is all zero.
    assert!(read("capacity.md").contains("--budget 128MiB"));
    // The paged/preallocated ratio has its own panel: log-log axes hide a 1.5x gap.
    assert!(read("capacity.svg").contains("paged / preallocated"));
    // The roof on a log axis, so every concurrency's roof is on the page.
    assert!(read("batch_throughput.svg").contains("log scale"));
    assert!(read("attention_map.md").contains("0 of 3 such cells are not 0"));
    assert!(read("attention_map.svg").contains("cat"));
    // Each drafter's best measured speedup, at its k, with α and the prediction there;
    // measured and predicted both drawn, for both drafters.
    let spec = read("spec_sweep_story.md");
    assert!(
        spec.contains("ngram:3: best 1.75x at k = 4 (α = 0.25, predicted 1.90x)")
            && spec.contains("bf16: best 0.70x at k = 4 (α = 0.80, predicted 0.80x)")
            && spec.contains("--prompt-file prompts/story.txt"),
        "{spec}"
    );
    // Every policy with its bytes and accuracy; the legend names each family once.
    let pareto = read("eval_pareto.md");
    assert!(
        pareto.contains("window-w32-s4 1.00 MiB (25 %): perplexity 12.00, top-1 80.0 %")
            && pareto.contains("Full cache perplexity 10.00"),
        "{pareto}"
    );
    assert_eq!(read("eval_pareto.svg").matches("H2O").count(), 2);
    let speed = read("evict_speed.md");
    assert!(
        speed.contains("full: 10.0 ms (100.0 tokens/s, 70 rows) at 64, 20.0 ms")
            && speed.contains("window-w32-s4: 9.0 ms (111.1 tokens/s, 32 rows) at 64"),
        "{speed}"
    );
    let svg = read("spec_sweep_story.svg");
    for needle in [
        "ngram:3 measured",
        "ngram:3 predicted",
        "bf16 predicted",
        "acceptance rate",
    ] {
        assert!(svg.contains(needle), "no {needle:?} in the SVG");
    }
}

#[test]
fn plot_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let out = plot(&["prefix_ttft"], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("prefix.json") && stderr.contains("figures.sh"),
        "{stderr}"
    );
    let out = plot(&["no_such_figure"], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("kvlab plot --list") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
