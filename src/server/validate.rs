//! From an OpenAI request to an engine [`Request`], refusing what cannot run
//! (book: serving.md).
//!
//! Everything is checked here, before the engine sees the request, so that each refusal
//! names the field at fault (`param`) and the fix: a prompt over the context, a
//! `max_tokens` that does not fit after it, `n > 1`, a temperature out of range, an
//! unknown model. The engine checks again (`engine::validate`, what only it knows: the
//! size of its KV pool), but a client should rarely meet that second check.

use super::error::ApiError;
use super::openai::{ChatMessage, GenerationParams};
use crate::engine::{Request, SamplingParams};
use crate::tokenizer::{Message, Tokenizer};
use serde_json::Value;

/// What the server serves, and the defaults it applies.
#[derive(Debug, Clone)]
pub struct ServedModel {
    /// The name clients put in `"model"`.
    pub name: String,
    /// Positions the model was trained for (`max_position_embeddings`).
    pub max_context: usize,
    pub vocab_size: usize,
    /// End-of-turn ids: generation stops when one is sampled (unless `ignore_eos`).
    pub eos_ids: Vec<u32>,
    /// `max_tokens` when the request gives none (capped by the room left in the context).
    pub default_max_tokens: usize,
}

/// OpenAI accepts up to four stop sequences.
pub const MAX_STOP_SEQUENCES: usize = 4;
/// Longest stop sequence, in bytes: the stream holds back at most this much text.
pub const MAX_STOP_BYTES: usize = 256;

/// An engine request, plus what the server itself does with the output.
#[derive(Debug)]
pub struct Prepared {
    pub request: Request,
    /// Stop strings, matched on the detokenized text (`text.rs`).
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
}

// ANCHOR: chat_prompt
/// The chat's token ids: the messages through the model's chat template, then the
/// tokenizer, the same two library calls `kvlab generate --chat` makes.
pub fn chat_prompt(tokenizer: &Tokenizer, messages: &[ChatMessage]) -> Result<Vec<u32>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "`messages` is empty: send at least one {\"role\": \"user\", \"content\": ...}",
        ));
    }
    let mut rendered = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            other => {
                return Err(ApiError::invalid(
                    &format!("messages[{i}].role"),
                    format!("role `{other}` is not supported: use system, user or assistant"),
                ))
            }
        };
        let content = message_text(&m.content)
            .map_err(|why| ApiError::invalid(&format!("messages[{i}].content"), why))?;
        rendered.push(Message::new(role, &content));
    }
    let text = tokenizer
        .apply_chat_template(&rendered)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    tokenizer
        .encode(&text)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))
}
// ANCHOR_END: chat_prompt

/// A message's text: a string, or the concatenation of its `{"type": "text"}` parts.
fn message_text(content: &Value) -> Result<String, String> {
    const WANT: &str =
        "give a string, or a list of {\"type\": \"text\", \"text\": ...} parts (kvlab reads text only)";
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => return Err(format!("the part {part} is not a text part: {WANT}")),
                }
            }
            Ok(text)
        }
        other => Err(format!("content is {other}: {WANT}")),
    }
}

/// A completion's token ids: a string (or a list of one) through the tokenizer, or a
/// list of token ids as they are.
pub fn completion_prompt(
    tokenizer: &Tokenizer,
    prompt: &Value,
    vocab_size: usize,
) -> Result<Vec<u32>, ApiError> {
    let bad = |why: String| ApiError::invalid("prompt", why);
    let ids = match prompt {
        Value::String(text) => tokenizer.encode(text).map_err(|e| bad(e.to_string()))?,
        Value::Array(items) if items.iter().all(Value::is_string) => match items.as_slice() {
            [Value::String(text)] => tokenizer.encode(text).map_err(|e| bad(e.to_string()))?,
            _ => {
                return Err(bad(format!(
                "a list of {} prompts: kvlab answers one prompt per request, send them one by one",
                items.len()
            )))
            }
        },
        Value::Array(items) => {
            let mut ids = Vec::with_capacity(items.len());
            for item in items {
                match item.as_u64() {
                    Some(id) if id < vocab_size as u64 => ids.push(id as u32),
                    _ => return Err(bad(format!(
                        "{item} is not a token id of this model (0..{vocab_size}): give a string or a list of token ids"
                    ))),
                }
            }
            ids
        }
        other => {
            return Err(bad(format!(
                "prompt is {other}: give a string or a list of token ids"
            )))
        }
    };
    Ok(ids)
}

