//! # Exercise 35 — kernel launches per token: the roof the CPU sets
//!
//! A decode step (解码) of SmolLM2-135M on a GPU reads every weight once: 269.1 MB in bf16.
//! At an H200's 4.8 TB/s that is 56 µs, a roof of about 17,800 tokens/s. But the CPU must
//! also *launch* every kernel of the step, and each launch costs the CPU and the driver some
//! fixed time `ℓ`, whatever the kernel does. At batch 1 the kernels are tiny, so the step
//! cannot be faster than either of two times:
//!
//! ```text
//! weight bytes / bandwidth      (the HBM roof)
//! launches per token · ℓ        (the launch roof: 1 / (launches · ℓ) tokens/s)
//! ```
//!
//! How many launches is a matter of counting, in three plans:
//!
//! - **Unfused** (`src/cuda/forward.rs`, `forward_kernels`): one kernel per operation. The
//!   embedding; per layer RMSNorm, the Q, K and V projections, RoPE (queries and keys in one
//!   kernel), the KV append (keys and values in one kernel), attention (v1 or v2: one
//!   kernel), the O projection, the residual add, RMSNorm, the gate and up projections,
//!   SwiGLU, the down projection, the residual add; then, for the last token, the final
//!   RMSNorm and the LM head. (A model with Q/K/V biases adds a bias kernel per projection;
//!   SmolLM2 has none.)
//! - **Fused** (`src/cuda/forward_fused.rs`, kernels/fused.cu): RMSNorm becomes the prologue
//!   of the matmuls after it, and those matmuls (Q, K, V; gate, up; the final norm's LM head)
//!   run as one launch; RoPE writes its keys and values into the cache itself; the residual
//!   add is the epilogue of the O and down projections; SwiGLU is the down projection's
//!   prologue. Attention is split-K (exercise 34): a split kernel and a combine kernel.
//! - **Graph** (`src/cuda/graph.rs`): the fused step captured once, then replayed by one
//!   `cuGraphLaunch` per token.
//!
//! Greedy decoding can pick the token on the GPU, with one more kernel (`argmax`) after
//! the step (`GpuModel::forward_greedy`); the graph captured it with the rest.
//!
//! kvlab: `src/lab/gpu_bench.rs` (the launch roof, next to the HBM roof), the launch count
//! in `tests/cuda_fused.rs`; book chapter "The CUDA backend", sections "Decode at batch 1
//! is launch-bound", "Fused kernels" and "CUDA graphs".

/// Which forward pass a decode step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// One kernel per operation (src/cuda/forward.rs).
    Unfused,
    /// The fused kernels and split-K attention (src/cuda/forward_fused.rs).
    Fused,
    /// The fused step replayed from a CUDA graph (src/cuda/graph.rs).
    Graph,
}

/// Kernel launches one decode step of a model with `n_layers` layers costs; `gpu_argmax`
/// when the greedy token is picked on the GPU after the step.
pub fn launches_per_token(plan: Plan, n_layers: usize, gpu_argmax: bool) -> usize {
    // TODO: Questions:
    // - Which launches happen once per step, before and after the layers, and which once
    //   per layer? Count a layer's kernels in the header's list, or in `forward_kernels`
    //   and `forward_kernels_fused` (`cache.write` is the KV append; `attention_v3`
    //   launches two kernels).
    // - Which of the unfused launches does each fusion remove, the final RMSNorm included?
    // - The greedy argmax is one more kernel after the step. Where is it in a graph?
    let _ = (plan, n_layers, gpu_argmax);
    0
}

/// Tokens/s if nothing but launching limited the step: `latency_s` seconds per launch.
pub fn launch_roof(launches: usize, latency_s: f64) -> f64 {
    // TODO: how long does issuing one step's launches take, and how many steps fit in a
    // second?
    let _ = (launches, latency_s);
    0.0
}

/// The launch latency (seconds) at which issuing the step's `launches` takes exactly as
/// long as reading `weight_bytes` at `bandwidth` bytes/s.
pub fn crossover_latency(weight_bytes: f64, bandwidth: f64, launches: usize) -> f64 {
    // TODO: write the two times of the header as equal and solve for the latency.
    let _ = (weight_bytes, bandwidth, launches);
    0.0
}

/// The best tokens/s a decode step can reach under both roofs.
pub fn decode_roof(weight_bytes: f64, bandwidth: f64, launches: usize, latency_s: f64) -> f64 {
    // TODO: a step pays for both its launches and its bytes. Which of the two roofs can it
    // reach, the higher or the lower?
    let _ = (weight_bytes, bandwidth, launches, latency_s);
    0.0
}

/// Given: tokens/s if nothing but reading the weights limited the step.
pub fn hbm_roof(weight_bytes: f64, bandwidth: f64) -> f64 {
    bandwidth / weight_bytes
}

/// Given: the weight bytes one SmolLM2-135M decode step reads in bf16
/// (`GpuWeights::bytes_read_per_token`): every matrix at 2 bytes, the LM head (the embedding
/// table: the two are tied), the norms kept in f32, and the one embedding row of the token.
pub fn smollm2_bf16_weight_bytes() -> u64 {
    let (layers, dim, kv_dim, hidden, vocab) = (30u64, 576, 192, 1536, 49_152);
    let per_layer = 2 * dim * dim + 2 * dim * kv_dim + 3 * dim * hidden; // Q, O; K, V; MLP
    let norms = layers * 2 * dim + dim;
    (layers * per_layer + vocab * dim) * 2 + norms * 4 + dim * 2
}

