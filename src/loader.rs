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
use crate::limits;
use crate::model::{Layer, Model};
use half::{bf16, f16};
use ndarray::{Array1, Array2};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The safetensors files of a model, read into memory, and which file holds each tensor.
struct WeightFiles {
    maps: Vec<(PathBuf, Vec<u8>)>,
    /// tensor name → index into `maps`
    index: HashMap<String, usize>,
}

impl WeightFiles {
    /// Finds the weight files, checks that together they are large enough for the
    /// parameters `config` implies (before reading a byte of them), then reads them.
    fn open(dir: &Path, config: &Config) -> Result<WeightFiles> {
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
        // Each file's header against its size first (a truncated file says so),
        // then all of them against the config, before reading any tensor data.
        let mut total: u64 = 0;
        for path in &files {
            total = total.saturating_add(check_safetensors_size(path)?);
        }
        let needed = crate::config::min_weight_bytes(config)?;
        if total < needed {
            return Err(Error::InvalidConfig(format!(
                "config.json describes {} layers, hidden {}, vocab {}: at least {needed} bytes of weights, \
                 but the weight files hold {total} bytes. The config and the weights do not belong together",
                config.num_hidden_layers, config.hidden_size, config.vocab_size
            )));
        }
        let mut maps = Vec::new();
        let mut index = HashMap::new();
        for path in files {
            let len = check_safetensors_size(&path)?;
            let map = limits::read_capped(&path, len, "weights")?;
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
        let mut values = limits::try_vec::<f32>(view.shape().iter().product(), name)?;
        match view.dtype() {
            Dtype::F32 => values.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            ),
            Dtype::BF16 => values.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()),
            ),
            Dtype::F16 => values.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()),
            ),
            other => {
                return Err(Error::TensorDtype {
                    name: name.to_string(),
                    dtype: format!("{other:?}"),
                })
            }
        };
        check_finite(name, path, &values)?;
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

// ANCHOR: check_finite
/// A NaN or an infinity in a weight poisons every logit it touches, and the model
/// then "generates" garbage with exit code 0. One pass over the values as they are
/// converted (a few tens of ms for 135M weights) turns that into an error naming
/// the tensor.
pub(crate) fn check_finite(name: &str, path: &Path, values: &[f32]) -> Result<()> {
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite(format!(
            "{}: tensor `{name}` holds {} at index {i}: the checkpoint is corrupt (re-download or re-convert it)",
            path.display(),
            values[i]
        )));
    }
    Ok(())
}
// ANCHOR_END: check_finite

/// Checks a safetensors file's header against its size and returns the size: the
/// 8-byte header length, the JSON directory, and the tensor data the directory
/// declares must add up to the file's length, so a truncated file (or one whose
/// header claims terabytes) is refused before its data is read.
fn check_safetensors_size(path: &Path) -> Result<u64> {
    let len = limits::regular_file_len(path, "weights")?;
    let bad = |msg: String| Error::Safetensors {
        path: path.to_path_buf(),
        msg,
    };
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut n = [0u8; 8];
    file.read_exact(&mut n).map_err(|_| {
        bad(format!(
            "{len} bytes is too short for the 8-byte header length"
        ))
    })?;
    let header_len = u64::from_le_bytes(n);
    if header_len > limits::MAX_SAFETENSORS_HEADER || header_len > len - 8 {
        return Err(bad(format!(
            "the header claims {header_len} bytes, but the file has {len} bytes (and headers are at most {} bytes)",
            limits::MAX_SAFETENSORS_HEADER
        )));
    }
    let mut header = limits::try_vec::<u8>(header_len as usize, "a safetensors header")?;
    (&mut file)
        .take(header_len)
        .read_to_end(&mut header)
        .map_err(|e| Error::io(path, e))?;
    let json: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| bad(format!("the header is not valid JSON: {e}")))?;
    let entries = json
        .as_object()
        .ok_or_else(|| bad("the header is not a JSON object".into()))?;
    let mut data_len: u64 = 0;
    for (name, entry) in entries {
        if name == "__metadata__" {
            continue;
        }
        let end = entry["data_offsets"][1]
            .as_u64()
            .ok_or_else(|| bad(format!("tensor `{name}` has no numeric data_offsets")))?;
        data_len = data_len.max(end);
    }
    let declared = 8 + header_len;
    if declared.checked_add(data_len) != Some(len) {
        return Err(bad(format!(
            "the header declares {} bytes of tensor data after {declared} bytes of header, but the file has {len} bytes",
            data_len
        )));
    }
    Ok(len)
}

