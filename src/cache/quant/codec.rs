//! Quantize a run of f32 values to int8 or int4 codes and back (book: kv-quantization.md).
//!
//! - **int8, symmetric**: `scale = max|x| / 127`, `q = round(x / scale)` in -127..=127,
//!   `x' = q · scale`. Zero maps to zero; 255 levels.
//! - **int4, asymmetric** (KIVI's, Liu et al. 2024, §3.1): `min` and `max` of the run,
//!   `scale = (max - min) / 15`, `q = round((x - min) / scale)` in 0..=15,
//!   `x' = q · scale + min`. 16 levels spread over the run's own range.
//!
//! Rounding to the nearest level is off by at most half a step (`scale / 2`) per element,
//! plus the f32 rounding of one division and one multiply-add (`tests/quant.rs` checks
//! this bound). Every reader of the cache dequantizes with [`dequantize_i8`] /
//! [`dequantize_u4`] and nothing else, so a quantized cache and an f32 cache holding the
//! dequantized values (the fake-quantized twin, `fake.rs`) give the same bits.

// ANCHOR: int8
/// Quantizes `x` to int8 codes (same length), symmetric around zero; returns the scale.
pub fn quantize_i8(x: &[f32], codes: &mut [i8]) -> f32 {
    let abs_max = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = abs_max / 127.0;
    for (code, &v) in codes.iter_mut().zip(x) {
        // scale == 0 means the whole run is 0: code 0 (0/0 would be NaN).
        let level = if scale > 0.0 {
            (v / scale).round()
        } else {
            0.0
        };
        *code = level.clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// The value code `q` of scale `scale` stands for.
#[inline(always)]
pub fn dequantize_i8(q: i8, scale: f32) -> f32 {
    q as f32 * scale
}
// ANCHOR_END: int8

// ANCHOR: int4
/// Quantizes `x` to int4 codes (0..=15, one per byte here; packed by the cache) over
/// the run's own range; returns `(scale, min)`.
pub fn quantize_u4(x: &[f32], codes: &mut [u8]) -> (f32, f32) {
    let min = x.iter().fold(f32::INFINITY, |m, &v| m.min(v));
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let scale = (max - min) / 15.0;
    for (code, &v) in codes.iter_mut().zip(x) {
        let level = if scale > 0.0 {
            ((v - min) / scale).round()
        } else {
            0.0
        };
        *code = level.clamp(0.0, 15.0) as u8;
    }
    (scale, min)
}

/// The value code `q` of `(scale, min)` stands for (one fused multiply-add).
#[inline(always)]
pub fn dequantize_u4(q: u8, scale: f32, min: f32) -> f32 {
    (q as f32).mul_add(scale, min)
}
// ANCHOR_END: int4

/// `x` replaced by what its int8 codes stand for: quantize, then dequantize, in f32.
pub fn fake_quantize_i8(x: &mut [f32]) {
    let mut codes = vec![0i8; x.len()];
    let scale = quantize_i8(x, &mut codes);
    for (v, &q) in x.iter_mut().zip(&codes) {
        *v = dequantize_i8(q, scale);
    }
}

/// `x` replaced by what its int4 codes stand for.
pub fn fake_quantize_u4(x: &mut [f32]) {
    let mut codes = vec![0u8; x.len()];
    let (scale, min) = quantize_u4(x, &mut codes);
    for (v, &q) in x.iter_mut().zip(&codes) {
        *v = dequantize_u4(q, scale, min);
    }
}

/// Two int4 codes per byte: code `2i` in the low nibble of byte `i`, code `2i + 1` in the high.
pub fn pack_u4(codes: &[u8], packed: &mut [u8]) {
    for (byte, pair) in packed.iter_mut().zip(codes.chunks(2)) {
        *byte = pair[0] | pair.get(1).map_or(0, |&hi| hi << 4);
    }
}
