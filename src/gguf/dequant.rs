//! Turning GGUF tensor bytes back into f32: dequantization.
//!
//! What this file teaches: a quantized tensor is a run of fixed-size *blocks*; each
//! block stores 32 small integers plus one or two f16 numbers that say how to map
//! them back to real values:
//!
//! ```text
//! Q8_0  [d: f16][q: 32 x i8]              x = d * q
//! Q4_0  [d: f16][16 bytes: 32 x u4]       x = d * (q - 8)
//! Q4_1  [d: f16][m: f16][16 bytes: 32 x u4]  x = d * q + m
//! ```
//!
//! The 4-bit formats pack two values per byte, and not in the obvious order: byte `j`
//! holds element `j` in its low nibble and element `j + 16` in its high nibble.
//!
//! The arithmetic copies llama.cpp's Python package (`gguf-py/gguf/quants.py`,
//! `gguf.dequantize`) operation for operation, in f32: `d` and `m` are widened from
//! f16 to f32 (exact), then `(d * q) + m` is computed as two separately rounded f32
//! operations (no fused multiply-add; Rust never fuses on its own). That makes the
//! imported weights bit-identical to the ones the reference logits were computed from.

use crate::gguf::dequant_k;
use crate::gguf::reader::GgmlType;
use half::{bf16, f16};

/// Elements per block of the 32-element formats (`QK4_0`, `QK4_1`, `QK8_0` in ggml).
pub const QK: usize = 32;

/// Dequantizes `n_elements` values of type `ty` from `bytes`.
///
/// Errors (as plain text, for the caller to wrap with the tensor name and path) when
/// the type is not one kvlab can dequantize, or when `bytes` has the wrong length.
pub fn dequantize(ty: GgmlType, bytes: &[u8], n_elements: usize) -> Result<Vec<f32>, String> {
    let expected = match (ty.block_size(), ty.type_size()) {
        (Some(block), Some(size)) if n_elements.is_multiple_of(block as usize) => {
            n_elements / block as usize * size as usize
        }
        _ => {
            return Err(format!(
                "{n_elements} elements of {ty} do not make whole blocks"
            ))
        }
    };
    if bytes.len() != expected {
        return Err(format!(
            "{n_elements} elements of {ty} take {expected} bytes, got {}",
            bytes.len()
        ));
    }
    let mut out = Vec::with_capacity(n_elements);
    match ty {
        GgmlType::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        GgmlType::F16 => out.extend(bytes.chunks_exact(2).map(|b| read_f16(b[0], b[1]))),
        // bf16 is the top half of an f32, so widening is a 16-bit shift (exact).
        GgmlType::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        ),
        GgmlType::Q8_0 => {
            for block in bytes.chunks_exact(2 + QK) {
                dequantize_q8_0_block(block, &mut out);
            }
        }
        GgmlType::Q4_0 => {
            for block in bytes.chunks_exact(2 + QK / 2) {
                dequantize_q4_0_block(block, &mut out);
            }
        }
        GgmlType::Q4_1 => {
            for block in bytes.chunks_exact(2 + 2 + QK / 2) {
                dequantize_q4_1_block(block, &mut out);
            }
        }
        GgmlType::Q5_0 => {
            for block in bytes.chunks_exact(2 + 4 + QK / 2) {
                dequant_k::dequantize_q5_0_block(block, &mut out);
            }
        }
        GgmlType::Q4_K => {
            for block in bytes.chunks_exact(144) {
                dequant_k::dequantize_q4_k_block(block, &mut out);
            }
        }
        GgmlType::Q6_K => {
            for block in bytes.chunks_exact(210) {
                dequant_k::dequantize_q6_k_block(block, &mut out);
            }
        }
        other => {
            return Err(format!(
                "{other} is not supported: kvlab's importer dequantizes F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K \
                 (re-quantize the model to one of these, e.g. with llama.cpp's llama-quantize)"
            ))
        }
    }
    Ok(out)
}

/// An IEEE half-precision number, little-endian, widened to f32 (exact).
fn read_f16(lo: u8, hi: u8) -> f32 {
    f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

// ANCHOR: dequant_blocks
/// Q8_0: 2 bytes of f16 scale `d`, then 32 signed bytes. `x = q * d`.
pub fn dequantize_q8_0_block(block: &[u8], out: &mut Vec<f32>) {
    let d = read_f16(block[0], block[1]);
    out.extend(block[2..2 + QK].iter().map(|&q| (q as i8) as f32 * d));
}

/// Q4_0: f16 scale `d`, then 16 bytes of 4-bit values stored with an offset of 8.
/// `x = d * (q - 8)`: the offset makes the 16 levels -8..=7, symmetric around zero.
pub fn dequantize_q4_0_block(block: &[u8], out: &mut Vec<f32>) {
    let d = read_f16(block[0], block[1]);
    let qs = &block[2..2 + QK / 2];
    // First all the low nibbles (elements 0..16), then all the high ones (16..32).
    out.extend(qs.iter().map(|&b| d * ((b & 0x0F) as i32 - 8) as f32));
    out.extend(qs.iter().map(|&b| d * ((b >> 4) as i32 - 8) as f32));
}

/// Q4_1: f16 scale `d`, f16 minimum `m`, then 16 bytes of unsigned 4-bit values.
/// `x = d * q + m`: the 16 levels span [m, m + 15 d], fitted to the block's range.
pub fn dequantize_q4_1_block(block: &[u8], out: &mut Vec<f32>) {
    let d = read_f16(block[0], block[1]);
    let m = read_f16(block[2], block[3]);
    let qs = &block[4..4 + QK / 2];
    // Two roundings, as numpy does: (d * q) first, then + m.
    out.extend(qs.iter().map(|&b| d * (b & 0x0F) as f32 + m));
    out.extend(qs.iter().map(|&b| d * (b >> 4) as f32 + m));
}
// ANCHOR_END: dequant_blocks

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_block() {
        // d = 0.5 (f16 0x3800), q = 0, 1, -1, 2, -2, ...
        let mut block = vec![0x00, 0x38];
        block.extend((0..32).map(|i: i32| {
            let q = if i % 2 == 1 { (i + 1) / 2 } else { -(i / 2) };
            q as i8 as u8
        }));
        let x = dequantize(GgmlType::Q8_0, &block, 32).unwrap();
        assert_eq!(x[0], 0.0);
        assert_eq!(x[1], 0.5);
        assert_eq!(x[2], -0.5);
        assert_eq!(x[31], 8.0);
    }

    #[test]
    fn unsupported_type_is_named() {
        let err = dequantize(GgmlType(13), &[0; 176], 256).unwrap_err();
        assert!(err.contains("Q5_K"), "{err}");
    }

    #[test]
    fn wrong_length_is_an_error() {
        assert!(dequantize(GgmlType::Q4_1, &[0; 19], 32).is_err());
        assert!(dequantize(GgmlType::Q4_1, &[0; 20], 31).is_err());
    }
}
