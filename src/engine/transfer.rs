//! Prefill/decode disaggregation: one engine prefills, ships a request's finished KV
//! rows, another decodes it (DistServe, Zhong et al. 2024; Splitwise, Patel et al. 2024).
//! Book: serving.md, "Disaggregation".
//!
//! A request's state after prefill is small and explicit: its prompt, the first token
//! sampled, and the K and V of every prompt position in every layer. That is what a
//! [`KvTransfer`] holds and what goes over the wire, `2 x n_layers x kv_dim x 4` bytes
//! per prompt token (f32). The decode engine writes the rows into blocks of its own pool
//! and the request carries on as if it had been prefilled there: the same rows, so the
//! same logits, bit for bit (the twin test is `tests/disagg.rs`).
//!
//! This file knows the rows and the pool, not the engine: the engine's `Role`, and its
//! `Engine::import` (which admits a transfer as a running request), are in `engine.rs`.

use super::request::{Request, SamplingParams};
use crate::cache::rows::KvRows;
use crate::cache::view::KvView;
use crate::cache::{KvStore, PagedCache, SeqId};
use crate::config::Config;
use crate::error::{Error, Result};

// ANCHOR: kv_transfer
/// A request whose prefill is done: what a decode engine needs to carry on.
#[derive(Debug, Clone, PartialEq)]
pub struct KvTransfer {
    pub prompt: Vec<u32>,
    /// Sampled by the prefill engine from the last prompt position's logits.
    pub first_token: u32,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop_ids: Vec<u32>,
    /// K and V width of one position in one layer: `n_kv_heads x head_dim`.
    pub kv_dim: usize,
    /// Per layer, `[prompt.len(), kv_dim]` row-major.
    pub k: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
}
// ANCHOR_END: kv_transfer

/// "KVT1": the format's name and version, first in every transfer.
const MAGIC: [u8; 4] = *b"KVT1";
/// Magic, six u32, two f32, one u64.
pub const HEADER_BYTES: usize = 4 + 6 * 4 + 2 * 4 + 8;

impl KvTransfer {
    pub fn n_layers(&self) -> usize {
        self.k.len()
    }

    // ANCHOR: to_bytes
    /// The wire format, little-endian: a 44-byte header (magic; six u32: n_layers,
    /// kv_dim, prompt len, first token, max_tokens, number of stop ids; temperature and
    /// top_p as f32; seed as u64), the prompt and stop ids (u32 each), then per layer
    /// its K rows, then its V rows (f32): `2 x n_layers x len x kv_dim x 4` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let payload = 2 * self.n_layers() * self.prompt.len() * self.kv_dim * 4;
        let mut out = Vec::with_capacity(HEADER_BYTES + 4 * self.prompt.len() + payload);
        out.extend_from_slice(&MAGIC);
        for x in [
            self.n_layers(),
            self.kv_dim,
            self.prompt.len(),
            self.first_token as usize,
            self.max_tokens,
            self.stop_ids.len(),
        ] {
            out.extend_from_slice(&(x as u32).to_le_bytes());
        }
        out.extend_from_slice(&self.sampling.temperature.to_le_bytes());
        out.extend_from_slice(&self.sampling.top_p.to_le_bytes());
        out.extend_from_slice(&self.sampling.seed.to_le_bytes());
        for id in self.prompt.iter().chain(&self.stop_ids) {
            out.extend_from_slice(&id.to_le_bytes());
        }
        for (k, v) in self.k.iter().zip(&self.v) {
            for x in k.iter().chain(v) {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        out
    }
    // ANCHOR_END: to_bytes

    /// Parses [`KvTransfer::to_bytes`]'s format. Every size is checked against the bytes
    /// actually there before anything is allocated: a truncated or forged header is a
    /// one-line error, never a panic or a huge allocation.
    pub fn from_bytes(bytes: &[u8]) -> Result<KvTransfer> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)? != MAGIC {
            return Err(bad("it does not start with KVT1 (not a kvlab KV transfer)"));
        }
        let mut header = [0usize; 6];
        for h in &mut header {
            *h = r.u32()? as usize;
        }
        let [n_layers, kv_dim, len, first_token, max_tokens, n_stop] = header;
        // An empty prompt or zero-width rows would make the payload 0 bytes whatever
        // n_layers claims: refused before n_layers sizes anything.
        if len == 0 || kv_dim == 0 || n_layers == 0 {
            return Err(bad(&format!(
                "{n_layers} layers x {len} positions x {kv_dim} floats: none may be 0"
            )));
        }
        let temperature = f32::from_le_bytes(r.array()?);
        let top_p = f32::from_le_bytes(r.array()?);
        let seed = u64::from_le_bytes(r.array()?);
        let prompt = r.u32s(len)?;
        let stop_ids = r.u32s(n_stop)?;
        let layer_floats = len
            .checked_mul(kv_dim)
            .ok_or_else(|| bad("prompt length x kv_dim overflows"))?;
        let needed = layer_floats
            .checked_mul(2 * 4)
            .and_then(|b| b.checked_mul(n_layers))
            .ok_or_else(|| bad("the KV payload's size overflows"))?;
        if r.left() != needed {
            return Err(bad(&format!(
                "the header says {n_layers} layers x {len} positions x {kv_dim} floats x 2 (K, V) = {needed} bytes of KV but {} follow (truncated?)",
                r.left()
            )));
        }
        let (mut k, mut v) = (Vec::with_capacity(n_layers), Vec::with_capacity(n_layers));
        for _ in 0..n_layers {
            k.push(r.f32s(layer_floats)?);
            v.push(r.f32s(layer_floats)?);
        }
        Ok(KvTransfer {
            prompt,
            first_token: first_token as u32,
            max_tokens,
            sampling: SamplingParams {
                temperature,
                top_p,
                seed,
            },
            stop_ids,
            kv_dim,
            k,
            v,
        })
    }
}

