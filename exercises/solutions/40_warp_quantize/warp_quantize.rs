//! # Exercise 40 — int8 on the GPU: 32 lanes, one scale, the CPU's bits
//!
//! `kvlab generate --device cuda --kv int8` quantizes each new key and value as it is stored
//! in the KV cache (KV缓存): kernels/kv_append.cu, `kv_append_int8`, gives one warp of 32
//! lanes to each (position, KV head). Lane `l` holds dimensions `l, l + 32, l + 64, ...` of
//! the head. The scale is `max |x| / 127` over the *whole* head, so the lanes must agree on
//! one maximum: each lane takes the max of its own values, then five butterfly steps
//! (`__shfl_xor_sync` with offsets 16, 8, 4, 2, 1: lane `l` takes the larger of its value
//! and lane `l ^ offset`'s) leave every lane holding the max of all 32.
//!
//! A max never rounds: it returns one of its inputs, so any order gives the same bits, and
//! the GPU's scale is the CPU's exactly (a sum is another story: exercises 34 and 39). Then
//! each code is `round(x / scale)`. Rust's `f32::round` and CUDA's `roundf` send a half away
//! from zero; `rintf` (Rust's `f32::round_ties_even`) sends it to the even neighbour, so 2.5
//! becomes 2, not 3, and the GPU's cache would no longer hold the CPU's codes.
//!
//! kvlab: `kernels/kv_append.cu` (`quantize_head`), `src/cuda/int8_cache.rs`,
//! `src/cache/quant/codec.rs` (`quantize_i8`); book chapter "The CUDA backend", section
//! "The same caches on the GPU".

/// Lanes in a warp.
pub const LANES: usize = 32;

/// Given: the CPU's quantizer (`src/cache/quant/codec.rs`), the reference for every bit.
pub fn quantize_i8(x: &[f32], codes: &mut [i8]) -> f32 {
    let abs_max = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = abs_max / 127.0;
    for (code, &v) in codes.iter_mut().zip(x) {
        let level = if scale > 0.0 {
            (v / scale).round()
        } else {
            0.0
        };
        *code = level.clamp(-127.0, 127.0) as i8;
    }
    scale
}

/// (a) What each lane holds before the lanes talk: lane `l`'s largest `|x[d]|` over its
/// own dimensions `d = l, l + 32, l + 64, ...` (0.0 for a lane with none, as the kernel
/// starts from 0.0).
pub fn lane_maxes(head: &[f32]) -> [f32; LANES] {
    let mut lanes = [0.0f32; LANES];
    for (lane, max) in lanes.iter_mut().enumerate() {
        for d in (lane..head.len()).step_by(LANES) {
            *max = max.max(head[d].abs());
        }
    }
    lanes
}

/// (b) The butterfly: for each offset 16, 8, 4, 2, 1 in turn, every lane `l` takes the
/// larger of its value and lane `l ^ offset`'s value *from before this step*.
pub fn butterfly_max(lanes: [f32; LANES]) -> [f32; LANES] {
    let mut v = lanes;
    for offset in [16, 8, 4, 2, 1] {
        let before = v;
        for (l, value) in v.iter_mut().enumerate() {
            *value = before[l].max(before[l ^ offset]);
        }
    }
    v
}

/// (c) The kernel's quantizer for one head: the scale from lane 0's value after the
/// butterfly, then every code as the CPU computes it. Returns the scale. Must equal
/// [`quantize_i8`] bit for bit, codes and scale.
pub fn quantize_like_the_gpu(head: &[f32], codes: &mut [i8]) -> f32 {
    let abs_max = butterfly_max(lane_maxes(head))[0];
    let scale = abs_max / 127.0;
    for (code, &x) in codes.iter_mut().zip(head) {
        let level = if scale > 0.0 {
            (x / scale).round()
        } else {
            0.0
        };
        *code = level.clamp(-127.0, 127.0) as i8;
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|d| (((d + seed) * 104_729 % 997) as f32 - 498.0) / 61.0)
            .collect()
    }

    #[test]
    fn lane_l_reads_every_32nd_dimension_from_l() {
        let mut x = vec![0.25f32; 64];
        x[33] = -9.0; // dimension 33 is lane 1's second value
        let lanes = lane_maxes(&x);
        assert_eq!(lanes[1], 9.0, "lane 1 holds dimensions 1 and 33");
        assert!(lanes.iter().enumerate().all(|(l, &m)| l == 1 || m == 0.25));
        let short = lane_maxes(&[1.0, -2.0, 3.0]);
        assert_eq!(
            &short[..4],
            &[1.0, 2.0, 3.0, 0.0],
            "a lane with no dimension holds 0"
        );
    }

    #[test]
    fn every_lane_ends_with_the_warps_max() {
        for hot in [0, 1, 17, 30, 31] {
            let mut lanes = [0.5f32; LANES];
            lanes[hot] = 7.0;
            assert_eq!(
                butterfly_max(lanes),
                [7.0; LANES],
                "the max starts in lane {hot}"
            );
        }
        let lanes: [f32; LANES] = std::array::from_fn(|l| ((l * 13) % 32) as f32);
        assert_eq!(butterfly_max(lanes), [31.0; LANES]);
    }

    #[test]
    fn the_gpu_quantizer_gives_the_cpus_bits() {
        for (len, seed) in [(8, 1), (48, 2), (64, 3), (256, 4), (100, 5)] {
            let x = head(len, seed);
            let (mut gpu, mut cpu) = (vec![0i8; len], vec![0i8; len]);
            let (g, c) = (
                quantize_like_the_gpu(&x, &mut gpu),
                quantize_i8(&x, &mut cpu),
            );
            assert_eq!(g.to_bits(), c.to_bits(), "scale, head of {len}");
            assert_eq!(gpu, cpu, "codes, head of {len}");
        }
    }

    #[test]
    fn a_head_of_zeros_has_scale_0_and_codes_0() {
        let mut codes = vec![5i8; 40];
        assert_eq!(quantize_like_the_gpu(&[0.0; 40], &mut codes), 0.0);
        assert!(codes.iter().all(|&c| c == 0));
    }

    #[test]
    fn halves_round_away_from_zero_as_on_the_cpu() {
        // max 127 gives scale 1: the levels are the values themselves.
        let x = [127.0f32, 2.5, -0.5, 0.5, -3.5];
        let mut codes = [0i8; 5];
        assert_eq!(quantize_like_the_gpu(&x, &mut codes), 1.0);
        assert_eq!(codes, [127, 3, -1, 1, -4], "roundf, not rintf");
    }
}