/// HBM bandwidth of one H200, bytes/s (NVIDIA's data sheet).
pub const H200_BYTES_PER_S: f64 = 4.8e12;

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() <= rel * want.abs()
    }

    #[test]
    fn smollm2_unfused_launches_453_kernels_a_token() {
        assert_eq!(launches_per_token(Plan::Unfused, 30, false), 453);
        assert_eq!(
            launches_per_token(Plan::Unfused, 30, true),
            454,
            "the greedy argmax on the GPU is one more launch"
        );
    }

    #[test]
    fn smollm2_fused_launches_212() {
        assert_eq!(launches_per_token(Plan::Fused, 30, false), 212);
        assert_eq!(launches_per_token(Plan::Fused, 30, true), 213);
    }

    #[test]
    fn a_graph_is_one_launch_whatever_it_holds() {
        for layers in [0, 2, 30] {
            for argmax in [false, true] {
                assert_eq!(launches_per_token(Plan::Graph, layers, argmax), 1);
            }
        }
    }

    #[test]
    fn other_layer_counts() {
        // Outside the layers: the embedding, the final norm, the LM head.
        assert_eq!(launches_per_token(Plan::Unfused, 0, false), 3);
        assert_eq!(launches_per_token(Plan::Fused, 0, false), 2);
        // tests/cuda_fused.rs counts a 2-layer model's fused step too: 1 + 7 · layers + 1.
        assert_eq!(launches_per_token(Plan::Unfused, 2, false), 33);
        assert_eq!(launches_per_token(Plan::Fused, 2, false), 16);
        assert_eq!(launches_per_token(Plan::Unfused, 24, true), 364);
        assert_eq!(launches_per_token(Plan::Fused, 24, true), 171);
        for plan in [Plan::Unfused, Plan::Fused] {
            let per_layer =
                launches_per_token(plan, 31, false) - launches_per_token(plan, 30, false);
            let want = if plan == Plan::Unfused { 15 } else { 7 };
            assert_eq!(per_layer, want, "{plan:?}: launches per layer");
        }
    }

    #[test]
    fn the_hbm_roof_of_smollm2_in_bf16() {
        let bytes = smollm2_bf16_weight_bytes();
        assert_eq!(bytes, 269_101_440, "269.1 MB");
        let roof = hbm_roof(bytes as f64, H200_BYTES_PER_S);
        assert!(close(roof, 17_837.14, 1e-6), "{roof}");
    }

    #[test]
    fn the_launch_roof() {
        // Latencies here are examples, not measurements: `kvlab bench --device cuda`
        // measures this GPU's.
        let roof = launch_roof(453, 2e-6);
        assert!(close(roof, 1103.7528, 1e-7), "453 launches of 2 µs: {roof}");
        let roof = launch_roof(212, 5e-6);
        assert!(close(roof, 943.3962, 1e-7), "212 launches of 5 µs: {roof}");
        let roof = launch_roof(1, 2e-6);
        assert!(close(roof, 500_000.0, 1e-12), "one launch of 2 µs: {roof}");
    }

    #[test]
    fn above_an_eighth_of_a_microsecond_smollm2_unfused_waits_for_the_cpu() {
        let bytes = smollm2_bf16_weight_bytes() as f64;
        let bw = H200_BYTES_PER_S;
        let unfused = crossover_latency(bytes, bw, 453) * 1e6;
        assert!(close(unfused, 0.12376, 1e-4), "{unfused} µs");
        assert_eq!(format!("{unfused:.2}"), "0.12", "the chapter's 0.12 µs");
        let fused = crossover_latency(bytes, bw, 212) * 1e6;
        assert!(close(fused, 0.26445, 1e-4), "{fused} µs");
        let graph = crossover_latency(bytes, bw, 1) * 1e6;
        assert!(close(graph, 56.0628, 1e-6), "{graph} µs: the whole 56 µs");
        // At the crossover the two roofs meet.
        for launches in [1, 212, 453] {
            let l = crossover_latency(bytes, bw, launches);
            assert!(close(launch_roof(launches, l), hbm_roof(bytes, bw), 1e-12));
        }
    }

    #[test]
    fn the_lower_roof_binds() {
        let bytes = smollm2_bf16_weight_bytes() as f64;
        let bw = H200_BYTES_PER_S;
        let hbm = hbm_roof(bytes, bw);
        // At 2 µs a launch the unfused step is launch-bound, the graph memory-bound.
        let unfused = decode_roof(bytes, bw, 453, 2e-6);
        assert!(close(unfused, 1103.7528, 1e-7), "{unfused}");
        assert!(close(decode_roof(bytes, bw, 1, 2e-6), hbm, 1e-12));
        // Below the crossover (0.12 µs) even 453 launches hide behind the weights.
        assert!(close(decode_roof(bytes, bw, 453, 0.1e-6), hbm, 1e-12));
    }
}
