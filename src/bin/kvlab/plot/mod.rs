//! `kvlab plot`: draws the book's figures from the JSON that `scripts/figures.sh` saved,
//! and writes next to each `NAME.svg` its caption `NAME.md` (what is plotted, the key
//! numbers computed from the data, the exact commands, the machine, the date and the
//! commit), which the pages include under the image (`{{#include figures/NAME.md}}`).
//!
//! Drawing is the binary's business, with plotters (axes, ticks, legends, log scales):
//! the library only measures. One file per family of figures: `timing.rs` (bench,
//! compare, roofline), `memory.rs` (KV bytes, layouts, capacity, prefix, multi-turn),
//! `attention.rs` (the attention map and the attention sink), `speculative.rs` (speedup
//! and acceptance against the draft length), `batching.rs` (serving: throughput against
//! concurrency, the decode stall), `serving.rs` (the load test's stalls), `pareto.rs`
//! (every KV policy's accuracy against its bytes, and a window's flat step cost);
//! `chart.rs` is the shared
//! line chart.

mod attention;
mod batching;
pub mod chart;
pub mod data;
mod memory;
pub mod pareto;
mod serving;
mod speculative;
mod timing;

use chart::DrawResult;
use clap::Args;
use data::{field, Data};
use kvlab::error::{Error, Result};
pub use memory::trace_svg;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct PlotArgs {
    /// Folder holding the JSON (NAME.json or .jsonl), the commands (NAME.cmd) and run.json.
    #[arg(long, default_value = "book/src/figures/data")]
    pub data: PathBuf,
    /// Folder for NAME.svg and NAME.md.
    #[arg(long, default_value = "book/src/figures")]
    pub out: PathBuf,
    /// Figures to draw (default: all). See `kvlab plot --list`.
    pub figures: Vec<String>,
    /// List the figures and the data each one reads.
    #[arg(long)]
    pub list: bool,
}

/// One figure: its name, the data files it reads, and how it is drawn. `draw` returns
/// the SVG and the caption's middle (what is plotted and the numbers).
struct Figure {
    name: &'static str,
    inputs: &'static [&'static str],
    draw: fn(&Data) -> DrawResult<(String, String)>,
}

const FIGURES: &[Figure] = &[
    Figure {
        name: "ttft_vs_prompt",
        inputs: &["bench.json"],
        draw: timing::ttft_vs_prompt,
    },
    Figure {
        name: "step_vs_context",
        inputs: &["bench.json"],
        draw: timing::step_vs_context,
    },
    Figure {
        name: "roofline",
        inputs: &["bench.json"],
        draw: timing::roofline,
    },
    Figure {
        name: "long_context_step",
        inputs: &["long_context.json"],
        draw: timing::long_context_step,
    },
    Figure {
        name: "long_context_total",
        inputs: &["long_context.json"],
        draw: timing::long_context_total,
    },
    Figure {
        name: "tpot_context",
        inputs: &["tpot_context.jsonl"],
        draw: timing::tpot_context,
    },
    Figure {
        name: "cumulative_time",
        inputs: &["compare.json"],
        draw: timing::cumulative_time,
    },
    Figure {
        name: "kv_bytes",
        inputs: &["generate.json"],
        draw: memory::kv_bytes,
    },
    Figure {
        name: "cache_layouts",
        inputs: &["trace.json"],
        draw: memory::cache_layouts,
    },
    Figure {
        name: "kv_vs_weights",
        inputs: &["kv_vs_weights.jsonl"],
        draw: memory::kv_vs_weights,
    },
    Figure {
        name: "capacity",
        inputs: &["capacity.jsonl"],
        draw: memory::capacity,
    },
    Figure {
        name: "prefix_ttft",
        inputs: &["prefix.json"],
        draw: memory::prefix_ttft,
    },
    Figure {
        name: "multi_turn",
        inputs: &["chat_reuse.jsonl", "chat_no_reuse.jsonl"],
        draw: memory::multi_turn,
    },
    Figure {
        name: "attention_map",
        inputs: &["attention.json"],
        draw: attention::attention_map,
    },
    Figure {
        name: "attention_sink",
        inputs: &["attention.json"],
        draw: attention::attention_sink,
    },
    Figure {
        name: "eval_pareto",
        inputs: &["eval_pareto.jsonl"],
        draw: pareto::eval_pareto,
    },
    Figure {
        name: "evict_speed",
        inputs: &["eval_evict_speed.json"],
        draw: pareto::evict_speed,
    },
    Figure {
        name: "spec_sweep_fix_typos",
        inputs: &["spec_sweep_fix_typos.json"],
        draw: speculative::spec_sweep_fix_typos,
    },
    Figure {
        name: "spec_sweep_story",
        inputs: &["spec_sweep_story.json"],
        draw: speculative::spec_sweep_story,
    },
    Figure {
        name: "batch_throughput",
        inputs: &["batching.json"],
        draw: batching::batch_throughput,
    },
    Figure {
        name: "decode_stall",
        inputs: &["batching.json"],
        draw: batching::decode_stall,
    },
    Figure {
        name: "loadtest_stalls",
        inputs: &[
            "loadtest_continuous.json",
            "loadtest_continuous_chunked.json",
        ],
        draw: serving::loadtest_stalls,
    },
];

