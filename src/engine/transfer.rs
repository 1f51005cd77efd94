//! Prefill/decode disaggregation: one engine prefills, ships a request's finished KV
//! rows, another decodes it (DistServe, Zhong et al. 2024; Splitwise, Patel et al. 2024).
//! Book: serving.md, "Disaggregation".
//!
//! A request's state after prefill is small and explicit: its prompt, the first token
//! sampled, and the K and V of every prompt position in every layer, as the pool stores
//! them (`cache/paged/row_io.rs`). That is what a [`KvTransfer`] holds and what goes over
//! the wire: per prompt token `2 x n_layers x kv_dim x 4` bytes from an f32 pool, about a
//! quarter of that from an int8 one (`--kv int8`: codes and scales travel as they are).
//! The decode engine writes the rows into blocks of its own pool, which must store the
//! same element, and the request carries on as if it had been prefilled there: the same
//! stored bits, so the same logits, bit for bit (the twin test is `tests/disagg.rs`).
//!
//! This file knows the rows and the pool, not the engine: the engine's `Role`, and its
//! `Engine::import` (which admits a transfer as a running request), are in `engine.rs`.

use super::request::{Request, SamplingParams};
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
    /// What the rows are, by the pool's `--kv` name: `full` (f32), `int8`,
    /// `int4-per-token`. The decode engine's pool must store the same.
    pub element: String,
    /// Bytes of one position of one layer, K then V, as stored (f32: `2 x kv_dim x 4`).
    pub row_bytes: usize,
    /// Per layer, `[prompt.len(), row_bytes]`: the stored rows in position order.
    pub rows: Vec<Vec<u8>>,
}
// ANCHOR_END: kv_transfer

/// "KVT2": the format's name and version, first in every transfer (KVT1 carried f32 only).
const MAGIC: [u8; 4] = *b"KVT2";
/// Magic, seven u32, two f32, one u64.
pub const HEADER_BYTES: usize = 4 + 7 * 4 + 2 * 4 + 8;
/// The longest element name a transfer may carry.
const MAX_ELEMENT_NAME: usize = 64;

impl KvTransfer {
    pub fn n_layers(&self) -> usize {
        self.rows.len()
    }

