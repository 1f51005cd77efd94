//! `kvlab capacity`: how many requests fit in one memory budget, preallocated vs paged
//! (book: capacity.md: "the same GPU serves several more concurrent requests").
//!
//! A preallocating engine must reserve `prompt + max_new_tokens` positions per request
//! before decoding, because it cannot know when the model will stop. Most requests stop
//! well before `max_new_tokens`: the rest of the reservation is never written, and no
//! other request can use it (internal fragmentation, Kwon et al. 2023 §3 measured 60-80%
//! of KV memory wasted this way in earlier systems). A paged engine gives each request
//! blocks as it grows, so at its longest a request holds `ceil((prompt + output) /
//! block_size)` blocks: less than one block of waste.
//!
//! The experiment draws a seeded mix of requests, admits them in arrival order until the
//! budget is full, and counts: with preallocation by formula (checked equal to the real
//! allocation in `tests/kv_size.rs`), with paging by running the real block allocator
//! ([`PagedCache::counting_only`]) at every request's peak length.
//!
//! A model with local layers (Gemma 3) needs less: a local layer reads only its window.
//! Preallocated, its cache is a ring per local layer (`cache/hybrid.rs`); paged, each
//! layer group has its own block table and a local group's blocks go back as its window
//! slides (`cache/paged/groups.rs`). So a request is filled as an engine runs it, its
//! prompt in chunks and its output one token at a time, and the report adds the plain
//! twin, one block table for every layer, to show what the groups buy.

use crate::cache::hybrid::DEFAULT_PASS;
use crate::cache::paged::LayerGroups;
use crate::cache::{KvElement, KvStore, PagedCache};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::rng::Rng;
use serde::Serialize;

/// One request of the mix.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Request {
    pub prompt_len: usize,
    /// Tokens it really generates before stopping (at most max_new_tokens).
    pub output_len: usize,
}

/// A seeded mix: prompt lengths log-uniform in `[16, max_prompt]` (many short prompts,
/// a few long ones), output lengths uniform in `[1, max_new_tokens]`.
pub fn request_mix(n: usize, max_prompt: usize, max_new_tokens: usize, seed: u64) -> Vec<Request> {
    let mut rng = Rng::new(seed);
    let (lo, hi) = (16f64.ln(), (max_prompt.max(16) as f64).ln());
    (0..n)
        .map(|_| Request {
            prompt_len: (lo + (hi - lo) * rng.next_f32() as f64).exp().round() as usize,
            output_len: 1 + (rng.next_u64() % max_new_tokens.max(1) as u64) as usize,
        })
        .collect()
}

