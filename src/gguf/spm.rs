//! A SentencePiece vocabulary (`tokenizer.ggml.model = llama`: Gemma 3's) rebuilt as a
//! Hugging Face `tokenizer.json`.
//!
//! What this file teaches: SentencePiece's BPE and Hugging Face's BPE are the same
//! algorithm described two ways. llama.cpp's SentencePiece tokenizer (`llm_tokenizer_spm`
//! in `src/llama-vocab.cpp`) starts from the characters of the text (spaces written `▁`)
//! and, again and again, joins the adjacent pair whose join is the vocabulary's
//! *highest-scoring* token, the leftmost on a tie; a piece that is no token at the end is
//! spelled as its bytes (`<0xE4>`...: byte fallback). Hugging Face's BPE joins the pair
//! with the *lowest merge rank*. So the merges are every split `(left, right)` of every
//! token into two tokens, ranked by the score of the token they make: best first.
//!
//! Gemma's scores fall strictly with the id (token 494 scores 0, token 495 scores −1...),
//! so "by score" is also "by position in the file", the order transformers' GGUF
//! converter uses for Gemma; `tests/gguf.rs` checks the result against its ids.
//!
//! Control tokens (`<bos>`, `<start_of_turn>`) and user-defined ones (Gemma's runs of
//! newlines, spaces and tabs) are *added tokens*: matched whole in the raw text before
//! BPE runs, as llama.cpp's `tokenizer_st_partition` does, so no merge ever makes one.

use super::tokenizer::GgufTokenizer;
use serde_json::{json, Value as Json};
use std::collections::HashMap;

/// `tokenizer.ggml.token_type` of an ordinary piece.
pub const TOKEN_TYPE_NORMAL: i64 = 1;

/// SentencePiece's stand-in for a space (U+2581, "▁").
pub const SPACE: &str = "\u{2581}";

// ANCHOR: spm_merges
/// The merges a SentencePiece vocabulary implies, best first: for every ordinary token,
/// each way to cut it into two tokens. Ranked by the score of the whole (higher first);
/// cuts of one token keep a fixed order (the longer left part first, as transformers'
/// `generate_merges`), which never matters: two cuts of one token cannot both be
/// adjacent pairs of the same text at once.
pub fn merges(tokens: &[String], scores: &[f32], types: &[i64]) -> Vec<(usize, usize)> {
    let id_of: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.as_str(), id))
        .collect();
    // (score of the whole, left id, right id), for every cut of every ordinary token.
    let mut cuts: Vec<(f32, usize, usize)> = Vec::new();
    for (id, token) in tokens.iter().enumerate() {
        if types[id] != TOKEN_TYPE_NORMAL {
            continue;
        }
        for (at, _) in token.char_indices().skip(1) {
            let (left, right) = token.split_at(at);
            if let (Some(&l), Some(&r)) = (id_of.get(left), id_of.get(right)) {
                cuts.push((scores[id], l, r));
            }
        }
    }
    // Stable: equal keys keep the file's order.
    cuts.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| tokens[b.1].len().cmp(&tokens[a.1].len()))
    });
    cuts.into_iter().map(|(_, l, r)| (l, r)).collect()
}
// ANCHOR_END: spm_merges

/// The `tokenizer.json` document of a SentencePiece vocabulary.
pub fn tokenizer_json(tok: &GgufTokenizer) -> Result<String, String> {
    let n = tok.tokens.len();
    if tok.scores.len() != n || tok.token_types.len() != n {
        return Err(format!(
            "tokenizer.ggml.scores holds {} numbers and token_type {} for {n} tokens: one of each per token",
            tok.scores.len(),
            tok.token_types.len()
        ));
    }
    let unk = tok
        .unk_id
        .map(|id| tok.tokens[id as usize].clone())
        .ok_or("a SentencePiece vocabulary needs `tokenizer.ggml.unknown_token_id`")?;
    let added_tokens = tok.added_tokens_json();
    // Spaces become ▁ (SentencePiece's escape); a space is put in front of the text only
    // when the file says so (Gemma 3: `add_space_prefix = false`).
    let replace = json!({"type": "Replace", "pattern": {"String": " "}, "content": SPACE});
    let normalizer = if tok.add_space_prefix {
        json!({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SPACE}, replace]})
    } else {
        replace
    };
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": SPACE}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if tok.add_space_prefix {
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    let vocab: serde_json::Map<String, Json> = tok
        .tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), json!(id)))
        .collect();
    let merges: Vec<Json> = merges(&tok.tokens, &tok.scores, &tok.token_types)
        .into_iter()
        .map(|(l, r)| json!([tok.tokens[l], tok.tokens[r]]))
        .collect();
    let document = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": normalizer,
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": unk,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": true,
            // A character no token spells is written as its UTF-8 bytes, <0x00>..<0xFF>.
            "byte_fallback": true,
            "ignore_merges": false,
            "vocab": vocab,
            "merges": merges,
        }
    });
    serde_json::to_string(&document).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::tokenizer::TOKEN_TYPE_USER_DEFINED;

    #[test]
    fn merges_are_every_cut_into_two_tokens_best_scored_first() {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc", "<x>"]
            .map(String::from)
            .to_vec();
        let scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0, -1000.0];
        let types = [1, 1, 1, 1, 1, 1, TOKEN_TYPE_USER_DEFINED];
        let m = merges(&tokens, &scores, &types);
        // bc (-1) before ab (-2) before abc (-3), whose cuts put the longer left first.
        assert_eq!(m, vec![(1, 2), (0, 1), (3, 2), (0, 4)]);
    }
}
