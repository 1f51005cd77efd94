//! kvlab: a Llama-family transformer, twice — a naive path that recomputes the whole
//! sequence for every token, and a KV-cached path — proven to give identical outputs.
//!
//! Reading order: [`ops`] (the kernels) → [`attention`] → [`kv_cache`] →
//! [`model`] (the forward pass) → [`generate`] (the loop and its timings) →
//! [`cache`] (where the cache lives: growable, paged, prefix-shared) → [`chat`].

pub mod attention;
pub mod bench;
pub mod cache;
pub mod chat;
pub mod compare;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod error;
pub mod generate;
pub mod gguf;
pub mod kv_cache;
pub mod kv_size;
pub mod loader;
pub mod model;
pub mod ops;
pub mod random_model;
pub mod rng;
pub mod roof;
pub mod sampler;
pub mod simd;
pub mod tokenizer;
pub mod weights;

pub use config::Config;
pub use error::{Error, Result};
pub use model::Model;
