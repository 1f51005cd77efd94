//! From llama.cpp's tensor names and row order back to Hugging Face's.
//!
//! What this file teaches: converting a checkpoint is more than renaming. When
//! llama.cpp's `convert_hf_to_gguf.py` writes a Llama model it
//!
//! 1. renames every tensor (`model.layers.3.self_attn.q_proj.weight` becomes
//!    `blk.3.attn_q.weight`; the table is gguf-py's `tensor_mapping.py`);
//! 2. lists dimensions innermost-first, so a `[1536, 576]` PyTorch matrix is stored
//!    with `ne = [576, 1536]` (the bytes are the same row-major matrix);
//! 3. *reorders the rows* of the query and key projections (`LlamaModel.permute`).
//!    Hugging Face's RoPE rotates dimension `i` of a head with dimension `i + d/2`
//!    ("rotate half"); llama.cpp's rotates `2i` with `2i + 1` (interleaved pairs).
//!    Permuting the rows of W_q and W_k makes the two conventions give the same
//!    attention scores. kvlab implements the Hugging Face convention, so the importer
//!    undoes the permutation.

/// The architectures the importer reads (`general.architecture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    /// Gemma 3: four norms a layer, QK-norm, no RoPE permutation (llama.cpp's Gemma 3
    /// uses the "NeoX" rotation, Hugging Face's rotate-half, so `convert_hf_to_gguf.py`
    /// leaves W_q and W_k as they are), and norms stored as `1 + w`.
    Gemma3,
}

/// The Hugging Face name of a llama.cpp tensor of a Llama model (see [`hf_name_for`]).
pub fn hf_name(gguf_name: &str) -> Option<String> {
    hf_name_for(Arch::Llama, gguf_name)
}

/// The Hugging Face name of a llama.cpp tensor, or None for names kvlab does not use
/// (e.g. `rope_freqs.weight`, which some converters add for scaled RoPE).
pub fn hf_name_for(arch: Arch, gguf_name: &str) -> Option<String> {
    // Whole-model tensors.
    let global = match gguf_name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output_norm.bias" => Some("model.norm.bias"),
        "output.weight" => Some("lm_head.weight"),
        "output.bias" => Some("lm_head.bias"),
        _ => None,
    };
    if let Some(name) = global {
        return Some(name.to_string());
    }

    // Per-layer tensors: blk.{N}.{part}.{weight|bias}
    let rest = gguf_name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    // gguf-py's tensor_mapping.py: in Gemma 2 and 3, `ffn_norm` is the MLP's input norm
    // (`pre_feedforward_layernorm`) and `post_attention_norm` the attention's output norm.
    let gemma_part = match part {
        "post_attention_norm" => Some("post_attention_layernorm"),
        "ffn_norm" => Some("pre_feedforward_layernorm"),
        "post_ffw_norm" => Some("post_feedforward_layernorm"),
        "attn_q_norm" => Some("self_attn.q_norm"),
        "attn_k_norm" => Some("self_attn.k_norm"),
        _ => None,
    };
    if arch == Arch::Gemma3 {
        if let Some(hf_part) = gemma_part {
            return Some(format!("model.layers.{layer}.{hf_part}.{kind}"));
        }
    }
    let hf_part = match part {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf_part}.{kind}"))
}

/// Which of llama.cpp's RoPE row permutations a tensor carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permuted {
    /// Not permuted.
    No,
    /// Query projection: permuted with `n_head` = the number of query heads.
    Query,
    /// Key projection: permuted with `n_head` = the number of KV heads.
    Key,
}

/// Whether `gguf_name` carries llama.cpp's permutation: a Llama query or key projection.
pub fn permutation_for(arch: Arch, gguf_name: &str) -> Permuted {
    match arch {
        Arch::Llama => permutation_of(gguf_name),
        Arch::Gemma3 => Permuted::No,
    }
}

/// Whether `gguf_name` is a query or key projection (weight or bias).
pub fn permutation_of(gguf_name: &str) -> Permuted {
    let Some(rest) = gguf_name.strip_prefix("blk.") else {
        return Permuted::No;
    };
    let part = rest.split('.').nth(1).unwrap_or("");
    match part {
        "attn_q" => Permuted::Query,
        "attn_k" => Permuted::Key,
        _ => Permuted::No,
    }
}

