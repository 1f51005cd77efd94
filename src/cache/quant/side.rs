//! One side of a quantized cache, K or V: its codes, its scales, and how one head's run of
//! position `j` is dequantized for attention (book: kv-quantization.md).
//!
//! Two ways to share a scale (KIVI, Liu et al. 2024, §3):
//!
//! ```text
//! per token:    one scale per position per `group` channels     ─── rows ───▶
//!               [pos 0: c0..c31 | c32..c63 | ...]               quantized as they come
//! per channel:  one scale per channel per `group` positions      │ columns
//!               [c0: pos 0..31] [c1: pos 0..31] ...              ▼ quantized when the
//!                                                                   group has filled
//! ```
//!
//! Keys have a few *outlier channels* (large in every token, Liu et al. 2024 Fig. 2):
//! a per-token scale is set by the outlier and crushes the other channels to a few
//! levels; a per-channel scale gives each channel its own range. A per-channel group
//! needs `group` positions before it can be quantized: until then they wait in an f32
//! *residual* of `group` rows.

use super::codec::{dequantize_i8, dequantize_u4, pack_u4, quantize_i8, quantize_u4};
use crate::cache::buffer::zeroed_buffer;
use crate::error::Result;

/// How one side's values share scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// int8, symmetric, one scale per position per `group` channels.
    Int8PerToken { group: usize },
    /// int4, one (scale, min) per position per `group` channels.
    Int4PerToken { group: usize },
    /// int4, one (scale, min) per channel per `group` positions; the unfilled group in f32.
    Int4PerChannel { group: usize },
}

impl Scheme {
    pub fn group(self) -> usize {
        match self {
            Scheme::Int8PerToken { group }
            | Scheme::Int4PerToken { group }
            | Scheme::Int4PerChannel { group } => group,
        }
    }

    /// Bytes of one position's codes in one layer.
    fn code_bytes(self, kv_dim: usize) -> usize {
        match self {
            Scheme::Int8PerToken { .. } => kv_dim,
            Scheme::Int4PerToken { .. } | Scheme::Int4PerChannel { .. } => kv_dim / 2,
        }
    }

    /// Bytes of one position in one layer, its share of the scales included (for a
    /// per-channel scheme, a share of its group's: `1 / group` of them).
    pub fn bytes_per_position(self, kv_dim: usize) -> usize {
        let scale_bytes = kv_dim * self.floats_per_group() * size_of::<f32>() / self.group();
        self.code_bytes(kv_dim) + scale_bytes
    }

    /// True when each position's row has scales of its own: it can be stored in any slot,
    /// alone (a paged block, `cache/element.rs`).
    pub fn is_per_token(self) -> bool {
        !matches!(self, Scheme::Int4PerChannel { .. })
    }

    /// f32s per scale group: a scale, and for int4 a zero point (`min`).
    fn floats_per_group(self) -> usize {
        match self {
            Scheme::Int8PerToken { .. } => 1,
            Scheme::Int4PerToken { .. } | Scheme::Int4PerChannel { .. } => 2,
        }
    }
}

// ANCHOR: side
/// K or V of every layer, quantized by `scheme`.
pub struct Side {
    scheme: Scheme,
    n_layers: usize,
    capacity: usize,
    kv_dim: usize,
    /// `[n_layers, capacity, code_bytes]`: int8 codes (as bytes), or two int4 codes a byte.
    codes: Vec<u8>,
    /// Per token: `[n_layers, capacity, kv_dim / group, floats_per_group]` (scale, min);
    /// per channel: `[n_layers, capacity / group, floats_per_group, kv_dim]` (scales, mins).
    scales: Vec<f32>,
    /// Per channel only: `[n_layers, group, kv_dim]`, the positions of the unfilled group.
    residual: Vec<f32>,
}
// ANCHOR_END: side