/// The shard files named in `model.safetensors.index.json`'s `weight_map`.
///
/// Each name must stay inside the model folder: a plain relative path, without
/// `..` or a root (an index naming `../../etc/passwd` or `/dev/zero` is refused).
/// The check is on the name, not on the resolved path, because the Hugging Face
/// cache keeps shards as symlinks into a sibling `blobs/` folder; the shard itself
/// must still be a regular file.
fn shard_files(index_path: &Path) -> Result<Vec<PathBuf>> {
    let bad = |msg: String| Error::InvalidFile {
        path: index_path.to_path_buf(),
        msg,
    };
    let text = limits::read_text_capped(
        index_path,
        limits::MAX_JSON_BYTES,
        "model.safetensors.index.json",
    )?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| bad(format!("not a valid safetensors index (JSON): {e}")))?;
    let map = json["weight_map"]
        .as_object()
        .ok_or_else(|| bad("no `weight_map` object naming the shard of each tensor".into()))?;
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let mut files = Vec::new();
    for (tensor, file) in map {
        let name = file
            .as_str()
            .ok_or_else(|| bad(format!("weight_map[`{tensor}`] is {file}, not a file name")))?;
        let confined = !name.is_empty()
            && Path::new(name)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !confined {
            return Err(bad(format!(
                "weight_map[`{tensor}`] names `{name}`, outside the model folder: shards must be files inside it"
            )));
        }
        files.push(dir.join(name));
    }
    if files.is_empty() {
        return Err(bad("`weight_map` is empty: it names no shard".into()));
    }
    files.sort();
    files.dedup();
    Ok(files)
}

// ANCHOR: load_model
/// Loads `config.json` and the safetensors weights of a Hugging Face model folder.
pub fn load_model(dir: &Path) -> Result<Model> {
    if !dir.is_dir() {
        return Err(not_a_folder(dir));
    }
    let config = Config::from_file(&dir.join("config.json"))?;
    let files = WeightFiles::open(dir, &config)?;
    model_from(config, &files)
}
// ANCHOR_END: load_model

