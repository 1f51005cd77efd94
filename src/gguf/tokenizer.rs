//! Rebuilding a Hugging Face `tokenizer.json` from the tokenizer a GGUF file carries.
//!
//! What this file teaches: a byte-level BPE tokenizer (GPT-2's design, used by
//! SmolLM2) is fully described by
//!
//! - a *pre-tokenizer* that splits text into words before BPE sees it (SmolLM2 splits
//!   every digit on its own, then uses GPT-2's regex and maps each byte to a printable
//!   character, so a space becomes `Ġ`);
//! - the *vocabulary*: token string -> id (`tokenizer.ggml.tokens`, the id is the index);
//! - the *merges*, in priority order (`tokenizer.ggml.merges`, "Ġ t" means: join `Ġ`
//!   and `t` into `Ġt`);
//! - the *special tokens* (`tokenizer.ggml.token_type` 3 = control, e.g. `<|im_end|>`),
//!   which are matched whole in the input before BPE runs.
//!
//! GGUF stores the vocabulary and merges but only *names* the pre-tokenizer
//! (`tokenizer.ggml.pre`, chosen in `convert_hf_to_gguf.py` by hashing the original
//! tokenizer's output); llama.cpp maps that name to hard-coded regexes in
//! `src/llama-vocab.cpp`. We map the names we know to the equivalent Hugging Face
//! pre-tokenizer and refuse the rest: a wrong pre-tokenizer would silently produce
//! different token ids.