    // ANCHOR: to_bytes
    /// The wire format, little-endian: a 48-byte header (magic; seven u32: n_layers,
    /// row_bytes, prompt len, first token, max_tokens, number of stop ids, length of the
    /// element's name; temperature and top_p as f32; seed as u64), the element's name
    /// (UTF-8), the prompt and stop ids (u32 each), then per layer its stored rows:
    /// `n_layers x len x row_bytes` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let payload = self.n_layers() * self.prompt.len() * self.row_bytes;
        let ids = 4 * (self.prompt.len() + self.stop_ids.len());
        let mut out = Vec::with_capacity(HEADER_BYTES + self.element.len() + ids + payload);
        out.extend_from_slice(&MAGIC);
        for x in [
            self.n_layers(),
            self.row_bytes,
            self.prompt.len(),
            self.first_token as usize,
            self.max_tokens,
            self.stop_ids.len(),
            self.element.len(),
        ] {
            out.extend_from_slice(&(x as u32).to_le_bytes());
        }
        out.extend_from_slice(&self.sampling.temperature.to_le_bytes());
        out.extend_from_slice(&self.sampling.top_p.to_le_bytes());
        out.extend_from_slice(&self.sampling.seed.to_le_bytes());
        out.extend_from_slice(self.element.as_bytes());
        for id in self.prompt.iter().chain(&self.stop_ids) {
            out.extend_from_slice(&id.to_le_bytes());
        }
        for rows in &self.rows {
            out.extend_from_slice(rows);
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
            return Err(bad(
                "it does not start with KVT2 (not a kvlab KV transfer of this version)",
            ));
        }
        let mut header = [0usize; 7];
        for h in &mut header {
            *h = r.u32()? as usize;
        }
        let [n_layers, row_bytes, len, first_token, max_tokens, n_stop, name_len] = header;
        // An empty prompt or zero-width rows would make the payload 0 bytes whatever
        // n_layers claims: refused before n_layers sizes anything.
        if len == 0 || row_bytes == 0 || n_layers == 0 {
            return Err(bad(&format!(
                "{n_layers} layers x {len} positions x {row_bytes} bytes: none may be 0"
            )));
        }
        if name_len == 0 || name_len > MAX_ELEMENT_NAME {
            return Err(bad(&format!(
                "an element name of {name_len} bytes (1 to {MAX_ELEMENT_NAME})"
            )));
        }
        let temperature = f32::from_le_bytes(r.array()?);
        let top_p = f32::from_le_bytes(r.array()?);
        let seed = u64::from_le_bytes(r.array()?);
        let element = std::str::from_utf8(r.take(name_len)?)
            .map_err(|_| bad("the element's name is not UTF-8"))?
            .to_string();
        let prompt = r.u32s(len)?;
        let stop_ids = r.u32s(n_stop)?;
        let layer_bytes = len
            .checked_mul(row_bytes)
            .ok_or_else(|| bad("prompt length x row bytes overflows"))?;
        let needed = layer_bytes
            .checked_mul(n_layers)
            .ok_or_else(|| bad("the KV payload's size overflows"))?;
        if r.left() != needed {
            return Err(bad(&format!(
                "the header says {n_layers} layers x {len} positions x {row_bytes} bytes = {needed} bytes of KV but {} follow (truncated?)",
                r.left()
            )));
        }
        let mut rows = Vec::with_capacity(n_layers);
        for _ in 0..n_layers {
            rows.push(r.take(layer_bytes)?.to_vec());
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
            element,
            row_bytes,
            rows,
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
}

impl KvTransfer {
    // ANCHOR: export
    /// Sequence `seq_id`'s finished prefill of `request`: every layer's rows for positions
    /// `0..prompt.len()` as the pool stores them, read through its block table, and
    /// `first_token`.
    pub fn from_cache(
        cache: &PagedCache,
        seq_id: SeqId,
        request: &Request,
        first_token: u32,
        config: &Config,
    ) -> Result<KvTransfer> {
        let len = request.prompt.len();
        let rows = (0..config.num_hidden_layers)
            .map(|layer| cache.export_rows(seq_id, layer, len))
            .collect::<Result<_>>()?;
        Ok(KvTransfer {
            prompt: request.prompt.clone(),
            first_token,
            max_tokens: request.max_tokens,
            sampling: request.sampling,
            stop_ids: request.stop_ids.clone(),
            element: cache.pool().element().name().to_string(),
            row_bytes: cache.row_bytes(),
            rows,
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

    /// Whether these rows can be decoded by a model of `config` from `cache`'s pool: a
    /// one-line error if not.
    pub fn check_fits(&self, config: &Config, cache: &PagedCache) -> Result<()> {
        let len = self.prompt.len();
        let invalid = |why: String| Err(Error::InvalidArgument(why));
        if self.n_layers() != config.num_hidden_layers {
            return invalid(format!(
                "the KV transfer has {} layers but this model has {}: prefill and decode engines must run the same model",
                self.n_layers(), config.num_hidden_layers
            ));
        }
        let element = cache.pool().element().name();
        if self.element != element || self.row_bytes != cache.row_bytes() {
            return invalid(format!(
                "the KV transfer carries --kv {} rows of {} bytes, and this engine's pool stores --kv {element} rows of {}: run both engines with the same model and --kv",
                self.element, self.row_bytes, cache.row_bytes()
            ));
        }
        if self
            .rows
            .iter()
            .any(|rows| rows.len() != len * self.row_bytes)
        {
            return invalid(format!(
                "the KV transfer's rows are not [{len} positions, {} bytes] in every layer",
                self.row_bytes
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
    /// layer's stored rows written into them as they are. On failure the blocks go back
    /// to the pool.
    pub fn write_into(&self, cache: &mut PagedCache) -> Result<SeqId> {
        let seq_id = cache.add_sequence();
        let written = (|| {
            cache.seq(seq_id)?.prepare(&self.prompt)?;
            for (layer, rows) in self.rows.iter().enumerate() {
                cache.import_rows(seq_id, layer, rows)?;
            }
            cache.seq(seq_id)?.advance(self.prompt.len());
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
