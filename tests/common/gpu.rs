//! Helpers shared by the CUDA test binaries (tests/cuda_kernels.rs, tests/cuda_paths.rs,
//! tests/cuda_bench.rs): the shared GPU (or a visible SKIPPED), random data, error
//! measures, small models, and the CPU/GPU logits of a request.
#![allow(dead_code)]

use half::bf16;
use kvlab::cache::PreallocatedCache;
use kvlab::cuda::gpu::probe_device;
use kvlab::cuda::{
    AttentionVersion, Gpu, GpuKvCache, GpuKvSource, GpuModel, MatmulVersion, RunState,
};
use kvlab::model::KvSource;
use kvlab::rng::Rng;
use kvlab::{Config, Model};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The GPU, opened once for the whole test binary (opening compiles every kernel, so
/// sharing it saves a second per test).
///
/// `None`, with a visible `SKIPPED (no CUDA device): <reason>` line, when this machine has
/// no CUDA driver or no GPU — unless `KVLAB_REQUIRE_GPU=1` (scripts/gpu-check.sh sets it),
/// which makes that a failure. A GPU that is there but on which kvlab fails (NVRTC missing,
/// PTX rejected, a kernel that does not compile) is always a failure, never a skip.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Gpu>> {
    static GPU: OnceLock<Result<Arc<Gpu>, String>> = OnceLock::new();
    if let Err(reason) = probe_device() {
        if std::env::var("KVLAB_REQUIRE_GPU").as_deref() == Ok("1") {
            panic!("{test}: KVLAB_REQUIRE_GPU=1 but there is no usable GPU: {reason}");
        }
        eprintln!("{test}: SKIPPED (no CUDA device): {reason}");
        return None;
    }
    match GPU.get_or_init(|| Gpu::new().map(Arc::new).map_err(|e| e.to_string())) {
        Ok(gpu) => {
            EMULATED.store(gpu.is_emulator(), Ordering::Relaxed);
            eprintln!("{test}: on {}", gpu.describe());
            Some(Arc::clone(gpu))
        }
        Err(reason) => panic!("{test}: there is a GPU, but kvlab cannot use it: {reason}"),
    }
}

/// True once [`gpu_or_skip`] has opened kvlab's CPU emulator of the GPU (tools/cudacpu),
/// not a real one. The emulator runs every CUDA thread one after another, about as fast as
/// one CPU core, so the tests cap their largest model there ([`smollm2`]).
static EMULATED: AtomicBool = AtomicBool::new(false);

pub fn on_emulator() -> bool {
    EMULATED.load(Ordering::Relaxed)
}

pub fn random(len: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| rng.symmetric(scale)).collect()
}

pub fn random_tokens(len: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..len)
        .map(|_| (rng.next_u64() % vocab as u64) as u32)
        .collect()
}

/// Largest `|gpu - cpu| / (1 + |cpu|)`: an absolute error near 0, a relative one for large values.
pub fn max_err(gpu: &[f32], cpu: &[f32]) -> f32 {
    assert_eq!(gpu.len(), cpu.len(), "lengths differ");
    gpu.iter()
        .zip(cpu)
        .map(|(g, c)| {
            if g.is_nan() || c.is_nan() {
                f32::INFINITY
            } else {
                (g - c).abs() / (1.0 + c.abs())
            }
        })
        .fold(0.0, f32::max)
}

