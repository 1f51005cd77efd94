//! # Exercise 02 — RMSNorm (均方根归一化)
//!
//! Every Llama block normalises its input twice, before attention and before the MLP.
//! RMSNorm (Zhang & Sennrich 2019) is LayerNorm without the mean subtraction: it rescales
//! the vector to unit root-mean-square, then multiplies by a learned weight per channel:
//!
//! ```text
//! out_i = x_i * w_i / sqrt(mean(x^2) + eps)
//! ```
//!
//! `eps` (the model's `rms_norm_eps`, 1e-5 for SmolLM2) sits *inside* the square root, as
//! in Hugging Face's `LlamaRMSNorm`; it keeps an all-zero vector from dividing by zero.
//! kvlab's RMSNorm is this loop, applied to every row of the hidden state; prefill runs it
//! on P rows at once, each decode step on one row.

/// RMSNorm of one row: `x` and `weight` are `[dim]`, the result is `[dim]`.
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    assert_eq!(x.len(), weight.len(), "x and weight must both be [dim]");
    // TODO: the placeholder returns the input unchanged. Questions:
    // - One number rescales the whole row: the mean of what, over how many elements?
    // - Is it computed once per row or once per channel?
    // - Where exactly does eps enter, and what does an all-zero row give then? (With
    //   x = [1, 1] and eps = 0.21, two placements give 0.909 and 0.826: which is the header's?)
    x.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len(), "length: got {got:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol,
                "index {i}: got {g}, want {w} (all: {got:?})"
            );
        }
    }

    #[test]
    fn hand_values_unit_weight() {
        // mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5, sqrt(7.5) = 2.738613
        let out = rmsnorm(&[1.0, 2.0, 3.0, 4.0], &[1.0; 4], 0.0);
        assert_close(
            &out,
            &[0.365_148_4, 0.730_296_7, 1.095_445_1, 1.460_593_5],
            1e-6,
        );
    }

    #[test]
    fn weight_scales_each_channel() {
        let out = rmsnorm(&[1.0, 2.0, 3.0, 4.0], &[2.0, 0.0, -1.0, 0.5], 0.0);
        assert_close(&out, &[0.730_296_7, 0.0, -1.095_445_1, 0.730_296_7], 1e-6);
    }

    #[test]
    fn output_has_unit_rms() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3)
            .collect();
        let out = rmsnorm(&x, &[1.0; 64], 1e-6);
        let rms = (out.iter().map(|v| v * v).sum::<f32>() / 64.0).sqrt();
        assert!((rms - 1.0).abs() < 1e-4, "rms = {rms}");
    }

    #[test]
    fn scale_invariant() {
        // Multiplying the input by a positive constant does not change the output.
        let x = [0.5, -1.5, 2.0, 0.25];
        let w = [1.0, 0.5, 2.0, -1.0];
        let a = rmsnorm(&x, &w, 1e-6);
        let big: Vec<f32> = x.iter().map(|v| v * 1000.0).collect();
        let b = rmsnorm(&big, &w, 1e-6);
        assert_close(&a, &b, 1e-5);
    }

    #[test]
    fn eps_is_inside_the_sqrt() {
        // all zeros: 0 / sqrt(0 + eps) = 0, not NaN
        let out = rmsnorm(&[0.0; 4], &[1.0; 4], 1e-5);
        assert_eq!(out, vec![0.0; 4]);
        // x = [1, 1]: mean(x^2) = 1, so out = 1 / sqrt(1 + eps). With eps = 0.21 that is
        // 1 / 1.1 = 0.90909; eps outside the sqrt would give 1 / 1.21 = 0.82645.
        let out = rmsnorm(&[1.0, 1.0], &[1.0, 1.0], 0.21);
        assert_close(&out, &[0.909_090_9, 0.909_090_9], 1e-6);
    }
}
