//! The element axis of a cache: what one stored key or value *is*, whatever the layout
//! that places it (book: kv-quantization.md, "Quantized blocks").
//!
//! A cache is three choices: a **layout** (`--cache`: where a position's row lives), an
//! **element** (f32, or int8/int4 codes with their scales: this file) and a **retention**
//! (every position, or a window, or H2O's heavy hitters: `policy.rs`). A layout needs
//! only one thing from an element to hold it: that a position's row can be stored and
//! read on its own, in any slot. Per-token quantization gives exactly that (each row
//! has its own scales), so a paged block of int8 rows is a paged block of f32 rows with
//! a different codec. KIVI's per-channel keys do not: a scale spans `group` positions
//! and the last, unfilled group waits in an f32 residual per sequence, which a pool of
//! blocks shared by many sequences has no place for.

use crate::cache::policy::KvPolicy;
use crate::cache::quant::{schemes, Scheme};
use crate::config::Config;
use crate::error::{Error, Result};

// ANCHOR: kv_element
/// What one stored key or value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvElement {
    /// f32, as the model computed it: the reference.
    #[default]
    F32,
    /// Codes and per-token scales (`--kv int8`, `--kv int4-per-token`): each position's
    /// row quantized on its own, so it fits any slot of any layout.
    PerToken { keys: Scheme, values: Scheme },
}
// ANCHOR_END: kv_element

impl KvElement {
    /// The element of `--kv policy` for the pool of `--cache layout`, or a one-line error
    /// saying why that pool cannot hold it.
    pub fn for_pool(config: &Config, policy: KvPolicy, layout: &str) -> Result<KvElement> {
        match policy {
            KvPolicy::Full => Ok(KvElement::F32),
            KvPolicy::Int8 | KvPolicy::Int4PerToken { .. } => {
                let (keys, values) = schemes(config, policy)?;
                Ok(KvElement::PerToken { keys, values })
            }
            KvPolicy::Int4Kivi { .. } => Err(Error::InvalidArgument(format!(
                "--kv int4 (KIVI) quantizes keys per channel over groups of positions and keeps the unfilled group in f32 per sequence, which a block of --cache {layout} cannot hold: use --kv int4-per-token or --kv int8 with --cache {layout}, or --cache preallocated with --kv int4"
            ))),
            KvPolicy::Window { .. } => Err(Error::InvalidArgument(format!(
                "--kv window evicts once per forward pass, so what a token sees depends on how its prompt was cut into passes, and a shared --cache {layout} pool (the engine, whose scheduler cuts prompts as the load allows) would change it: serve with --kv full, int8, int4-per-token or sliding (a window per query, the same for any cut); kvlab generate --cache {layout} --kv window runs one sequence in its own pool"
            ))),
            // A per-query window is a retention (`paged/retention.rs`) of blocks holding
            // its rows' codes: f32, int8 or int4 per token.
            KvPolicy::Sliding { codes, .. } => KvElement::for_pool(config, codes.policy(), layout),
            KvPolicy::H2o { .. } => Err(Error::InvalidArgument(format!(
                "--kv h2o evicts single rows anywhere by the attention they received, and a block of --cache {layout} goes back to the pool only when all its rows have gone (its choice also depends on how the prompt was cut into passes): use --cache preallocated with --kv h2o, or --kv sliding for a window the pool can serve"
            ))),
        }
    }

    /// Bytes of one position (K and V, every layer) stored as this element.
    pub fn bytes_per_token(self, config: &Config) -> usize {
        let kv_dim = config.n_kv_heads() * config.head_dim();
        self.bytes_per_token_of(config.num_hidden_layers, kv_dim)
    }

    /// [`KvElement::bytes_per_token`] of `n_layers` layers of `kv_dim` channels.
    pub fn bytes_per_token_of(self, n_layers: usize, kv_dim: usize) -> usize {
        let per_layer = match self {
            KvElement::F32 => 2 * kv_dim * size_of::<f32>(),
            KvElement::PerToken { keys, values } => {
                keys.bytes_per_position(kv_dim) + values.bytes_per_position(kv_dim)
            }
        };
        n_layers * per_layer
    }

    /// The `--kv` name of this element.
    pub fn name(self) -> &'static str {
        match self {
            KvElement::F32 => "full",
            KvElement::PerToken {
                keys: Scheme::Int8PerToken { .. },
                ..
            } => "int8",
            KvElement::PerToken { .. } => "int4-per-token",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn int8_blocks_cost_what_the_size_formula_says() {
        // SmolLM2-135M: 46 080 bytes per position in f32, 12 240 in int8 (kv_size.rs).
        let config = Config::smollm2_135m();
        let int8 = KvElement::for_pool(&config, KvPolicy::Int8, "paged").unwrap();
        assert_eq!(KvElement::F32.bytes_per_token(&config), 46_080);
        assert_eq!(int8.bytes_per_token(&config), 12_240);
        let int4 = KvElement::for_pool(&config, KvPolicy::Int4PerToken { group: 32 }, "paged");
        assert_eq!(int4.unwrap().bytes_per_token(&config), 8_640);
    }

    #[test]
    fn kivi_and_evicting_policies_are_refused_with_the_reason() {
        let config = Config::smollm2_135m();
        let kivi = KvElement::for_pool(&config, KvPolicy::Int4Kivi { group: 32 }, "paged");
        assert!(kivi.unwrap_err().to_string().contains("per channel"));
        let window = KvPolicy::Window {
            window: 64,
            sinks: 4,
        };
        let err = KvElement::for_pool(&config, window, "paged").unwrap_err();
        assert!(err.to_string().contains("evicts once per forward pass"));
        let h2o = KvPolicy::H2o {
            budget: 64,
            recent: 8,
        };
        let err = KvElement::for_pool(&config, h2o, "prefix").unwrap_err();
        assert!(err
            .to_string()
            .contains("--cache preallocated with --kv h2o"));
    }
}