fn model_from(config: Config, w: &WeightFiles) -> Result<Model> {
    let dim = config.hidden_size;
    let hidden = config.intermediate_size;
    let head_dim = config.head_dim();
    let q_dim = config.num_attention_heads * head_dim;
    let kv_dim = config.n_kv_heads() * head_dim;
    let vocab = config.vocab_size;
    let names = NormNames::of(&config);
    // A norm as the factor it multiplies by (Gemma stores `w` for `1 + w`).
    let norm = |name: &str, len: usize| -> Result<Array1<f32>> {
        let weight = w.vector(name, len)?;
        Ok(if config.is_gemma3() {
            weight.mapv(|v| v + GEMMA_NORM_OFFSET)
        } else {
            weight
        })
    };
    let gemma_norm = |name: String, len: usize| -> Result<Option<Array1<f32>>> {
        config.is_gemma3().then(|| norm(&name, len)).transpose()
    };

    let mut layers = Vec::with_capacity(config.num_hidden_layers);
    for l in 0..config.num_hidden_layers {
        let p = format!("model.layers.{l}");
        layers.push(Layer {
            attn_norm: norm(&format!("{p}.input_layernorm.weight"), dim)?,
            wq: w.linear(&format!("{p}.self_attn.q_proj.weight"), q_dim, dim)?,
            wk: w.linear(&format!("{p}.self_attn.k_proj.weight"), kv_dim, dim)?,
            wv: w.linear(&format!("{p}.self_attn.v_proj.weight"), kv_dim, dim)?,
            wo: w.linear(&format!("{p}.self_attn.o_proj.weight"), dim, q_dim)?,
            bq: w.optional_vector(&format!("{p}.self_attn.q_proj.bias"), q_dim)?,
            bk: w.optional_vector(&format!("{p}.self_attn.k_proj.bias"), kv_dim)?,
            bv: w.optional_vector(&format!("{p}.self_attn.v_proj.bias"), kv_dim)?,
            mlp_norm: norm(&format!("{p}.{}.weight", names.pre_mlp), dim)?,
            w_gate: w.linear(&format!("{p}.mlp.gate_proj.weight"), hidden, dim)?,
            w_up: w.linear(&format!("{p}.mlp.up_proj.weight"), hidden, dim)?,
            w_down: w.linear(&format!("{p}.mlp.down_proj.weight"), dim, hidden)?,
            q_norm: gemma_norm(format!("{p}.self_attn.q_norm.weight"), head_dim)?,
            k_norm: gemma_norm(format!("{p}.self_attn.k_norm.weight"), head_dim)?,
            post_attn_norm: gemma_norm(format!("{p}.post_attention_layernorm.weight"), dim)?,
            post_mlp_norm: gemma_norm(format!("{p}.post_feedforward_layernorm.weight"), dim)?,
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
        final_norm: norm("model.norm.weight", dim)?,
        lm_head,
        tied_embeddings,
        config,
    })
}

// ANCHOR: norm_names
/// Gemma's RMSNorm multiplies by `1 + w` (transformers' `Gemma3RMSNorm`:
/// `output * (1.0 + self.weight.float())`), so that a weight initialised at 0 is the
/// identity; Llama's multiplies by `w`. The loader adds this to every Gemma norm.
pub const GEMMA_NORM_OFFSET: f32 = 1.0;

/// The tensor name of the norm before the MLP. Llama calls it
/// `post_attention_layernorm` (it comes after the attention block); Gemma 3 uses that
/// name for the norm *of* the attention's output (its sandwich) and calls the MLP's
/// input norm `pre_feedforward_layernorm`.
struct NormNames {
    pre_mlp: &'static str,
}

impl NormNames {
    fn of(config: &Config) -> NormNames {
        NormNames {
            pre_mlp: if config.is_gemma3() {
                "pre_feedforward_layernorm"
            } else {
                "post_attention_layernorm"
            },
        }
    }
}
// ANCHOR_END: norm_names

/// The error for a model path that is not a folder: missing, or a file given
/// where the folder that holds it was meant.
pub fn not_a_folder(dir: &Path) -> Error {
    if dir.exists() {
        Error::InvalidFile {
            path: dir.to_path_buf(),
            msg: "is a file, not a model folder: point --model at the folder holding config.json, *.safetensors and tokenizer.json".into(),
        }
    } else {
        Error::ModelFolderMissing(dir.to_path_buf())
    }
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
    let gemma = model.config.is_gemma3();
    // The checkpoint's convention: Gemma's norms are stored as `factor - 1`.
    let stored = |a: &Array1<f32>| {
        if gemma {
            a.mapv(|v| v - GEMMA_NORM_OFFSET)
        } else {
            a.clone()
        }
    };
    let names = NormNames::of(&model.config);
    for (l, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{l}");
        put_vec(
            format!("{p}.input_layernorm.weight"),
            &stored(&layer.attn_norm),
        );
        put_vec(
            format!("{p}.{}.weight", names.pre_mlp),
            &stored(&layer.mlp_norm),
        );
        for (name, norm) in [
            ("self_attn.q_norm", &layer.q_norm),
            ("self_attn.k_norm", &layer.k_norm),
            ("post_attention_layernorm", &layer.post_attn_norm),
            ("post_feedforward_layernorm", &layer.post_mlp_norm),
        ] {
            if let Some(norm) = norm {
                put_vec(format!("{p}.{name}.weight"), &stored(norm));
            }
        }
        for (name, bias) in [("q", &layer.bq), ("k", &layer.bk), ("v", &layer.bv)] {
            if let Some(b) = bias {
                put_vec(format!("{p}.self_attn.{name}_proj.bias"), b);
            }
        }
    }
    put_vec("model.norm.weight".into(), &stored(&model.final_norm));

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
