//! # Exercise 22 — int8 quantization of a KV cache row
//!
//! The KV缓存 (KV cache) stores every key and value in f32: 4 bytes a number, 46 080 bytes
//! per token for SmolLM2. Stored as **int8** codes, each number takes 1 byte, plus one f32
//! *scale* per run of numbers that share it (here: one token's one KV head, `head_dim`
//! values). Symmetric int8 quantization:
//!
//! ```text
//! scale = max |x| / 127          the largest magnitude lands on the last level
//! q     = round(x / scale)        an integer in -127..=127
//! x'    = q * scale               what attention reads back
//! ```
//!
//! Rounding to the nearest level is off by at most half a step, `scale / 2`, per number;
//! that rounding is everything the quantized cache changes (`kvlab eval --kv int8`
//! measures what it does to the model's predictions).
//!
//! kvlab: `src/cache/quant/codec.rs` (`quantize_i8`, `dequantize_i8`), book chapter
//! "KV cache quantization".

/// The int8 codes of `x` and their scale.
pub fn quantize(x: &[f32]) -> (Vec<i8>, f32) {
    let abs_max = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = abs_max / 127.0;
    // An all-zero run has scale 0: every code is 0 (0 / 0 would be NaN).
    let codes = x
        .iter()
        .map(|&v| {
            let level = if scale > 0.0 {
                (v / scale).round()
            } else {
                0.0
            };
            level.clamp(-127.0, 127.0) as i8
        })
        .collect();
    (codes, scale)
}

/// Given: the values the codes stand for.
pub fn dequantize(codes: &[i8], scale: f32) -> Vec<f32> {
    codes.iter().map(|&q| q as f32 * scale).collect()
}

/// Bytes one token adds to an int8 cache: K and V, every layer, every KV head: the codes
/// and one f32 scale per head.
pub fn int8_bytes_per_token(layers: usize, kv_heads: usize, head_dim: usize) -> usize {
    2 * layers * kv_heads * (head_dim + 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Vec<f32> {
        (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 31.3) * 0.07)
            .collect()
    }

    #[test]
    fn every_number_is_within_half_a_step() {
        let x = run();
        let (codes, scale) = quantize(&x);
        assert_eq!(codes.len(), x.len());
        let back = dequantize(&codes, scale);
        for (v, b) in x.iter().zip(&back) {
            assert!(
                (v - b).abs() <= 0.5 * scale * 1.0001,
                "{v} came back as {b}: more than half a step ({scale} / 2) off"
            );
        }
    }

    #[test]
    fn the_largest_magnitude_uses_the_last_level() {
        let x = [0.5f32, -2.54, 1.0, 0.0];
        let (codes, scale) = quantize(&x);
        assert!((scale - 0.02).abs() < 1e-6, "scale {scale}: max |x| / 127");
        assert_eq!(codes, vec![25, -127, 50, 0]);
        let back = dequantize(&codes, scale);
        assert!((back[1] + 2.54).abs() < 1e-5, "{}", back[1]);
    }

    #[test]
    fn positive_and_negative_share_one_symmetric_scale() {
        let (codes, scale) = quantize(&[-3.0, 1.0]);
        assert!((scale - 3.0 / 127.0).abs() < 1e-7);
        assert_eq!(codes, vec![-127, 42]);
    }

    #[test]
    fn zeros_stay_zeros() {
        let (codes, scale) = quantize(&[0.0; 8]);
        assert_eq!(codes, vec![0; 8]);
        assert_eq!(dequantize(&codes, scale), vec![0.0; 8]);
        assert!(!scale.is_nan());
    }

    #[test]
    fn smollm2_int8_cache_is_about_a_quarter() {
        // 30 layers, 3 KV heads of 64: f32 is 2 x 30 x 192 x 4 = 46 080 bytes per token.
        assert_eq!(int8_bytes_per_token(30, 3, 64), 12_240);
        assert_eq!(int8_bytes_per_token(1, 1, 4), 16);
    }
}