pub fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: f32) {
    let err = max_err(gpu, cpu);
    eprintln!("  {what}: max error {err:.2e} (tolerance {tol:.0e})");
    assert!(
        err <= tol,
        "{what}: GPU and CPU differ by {err:e} > {tol:e}"
    );
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Whether to time kernels after validating them: yes, unless `KVLAB_NO_TIMING=1` (for a
/// quick correctness run, or on an emulator where times mean nothing).
pub fn timing_wanted() -> bool {
    if std::env::var("KVLAB_NO_TIMING").as_deref() == Ok("1") {
        eprintln!("  All results match. (Timing skipped: KVLAB_NO_TIMING=1.)");
        return false;
    }
    eprintln!("  All results match. Timing:");
    true
}

/// Mean time of one call of `launch`, in µs, after one warm-up call (llm.c's `benchmark_kernel`).
pub fn time_us(gpu: &Gpu, mut launch: impl FnMut()) -> f64 {
    launch();
    gpu.synchronize().unwrap();
    let iters = 20;
    let t = Instant::now();
    for _ in 0..iters {
        launch();
    }
    gpu.synchronize().unwrap();
    t.elapsed().as_secs_f64() * 1e6 / iters as f64
}

/// Each value rounded to bf16 and back: what the GPU computes with when weights are bf16.
pub fn round_bf16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

/// A small model shape; `head_dim` is explicit, so `dim` may differ from `n_heads * head_dim`.
#[allow(clippy::too_many_arguments)]
pub fn small_config(
    layers: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    dim: usize,
    hidden: usize,
    vocab: usize,
    bias: bool,
    tied: bool,
) -> Config {
    Config {
        hidden_size: dim,
        intermediate_size: hidden,
        num_hidden_layers: layers,
        num_attention_heads: n_heads,
        num_key_value_heads: Some(n_kv_heads),
        head_dim: Some(head_dim),
        vocab_size: vocab,
        max_position_embeddings: 256,
        tie_word_embeddings: tied,
        attention_bias: bias,
        ..Config::smollm2_135m()
    }
}

/// Shapes that stress the edges: GQA, MQA and MHA; head_dim below, at and off a warp (32);
/// `dim != n_heads * head_dim`; q/k/v biases; tied and untied LM heads; odd vocabularies.
pub fn small_configs() -> Vec<(&'static str, Config)> {
    vec![
        (
            "gqa 4/2 hd12",
            small_config(2, 4, 2, 12, 48, 100, 97, false, true),
        ),
        (
            "mqa 6/1 hd8 dim40 bias untied",
            small_config(3, 6, 1, 8, 40, 72, 131, true, false),
        ),
        (
            "smollm2 heads, 2 layers",
            small_config(2, 9, 3, 64, 576, 1536, 1000, false, true),
        ),
        (
            "mha 2/2 hd6 bias",
            small_config(1, 2, 2, 6, 12, 30, 50, true, true),
        ),
        (
            "gqa 8/2 hd128",
            small_config(1, 8, 2, 128, 256, 300, 77, false, true),
        ),
    ]
}

/// A seeded random model of each of [`small_configs`].
pub fn small_models() -> Vec<(&'static str, Model)> {
    small_configs()
        .into_iter()
        .enumerate()
        .map(|(seed, (name, config))| (name, Model::random(config, seed as u64).unwrap()))
        .collect()
}

/// Seeded random Gemma 3 models (QK-norm, sandwich norms, GeGLU, a scaled embedding, local
/// layers with their own RoPE base and a window of 3-6 positions, so that 16-token requests
/// cross it): MQA with a tiny head, GQA with a head off a warp, and Gemma 3 270M's own layer
/// shape (dim 640, 4/1 heads of 256, FFN 2048) with 2 layers and a 96-token vocabulary.
pub fn gemma_models() -> Vec<(&'static str, Model)> {
    let mut real = Config::gemma3_270m();
    real.num_hidden_layers = 2;
    real.gemma.layer_types = Some(kvlab::config::gemma3_layer_types(2, 2)); // local, global
    real.gemma.sliding_window = Some(6);
    real.vocab_size = 96;
    real.max_position_embeddings = 64;
    let configs = [
        (
            "gemma mqa 4/1 hd8 w3",
            super::tiny_gemma_config(4, 1, 8, 64, 3, &[true, true, false]),
        ),
        (
            "gemma gqa 6/2 hd40 w5",
            super::tiny_gemma_config(6, 2, 40, 80, 5, &[true, false, true, true]),
        ),
        ("gemma 3 270m layer shape, 2 layers, w6", real),
    ];
    configs
        .into_iter()
        .enumerate()
        .map(|(seed, (name, config))| (name, Model::random(config, 20 + seed as u64).unwrap()))
        .collect()
}

/// The small models, then the SmolLM2-shaped one.
pub fn with_smollm2<'a>(small: &'a [(&'static str, Model)]) -> Vec<(&'static str, &'a Model)> {
    let mut all: Vec<(&'static str, &'a Model)> = small.iter().map(|(n, m)| (*n, m)).collect();
    all.push(("SmolLM2 shape", smollm2()));
    all
}

/// The SmolLM2-135M-shaped random model (30 layers, 49152 vocabulary), built once.
///
/// Under the CPU emulator it keeps SmolLM2's layer shape (dim 576, 9/3 heads of 64, FFN
/// 1536) but has 2 layers, a 4096-token vocabulary and 512 positions: 1/13 of the work per
/// token, the same kernels, launch shapes and head mapping as the full model, and prompts
/// of at most a few hundred tokens (tests that read 1024+ positions as "long" give it a
/// short prompt; `long_model` in tests/cuda_fused.rs still crosses three split-K chunks).
pub fn smollm2() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        let mut config = Config::smollm2_135m();
        if on_emulator() {
            config.num_hidden_layers = 2;
            config.vocab_size = 4096;
            config.max_position_embeddings = 512;
            eprintln!(
                "  (under the CPU emulator the SmolLM2-shaped model has 2 layers, 4096 tokens and 512 positions)"
            );
        }
        Model::random(config, 1).unwrap()
    })
}