// ANCHOR: prepare
/// Checks the settings against `model` and builds the engine request for `prompt`.
/// `prompt_param` names the prompt's field in errors (`messages` or `prompt`);
/// `fallback_seed` seeds a sampled request that gives no `seed`.
pub fn prepare(
    params: &GenerationParams,
    prompt: Vec<u32>,
    prompt_param: &str,
    model: &ServedModel,
    fallback_seed: u64,
) -> Result<Prepared, ApiError> {
    if params.model != model.name {
        return Err(ApiError::unknown_model(&params.model, &model.name));
    }
    refuse_unsupported(params)?;
    if prompt.is_empty() {
        return Err(ApiError::invalid(
            prompt_param,
            "the prompt is empty: give at least one token of text",
        ));
    }
    let context = model.max_context;
    if prompt.len() >= context {
        return Err(ApiError::invalid(
            prompt_param,
            format!(
                "the prompt is {} tokens and the model's context is {context}: shorten it to at most {} tokens to leave room for one new token",
                prompt.len(),
                context - 1
            ),
        )
        .with_code("context_length_exceeded"));
    }
    let room = context - prompt.len();
    let (name, asked) = match (params.max_completion_tokens, params.max_tokens) {
        (Some(n), _) => ("max_completion_tokens", Some(n)),
        (None, n) => ("max_tokens", n),
    };
    let max_tokens = match asked {
        None => model.default_max_tokens.min(room),
        Some(0) => return Err(ApiError::invalid(name, format!("{name} is 0: ask for at least 1 token"))),
        Some(n) if n > room as u64 => {
            return Err(ApiError::invalid(
                name,
                format!(
                    "{name} is {n}, but the prompt ({} tokens) leaves {room} of the model's {context} positions: ask for at most {room}",
                    prompt.len()
                ),
            )
            .with_code("context_length_exceeded"))
        }
        Some(n) => n as usize,
    };
    let temperature = params.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature is {temperature}: give a number from 0 (greedy) to 2"),
        ));
    }
    let top_p = params.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            "top_p",
            format!("top_p is {top_p}: give a number in (0, 1]"),
        ));
    }
    let include_usage = params
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    let stream = params.stream.unwrap_or(false);
    if params.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "stream_options is only allowed with \"stream\": true",
        ));
    }
    Ok(Prepared {
        request: Request {
            prompt,
            max_tokens,
            sampling: SamplingParams {
                temperature,
                top_p,
                seed: params.seed.unwrap_or(fallback_seed),
            },
            stop_ids: if params.ignore_eos == Some(true) {
                Vec::new()
            } else {
                model.eos_ids.clone()
            },
        },
        stop: stop_strings(params.stop.as_ref())?,
        stream,
        include_usage,
    })
}
// ANCHOR_END: prepare

