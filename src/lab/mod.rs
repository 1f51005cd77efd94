//! The experiments: code that *measures* the engine, kept apart from the engine itself.
//! Each file is one experiment behind one `kvlab` command; each returns a `Serialize`
//! report and prints nothing (the `kvlab` binary prints the tables, or `--json`).
//!
//! | file | command | chapter |
//! |---|---|---|
//! | [`compare`] | `kvlab compare`, `kvlab demo` | naive-vs-cached.md |
//! | [`against_engine`] | `kvlab compare --impl textbook, learner` | forward-pass.md |
//! | [`bench`] | `kvlab bench` (CPU) | prefill-decode.md, roofline.md |
//! | `gpu_bench` | `kvlab bench --device cuda` (`--features cuda`) | roofline.md |
//! | [`roof`] (+ [`peak`]) | `kvlab bench` (the roofs and each point's intensity) | roofline.md |
//! | [`attention_map`] | `kvlab attention-map` | attention.md |
//! | [`trace`] | `kvlab trace` | cache-layouts.md |
//! | [`capacity`] | `kvlab capacity` | capacity.md |
//! | [`shared_prompt`] | `kvlab prefix` | prefix-caching.md |
//! | [`speculative`] | `kvlab compare --speculative` | speculative.md |
//! | [`verify_cost`] | `kvlab bench-verify` | speculative.md |
//! | [`spec_sweep`] | `kvlab spec-sweep` | speculative.md |
//! | [`cache_bench`] | `kvlab bench-cache` | paged-attention.md, prefix-caching.md |
//! | [`gqa`] | `kvlab gqa` | gqa.md |
//! | [`eval`] | `kvlab eval`, `kvlab eval-table` | kv-quantization.md, eviction.md |
//! | [`eval_weights`] | `kvlab eval --dtype` | weight-formats.md, making-decode-fast.md |
//! | [`evict_speed`] | `kvlab evict-speed` | eviction.md |
//! | [`kv_bench`] | `kvlab bench-kv` | kv-quantization.md |
//! | [`batching`] | `kvlab bench-batch` | scheduling.md |
//! | [`engine_speculation`] | `kvlab bench-batch --speculative` | speculative.md |
//! | [`disagg`] | `kvlab bench-disagg` | serving.md |
//! | [`replays`] | `kvlab record` | live-view.md |
//!
//! [`timing`] holds what they share: medians, `ms_since`, the synthetic prompt.

pub mod against_engine;
pub mod attention_map;
pub mod batching;
pub mod bench;
pub mod cache_bench;
pub mod capacity;
pub mod compare;
pub mod disagg;
pub mod engine_load;
pub mod engine_speculation;
pub mod eval;
pub mod eval_weights;
pub mod evict_speed;
#[cfg(feature = "cuda")]
pub mod gpu_bench;
pub mod gqa;
pub mod kv_bench;
pub mod kv_fill;
pub mod long_context;
pub mod peak;
pub mod replays;
pub mod roof;
pub mod shared_prompt;
pub mod spec_sweep;
pub mod speculative;
pub mod timing;
pub mod tpot_context;
pub mod trace;
pub mod verify_cost;