/// A zeroed byte buffer of `dims` (multiplied, checked), or an error naming the cache.
fn zeroed_codes(dims: &[usize]) -> Result<Vec<u8>> {
    let too_big = || crate::error::Error::OutOfMemory {
        what: "the quantized KV cache".into(),
        bytes: dims.iter().fold(1u128, |a, &d| a.saturating_mul(d as u128)),
    };
    let len = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(too_big)?;
    let mut codes = Vec::new();
    codes.try_reserve_exact(len).map_err(|_| too_big())?;
    codes.resize(len, 0);
    Ok(codes)
}

impl Side {
    pub fn new(scheme: Scheme, n_layers: usize, capacity: usize, kv_dim: usize) -> Result<Side> {
        let group = scheme.group();
        let fpg = scheme.floats_per_group();
        let what = "the quantized KV cache";
        let (scales, residual) = match scheme {
            Scheme::Int4PerChannel { .. } => (
                zeroed_buffer(what, &[n_layers, capacity / group, kv_dim, fpg])?,
                zeroed_buffer(what, &[n_layers, group, kv_dim])?,
            ),
            _ => (
                zeroed_buffer(what, &[n_layers, capacity, kv_dim / group, fpg])?,
                Vec::new(),
            ),
        };
        Ok(Side {
            codes: zeroed_codes(&[n_layers, capacity, scheme.code_bytes(kv_dim)])?,
            scales,
            residual,
            scheme,
            n_layers,
            capacity,
            kv_dim,
        })
    }

    /// Bytes reserved: codes, scales, residual.
    pub fn bytes_reserved(&self) -> usize {
        self.codes.len() + (self.scales.len() + self.residual.len()) * size_of::<f32>()
    }

    /// Bytes (all layers) that hold `len` live positions: the codes and scales of every quantized
    /// position, and (per channel) the f32 rows still waiting in the residual.
    pub fn bytes_used(&self, len: usize) -> usize {
        let kv_dim = self.kv_dim;
        let (group, fpg) = (self.scheme.group(), self.scheme.floats_per_group());
        let float = size_of::<f32>();
        self.n_layers
            * match self.scheme {
                Scheme::Int4PerChannel { .. } => {
                    let full = len / group;
                    full * group * self.scheme.code_bytes(kv_dim)
                        + full * kv_dim * fpg * float
                        + (len - full * group) * kv_dim * float
                }
                _ => len * (self.scheme.code_bytes(kv_dim) + kv_dim / group * fpg * float),
            }
    }

    // ANCHOR: write
    /// Quantizes layer `layer`'s rows `[n, kv_dim]` of positions `start..start + n`.
    pub fn write(&mut self, layer: usize, start: usize, rows: &[f32]) {
        let kv_dim = self.kv_dim;
        let group = self.scheme.group();
        for (i, row) in rows.chunks_exact(kv_dim).enumerate() {
            let pos = start + i;
            match self.scheme {
                Scheme::Int4PerChannel { .. } => {
                    // Wait in f32 until the group is full, then quantize it column by column.
                    let slot = (layer * group + pos % group) * kv_dim;
                    self.residual[slot..slot + kv_dim].copy_from_slice(row);
                    if pos % group == group - 1 {
                        self.quantize_channel_group(layer, pos / group);
                    }
                }
                _ => self.quantize_row(layer, pos, row),
            }
        }
    }

    /// Per token: each `group` channels of the row get their own scale.
    fn quantize_row(&mut self, layer: usize, pos: usize, row: &[f32]) {
        let (kv_dim, group) = (self.kv_dim, self.scheme.group());
        let fpg = self.scheme.floats_per_group();
        let row_index = layer * self.capacity + pos;
        let code_bytes = self.scheme.code_bytes(kv_dim);
        let codes = &mut self.codes[row_index * code_bytes..][..code_bytes];
        let scales = &mut self.scales[row_index * (kv_dim / group) * fpg..][..kv_dim / group * fpg];
        match self.scheme {
            Scheme::Int8PerToken { .. } => {
                let mut q = vec![0i8; group];
                for ((x, out), scale) in row
                    .chunks_exact(group)
                    .zip(codes.chunks_exact_mut(group))
                    .zip(scales)
                {
                    *scale = quantize_i8(x, &mut q);
                    for (o, &c) in out.iter_mut().zip(&q) {
                        *o = c as u8; // the i8's bits; read back with `as i8`
                    }
                }
            }
            _ => {
                let mut q = vec![0u8; kv_dim];
                for ((x, out), scale_min) in row
                    .chunks_exact(group)
                    .zip(q.chunks_exact_mut(group))
                    .zip(scales.chunks_exact_mut(2))
                {
                    let (scale, min) = quantize_u4(x, out);
                    scale_min.copy_from_slice(&[scale, min]);
                }
                pack_u4(&q, codes);
            }
        }
    }
    // ANCHOR_END: write