use crate::gguf::reader::{GgufFile, Value};
use crate::Result;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Value as Json};

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub const TOKEN_TYPE_CONTROL: i64 = 3;
/// User-defined tokens (added tokens that are not special).
pub const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Which tokenizer a GGUF file describes (`tokenizer.ggml.model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabKind {
    /// `gpt2`: byte-level BPE with merges (SmolLM2).
    ByteLevelBpe,
    /// `llama`: SentencePiece BPE, scores instead of merges (Gemma 3; `super::spm`).
    SentencePiece,
}

/// The tokenizer pieces read from GGUF metadata.
#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    pub kind: VocabKind,
    pub tokens: Vec<String>,
    /// SentencePiece scores, one per token (empty for byte-level BPE).
    pub scores: Vec<f32>,
    /// SentencePiece only: whether a space goes in front of the text.
    pub add_space_prefix: bool,
    pub merges: Vec<(String, String)>,
    pub token_types: Vec<i64>,
    /// `tokenizer.ggml.pre`, e.g. "smollm".
    pub pre: String,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub pad_id: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub chat_template: Option<String>,
}

impl GgufTokenizer {
    /// Reads the `tokenizer.ggml.*` keys; errors name the missing or malformed key.
    pub fn from_gguf(gguf: &GgufFile) -> Result<GgufTokenizer> {
        let model = gguf
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .ok_or_else(|| gguf.error("metadata has no string `tokenizer.ggml.model`"))?;
        let kind = match model {
            "gpt2" => VocabKind::ByteLevelBpe,
            "llama" => VocabKind::SentencePiece,
            _ => {
                return Err(gguf.error(format!(
                    "tokenizer.ggml.model is `{model}`; kvlab rebuilds `gpt2` (byte-level BPE) and `llama` (SentencePiece) tokenizers"
                )))
            }
        };
        let strings = |key: &str| -> Result<Vec<String>> {
            let items = gguf
                .get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| gguf.error(format!("metadata has no array `{key}`")))?;
            items
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        gguf.error(format!("`{key}` holds a {}, not strings", v.type_name()))
                    })
                })
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        // A SentencePiece file ranks its pieces by score and lists no merges.
        let merge_list = match kind {
            VocabKind::ByteLevelBpe => strings("tokenizer.ggml.merges")?,
            VocabKind::SentencePiece => Vec::new(),
        };
        let scores = match kind {
            VocabKind::ByteLevelBpe => Vec::new(),
            VocabKind::SentencePiece => gguf
                .get("tokenizer.ggml.scores")
                .and_then(Value::as_array)
                .ok_or_else(|| gguf.error("metadata has no array `tokenizer.ggml.scores`"))?
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32))
                .collect::<Option<Vec<f32>>>()
                .filter(|s| s.len() == tokens.len())
                .ok_or_else(|| {
                    gguf.error(format!(
                        "tokenizer.ggml.scores must be {} numbers, one per token",
                        tokens.len()
                    ))
                })?,
        };
        let merges = merge_list
            .into_iter()
            .map(|merge| {
                // "a b": llama.cpp splits at the first space after the first character.
                // Byte-level tokens never contain a plain space (it is mapped to Ġ).
                let parts: Vec<&str> = merge.split(' ').collect();
                match parts[..] {
                    [a, b] if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
                    _ => Err(gguf.error(format!(
                        "merge {merge:?} is not two tokens separated by one space"
                    ))),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let token_types = match gguf.get("tokenizer.ggml.token_type") {
            None => vec![1; tokens.len()],
            Some(v) => v
                .as_array()
                .unwrap_or(&[])
                .iter()
                .map(|t| match t {
                    Value::I32(t) => Some(i64::from(*t)),
                    other => other.as_u64().map(|t| t as i64),
                })
                .collect::<Option<Vec<i64>>>()
                .filter(|types| types.len() == tokens.len())
                .ok_or_else(|| {
                    gguf.error(format!(
                        "tokenizer.ggml.token_type must be {} integers, one per token",
                        tokens.len()
                    ))
                })?,
        };
        let id = |key: &str| -> Result<Option<u32>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(id) if (id as usize) < tokens.len() => Ok(Some(id as u32)),
                    _ => Err(gguf.error(format!(
                        "`{key}` = {v:?} is not a token id (the vocabulary has {} tokens)",
                        tokens.len()
                    ))),
                },
            }
        };
        let flag =
            |key: &str, default: bool| gguf.get(key).and_then(Value::as_bool).unwrap_or(default);
        // A template of another type would be dropped from tokenizer_config.json, and
        // `--chat` would later say the model has none: refuse it where it is wrong.
        let chat_template = match gguf.get("tokenizer.chat_template") {
            None => None,
            Some(Value::String(t)) => Some(t.clone()),
            Some(other) => {
                return Err(gguf.error(format!(
                    "`tokenizer.chat_template` holds a {}, not a template string",
                    other.type_name()
                )))
            }
        };
        Ok(GgufTokenizer {
            kind,
            scores,
            // llama.cpp's default for SentencePiece is a prefix space (Gemma's file says false).
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix", true),
            pre: gguf
                .get("tokenizer.ggml.pre")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string(),
            bos_id: id("tokenizer.ggml.bos_token_id")?,
            eos_id: id("tokenizer.ggml.eos_token_id")?,
            unk_id: id("tokenizer.ggml.unknown_token_id")?,
            pad_id: id("tokenizer.ggml.padding_token_id")?,
            // llama.cpp's default: no BOS for gpt2 vocabularies, a BOS for SentencePiece.
            add_bos: flag(
                "tokenizer.ggml.add_bos_token",
                kind == VocabKind::SentencePiece,
            ),
            add_eos: flag("tokenizer.ggml.add_eos_token", false),
            chat_template,
            tokens,
            merges,
            token_types,
        })
    }

    /// The Hugging Face pre-tokenizer equivalent to llama.cpp's `tokenizer.ggml.pre`.
    fn pre_tokenizer(&self) -> std::result::Result<Json, String> {
        let byte_level = json!({
            "type": "ByteLevel",
            "add_prefix_space": false,
            "trim_offsets": true,
            "use_regex": true
        });
        match self.pre.as_str() {
            // llama.cpp gives these the GPT-2 regex preceded by a split of every digit
            // (`\p{N}`): in Hugging Face terms, Digits(individual) then ByteLevel.
            "smollm" | "starcoder" | "refact" => Ok(json!({
                "type": "Sequence",
                "pretokenizers": [
                    { "type": "Digits", "individual_digits": true },
                    byte_level
                ]
            })),
            // Plain GPT-2.
            "gpt-2" => Ok(byte_level),
            other => Err(format!(
                "tokenizer.ggml.pre is `{other}`; kvlab knows the pre-tokenizers `smollm`, `starcoder`, \
                 `refact` and `gpt-2`. Another one would split text differently and give wrong token ids"
            )),
        }
    }

    /// The `tokenizer.json` text (format of the `tokenizers` library, version 1.0).
    pub fn to_tokenizer_json(&self) -> std::result::Result<String, String> {
        self.check_unique()?;
        match self.kind {
            VocabKind::ByteLevelBpe => self.byte_level_json(),
            VocabKind::SentencePiece => super::spm::tokenizer_json(self),
        }
    }

    /// Control tokens become special added tokens: the tokenizer matches them whole in the
    /// input (so "<|im_end|>" in a chat prompt is one id, not 7 BPE pieces) and
    /// `decode(.., skip_special_tokens = true)` can drop them; user-defined tokens are
    /// matched whole too, as llama.cpp does, but are not special.
    pub(super) fn added_tokens_json(&self) -> Vec<Json> {
        self.token_types
            .iter()
            .enumerate()
            .filter(|(_, &ty)| ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED)
            .map(|(id, &ty)| {
                json!({
                    "id": id,
                    "content": self.tokens[id],
                    "single_word": false,
                    "lstrip": false,
                    "rstrip": false,
                    "normalized": false,
                    "special": ty == TOKEN_TYPE_CONTROL
                })
            })
            .collect()
    }

    /// A vocabulary maps strings to ids: the same string twice cannot be rebuilt.
    fn check_unique(&self) -> std::result::Result<(), String> {
        let mut seen = std::collections::HashMap::with_capacity(self.tokens.len());
        for (id, token) in self.tokens.iter().enumerate() {
            if let Some(first) = seen.insert(token.as_str(), id) {
                return Err(format!(
                    "token {token:?} appears twice in the vocabulary (ids {first} and {id})"
                ));
            }
        }
        Ok(())
    }

    fn byte_level_json(&self) -> std::result::Result<String, String> {
        let added_tokens = self.added_tokens_json();
        let document = TokenizerJson {
            version: "1.0",
            truncation: None,
            padding: None,
            added_tokens,
            normalizer: None,
            pre_tokenizer: self.pre_tokenizer()?,
            // As in SmolLM2's own tokenizer.json. The post-processor only adjusts
            // offsets here (add_special_tokens adds nothing: there is no template).
            post_processor: json!({
                "type": "ByteLevel",
                "add_prefix_space": true,
                "trim_offsets": false,
                "use_regex": true
            }),
            // Maps the printable stand-ins (Ġ, Ċ, ...) back to bytes, then to UTF-8.
            decoder: json!({
                "type": "ByteLevel",
                "add_prefix_space": true,
                "trim_offsets": true,
                "use_regex": true
            }),
            model: BpeModel {
                r#type: "BPE",
                dropout: None,
                unk_token: None,
                continuing_subword_prefix: None,
                end_of_word_suffix: None,
                fuse_unk: false,
                // Every byte has a token of its own in a byte-level vocabulary, so
                // nothing can be unknown and no <0xNN> fallback is needed.
                byte_fallback: false,
                ignore_merges: false,
                vocab: VocabInIdOrder(&self.tokens),
                merges: self
                    .merges
                    .iter()
                    .map(|(a, b)| [a.as_str(), b.as_str()])
                    .collect(),
            },
        };
        serde_json::to_string_pretty(&document).map_err(|e| e.to_string())
    }

    /// The `tokenizer_config.json` document: special-token strings and the chat template.
    pub fn to_tokenizer_config_json(&self, model_max_length: usize) -> Json {
        let token = |id: Option<u32>| id.map(|id| self.tokens[id as usize].clone());
        let class = match self.kind {
            VocabKind::ByteLevelBpe => "GPT2Tokenizer",
            VocabKind::SentencePiece => "PreTrainedTokenizerFast",
        };
        let mut config = json!({
            "tokenizer_class": class,
            "add_bos_token": self.add_bos,
            "add_eos_token": self.add_eos,
            "add_prefix_space": false,
            "clean_up_tokenization_spaces": false,
            "model_max_length": model_max_length,
            "bos_token": token(self.bos_id),
            "eos_token": token(self.eos_id),
            "unk_token": token(self.unk_id),
            "pad_token": token(self.pad_id),
            "additional_special_tokens": self
                .token_types
                .iter()
                .enumerate()
                .filter(|(_, &ty)| ty == TOKEN_TYPE_CONTROL)
                .map(|(id, _)| self.tokens[id].clone())
                .collect::<Vec<_>>(),
        });
        if let Some(template) = &self.chat_template {
            config["chat_template"] = Json::String(template.clone());
        }
        config
    }
}

/// `tokenizer.json`, field by field. A struct rather than `json!` so that the fields
/// and the vocabulary keep a readable order (serde_json's map sorts its keys).
#[derive(Serialize)]
struct TokenizerJson<'a> {
    version: &'static str,
    truncation: Option<Json>,
    padding: Option<Json>,
    added_tokens: Vec<Json>,
    normalizer: Option<Json>,
    pre_tokenizer: Json,
    post_processor: Json,
    decoder: Json,
    model: BpeModel<'a>,
}

#[derive(Serialize)]
struct BpeModel<'a> {
    r#type: &'static str,
    dropout: Option<f32>,
    unk_token: Option<String>,
    continuing_subword_prefix: Option<String>,
    end_of_word_suffix: Option<String>,
    fuse_unk: bool,
    byte_fallback: bool,
    ignore_merges: bool,
    vocab: VocabInIdOrder<'a>,
    merges: Vec<[&'a str; 2]>,
}

/// Serializes the vocabulary as a JSON object in id order (token -> id), as Hugging
/// Face writes it, without building a map first (serde_json's own map is sorted by key).
struct VocabInIdOrder<'a>(&'a [String]);

impl Serialize for VocabInIdOrder<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (id, token) in self.0.iter().enumerate() {
            map.serialize_entry(token, &id)?;
        }
        map.end()
    }
}