fn bad(why: &str) -> Error {
    Error::InvalidArgument(format!(
        "malformed KV transfer: {why}; send what KvTransfer::to_bytes wrote"
    ))
}

/// A cursor over the bytes that refuses to read past their end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(bad(&format!(
                "{n} more bytes expected at offset {} but only {} are left (truncated)",
                self.at,
                self.left()
            )));
        }
        self.at += n;
        Ok(&self.bytes[self.at - n..self.at])
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u32s(&mut self, n: usize) -> Result<Vec<u32>> {
        let bytes = self.take(n.checked_mul(4).ok_or_else(|| bad("a count overflows"))?)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
            .collect())
    }
    fn f32s(&mut self, n: usize) -> Result<Vec<f32>> {
        let bytes = self.take(n.checked_mul(4).ok_or_else(|| bad("a count overflows"))?)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4")))
            .collect())
    }
}

impl KvTransfer {
    // ANCHOR: export
    /// Sequence `seq_id`'s finished prefill of `request`: every layer's K and V for
    /// positions `0..prompt.len()`, read through its block table, and `first_token`.
    pub fn from_cache(
        cache: &PagedCache,
        seq_id: SeqId,
        request: &Request,
        first_token: u32,
        config: &Config,
    ) -> Result<KvTransfer> {
        let len = request.prompt.len();
        let n_layers = config.num_hidden_layers;
        let (mut k, mut v) = (Vec::with_capacity(n_layers), Vec::with_capacity(n_layers));
        for layer in 0..n_layers {
            let KvView::Paged(rows) = cache.read_seq(seq_id, layer, len) else {
                return Err(Error::InvalidArgument(format!(
                    "a KV transfer carries f32 rows, and this engine's pool stores --kv {} codes (sending codes and scales is not built): disaggregate with --kv full",
                    cache.pool().element().name()
                )));
            };
            k.push((0..len).flat_map(|j| rows.key(j).iter().copied()).collect());
            v.push(
                (0..len)
                    .flat_map(|j| rows.value(j).iter().copied())
                    .collect(),
            );
        }
        Ok(KvTransfer {
            prompt: request.prompt.clone(),
            first_token,
            max_tokens: request.max_tokens,
            sampling: request.sampling,
            stop_ids: request.stop_ids.clone(),
            kv_dim: config.n_kv_heads() * config.head_dim(),
            k,
            v,
        })
    }
    // ANCHOR_END: export

    /// The request the transfer carries on.
    pub fn request(&self) -> Request {
        Request {
            prompt: self.prompt.clone(),
            max_tokens: self.max_tokens,
            sampling: self.sampling,
            stop_ids: self.stop_ids.clone(),
        }
    }

    /// Whether these rows can be decoded by a model of `config`: a one-line error if not.
    pub fn check_fits(&self, config: &Config) -> Result<()> {
        let (len, kv_dim) = (self.prompt.len(), config.n_kv_heads() * config.head_dim());
        let invalid = |why: String| Err(Error::InvalidArgument(why));
        if self.n_layers() != config.num_hidden_layers || self.kv_dim != kv_dim {
            return invalid(format!(
                "the KV transfer has {} layers of width {} but this model has {} of width {kv_dim}: prefill and decode engines must run the same model",
                self.n_layers(), self.kv_dim, config.num_hidden_layers
            ));
        }
        if self
            .k
            .iter()
            .chain(&self.v)
            .any(|rows| rows.len() != len * kv_dim)
        {
            return invalid(format!(
                "the KV transfer's rows are not [{len} positions, {kv_dim}] in every layer"
            ));
        }
        if self.max_tokens < 2 {
            return invalid(format!(
                "the KV transfer's max_tokens is {}: its one token came with it, nothing is left to decode",
                self.max_tokens
            ));
        }
        if (self.first_token as usize) >= config.vocab_size {
            return invalid(format!(
                "the first token {} is outside the vocabulary ({})",
                self.first_token, config.vocab_size
            ));
        }
        Ok(())
    }

    // ANCHOR: import
    /// A new sequence of `cache` holding these rows: blocks for the prompt, every
    /// layer's K and V written into them. On failure the blocks go back to the pool.
    pub fn write_into(&self, cache: &mut PagedCache) -> Result<SeqId> {
        let seq_id = cache.add_sequence();
        let written = (|| {
            let mut store = cache.seq(seq_id)?;
            store.prepare(&self.prompt)?;
            for (layer, (k, v)) in self.k.iter().zip(&self.v).enumerate() {
                store.write(layer, k, v)?;
            }
            store.advance(self.prompt.len());
            Ok(())
        })();
        match written {
            Ok(()) => Ok(seq_id),
            Err(e) => {
                cache.free(seq_id)?;
                Err(e)
            }
        }
    }
    // ANCHOR_END: import
}
