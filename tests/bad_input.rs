//! Bad input gets a clear error that names the problem, never a panic.

mod common;

use kvlab::backend::generate;
use kvlab::generate::{GenerateOptions, PathKind};
use kvlab::loader::{load_model, save_model};
use kvlab::sampler::SamplerConfig;
use kvlab::{Error, Model};
use std::path::Path;

fn saved_tiny_model(dir: &Path) -> Model {
    let model = Model::random(common::tiny_config(2, 4, 2, 8, 64), 9).unwrap();
    save_model(&model, dir).unwrap();
    model
}

fn expect_err<T>(r: kvlab::Result<T>) -> Error {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn saved_model_loads_back_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let model = saved_tiny_model(dir.path());
    let loaded = load_model(dir.path()).unwrap();
    let prompt = [1, 2, 3, 4];
    assert_eq!(
        common::bits(&common::naive_step_logits(&model, &prompt, &[5])),
        common::bits(&common::naive_step_logits(&loaded, &prompt, &[5]))
    );
}

#[test]
fn missing_model_folder() {
    let err = expect_err(load_model(Path::new("/no/such/model")));
    assert!(matches!(err, Error::ModelFolderMissing(_)));
    assert!(err.to_string().contains("fetch-smollm2.sh"), "{err}");
}

#[test]
fn missing_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    saved_tiny_model(dir.path());
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let err = expect_err(load_model(dir.path()));
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}

#[test]
fn truncated_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    saved_tiny_model(dir.path());
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    for keep in [0, 7, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let err = expect_err(load_model(dir.path()));
        assert!(
            matches!(err, Error::Safetensors { .. }),
            "{keep} bytes: {err}"
        );
        assert!(err.to_string().contains("truncated"), "{err}");
    }
}

/// Rewrites one tensor of a saved model with another shape or dtype.
fn replace_tensor(dir: &Path, name: &str, dtype: safetensors::Dtype, shape: Vec<usize>) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = tensors
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    for t in owned.iter_mut().filter(|t| t.0 == name) {
        let elems: usize = shape.iter().product();
        t.3 = vec![0u8; elems * dtype.bitsize() / 8];
        t.1 = dtype;
        t.2 = shape.clone();
    }
    let views: Vec<_> = owned
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &path).unwrap();
}

#[test]
fn tensor_with_the_wrong_shape() {
    let dir = tempfile::tempdir().unwrap();
    saved_tiny_model(dir.path());
    // k_proj of a 2-KV-head model is [16, 32]; pretend it was MHA.
    replace_tensor(
        dir.path(),
        "model.layers.1.self_attn.k_proj.weight",
        safetensors::Dtype::F32,
        vec![32, 32],
    );
    let err = expect_err(load_model(dir.path()));
    assert!(
        matches!(&err, Error::TensorShape { name, expected, got }
            if name == "model.layers.1.self_attn.k_proj.weight" && expected == &[16, 32] && got == &[32, 32]),
        "{err}"
    );
}

#[test]
fn tensor_with_an_unsupported_dtype() {
    let dir = tempfile::tempdir().unwrap();
    saved_tiny_model(dir.path());
    replace_tensor(
        dir.path(),
        "model.norm.weight",
        safetensors::Dtype::I32,
        vec![32],
    );
    let err = expect_err(load_model(dir.path()));
    assert!(matches!(err, Error::TensorDtype { .. }), "{err}");
    assert!(err.to_string().contains("model.norm.weight"));
}

#[test]
fn missing_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::random(common::tiny_config(2, 4, 2, 8, 64), 9).unwrap();
    model.layers.truncate(1);
    save_model(&model, dir.path()).unwrap(); // config still says 2 layers
    let err = expect_err(load_model(dir.path()));
    assert!(
        matches!(&err, Error::MissingTensor { name } if name.starts_with("model.layers.1.")),
        "{err}"
    );
}

#[test]
fn heads_not_divisible_by_kv_heads() {
    let dir = tempfile::tempdir().unwrap();
    saved_tiny_model(dir.path());
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["num_key_value_heads"] = 3.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let err = expect_err(load_model(dir.path()));
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    assert!(err.to_string().contains("not divisible"), "{err}");
}

#[test]
fn malformed_config() {
    let dir = tempfile::tempdir().unwrap();
    saved_tiny_model(dir.path());
    std::fs::write(dir.path().join("config.json"), "{\"hidden_size\": 32").unwrap();
    let err = expect_err(load_model(dir.path()));
    assert!(matches!(err, Error::Config { .. }), "{err}");
}

fn opts(max_new_tokens: usize, path: PathKind) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens,
        path,
        sampler: SamplerConfig::default(),
        eos_ids: vec![],
    }
}

#[test]
fn requests_that_do_not_fit_the_context() {
    let model = Model::random(common::tiny_config(1, 2, 1, 8, 64), 1).unwrap();
    let ctx = model.config.max_position_embeddings; // 256
    for path in [PathKind::Cached, PathKind::Naive] {
        let err = expect_err(generate(&model, &[], &opts(4, path), |_| {}));
        assert!(matches!(err, Error::EmptyPrompt), "{err}");

        let long = vec![1u32; ctx + 1];
        let err = expect_err(generate(&model, &long, &opts(4, path), |_| {}));
        assert!(
            matches!(err, Error::PromptTooLong { prompt_len, max_seq_len } if prompt_len == ctx + 1 && max_seq_len == ctx),
            "{err}"
        );

        let err = expect_err(generate(&model, &[1, 2, 3], &opts(ctx, path), |_| {}));
        assert!(matches!(err, Error::ContextOverflow { .. }), "{err}");
        assert!(err.to_string().contains("at most 253"), "{err}");

        let err = expect_err(generate(&model, &[1, 2, 99], &opts(2, path), |_| {}));
        assert!(
            matches!(err, Error::TokenOutOfRange { id: 99, .. }),
            "{err}"
        );
    }
    // Exactly filling the context is fine.
    let g = generate(
        &model,
        &vec![1u32; ctx - 2],
        &opts(2, PathKind::Cached),
        |_| {},
    )
    .unwrap();
    assert_eq!(g.generated_ids.len(), 2);
}

#[test]
fn bad_sampling_parameters() {
    let model = Model::random(common::tiny_config(1, 2, 1, 8, 64), 1).unwrap();
    for (temperature, top_p) in [(-1.0, 1.0), (f32::NAN, 1.0), (1.0, 0.0), (1.0, 1.5)] {
        let mut o = opts(2, PathKind::Cached);
        o.sampler = SamplerConfig {
            temperature,
            top_k: 0,
            top_p,
            seed: 0,
        };
        let err = expect_err(generate(&model, &[1, 2], &o, |_| {}));
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}