    // ANCHOR: per_channel
    /// Per channel: the residual's `group` positions are full; channel `c` of group `g`
    /// gets one (scale, min) over its `group` values, and the residual is free again.
    fn quantize_channel_group(&mut self, layer: usize, g: usize) {
        let (kv_dim, group) = (self.kv_dim, self.scheme.group());
        let residual = &self.residual[layer * group * kv_dim..][..group * kv_dim]; // [group, kv_dim]
        let mut column = vec![0.0f32; group];
        let mut q = vec![0u8; group * kv_dim]; // [group, kv_dim], unpacked
        let mut q_column = vec![0u8; group];
        let scales =
            &mut self.scales[(layer * (self.capacity / group) + g) * kv_dim * 2..][..kv_dim * 2];
        for c in 0..kv_dim {
            for (t, x) in column.iter_mut().enumerate() {
                *x = residual[t * kv_dim + c];
            }
            // The group's scales are `[kv_dim]`, then its mins `[kv_dim]`: each read as one run.
            (scales[c], scales[kv_dim + c]) = quantize_u4(&column, &mut q_column);
            for (t, &code) in q_column.iter().enumerate() {
                q[t * kv_dim + c] = code;
            }
        }
        let code_bytes = kv_dim / 2;
        for (t, row) in q.chunks_exact(kv_dim).enumerate() {
            let at = (layer * self.capacity + g * group + t) * code_bytes;
            pack_u4(row, &mut self.codes[at..at + code_bytes]);
        }
    }
    // ANCHOR_END: per_channel

    /// Copies slots `from..from + n` to `to..to + n` in every layer, codes and scales: a
    /// paged block's copy-on-write. Per-token schemes only (a slot is a whole row there).
    pub fn copy_rows(&mut self, from: usize, to: usize, n: usize) -> usize {
        debug_assert!(self.scheme.is_per_token());
        let code_bytes = self.scheme.code_bytes(self.kv_dim);
        let row_scales = self.kv_dim / self.scheme.group() * self.scheme.floats_per_group();
        for layer in 0..self.n_layers {
            let (src, dst) = (layer * self.capacity + from, layer * self.capacity + to);
            self.codes
                .copy_within(src * code_bytes..(src + n) * code_bytes, dst * code_bytes);
            self.scales
                .copy_within(src * row_scales..(src + n) * row_scales, dst * row_scales);
        }
        self.n_layers * n * (code_bytes + row_scales * size_of::<f32>())
    }

    /// Appends the stored bytes of slots `from..from + n` in every layer (codes, then the
    /// scales' bits) to `out`: what a check compares to see that nothing wrote there.
    pub fn image(&self, from: usize, n: usize, out: &mut Vec<u8>) {
        debug_assert!(self.scheme.is_per_token());
        let code_bytes = self.scheme.code_bytes(self.kv_dim);
        let row_scales = self.kv_dim / self.scheme.group() * self.scheme.floats_per_group();
        for layer in 0..self.n_layers {
            let slot = layer * self.capacity + from;
            out.extend_from_slice(&self.codes[slot * code_bytes..(slot + n) * code_bytes]);
            let scales = &self.scales[slot * row_scales..(slot + n) * row_scales];
            out.extend(scales.iter().flat_map(|x| x.to_le_bytes()));
        }
    }