/// How one layout did with the budget.
#[derive(Debug, Clone, Serialize)]
pub struct Fit {
    /// Requests admitted, in arrival order, before the first that did not fit.
    pub requests: usize,
    /// Bytes those requests hold for themselves.
    pub bytes_reserved: usize,
    /// Bytes holding their tokens, at their longest.
    pub bytes_live: usize,
    /// `1 - live / reserved`: the share of the reservation never written.
    pub waste: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CapacityReport {
    pub budget_bytes: usize,
    /// What each cached value is (`--kv`): `full` (f32), `int8`, `int4-per-token`.
    pub kv: &'static str,
    pub bytes_per_token: usize,
    pub block_size: usize,
    pub max_new_tokens: usize,
    pub offered: usize,
    pub mean_prompt_len: f64,
    pub mean_output_len: f64,
    pub preallocated: Fit,
    pub paged: Fit,
    /// Paged requests / preallocated requests.
    pub gain: f64,
    /// Block tables per request (one per layer group: `cache/paged/groups.rs`).
    pub layer_groups: usize,
    /// For a model with local layers: paged with one block table for every layer (the
    /// plain twin of the groups, which keeps every local row).
    pub paged_one_table: Option<Fit>,
}

/// The most tokens one pass of a request's prompt brings (chunked prefill, as an engine
/// runs a long prompt): the most rows a local layer's table holds beyond its window.
pub const PREFILL_CHUNK: usize = 512;

// ANCHOR: capacity
/// Admits `requests` in order into `budget_bytes` of KV cache of `config`'s shape, each
/// value stored as `element` (f32, or int8 codes: about four times the positions).
pub fn capacity(
    config: &Config,
    element: KvElement,
    budget_bytes: usize,
    block_size: usize,
    max_new_tokens: usize,
    requests: &[Request],
) -> Result<CapacityReport> {
    let per_token = element.bytes_per_token(config);
    let groups = LayerGroups::of(config);
    // Bytes a request's last query reads: every position of a global layer, the window
    // of a local one.
    let row_bytes = per_token / config.num_hidden_layers.max(1);
    let live_bytes = |r: &Request| groups.rows_read(r.prompt_len + r.output_len) * row_bytes;
    // Preallocated: prompt + max_new_tokens each (a local layer: its ring), reserved
    // before the first token.
    let (mut n, mut reserved, mut live) = (0, 0, 0);
    for r in requests {
        let reserve = preallocated_slots(config, r.prompt_len + max_new_tokens) * row_bytes;
        if reserved + reserve > budget_bytes {
            break;
        }
        (n, reserved, live) = (n + 1, reserved + reserve, live + live_bytes(r));
    }
    let preallocated = fit(n, reserved, live);

    // Paged: the real allocator, each request run to its longest (prompt + output).
    let pool = PagedCache::counting_only(config, element, block_size, budget_bytes, false)?;
    let paged = paged_fit(pool, requests, live_bytes)?;
    let paged_one_table = match groups.is_hybrid() {
        true => {
            let pool = PagedCache::one_table_in_budget(config, element, block_size, budget_bytes)?;
            Some(paged_fit(pool, requests, live_bytes)?)
        }
        false => None,
    };
    // ANCHOR_END: capacity

    let count = requests.len().max(1) as f64;
    Ok(CapacityReport {
        budget_bytes,
        kv: element.name(),
        bytes_per_token: per_token,
        block_size,
        max_new_tokens,
        offered: requests.len(),
        mean_prompt_len: requests.iter().map(|r| r.prompt_len).sum::<usize>() as f64 / count,
        mean_output_len: requests.iter().map(|r| r.output_len).sum::<usize>() as f64 / count,
        gain: paged.requests as f64 / preallocated.requests.max(1) as f64,
        preallocated,
        paged,
        layer_groups: groups.len(),
        paged_one_table,
    })
}

// ANCHOR: paged_fit
/// Admits `requests` in order into `pool`, each run as an engine runs it: the prompt in
/// passes of at most [`PREFILL_CHUNK`] tokens, then its output one token per pass, so
/// that a window gives its blocks back as it slides. The first request that does not fit
/// is freed, and admission stops.
fn paged_fit(
    mut pool: PagedCache,
    requests: &[Request],
    live_bytes: impl Fn(&Request) -> usize,
) -> Result<Fit> {
    let (mut n, mut live) = (0, 0);
    for r in requests {
        let id = pool.add_sequence();
        let passes = chunks(r.prompt_len, PREFILL_CHUNK).chain(chunks(r.output_len, 1));
        let mut filled = Ok(());
        for pass in passes {
            let mut seq = pool.seq(id)?;
            filled = seq.prepare(&vec![0; pass]);
            if filled.is_err() {
                break;
            }
            seq.advance(pass);
        }
        match filled {
            Ok(()) => (n, live) = (n + 1, live + live_bytes(r)),
            Err(Error::BlockBudgetExhausted { .. }) => {
                pool.free(id)?;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(fit(n, pool.bytes_in_use(), live))
}
// ANCHOR_END: paged_fit

/// `len` tokens in passes of at most `most`.
fn chunks(len: usize, most: usize) -> impl Iterator<Item = usize> {
    (0..len.div_ceil(most)).map(move |i| most.min(len - i * most))
}

/// Positions a preallocated cache reserves over all layers for a request of `capacity`
/// positions: `capacity` per layer, or for a local layer its ring, `window - 1 +
/// DEFAULT_PASS` slots ([`crate::cache::HybridCache::new`]).
pub fn preallocated_slots(config: &Config, capacity: usize) -> usize {
    (0..config.num_hidden_layers)
        .map(|l| match config.layer_window(l) {
            Some(w) => (w - 1 + DEFAULT_PASS).min(capacity),
            None => capacity,
        })
        .sum()
}

fn fit(requests: usize, bytes_reserved: usize, bytes_live: usize) -> Fit {
    Fit {
        requests,
        bytes_reserved,
        bytes_live,
        waste: if bytes_reserved == 0 {
            0.0
        } else {
            1.0 - bytes_live as f64 / bytes_reserved as f64
        },
    }
}

/// `"1GiB"`, `"512MiB"`, `"2GB"`, `"1e9"` or plain bytes → bytes.
pub fn parse_bytes(text: &str) -> Result<usize> {
    let t = text.trim();
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => f64::NAN,
    };
    let value: f64 = number.trim().parse().unwrap_or(f64::NAN) * scale;
    if !value.is_finite() || value < 1.0 || value > (1u64 << 50) as f64 {
        return Err(Error::InvalidArgument(format!(
            "{text:?} is not a byte count: write e.g. 1073741824, 1GiB, 512MiB or 2GB"
        )));
    }
    Ok(value as usize)
}
