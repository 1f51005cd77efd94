//! Text ⇄ token ids, with the Hugging Face `tokenizers` crate, and the model's
//! own chat template (from `tokenizer_config.json`, rendered with minijinja).

use crate::error::{Error, Result};
use serde::Serialize;
use std::path::Path;

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The Jinja chat template, if the model has one.
    chat_template: Option<String>,
    bos_token: String,
    eos_token: String,
    add_bos_token: bool,
    bos_id: Option<u32>,
}

/// One chat message, as chat templates expect it.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` and (if present) `tokenizer_config.json` from a model folder.
    pub fn from_dir(dir: &Path) -> Result<Tokenizer> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Err(Error::Tokenizer(format!(
                "{} not found: the model folder needs the tokenizer that goes with the weights",
                path.display()
            )));
        }
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = if config_path.exists() {
            let text =
                std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
            serde_json::from_str(&text).map_err(|e| Error::Config {
                path: config_path.clone(),
                msg: e.to_string(),
            })?
        } else {
            serde_json::Value::Null
        };
        // Special tokens appear either as plain strings or as {"content": ...} objects.
        let token_str = |key: &str| match &config[key] {
            serde_json::Value::String(s) => s.clone(),
            v => v["content"].as_str().unwrap_or_default().to_string(),
        };
        let bos_token = token_str("bos_token");
        let bos_id = inner.token_to_id(&bos_token);
        Ok(Tokenizer {
            chat_template: config["chat_template"].as_str().map(str::to_string),
            eos_token: token_str("eos_token"),
            add_bos_token: config["add_bos_token"].as_bool().unwrap_or(false),
            bos_token,
            bos_id,
            inner,
        })
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`)
    /// become their ids; a BOS is prepended only when the model asks for one.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        if self.add_bos_token {
            ids.extend(self.bos_id);
        }
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// Text of `ids`, special tokens included (so a chat's `<|im_end|>` shows).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    // ANCHOR: chat_template
    /// Renders `messages` with the model's chat template, ending with the
    /// assistant's turn opened (`add_generation_prompt`), as Hugging Face's
    /// `apply_chat_template(..., add_generation_prompt=True)` does.
    pub fn apply_chat_template(&self, messages: &[Message]) -> Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            Error::ChatTemplate(
                "this model's tokenizer_config.json has no chat_template: drop --chat".into(),
            )
        })?;
        let mut env = minijinja::Environment::new();
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template("chat", template)
            .map_err(|e| Error::ChatTemplate(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => minijinja::Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt => true,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        env.get_template("chat")
            .and_then(|t| t.render(ctx))
            .map_err(|e| Error::ChatTemplate(e.to_string()))
    }
    // ANCHOR_END: chat_template
}

/// Turns a stream of token ids into a stream of text. A character can span
/// several byte-level tokens (a Chinese character is 3 bytes), so text is only
/// released once it decodes without a trailing replacement character.
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    printed: usize,
}

impl<'a> TextStream<'a> {
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        TextStream {
            tokenizer,
            ids: Vec::new(),
            printed: 0,
        }
    }

    /// Adds a token; returns the new text that is now complete, if any.
    pub fn push(&mut self, id: u32) -> Option<String> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids).ok()?;
        if text.ends_with('\u{FFFD}') || text.len() <= self.printed {
            return None;
        }
        let new = text.get(self.printed..)?.to_string();
        self.printed = text.len();
        Some(new)
    }
}