/// `stop`: absent, a string, or a list of up to four non-empty strings.
fn stop_strings(stop: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let bad = |why: String| ApiError::invalid("stop", why);
    let list = match stop {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    bad(format!(
                        "{v} is not a string: stop is a string or a list of strings"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(bad(format!(
                "stop is {other}: give a string or a list of strings"
            )))
        }
    };
    if list.len() > MAX_STOP_SEQUENCES {
        return Err(bad(format!(
            "{} stop sequences: give at most {MAX_STOP_SEQUENCES}",
            list.len()
        )));
    }
    for s in &list {
        if s.is_empty() || s.len() > MAX_STOP_BYTES {
            return Err(bad(format!(
                "a stop sequence of {} bytes: each must be 1 to {MAX_STOP_BYTES} bytes",
                s.len()
            )));
        }
    }
    Ok(list)
}

/// The settings kvlab does not implement, refused by name when set to anything but
/// their default.
fn refuse_unsupported(p: &GenerationParams) -> Result<(), ApiError> {
    if let Some(n) = p.n {
        if n != 1 {
            return Err(ApiError::invalid("n", format!("n is {n}: kvlab returns one choice per request; send n = 1 (or several requests)")));
        }
    }
    let unsupported: [(&str, &Option<Value>); 9] = [
        ("logprobs", &p.logprobs),
        ("top_logprobs", &p.top_logprobs),
        ("presence_penalty", &p.presence_penalty),
        ("frequency_penalty", &p.frequency_penalty),
        ("logit_bias", &p.logit_bias),
        ("best_of", &p.best_of),
        ("echo", &p.echo),
        ("suffix", &p.suffix),
        ("tools", &p.tools),
    ];
    for (name, value) in unsupported {
        let is_default = match value {
            None | Some(Value::Null) | Some(Value::Bool(false)) => true,
            Some(Value::Number(n)) => {
                n.as_f64() == Some(0.0) || (name == "best_of" && n.as_u64() == Some(1))
            }
            Some(Value::Object(o)) => o.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Bool(true)) => false,
        };
        if !is_default {
            return Err(ApiError::invalid(
                name,
                format!("`{name}` is not supported by kvlab serve: leave it out"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(json: &str) -> GenerationParams {
        serde_json::from_str(json).unwrap()
    }

    fn served() -> ServedModel {
        ServedModel {
            name: "m".into(),
            max_context: 100,
            vocab_size: 1000,
            eos_ids: vec![2],
            default_max_tokens: 16,
        }
    }

    #[test]
    fn max_tokens_defaults_to_the_room_left_and_refuses_more() {
        let ok = prepare(
            &params(r#"{"model":"m"}"#),
            vec![5; 90],
            "prompt",
            &served(),
            0,
        )
        .unwrap();
        assert_eq!(ok.request.max_tokens, 10);
        let err = prepare(
            &params(r#"{"model":"m","max_tokens":11}"#),
            vec![5; 90],
            "prompt",
            &served(),
            0,
        )
        .unwrap_err();
        assert_eq!(err.param.as_deref(), Some("max_tokens"));
        assert!(err.message.contains("at most 10"), "{}", err.message);
        let err = prepare(
            &params(r#"{"model":"m"}"#),
            vec![5; 100],
            "prompt",
            &served(),
            0,
        )
        .unwrap_err();
        assert_eq!(err.param.as_deref(), Some("prompt"));
    }

    #[test]
    fn refuses_what_it_cannot_do_by_name() {
        for (json, param) in [
            (r#"{"model":"m","n":2}"#, "n"),
            (r#"{"model":"m","logprobs":true}"#, "logprobs"),
            (r#"{"model":"m","temperature":3}"#, "temperature"),
            (r#"{"model":"m","top_p":0}"#, "top_p"),
            (r#"{"model":"m","stop":["a","b","c","d","e"]}"#, "stop"),
            (r#"{"model":"m","stop":""}"#, "stop"),
            (r#"{"model":"other"}"#, "model"),
        ] {
            let err = prepare(&params(json), vec![5; 3], "prompt", &served(), 0).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(param), "{json}: {}", err.message);
        }
        let ok = prepare(
            &params(r#"{"model":"m","n":1,"logprobs":false,"presence_penalty":0}"#),
            vec![5; 3],
            "prompt",
            &served(),
            0,
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn ignore_eos_drops_the_stop_ids() {
        let p = prepare(
            &params(r#"{"model":"m","ignore_eos":true}"#),
            vec![5; 3],
            "prompt",
            &served(),
            0,
        )
        .unwrap();
        assert!(p.request.stop_ids.is_empty());
        let p = prepare(
            &params(r#"{"model":"m"}"#),
            vec![5; 3],
            "prompt",
            &served(),
            0,
        )
        .unwrap();
        assert_eq!(p.request.stop_ids, vec![2]);
    }
}
