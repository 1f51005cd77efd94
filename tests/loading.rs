//! Loading variants of the Hugging Face layout: sharded checkpoints, bf16/f16 weights.

mod common;

use kvlab::loader::{load_model, save_model};
use kvlab::Model;
use safetensors::{tensor::TensorView, Dtype, SafeTensors};
use std::path::Path;

/// One tensor as stored: (name, dtype, shape, bytes).
type Stored = (String, Dtype, Vec<usize>, Vec<u8>);

/// Every tensor in a saved model.
fn read_tensors(dir: &Path) -> Vec<Stored> {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut all: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

fn write(path: &Path, tensors: &[Stored]) {
    let views: Vec<_> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn logits(model: &Model) -> Vec<Vec<u32>> {
    common::bits(&common::naive_step_logits(model, &[3, 1, 4, 1, 5], &[9, 2]))
}

#[test]
fn sharded_checkpoint_loads_like_a_single_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::tiny_config(2, 4, 2, 8, 64);
    config.attention_bias = true; // Qwen2-style biases travel too
    config.tie_word_embeddings = false;
    let model = Model::random(config, 4).unwrap();
    save_model(&model, dir.path()).unwrap();
    let tensors = read_tensors(dir.path());
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();

    let (first, second) = tensors.split_at(tensors.len() / 2);
    let names = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    write(&dir.path().join(names[0]), first);
    write(&dir.path().join(names[1]), second);
    let weight_map: serde_json::Map<String, serde_json::Value> = first
        .iter()
        .map(|t| (t.0.clone(), names[0].into()))
        .chain(second.iter().map(|t| (t.0.clone(), names[1].into())))
        .collect();
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();

    assert_eq!(logits(&load_model(dir.path()).unwrap()), logits(&model));
}

#[test]
fn bf16_and_f16_weights_load_as_their_f32_values() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::random(common::tiny_config(2, 4, 2, 8, 64), 4).unwrap();
    save_model(&model, dir.path()).unwrap();
    let f32_tensors = read_tensors(dir.path());
    let as_f32 = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };

    for dtype in [Dtype::BF16, Dtype::F16] {
        // Round every weight to 16 bits, in the file and in a reference f32 copy:
        // (name, dtype, shape, 16-bit bytes, the same values as f32 bytes).
        type Rounded = (String, Dtype, Vec<usize>, Vec<u8>, Vec<u8>);
        let rounded: Vec<Rounded> = f32_tensors
            .iter()
            .map(|(n, _, s, b)| {
                let (half_bytes, back): (Vec<[u8; 2]>, Vec<f32>) = as_f32(b)
                    .into_iter()
                    .map(|v| match dtype {
                        Dtype::BF16 => {
                            let h = half::bf16::from_f32(v);
                            (h.to_le_bytes(), h.to_f32())
                        }
                        _ => {
                            let h = half::f16::from_f32(v);
                            (h.to_le_bytes(), h.to_f32())
                        }
                    })
                    .unzip();
                let f32_bytes = back.iter().flat_map(|v| v.to_le_bytes()).collect();
                (n.clone(), dtype, s.clone(), half_bytes.concat(), f32_bytes)
            })
            .collect();
        let half_dir = dir.path().join(format!("{dtype:?}"));
        let f32_dir = dir.path().join(format!("{dtype:?}-as-f32"));
        for (d, pick_half) in [(&half_dir, true), (&f32_dir, false)] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::copy(dir.path().join("config.json"), d.join("config.json")).unwrap();
            let tensors: Vec<_> = rounded
                .iter()
                .map(|(n, dt, s, h, f)| {
                    if pick_half {
                        (n.clone(), *dt, s.clone(), h.clone())
                    } else {
                        (n.clone(), Dtype::F32, s.clone(), f.clone())
                    }
                })
                .collect();
            write(&d.join("model.safetensors"), &tensors);
        }
        assert_eq!(
            logits(&load_model(&half_dir).unwrap()),
            logits(&load_model(&f32_dir).unwrap()),
            "{dtype:?}"
        );
    }
}
