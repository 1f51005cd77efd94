//! The OpenAI wire format, as serde types: what a client sends to `/v1/chat/completions`
//! and `/v1/completions`, and what it gets back, whole or as SSE chunks (book: serving.md).
//!
//! Only the fields kvlab acts on are typed. The fields it cannot honour (`n > 1`,
//! `logprobs`, penalties, tools...) are read as raw JSON so that `validate.rs` can refuse
//! them by name instead of ignoring them: a client asking for three choices must not get
//! one and believe it got three.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

// ANCHOR: request
/// The sampling and length settings both endpoints share.
#[derive(Debug, Deserialize, ToSchema)]
pub struct GenerationParams {
    pub model: String,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// 0 = greedy; OpenAI's default is 1.
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f32>,
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f32>,
    /// u64, so that a huge value parses and is refused with a message, not a type error.
    #[schema(minimum = 1)]
    pub max_tokens: Option<u64>,
    /// The newer name of `max_tokens` (chat).
    #[schema(minimum = 1)]
    pub max_completion_tokens: Option<u64>,
    pub seed: Option<u64>,
    /// A string or a list of strings: generation stops before the first one in the text.
    #[schema(value_type = Option<Stop>)]
    pub stop: Option<Value>,
    #[schema(minimum = 1, maximum = 1)]
    pub n: Option<u64>,
    /// vLLM's extension: keep going past the end-of-turn token (load tests want fixed
    /// output lengths).
    pub ignore_eos: Option<bool>,
    // Read only to be refused when set (validate.rs).
    pub logprobs: Option<Value>,
    pub top_logprobs: Option<Value>,
    pub presence_penalty: Option<Value>,
    pub frequency_penalty: Option<Value>,
    pub logit_bias: Option<Value>,
    pub best_of: Option<Value>,
    pub echo: Option<Value>,
    pub suffix: Option<Value>,
    pub tools: Option<Value>,
}

/// `stop` as the spec describes it (the server reads it as raw JSON, to name what is
/// wrong with it): one string, or a list of at most 4, each 1 to 256 bytes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// A message's `content` as the spec describes it: a string, or text parts.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<TextPart>),
}

/// `{"type": "text", "text": ...}`: the one kind of part kvlab reads.
#[derive(Debug, Deserialize, ToSchema)]
pub struct TextPart {
    #[schema(pattern = "^text$")]
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
}

/// A completion's `prompt` as the spec describes it: text, or the token ids of one prompt.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessage>,
    #[serde(flatten)]
    pub params: GenerationParams,
}

/// One message. `content` is a string or a list of `{"type": "text", "text": ...}` parts.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatMessage {
    #[schema(pattern = "^(system|developer|user|assistant)$")]
    pub role: String,
    #[schema(value_type = Content)]
    pub content: Value,
}

/// `POST /v1/completions`: `prompt` is a string, a one-string list, or a list of token ids.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CompletionRequest {
    #[schema(value_type = Prompt)]
    pub prompt: Value,
    #[serde(flatten)]
    pub params: GenerationParams,
}
// ANCHOR_END: request

// ANCHOR: response
/// Token counts, in every non-streamed response and in the last streamed chunk when
/// `stream_options.include_usage` is set.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

/// Prompt tokens whose K and V came from the prefix cache.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str, // "chat.completion"
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub finish_reason: &'static str,
    pub logprobs: Option<()>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: String,
}

/// One SSE event of a streamed chat completion.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: &'static str, // "chat.completion.chunk"
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<&'static str>,
    pub logprobs: Option<()>,
}

/// What a chunk adds: the role in the first chunk, then text.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A completion, whole or one streamed chunk: the same object, `"text_completion"`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub finish_reason: Option<&'static str>,
    pub logprobs: Option<()>,
}
// ANCHOR_END: response

/// `GET /v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    pub object: &'static str, // "list"
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str, // "model"
    pub created: u64,
    pub owned_by: &'static str,
    /// The context the model was trained for (vLLM reports this too).
    pub max_model_len: usize,
}

/// The body of every error: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

/// Which endpoint a response answers (and so the shape of its chunks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `chat.completion.chunk`, text in `choices[0].delta.content`.
    Chat,
    /// `text_completion`, text in `choices[0].text`.
    Completion,
}
