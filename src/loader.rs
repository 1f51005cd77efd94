//! Loading a model the Hugging Face way: a folder with `config.json`,
//! `model.safetensors` (or shards listed in `model.safetensors.index.json`)
//! and `tokenizer.json`.
//!
//! Each safetensors file is read into memory and every tensor converted to f32.
//! (A memory map would save that transient copy but needs `unsafe` — the file
//! could change under the map — and this project keeps `unsafe` to the CUDA
//! boundary. kvlab holds its weights in f32 either way.)

use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::{Layer, Model};
use half::{bf16, f16};
use ndarray::{Array1, Array2};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The safetensors files of a model, read into memory, and which file holds each tensor.
struct WeightFiles {
    maps: Vec<(PathBuf, Vec<u8>)>,
    /// tensor name → index into `maps`
    index: HashMap<String, usize>,
}

impl WeightFiles {
    fn open(dir: &Path) -> Result<WeightFiles> {
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if single.exists() {
            vec![single]
        } else if index_path.exists() {
            shard_files(&index_path)?
        } else {
            return Err(Error::io(
                &single,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no model.safetensors (nor model.safetensors.index.json) in the model folder",
                ),
            ));
        };
        let mut maps = Vec::new();
        let mut index = HashMap::new();
        for path in files {
            let map = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let tensors = SafeTensors::deserialize(&map).map_err(|e| Error::Safetensors {
                path: path.clone(),
                msg: e.to_string(),
            })?;
            for name in tensors.names() {
                index.insert(name.to_string(), maps.len());
            }
            maps.push((path, map));
        }
        Ok(WeightFiles { maps, index })
    }

    /// Reads tensor `name` as f32, checking its shape.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let &i = self.index.get(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
        })?;
        let (path, map) = &self.maps[i];
        let tensors = SafeTensors::deserialize(map).map_err(|e| Error::Safetensors {
            path: path.clone(),
            msg: e.to_string(),
        })?;
        let view = tensors.tensor(name).map_err(|e| Error::Safetensors {
            path: path.clone(),
            msg: e.to_string(),
        })?;
        if view.shape() != shape {
            return Err(Error::TensorShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                got: view.shape().to_vec(),
            });
        }
        let bytes = view.data();
        let values = match view.dtype() {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(Error::TensorDtype {
                    name: name.to_string(),
                    dtype: format!("{other:?}"),
                })
            }
        };
        Ok(values)
    }

    fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// A `[rows, cols]` tensor as stored.
    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Array2<f32>> {
        let data = self.get(name, &[rows, cols])?;
        Ok(Array2::from_shape_vec((rows, cols), data).expect("length checked against the shape"))
    }

    /// A PyTorch linear weight `[d_out, d_in]`, returned transposed as `[d_in, d_out]`
    /// (the layout `ops::matmul` reads).
    fn linear(&self, name: &str, d_out: usize, d_in: usize) -> Result<Array2<f32>> {
        Ok(transpose(&self.matrix(name, d_out, d_in)?))
    }

    fn vector(&self, name: &str, len: usize) -> Result<Array1<f32>> {
        Ok(Array1::from_vec(self.get(name, &[len])?))
    }

    fn optional_vector(&self, name: &str, len: usize) -> Result<Option<Array1<f32>>> {
        if self.has(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// The shard files named in `model.safetensors.index.json`'s `weight_map`.
fn shard_files(index_path: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(index_path).map_err(|e| Error::io(index_path, e))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Config {
        path: index_path.to_path_buf(),
        msg: e.to_string(),
    })?;
    let map = json["weight_map"]
        .as_object()
        .ok_or_else(|| Error::Config {
            path: index_path.to_path_buf(),
            msg: "no `weight_map` object".into(),
        })?;
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let mut files: Vec<PathBuf> = map
        .values()
        .filter_map(|v| v.as_str())
        .map(|f| dir.join(f))
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

// ANCHOR: load_model
/// Loads `config.json` and the safetensors weights of a Hugging Face model folder.
pub fn load_model(dir: &Path) -> Result<Model> {
    if !dir.is_dir() {
        return Err(Error::ModelFolderMissing(dir.to_path_buf()));
    }
    let config = Config::from_file(&dir.join("config.json"))?;
    let files = WeightFiles::open(dir)?;
    model_from(config, &files)
}
// ANCHOR_END: load_model

fn model_from(config: Config, w: &WeightFiles) -> Result<Model> {
    let dim = config.hidden_size;
    let hidden = config.intermediate_size;
    let q_dim = config.num_attention_heads * config.head_dim();
    let kv_dim = config.n_kv_heads() * config.head_dim();
    let vocab = config.vocab_size;

    let mut layers = Vec::with_capacity(config.num_hidden_layers);
    for l in 0..config.num_hidden_layers {
        let p = format!("model.layers.{l}");
        layers.push(Layer {
            attn_norm: w.vector(&format!("{p}.input_layernorm.weight"), dim)?,
            wq: w.linear(&format!("{p}.self_attn.q_proj.weight"), q_dim, dim)?,
            wk: w.linear(&format!("{p}.self_attn.k_proj.weight"), kv_dim, dim)?,
            wv: w.linear(&format!("{p}.self_attn.v_proj.weight"), kv_dim, dim)?,
            wo: w.linear(&format!("{p}.self_attn.o_proj.weight"), dim, q_dim)?,
            bq: w.optional_vector(&format!("{p}.self_attn.q_proj.bias"), q_dim)?,
            bk: w.optional_vector(&format!("{p}.self_attn.k_proj.bias"), kv_dim)?,
            bv: w.optional_vector(&format!("{p}.self_attn.v_proj.bias"), kv_dim)?,
            mlp_norm: w.vector(&format!("{p}.post_attention_layernorm.weight"), dim)?,
            w_gate: w.linear(&format!("{p}.mlp.gate_proj.weight"), hidden, dim)?,
            w_up: w.linear(&format!("{p}.mlp.up_proj.weight"), hidden, dim)?,
            w_down: w.linear(&format!("{p}.mlp.down_proj.weight"), dim, hidden)?,
        });
    }
    let embed = w.matrix("model.embed_tokens.weight", vocab, dim)?;
    let tied_embeddings = config.tie_word_embeddings && !w.has("lm_head.weight");
    let lm_head = if tied_embeddings {
        transpose(&embed)
    } else {
        w.linear("lm_head.weight", vocab, dim)?
    };
    Ok(Model {
        embed,
        layers,
        final_norm: w.vector("model.norm.weight", dim)?,
        lm_head,
        tied_embeddings,
        config,
    })
}

/// `a` transposed, in standard (row-major) layout.
pub fn transpose(a: &Array2<f32>) -> Array2<f32> {
    a.t().as_standard_layout().into_owned()
}

/// Writes `model` as a Hugging Face folder (`config.json` + `model.safetensors`,
/// f32, PyTorch layouts), which [`load_model`] reads back bit for bit. Used to
/// carry seeded random models to tests and to the GPU check.
pub fn save_model(model: &Model, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut put = |name: String, a: &Array2<f32>| {
        tensors.push((name, a.shape().to_vec(), to_le_bytes(a.iter())));
    };
    // Linear weights go back to PyTorch's [d_out, d_in].
    for (l, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{l}");
        put(
            format!("{p}.self_attn.q_proj.weight"),
            &transpose(&layer.wq),
        );
        put(
            format!("{p}.self_attn.k_proj.weight"),
            &transpose(&layer.wk),
        );
        put(
            format!("{p}.self_attn.v_proj.weight"),
            &transpose(&layer.wv),
        );
        put(
            format!("{p}.self_attn.o_proj.weight"),
            &transpose(&layer.wo),
        );
        put(
            format!("{p}.mlp.gate_proj.weight"),
            &transpose(&layer.w_gate),
        );
        put(format!("{p}.mlp.up_proj.weight"), &transpose(&layer.w_up));
        put(
            format!("{p}.mlp.down_proj.weight"),
            &transpose(&layer.w_down),
        );
    }
    put("model.embed_tokens.weight".into(), &model.embed);
    if !model.tied_embeddings {
        put("lm_head.weight".into(), &transpose(&model.lm_head));
    }
    let mut put_vec = |name: String, a: &Array1<f32>| {
        tensors.push((name, vec![a.len()], to_le_bytes(a.iter())));
    };
    for (l, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{l}");
        put_vec(format!("{p}.input_layernorm.weight"), &layer.attn_norm);
        put_vec(
            format!("{p}.post_attention_layernorm.weight"),
            &layer.mlp_norm,
        );
        for (name, bias) in [("q", &layer.bq), ("k", &layer.bk), ("v", &layer.bv)] {
            if let Some(b) = bias {
                put_vec(format!("{p}.self_attn.{name}_proj.bias"), b);
            }
        }
    }
    put_vec("model.norm.weight".into(), &model.final_norm);

    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            let view = safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), bytes)
                .expect("shape and byte length agree by construction");
            (name.clone(), view)
        })
        .collect();
    let path = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &path).map_err(|e| Error::Safetensors {
        path: path.clone(),
        msg: e.to_string(),
    })?;
    let config_path = dir.join("config.json");
    let json = serde_json::to_string_pretty(&model.config).expect("a Config always serialises");
    std::fs::write(&config_path, json).map_err(|e| Error::io(&config_path, e))
}

fn to_le_bytes<'a>(values: impl Iterator<Item = &'a f32>) -> Vec<u8> {
    values.flat_map(|v| v.to_le_bytes()).collect()
}
