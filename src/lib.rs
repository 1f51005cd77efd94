//! kvlab: a Llama-family transformer, twice — a naive path that recomputes the whole
//! sequence for every token, and a KV-cached path — proven to give identical outputs.
//!
//! Reading order: [`textbook`] first (the whole of inference in one file, nothing
//! optimised: the engine's bits; [`learner`] runs it with the exercises' code), then the engine: [`ops`] (the kernels) → [`attention`] → [`cache`] (where K and V
//! live: [`cache::PreallocatedCache`] first, then growable, paged, prefix-shared) →
//! [`model`] (the forward pass) → [`generate`] (the loop and its timings) →
//! [`backend`] (which decoder runs where) → [`chat`] → [`batch`] (one pass over many
//! sequences) → [`engine`] (serving many requests: continuous batching, chunked
//! prefill). The experiments that measure all this are in [`lab`].
//!
//! **The library computes and returns `Serialize` reports; the binary prints.** Nothing
//! under `src/` outside `src/bin/` parses command lines or writes tables: the `kvlab`
//! binary (`src/bin/kvlab/`) turns arguments into calls, and each report into a text
//! table or, with `--json`, into JSON.

pub mod attention;
pub mod backend;
pub mod batch;
pub mod cache;
pub mod chat;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod engine;
pub mod error;
pub mod generate;
pub mod gguf;
pub mod kv_size;
pub mod lab;
pub mod learner;
pub mod limits;
pub mod loader;
pub mod mask;
pub mod model;
pub mod ops;
pub mod random_model;
pub mod rng;
pub mod sampler;
pub mod server;
pub mod simd;
pub mod speculative;
pub mod textbook;
pub mod tokenizer;
pub mod weights;

pub use config::Config;
pub use error::{Error, Result};
pub use model::Model;
