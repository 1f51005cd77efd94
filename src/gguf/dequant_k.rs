//! The formats Gemma 3 270M's GGUF adds: Q5_0 and the "k-quants" Q4_K and Q6_K.
//!
//! Q5_0 is Q4_0 with a fifth bit: the high bits of the 32 values sit in one u32.
//! The k-quants group 256 values into a *super-block* with one f16 scale (and, for Q4_K,
//! one f16 minimum), and give each sub-block its own small integer scale relative to it,
//! so that a scale costs 6 or 8 bits instead of 16:
//!
//! ```text
//! Q5_0  [d: f16][qh: u32][qs: 16 B]                      x = d * (q - 16),  q = 5 bits
//! Q4_K  [d: f16][dmin: f16][scales: 12 B][qs: 128 B]     8 sub-blocks of 32:
//!                                                         x = (d * sc_j) * q - (dmin * m_j)
//! Q6_K  [ql: 128 B][qh: 64 B][scales: 16 x i8][d: f16]   16 sub-blocks of 16:
//!                                                         x = (d * sc_j) * (q - 32), q = 6 bits
//! ```
//!
//! As in `dequant.rs`, the arithmetic copies gguf-py (`gguf/quants.py`, `Q5_0`, `Q4_K`,
//! `Q6_K`, `dequantize_blocks`) operation for operation, in f32: the sub-block's scale is
//! one rounded product (`d * sc_j`), the value another, the minimum is subtracted last.
//! The bit layouts are gguf-py's reshapes written as index arithmetic; the fixture test
//! in `tests/gguf.rs` checks every value against gguf-py's own output, bit for bit.

use half::f16;

/// Values per k-quant super-block (`QK_K` in ggml).
pub const QK_K: usize = 256;

fn read_f16(lo: u8, hi: u8) -> f32 {
    f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32()
}

/// Q5_0: `d`, then the 32 high bits in a little-endian u32, then 16 bytes of low nibbles
/// (element `j` in byte `j % 16`, low nibble for `j < 16`, high nibble after).
pub fn dequantize_q5_0_block(block: &[u8], out: &mut Vec<f32>) {
    let d = read_f16(block[0], block[1]);
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let qs = &block[6..22];
    out.extend((0..32).map(|j| {
        let low = if j < 16 {
            qs[j] & 0x0F
        } else {
            qs[j - 16] >> 4
        };
        let high = ((qh >> j) & 1) as u8;
        d * (((low | (high << 4)) as i8 - 16) as f32)
    }));
}

/// Q4_K's 12 bytes of sub-block scales and minimums, 6 bits each:
///
/// ```text
/// bytes 0-3:  [sc_j+4 high 2 bits | sc_j  6 bits]   j = 0..4
/// bytes 4-7:  [m_j+4  high 2 bits | m_j   6 bits]
/// bytes 8-11: [m_j+4  low 4 bits  | sc_j+4 low 4 bits]
/// ```
fn q4_k_scales(scales: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut min) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        let (d, m, m_d) = (scales[j], scales[4 + j], scales[8 + j]);
        sc[j] = d & 0x3F;
        min[j] = m & 0x3F;
        sc[4 + j] = (m_d & 0x0F) | ((d >> 2) & 0x30);
        min[4 + j] = (m_d >> 4) | ((m >> 2) & 0x30);
    }
    (sc, min)
}

/// Q4_K: 8 sub-blocks of 32. Sub-block `2g` is the low nibbles of bytes `32g..32g+32`,
/// sub-block `2g + 1` their high nibbles.
pub fn dequantize_q4_k_block(block: &[u8], out: &mut Vec<f32>) {
    let d = read_f16(block[0], block[1]);
    let dmin = read_f16(block[2], block[3]);
    let (sc, min) = q4_k_scales(&block[4..16]);
    let qs = &block[16..144];
    for sub in 0..8 {
        let scale = d * sc[sub] as f32;
        let offset = dmin * min[sub] as f32;
        let bytes = &qs[(sub / 2) * 32..(sub / 2) * 32 + 32];
        let shift = 4 * (sub % 2);
        out.extend(
            bytes
                .iter()
                .map(|&b| scale * ((b >> shift) & 0x0F) as f32 - offset),
        );
    }
}

/// Q6_K: the low 4 bits of value `e` are in `ql`, its high 2 bits in `qh`; each half of
/// the block (128 values) uses 64 bytes of `ql` (low nibbles, then high nibbles) and 32
/// bytes of `qh` (bits 0-1, 2-3, 4-5, 6-7 for its four runs of 32).
pub fn dequantize_q6_k_block(block: &[u8], out: &mut Vec<f32>) {
    let (ql, qh, scales) = (&block[0..128], &block[128..192], &block[192..208]);
    let d = read_f16(block[208], block[209]);
    out.extend((0..QK_K).map(|e| {
        let (half, within) = (e / 128, e % 128);
        let low = (ql[half * 64 + within % 64] >> (4 * (within / 64))) & 0x0F;
        let high = (qh[half * 32 + within % 32] >> (2 * (within / 32))) & 0x03;
        let q = (low | (high << 4)) as i8 - 32;
        let scale = d * scales[e / 16] as i8 as f32;
        scale * q as f32
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q5_0_uses_the_fifth_bit() {
        // d = 1.0 (f16 0x3C00); all low nibbles 0; high bit set for element 0 and 31.
        let mut block = vec![0x00, 0x3C];
        block.extend((1u32 | (1 << 31)).to_le_bytes());
        block.extend([0u8; 16]);
        let mut x = Vec::new();
        dequantize_q5_0_block(&block, &mut x);
        assert_eq!((x[0], x[1], x[31]), (0.0, -16.0, 0.0));
    }

    #[test]
    fn q4_k_scales_unpack_six_bits() {
        // sc_0 = 63, sc_4 = 0b11_0101 from byte 0's top bits and byte 8's low nibble.
        let mut s = [0u8; 12];
        s[0] = 0b1111_1111;
        s[8] = 0b0000_0101;
        let (sc, min) = q4_k_scales(&s);
        assert_eq!((sc[0], sc[4], min[4]), (63, 0b11_0101, 0));
    }

    #[test]
    fn q6_k_one_value_in_each_half() {
        let mut block = vec![0u8; 210];
        block[208..210].copy_from_slice(&[0x00, 0x3C]); // d = 1
        block[192..208].fill(1); // every sub-block scale 1
        let mut x = Vec::new();
        dequantize_q6_k_block(&block, &mut x);
        assert!(x.iter().all(|&v| v == -32.0));
        block[0] = 0x0F; // element 0's low bits: 15
        block[128] = 0b0000_0011; // element 0's high bits: 3 -> q = 63 - 32
        x.clear();
        dequantize_q6_k_block(&block, &mut x);
        assert_eq!((x[0], x[1]), (31.0, -32.0));
    }
}