    /// Bytes of one slot of one layer: its codes, then its scales. Per-token schemes only.
    pub fn slot_len(&self) -> usize {
        let row_scales = self.kv_dim / self.scheme.group() * self.scheme.floats_per_group();
        self.scheme.code_bytes(self.kv_dim) + row_scales * size_of::<f32>()
    }

    /// Appends slot `slot` of layer `layer` as stored (codes, then the scales' bits): one
    /// position as a KV transfer carries it (`engine/transfer.rs`). Per-token only.
    pub fn slot_bytes(&self, layer: usize, slot: usize, out: &mut Vec<u8>) {
        debug_assert!(self.scheme.is_per_token());
        let code_bytes = self.scheme.code_bytes(self.kv_dim);
        let row_scales = self.kv_dim / self.scheme.group() * self.scheme.floats_per_group();
        let at = layer * self.capacity + slot;
        out.extend_from_slice(&self.codes[at * code_bytes..(at + 1) * code_bytes]);
        let scales = &self.scales[at * row_scales..(at + 1) * row_scales];
        out.extend(scales.iter().flat_map(|x| x.to_le_bytes()));
    }

    /// Stores what [`Side::slot_bytes`] gave (`bytes`: [`Side::slot_len`] of them) into slot
    /// `slot` of layer `layer`: the codes and scales as they were, never quantized again.
    pub fn set_slot_bytes(&mut self, layer: usize, slot: usize, bytes: &[u8]) {
        debug_assert!(self.scheme.is_per_token() && bytes.len() == self.slot_len());
        let code_bytes = self.scheme.code_bytes(self.kv_dim);
        let row_scales = self.kv_dim / self.scheme.group() * self.scheme.floats_per_group();
        let at = layer * self.capacity + slot;
        let (codes, scales) = bytes.split_at(code_bytes);
        self.codes[at * code_bytes..(at + 1) * code_bytes].copy_from_slice(codes);
        let dst = &mut self.scales[at * row_scales..(at + 1) * row_scales];
        for (d, b) in dst.iter_mut().zip(scales.chunks_exact(4)) {
            *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }

    /// Forgets positions `new_len..` of a cache holding `old_len`. Per channel, a cut into a
    /// group already quantized puts its kept positions back into the residual, dequantized
    /// (the f32 originals are gone): the fake-quantized twin holds the same values there.
    pub fn truncate(&mut self, old_len: usize, new_len: usize) {
        let Scheme::Int4PerChannel { group } = self.scheme else {
            return;
        };
        let g = new_len / group;
        if new_len.is_multiple_of(group) || (g + 1) * group > old_len {
            return; // the cut group is still in the residual, or there is none
        }
        let kv_dim = self.kv_dim;
        let mut buf = vec![0.0f32; kv_dim];
        for layer in 0..self.n_layers {
            for t in 0..new_len % group {
                self.rows(layer, old_len)
                    .dequantize(g * group + t, 0, kv_dim, &mut buf);
                let slot = (layer * group + t) * kv_dim;
                self.residual[slot..slot + kv_dim].copy_from_slice(&buf);
            }
        }
    }

    /// Layer `layer` for attention over positions `0..end`.
    pub fn rows(&self, layer: usize, end: usize) -> SideRows<'_> {
        let (kv_dim, group) = (self.kv_dim, self.scheme.group());
        let code_bytes = self.scheme.code_bytes(kv_dim);
        let layer_scales = self.scales.len() / self.n_layers.max(1);
        SideRows {
            scheme: self.scheme,
            kv_dim,
            codes: &self.codes[layer * self.capacity * code_bytes..][..self.capacity * code_bytes],
            scales: &self.scales[layer * layer_scales..][..layer_scales],
            residual: match self.scheme {
                Scheme::Int4PerChannel { .. } => {
                    &self.residual[layer * group * kv_dim..][..group * kv_dim]
                }
                _ => &[],
            },
            quantized_end: end / group * group,
        }
    }
}