// ANCHOR: unpermute
/// llama.cpp's permutation, as `convert_hf_to_gguf.py` applies it to W_q and W_k:
///
/// ```python
/// w.reshape(n_head, 2, dim // n_head // 2, *rest).swapaxes(1, 2).reshape(w.shape)
/// ```
///
/// `w` is row-major with `data.len() / row_len` rows (a bias is rows of length 1).
/// Within each head of `head_dim` rows, the Hugging Face row `half * j + i` (j in 0..2,
/// i in 0..head_dim/2) moves to row `2 * i + j`: the two halves are interleaved.
/// kvlab only needs the inverse; this direction exists to test it and to write
/// synthetic GGUF files.
pub fn permute_rows(data: &[f32], row_len: usize, n_head: usize) -> Result<Vec<f32>, String> {
    reorder_rows(data, row_len, n_head, |head_dim, r| {
        // Output row r = (h, i, j) in llama.cpp order comes from HF row (h, j, i).
        let (i, j) = (r / 2, r % 2);
        j * (head_dim / 2) + i
    })
}

/// The inverse of [`permute_rows`]: from llama.cpp's interleaved row order back to
/// Hugging Face's. In numpy terms, `w.reshape(n_head, dim // n_head // 2, 2, *rest)
/// .swapaxes(1, 2).reshape(w.shape)`.
pub fn unpermute_rows(data: &[f32], row_len: usize, n_head: usize) -> Result<Vec<f32>, String> {
    reorder_rows(data, row_len, n_head, |head_dim, r| {
        // Output row r = (h, j, i) in HF order comes from llama.cpp row (h, i, j).
        let half = head_dim / 2;
        let (j, i) = (r / half, r % half);
        2 * i + j
    })
}
// ANCHOR_END: unpermute

/// Builds a new matrix whose row `h * head_dim + r` is the input's row
/// `h * head_dim + source(head_dim, r)`: the permutations only move rows within a head.
fn reorder_rows(
    data: &[f32],
    row_len: usize,
    n_head: usize,
    source: impl Fn(usize, usize) -> usize,
) -> Result<Vec<f32>, String> {
    if row_len == 0 || n_head == 0 || !data.len().is_multiple_of(row_len) {
        return Err(format!(
            "cannot split {} values into {n_head} heads of rows of {row_len}",
            data.len()
        ));
    }
    let n_rows = data.len() / row_len;
    if !n_rows.is_multiple_of(n_head) || !(n_rows / n_head).is_multiple_of(2) {
        return Err(format!(
            "{n_rows} rows do not split into {n_head} heads of an even number of rows"
        ));
    }
    let head_dim = n_rows / n_head;
    let mut out = Vec::with_capacity(data.len());
    for h in 0..n_head {
        for r in 0..head_dim {
            let src = h * head_dim + source(head_dim, r);
            out.extend_from_slice(&data[src * row_len..(src + 1) * row_len]);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            hf_name("blk.12.ffn_down.weight").as_deref(),
            Some("model.layers.12.mlp.down_proj.weight")
        );
        assert_eq!(
            hf_name("blk.0.attn_q.bias").as_deref(),
            Some("model.layers.0.self_attn.q_proj.bias")
        );
        assert_eq!(hf_name("rope_freqs.weight"), None);
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
        assert_eq!(permutation_of("blk.3.attn_k.bias"), Permuted::Key);
        assert_eq!(permutation_of("blk.3.attn_output.weight"), Permuted::No);
    }

    #[test]
    fn gemma_names_its_four_norms_and_permutes_nothing() {
        let g = |name| hf_name_for(Arch::Gemma3, name);
        assert_eq!(
            g("blk.2.ffn_norm.weight").as_deref(),
            Some("model.layers.2.pre_feedforward_layernorm.weight")
        );
        assert_eq!(
            g("blk.2.post_attention_norm.weight").as_deref(),
            Some("model.layers.2.post_attention_layernorm.weight")
        );
        assert_eq!(
            g("blk.2.post_ffw_norm.weight").as_deref(),
            Some("model.layers.2.post_feedforward_layernorm.weight")
        );
        assert_eq!(
            g("blk.0.attn_k_norm.weight").as_deref(),
            Some("model.layers.0.self_attn.k_norm.weight")
        );
        // Llama's `ffn_norm` is the norm after attention; Llama has no QK-norm.
        assert_eq!(
            hf_name("blk.2.ffn_norm.weight").as_deref(),
            Some("model.layers.2.post_attention_layernorm.weight")
        );
        assert_eq!(hf_name("blk.0.attn_k_norm.weight"), None);
        assert_eq!(
            permutation_for(Arch::Gemma3, "blk.3.attn_q.weight"),
            Permuted::No
        );
    }
}
