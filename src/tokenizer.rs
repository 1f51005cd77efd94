//! Text ⇄ token ids, with the Hugging Face `tokenizers` crate, and the model's
//! own chat template (from `tokenizer_config.json`, rendered with minijinja).

use crate::error::{Error, Result};
use crate::limits;
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
        if !dir.is_dir() {
            return Err(crate::loader::not_a_folder(dir));
        }
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Err(Error::Tokenizer(format!(
                "{} not found: the model folder needs the tokenizer that goes with the weights",
                path.display()
            )));
        }
        let bytes = limits::read_capped(&path, limits::MAX_TOKENIZER_BYTES, "tokenizer.json")?;
        let inner = parse_tokenizer_json(&path, &bytes)?;
        drop(bytes);
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = if config_path.exists() {
            let text = limits::read_text_capped(
                &config_path,
                limits::MAX_JSON_BYTES,
                "tokenizer_config.json",
            )?;
            serde_json::from_str(&text).map_err(|e| Error::InvalidFile {
                path: config_path.clone(),
                msg: format!("not a valid tokenizer_config.json: {e}"),
            })?
        } else {
            serde_json::Value::Null
        };
        let bad = |msg: String| Error::InvalidFile {
            path: config_path.clone(),
            msg,
        };
        if !config.is_object() && !config.is_null() {
            return Err(bad("expected a JSON object of tokenizer settings".into()));
        }
        // Special tokens appear either as plain strings or as {"content": ...} objects.
        let token_str = |key: &str| match &config[key] {
            serde_json::Value::String(s) => s.clone(),
            v => v["content"].as_str().unwrap_or_default().to_string(),
        };
        let bos_token = token_str("bos_token");
        let bos_id = inner.token_to_id(&bos_token);
        let add_bos_token = match &config["add_bos_token"] {
            serde_json::Value::Null => false,
            serde_json::Value::Bool(b) => *b,
            other => {
                return Err(bad(format!(
                    "`add_bos_token` is {other}, not true or false"
                )))
            }
        };
        // Dropping the BOS silently would shift every logit the model was trained with.
        if add_bos_token && bos_id.is_none() {
            return Err(bad(format!(
                "add_bos_token is true but bos_token `{bos_token}` is not in tokenizer.json's vocabulary: \
                 fix bos_token (or set add_bos_token to false)"
            )));
        }
        Ok(Tokenizer {
            chat_template: chat_template(&config["chat_template"]).map_err(bad)?,
            eos_token: token_str("eos_token"),
            add_bos_token,
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

    /// Whether the model ships a chat template (instruct models do, base models do not).
    pub fn has_chat_template(&self) -> bool {
        self.chat_template.is_some()
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
                "this model's tokenizer_config.json has no chat_template (a base model, not a chat one): use an instruct model's folder".into(),
            )
        })?;
        let mut env = minijinja::Environment::new();
        // A template is code from a file: bound its work and its memory (fuel counts
        // both instructions and the bytes of the values it builds) and its output.
        env.set_fuel(Some(limits::TEMPLATE_FUEL));
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
        let mut out = CappedWriter {
            bytes: Vec::new(),
            cap: limits::MAX_TEMPLATE_OUTPUT,
        };
        let rendered = env
            .get_template("chat")
            .and_then(|t| t.render_captured_to(ctx, &mut out).map(drop));
        match rendered {
            Ok(_) => String::from_utf8(out.bytes)
                .map_err(|_| Error::ChatTemplate("the rendered text is not UTF-8".into())),
            Err(e) if e.kind() == minijinja::ErrorKind::OutOfFuel => Err(Error::ChatTemplate(
                format!(
                    "the template ran out of fuel ({} units of work and memory): it loops or builds text without bound; fix chat_template",
                    limits::TEMPLATE_FUEL
                ),
            )),
            Err(_) if out.bytes.len() >= out.cap => Err(Error::ChatTemplate(format!(
                "the rendered conversation exceeds {} bytes: fix chat_template or shorten the messages",
                out.cap
            ))),
            Err(e) => Err(Error::ChatTemplate(e.to_string())),
        }
    }
    // ANCHOR_END: chat_template
}

/// Parses `tokenizer.json` with the `tokenizers` library, which panics (an
/// `.expect("Helper")` in its decoder deserializer, found by `tests/fuzz_loaders.rs`)
/// on JSON that is malformed or nested too deep inside `"decoder"`. So the bytes
/// are first checked to be well-formed JSON within serde_json's nesting limit, and
/// any panic left is still caught and reported as an error about this file.
fn parse_tokenizer_json(path: &Path, bytes: &[u8]) -> Result<tokenizers::Tokenizer> {
    let bad = |msg: String| Error::Tokenizer(format!("{}: {msg}", path.display()));
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
        .map_err(|e| bad(format!("not valid JSON: {e}")))?;
    match std::panic::catch_unwind(|| tokenizers::Tokenizer::from_bytes(bytes)) {
        Ok(Ok(tokenizer)) => Ok(tokenizer),
        Ok(Err(e)) => Err(bad(e.to_string())),
        Err(_) => Err(bad(
            "the tokenizers library cannot read this file (it panicked): the file is corrupt"
                .into(),
        )),
    }
}

/// The chat template of a `tokenizer_config.json`: a string, or (as Hugging Face
/// allows) a list of `{"name", "template"}` objects, of which kvlab uses "default".
fn chat_template(value: &serde_json::Value) -> std::result::Result<Option<String>, String> {
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        serde_json::Value::Array(items) => {
            let mut names = Vec::new();
            for item in items {
                let name = item["name"].as_str();
                let template = item["template"].as_str();
                match (name, template) {
                    (Some("default"), Some(t)) => return Ok(Some(t.to_string())),
                    (Some(name), Some(_)) => names.push(name.to_string()),
                    _ => return Err(format!(
                        "chat_template list entry {item} is not a {{\"name\": ..., \"template\": ...}} object"
                    )),
                }
            }
            Err(format!(
                "chat_template is a list of named templates ({}) without one named \"default\"",
                names.join(", ")
            ))
        }
        other => Err(format!("chat_template is {other}, not a template string")),
    }
}

/// A writer that refuses to grow past `cap` bytes: the template's output bound.
struct CappedWriter {
    bytes: Vec<u8>,
    cap: usize,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            self.bytes
                .extend_from_slice(&buf[..self.cap - self.bytes.len()]);
            return Err(std::io::Error::other("template output cap reached"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
