//! Unit tests of the CPU kernels against their textbook formulas (computed in f64).

use kvlab::ops;

fn close(a: f32, b: f64, tol: f64) -> bool {
    ((a as f64) - b).abs() <= tol * (1.0 + b.abs())
}

#[test]
fn rope_matches_the_direct_cos_sin_formula() {
    let (head_dim, theta) = (64, 100000.0f64);
    let x: Vec<f32> = (0..2 * head_dim)
        .map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0)
        .collect();
    for pos in [0usize, 1, 7, 300, 8191] {
        let (cos, sin) = ops::rope_cos_sin(pos, head_dim, theta);
        let mut rotated = x.clone();
        ops::apply_rope(&mut rotated, head_dim, &cos, &sin);
        let half = head_dim / 2;
        for head in 0..2 {
            let h = &x[head * head_dim..][..head_dim];
            let r = &rotated[head * head_dim..][..head_dim];
            for i in 0..half {
                // Pair (i, i + half) is the complex number h[i] + j h[i+half], turned by angle pos·θ^(-2i/d).
                let angle = pos as f64 * theta.powf(-2.0 * i as f64 / head_dim as f64);
                let (a, b) = (h[i] as f64, h[i + half] as f64);
                assert!(
                    close(r[i], a * angle.cos() - b * angle.sin(), 1e-5),
                    "pos {pos} i {i}"
                );
                assert!(
                    close(r[i + half], b * angle.cos() + a * angle.sin(), 1e-5),
                    "pos {pos} i {i}"
                );
            }
        }
        if pos == 0 {
            assert_eq!(rotated, x, "position 0 must not rotate");
        }
    }
}

#[test]
fn rope_scores_depend_only_on_relative_position() {
    // q·k after RoPE at positions (m, n) depends only on m - n: the property RoPE is built for.
    let head_dim = 16;
    let q: Vec<f32> = (0..head_dim).map(|i| (i as f32 * 0.37).sin()).collect();
    let k: Vec<f32> = (0..head_dim).map(|i| (i as f32 * 0.91).cos()).collect();
    let score = |m: usize, n: usize| {
        let (mut qr, mut kr) = (q.clone(), k.clone());
        let (c, s) = ops::rope_cos_sin(m, head_dim, 10000.0);
        ops::apply_rope(&mut qr, head_dim, &c, &s);
        let (c, s) = ops::rope_cos_sin(n, head_dim, 10000.0);
        ops::apply_rope(&mut kr, head_dim, &c, &s);
        ops::dot(&qr, &kr)
    };
    assert!((score(10, 3) - score(107, 100)).abs() < 1e-4);
    assert!((score(10, 3) - score(10, 4)).abs() > 1e-3);
}

#[test]
fn rmsnorm_matches_the_formula() {
    let dim = 37;
    let x: Vec<f32> = (0..2 * dim).map(|i| (i as f32 - 30.0) * 0.13).collect();
    let w: Vec<f32> = (0..dim).map(|i| 0.5 + i as f32 * 0.01).collect();
    let mut out = vec![0.0; x.len()];
    ops::rmsnorm(&x, &w, 1e-5, &mut out);
    for row in 0..2 {
        let xr = &x[row * dim..][..dim];
        let ms: f64 = xr.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / dim as f64;
        for i in 0..dim {
            let expected = xr[i] as f64 / (ms + 1e-5).sqrt() * w[i] as f64;
            assert!(close(out[row * dim + i], expected, 1e-6));
        }
    }
}

#[test]
fn softmax_survives_large_logits() {
    let mut x = vec![1000.0f32, 1001.0, 999.0, -1000.0];
    ops::softmax(&mut x);
    assert!(x.iter().all(|p| p.is_finite()));
    assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    let e = [(-1.0f64).exp(), 1.0, (-2.0f64).exp()];
    let z: f64 = e.iter().sum();
    for i in 0..3 {
        assert!(close(x[i], e[i] / z, 1e-6));
    }
    assert_eq!(x[3], 0.0);
}

#[test]
fn matmul_matches_f64_reference_at_awkward_sizes() {
    // Sizes that are not multiples of the 6-row or 16/64-column tiles.
    for (n, d_in, d_out) in [
        (1, 7, 5),
        (1, 576, 1539),
        (5, 33, 17),
        (13, 64, 100),
        (37, 19, 70),
    ] {
        let x: Vec<f32> = (0..n * d_in)
            .map(|i| ((i * 7919 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..d_in * d_out)
            .map(|i| ((i * 104729 % 31) as f32 - 15.0) / 13.0)
            .collect();
        let mut out = vec![0.0; n * d_out];
        ops::matmul(&x, &w, &mut out, d_in, d_out);
        for r in 0..n {
            for j in 0..d_out {
                let expected: f64 = (0..d_in)
                    .map(|k| x[r * d_in + k] as f64 * w[k * d_out + j] as f64)
                    .sum();
                assert!(
                    close(out[r * d_out + j], expected, 1e-4),
                    "n={n} d_in={d_in} d_out={d_out} at ({r},{j})"
                );
            }
        }
    }
}

#[test]
fn matmul_is_row_independent() {
    // A row computed alone (decode) and inside a batch of 50 (prefill): the same bits.
    let (n, d_in, d_out) = (50, 96, 200);
    let x: Vec<f32> = (0..n * d_in).map(|i| ((i as f32) * 0.7311).sin()).collect();
    let w: Vec<f32> = (0..d_in * d_out)
        .map(|i| ((i as f32) * 0.1213).cos())
        .collect();
    let mut batch = vec![0.0; n * d_out];
    ops::matmul(&x, &w, &mut batch, d_in, d_out);
    for r in [0, 5, 6, 17, 49] {
        let mut single = vec![0.0; d_out];
        ops::matmul(&x[r * d_in..(r + 1) * d_in], &w, &mut single, d_in, d_out);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&single),
            bits(&batch[r * d_out..(r + 1) * d_out]),
            "row {r}"
        );
    }
}

#[test]
fn argmax_breaks_ties_toward_the_lowest_id() {
    assert_eq!(ops::argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
}