// ANCHOR: side_rows
/// One layer of one side, as attention reads it.
#[derive(Clone, Copy)]
pub struct SideRows<'a> {
    scheme: Scheme,
    kv_dim: usize,
    /// `[capacity, code_bytes]`
    codes: &'a [u8],
    scales: &'a [f32],
    /// Per channel: `[group, kv_dim]`, positions `quantized_end..` (modulo `group`).
    residual: &'a [f32],
    /// Per channel: positions below this are quantized, the rest are in the residual.
    quantized_end: usize,
}

impl SideRows<'_> {
    /// Channels `c0..c0 + width` of position `j`, dequantized into `out[..width]`.
    /// `c0` and `width` are multiples of the group (a head's run, or a whole row), so each
    /// chunk of `group` channels has one scale.
    #[inline]
    pub fn dequantize(&self, j: usize, c0: usize, width: usize, out: &mut [f32]) {
        let kv_dim = self.kv_dim;
        let out = &mut out[..width];
        match self.scheme {
            Scheme::Int8PerToken { group } => {
                debug_assert!(c0.is_multiple_of(group) && width.is_multiple_of(group));
                let codes = &self.codes[j * kv_dim + c0..][..width];
                let scales = &self.scales[j * (kv_dim / group) + c0 / group..];
                for ((o, q), &scale) in out
                    .chunks_exact_mut(group)
                    .zip(codes.chunks_exact(group))
                    .zip(scales)
                {
                    for (o, &q) in o.iter_mut().zip(q) {
                        *o = dequantize_i8(q as i8, scale);
                    }
                }
            }
            Scheme::Int4PerToken { group } => {
                debug_assert!(c0.is_multiple_of(group) && width.is_multiple_of(group));
                let codes = &self.codes[j * kv_dim / 2..][..kv_dim / 2];
                let scales = &self.scales[(j * (kv_dim / group) + c0 / group) * 2..];
                for (g, (o, scale_min)) in out
                    .chunks_exact_mut(group)
                    .zip(scales.chunks_exact(2))
                    .enumerate()
                {
                    let (scale, min) = (scale_min[0], scale_min[1]);
                    let first = c0 + g * group;
                    if group.is_multiple_of(2) {
                        // Whole bytes: two codes each, one scale (the loop the compiler vectorizes).
                        let bytes = &codes[first / 2..][..group / 2];
                        for (pair, &byte) in o.chunks_exact_mut(2).zip(bytes) {
                            pair[0] = dequantize_u4(byte & 0x0f, scale, min);
                            pair[1] = dequantize_u4(byte >> 4, scale, min);
                        }
                    } else {
                        for (i, o) in o.iter_mut().enumerate() {
                            *o = dequantize_u4(nibble(codes, first + i), scale, min);
                        }
                    }
                }
            }
            Scheme::Int4PerChannel { group } => {
                if j >= self.quantized_end {
                    let row = &self.residual[(j % group) * kv_dim..][..kv_dim];
                    out.copy_from_slice(&row[c0..c0 + width]);
                    return;
                }
                // c0 and width are even (head_dim is): whole bytes, two channels each.
                let bytes = &self.codes[(j * kv_dim + c0) / 2..][..width / 2];
                let group_scales = &self.scales[(j / group) * kv_dim * 2..][..kv_dim * 2];
                let (scales, mins) = group_scales.split_at(kv_dim);
                let (scales, mins) = (&scales[c0..c0 + width], &mins[c0..c0 + width]);
                for (((pair, &byte), s), m) in out
                    .chunks_exact_mut(2)
                    .zip(bytes)
                    .zip(scales.chunks_exact(2))
                    .zip(mins.chunks_exact(2))
                {
                    pair[0] = dequantize_u4(byte & 0x0f, s[0], m[0]);
                    pair[1] = dequantize_u4(byte >> 4, s[1], m[1]);
                }
            }
        }
    }
}

/// Int4 code `c` of a packed row: low nibble for even `c`, high for odd.
#[inline(always)]
fn nibble(codes: &[u8], c: usize) -> u8 {
    (codes[c / 2] >> ((c % 2) * 4)) & 0x0f
}
// ANCHOR_END: side_rows