/// The CPU model with every matrix rounded to bf16 (norms and biases stay f32, as on the
/// GPU): the exact numbers a bf16 GPU model multiplies by.
pub fn bf16_twin(model: &Model) -> Model {
    let round = |a: &ndarray::Array2<f32>| a.mapv(|v| bf16::from_f32(v).to_f32());
    Model {
        config: model.config.clone(),
        embed: round(&model.embed),
        layers: model
            .layers
            .iter()
            .map(|l| kvlab::model::Layer {
                attn_norm: l.attn_norm.clone(),
                wq: round(&l.wq),
                wk: round(&l.wk),
                wv: round(&l.wv),
                wo: round(&l.wo),
                bq: l.bq.clone(),
                bk: l.bk.clone(),
                bv: l.bv.clone(),
                mlp_norm: l.mlp_norm.clone(),
                w_gate: round(&l.w_gate),
                w_up: round(&l.w_up),
                w_down: round(&l.w_down),
                q_norm: l.q_norm.clone(),
                k_norm: l.k_norm.clone(),
                post_attn_norm: l.post_attn_norm.clone(),
                post_mlp_norm: l.post_mlp_norm.clone(),
            })
            .collect(),
        final_norm: model.final_norm.clone(),
        lm_head: round(&model.lm_head),
        tied_embeddings: model.tied_embeddings,
    }
}

/// The GPU's naive and cached logits over `prompt` then `continuation`, asserted equal bit
/// for bit at every step (`what` names the model and kernels in a failure); returns the
/// cached path's logits.
pub fn assert_gpu_paths_bitwise(
    gm: &GpuModel,
    prompt: &[u32],
    continuation: &[u32],
    what: &str,
) -> Vec<Vec<f32>> {
    let naive = gpu_naive_logits(gm, prompt, continuation);
    let cached = gpu_cached_logits(gm, prompt, continuation);
    for (step, (a, b)) in naive.iter().zip(&cached).enumerate() {
        assert_eq!(
            bits(a),
            bits(b),
            "{what}: step {step}: naive and cached differ"
        );
    }
    cached
}

/// Logits after `prompt`, then after each token of `continuation` fed one at a time, on
/// the GPU's cached path.
pub fn gpu_cached_logits(gm: &GpuModel, prompt: &[u32], continuation: &[u32]) -> Vec<Vec<f32>> {
    let mut st = RunState::new(gm.gpu(), &gm.config, prompt.len() + continuation.len()).unwrap();
    let mut cache =
        GpuKvCache::new(gm.gpu(), &gm.config, prompt.len() + continuation.len()).unwrap();
    let mut all = vec![gm
        .forward_logits(prompt, GpuKvSource::Cache(&mut cache), &mut st)
        .unwrap()];
    for &t in continuation {
        all.push(
            gm.forward_logits(&[t], GpuKvSource::Cache(&mut cache), &mut st)
                .unwrap(),
        );
    }
    all
}

/// The same logits on the GPU's naive path: the whole prefix, every time.
pub fn gpu_naive_logits(gm: &GpuModel, prompt: &[u32], continuation: &[u32]) -> Vec<Vec<f32>> {
    let mut st = RunState::new(gm.gpu(), &gm.config, prompt.len() + continuation.len()).unwrap();
    let mut seq = prompt.to_vec();
    let mut all = vec![gm
        .forward_logits(&seq, GpuKvSource::ThisPass, &mut st)
        .unwrap()];
    for &t in continuation {
        seq.push(t);
        all.push(
            gm.forward_logits(&seq, GpuKvSource::ThisPass, &mut st)
                .unwrap(),
        );
    }
    all
}

/// The CPU's cached-path logits for the same steps.
pub fn cpu_cached_logits(model: &Model, prompt: &[u32], continuation: &[u32]) -> Vec<Vec<f32>> {
    let mut cache =
        PreallocatedCache::new(&model.config, prompt.len() + continuation.len()).unwrap();
    let mut all = vec![model.forward(prompt, KvSource::Cache(&mut cache)).unwrap()];
    for &t in continuation {
        all.push(model.forward(&[t], KvSource::Cache(&mut cache)).unwrap());
    }
    all
}

/// The unfused kernel versions the path tests run: each attention version once (v3, split-K,
/// reads its position from the GPU; the fused kernels are tests/cuda_fused.rs's).
pub const KERNEL_VERSIONS: [(MatmulVersion, AttentionVersion); 4] = [
    (MatmulVersion::V1, AttentionVersion::V1),
    (MatmulVersion::V2, AttentionVersion::V2),
    (MatmulVersion::V2, AttentionVersion::V3),
    (MatmulVersion::V3, AttentionVersion::V3),
];