/// Where and when the data was measured, for every caption.
struct Run {
    machine: String,
    date: String,
    commit: String,
}

impl Run {
    fn read(data: &Data) -> DrawResult<Run> {
        let run = data.json("run.json")?;
        let text = |key: &str| -> DrawResult<String> {
            Ok(field(&run, key)?.as_str().unwrap_or("unknown").to_string())
        };
        // bench.json names the machine (CPU model and threads); the other reports are
        // measured by the same script on the same machine.
        let machine = data
            .json("bench.json")
            .ok()
            .and_then(|b| b.get("machine").and_then(Value::as_str).map(String::from))
            .unwrap_or_else(|| "an unnamed machine".into());
        Ok(Run {
            machine,
            date: text("date")?,
            commit: text("commit")?,
        })
    }
}

pub fn plot(args: PlotArgs) -> Result<()> {
    if args.list {
        for f in FIGURES {
            outln!("{:16} {}", f.name, f.inputs.join(", "));
        }
        return Ok(());
    }
    let chosen: Vec<&Figure> = if args.figures.is_empty() {
        FIGURES.iter().collect()
    } else {
        args.figures
            .iter()
            .map(|name| {
                FIGURES.iter().find(|f| f.name == name).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "no figure named {name:?}: see kvlab plot --list"
                    ))
                })
            })
            .collect::<Result<_>>()?
    };
    let data = Data {
        dir: args.data.clone(),
    };
    let run = Run::read(&data).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    std::fs::create_dir_all(&args.out).map_err(|e| Error::io(&args.out, e))?;
    for figure in chosen {
        let (svg, what) = (figure.draw)(&data)
            .map_err(|e| Error::InvalidArgument(format!("figure {}: {e}", figure.name)))?;
        let mut commands = Vec::new();
        for input in figure.inputs {
            commands.push(
                data.cmd(input)
                    .map_err(|e| Error::InvalidArgument(e.to_string()))?,
            );
        }
        let raw: Vec<String> = figure
            .inputs
            .iter()
            // Not a link: this file is included into pages one folder up, and a relative
            // link cannot be right both here and there.
            .map(|f| format!("`book/src/figures/data/{f}`"))
            .collect();
        let caption = format!(
            "*{what} Command{}: {}. Measured on {}, {}, kvlab {}; drawn by `kvlab plot {}`. Raw data: {}.*\n",
            if commands.len() > 1 || commands[0].contains(';') { "s" } else { "" },
            commands.join("; "),
            run.machine,
            run.date,
            run.commit,
            figure.name,
            raw.join(", "),
        );
        write(&args.out.join(format!("{}.svg", figure.name)), &svg)?;
        write(&args.out.join(format!("{}.md", figure.name)), &caption)?;
        outln!("wrote {}.svg and {}.md", figure.name, figure.name);
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}
