//! `kvlab kv-size` and `kvlab import-gguf`: about a model's shape and files, no forward pass.

use crate::args::{JsonArgs, KvDtypeArg};
use crate::checks::{at_least, in_range};
use crate::print;
use clap::{Args, ValueEnum};
use kvlab::error::{Error, Result};
use kvlab::gguf::OutDtype;
use kvlab::kv_size::KvShape;
use kvlab::{limits, Config};
use std::path::PathBuf;

#[derive(Args)]
pub struct KvSizeArgs {
    /// Read the shape from this model folder's config.json.
    #[arg(long, conflicts_with_all = ["layers", "kv_heads", "head_dim"])]
    pub model: Option<PathBuf>,
    #[arg(long)]
    pub layers: Option<usize>,
    #[arg(long)]
    pub kv_heads: Option<usize>,
    #[arg(long)]
    pub head_dim: Option<usize>,
    /// Type of the cached values (kvlab's CPU cache is f32; GPUs usually bf16).
    #[arg(long, value_enum, default_value_t = KvDtypeArg::Bf16)]
    pub dtype: KvDtypeArg,
    #[arg(long)]
    pub seq_len: usize,
    /// Concurrent sequences.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// The model's parameter count, to set the cache against the weights (read from
    /// config.json with --model).
    #[arg(long)]
    pub params: Option<u64>,
    /// What the shape is of, for the report (default: the --model folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Also build the cache kvlab's cached path uses for --model (a ring per local
    /// layer for Gemma 3), fill it with --seq-len positions and count its bytes.
    #[arg(long)]
    pub measure: bool,
    #[command(flatten)]
    pub out: JsonArgs,
}

#[derive(Args)]
pub struct ImportArgs {
    /// The .gguf file.
    pub gguf: PathBuf,
    /// Output folder (created).
    pub out_dir: PathBuf,
    /// Weight type written to model.safetensors. f32 keeps the dequantized values exactly.
    #[arg(long, value_enum, default_value_t = ImportDtype::F32)]
    pub dtype: ImportDtype,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ImportDtype {
    F32,
    Bf16,
}

pub fn kv_size(args: KvSizeArgs) -> Result<()> {
    let dtype = args.dtype.into();
    let mut params = args.params;
    let mut name = args.name.clone();
    let mut model_config = None;
    let shape = if let Some(dir) = &args.model {
        let config = Config::from_file(&dir.join("config.json"))?;
        params = params.or(Some(kvlab::config::min_params(&config)?));
        name = name.or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()));
        let shape = KvShape::of(&config, dtype);
        model_config = Some(config);
        shape
    } else {
        let missing = |name: &str| {
            Error::InvalidArgument(format!(
                "give --model DIR, or all of --layers, --kv-heads and --head-dim (missing --{name})"
            ))
        };
        let shape = KvShape {
            layers: args.layers.ok_or_else(|| missing("layers"))?,
            kv_heads: args.kv_heads.ok_or_else(|| missing("kv-heads"))?,
            head_dim: args.head_dim.ok_or_else(|| missing("head-dim"))?,
            dtype,
        };
        // The bounds config.json is held to (src/limits.rs): no real model comes near.
        let model = "kvlab's limit for any model";
        in_range("--layers", shape.layers, 1, limits::MAX_LAYERS, model)?;
        in_range("--kv-heads", shape.kv_heads, 1, limits::MAX_HEADS, model)?;
        in_range("--head-dim", shape.head_dim, 1, limits::MAX_HEAD_DIM, model)?;
        shape
    };
    at_least("--seq-len", args.seq_len, 1)?;
    at_least("--batch", args.batch, 1)?;
    if args.measure && model_config.is_none() {
        return Err(Error::InvalidArgument(
            "--measure fills the cache kvlab builds for a model: give --model DIR".into(),
        ));
    }
    // Checked: 2^62 tokens is an overflow error, not "0 bytes".
    let mut report = shape.report(args.seq_len, args.batch)?;
    report.name = name;
    if let Some(config) = &model_config {
        report = report.with_layer_groups(config)?;
        if args.measure {
            report.measured = Some(kvlab::lab::kv_fill::measure_kv(config, args.seq_len)?);
        }
    }
    if let Some(params) = params {
        at_least("--params", params as usize, 1)?;
        report = report.with_weights(params)?;
    }
    if args.out.json {
        return print::json(&report);
    }
    print::kv_size(&report);
    Ok(())
}

pub fn import_gguf(args: ImportArgs) -> Result<()> {
    let dtype = match args.dtype {
        ImportDtype::F32 => OutDtype::F32,
        ImportDtype::Bf16 => OutDtype::Bf16,
    };
    let report = kvlab::gguf::import_gguf(&args.gguf, &args.out_dir, dtype)?;
    outln!("{report}");
    Ok(())
}
