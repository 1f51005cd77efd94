//! The HTTP routes: what each endpoint does, from request body to response (book: serving.md).
//!
//! A generation request goes: JSON body → [`validate`] (prompt ids, engine request) →
//! [`EngineHandle::submit`](crate::engine::EngineHandle::submit) (refused at once when
//! the queue is full) → a [`Generation`] read to the end (non-streamed) or sent piece by
//! piece ([`sse`]). Everything that goes wrong before the first byte of the answer is an
//! [`ApiError`] with its status; the server itself never stops for a bad request.

use super::app::{unix_time, App};
use super::error::ApiError;
use super::error::{KeyRefusal, Refusals};
use super::generation::{Generation, Piece};
use super::openai::Endpoint;
use super::openai::{
    AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionRequest, Completion,
    CompletionChoice, CompletionRequest, ModelCard, ModelList,
};
use super::sse::{self, Chunks};
use super::validate::{self, Prepared};
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type Body<T> = Result<Json<T>, JsonRejection>;

// ANCHOR: chat_route
/// `POST /v1/chat/completions`.
#[utoipa::path(post, path = "/v1/chat/completions", request_body = ChatCompletionRequest,
    responses((status = 200, description = "The answer; with `\"stream\": true`, SSE chunks (ChatCompletionChunk), then `data: [DONE]`",
        content((ChatCompletion = "application/json"), (String = "text/event-stream"))), Refusals))]
pub async fn chat_completions(
    State(app): State<Arc<App>>,
    body: Body<ChatCompletionRequest>,
) -> Response {
    let result = async {
        let Json(request) = body?;
        let prompt = validate::chat_prompt(&app.tokenizer, &request.messages)?;
        let prepared = validate::prepare(
            &request.params,
            prompt,
            "messages",
            &app.served,
            app.fallback_seed(),
        )?;
        generate(&app, prepared, Endpoint::Chat).await
    }
    .await;
    app.answer(result)
}
// ANCHOR_END: chat_route

/// `POST /v1/completions`.
#[utoipa::path(post, path = "/v1/completions", request_body = CompletionRequest,
    responses((status = 200, description = "The answer; with `\"stream\": true`, SSE chunks (Completion), then `data: [DONE]`",
        content((Completion = "application/json"), (String = "text/event-stream"))), Refusals))]
pub async fn completions(State(app): State<Arc<App>>, body: Body<CompletionRequest>) -> Response {
    let result = async {
        let Json(request) = body?;
        let prompt =
            validate::completion_prompt(&app.tokenizer, &request.prompt, app.served.vocab_size)?;
        let prepared = validate::prepare(
            &request.params,
            prompt,
            "prompt",
            &app.served,
            app.fallback_seed(),
        )?;
        generate(&app, prepared, Endpoint::Completion).await
    }
    .await;
    app.answer(result)
}

/// Submits, then answers whole or streamed.
async fn generate(
    app: &Arc<App>,
    prepared: Prepared,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    let Prepared {
        request,
        stop,
        stream,
        include_usage,
    } = prepared;
    let prompt_tokens = request.prompt.len();
    let request_stream = app.engine.submit(request)?;
    let chunks = Chunks {
        endpoint,
        id: app.response_id(endpoint),
        created: unix_time(),
        model: app.served.name.clone(),
    };
    if stream {
        return Ok(sse::respond(
            app.clone(),
            request_stream,
            chunks,
            stop,
            prompt_tokens,
            include_usage,
        ));
    }
    // Not streamed: the same pieces, collected. If the client leaves, axum drops this
    // future, and with it the stream: the request is cancelled as in the streamed case.
    let mut generation = Generation::new(request_stream, &app.tokenizer, stop, prompt_tokens);
    let mut text = String::new();
    while let Some(piece) = generation.next().await {
        match piece {
            Piece::Text(t) => text.push_str(&t),
            Piece::Failed(message) => return Err(ApiError::engine_failed(message)),
            Piece::Done {
                finish_reason,
                usage,
            } => {
                let response = match endpoint {
                    Endpoint::Chat => Json(ChatCompletion {
                        id: chunks.id,
                        object: "chat.completion",
                        created: chunks.created,
                        model: chunks.model,
                        choices: vec![ChatChoice {
                            index: 0,
                            message: AssistantMessage {
                                role: "assistant",
                                content: text,
                            },
                            finish_reason,
                            logprobs: None,
                        }],
                        usage,
                    })
                    .into_response(),
                    Endpoint::Completion => Json(Completion {
                        id: chunks.id,
                        object: "text_completion",
                        created: chunks.created,
                        model: chunks.model,
                        choices: vec![CompletionChoice {
                            index: 0,
                            text,
                            finish_reason: Some(finish_reason),
                            logprobs: None,
                        }],
                        usage: Some(usage),
                    })
                    .into_response(),
                };
                return Ok(response);
            }
        }
    }
    Err(ApiError::engine_failed(
        "the request ended without finishing".into(),
    ))
}

/// `GET /v1/models`: the one model this server runs.
#[utoipa::path(get, path = "/v1/models", responses((status = 200, body = ModelList), KeyRefusal))]
pub async fn models(State(app): State<Arc<App>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: app.served.name.clone(),
            object: "model",
            created: app.started,
            owned_by: "kvlab",
            max_model_len: app.served.max_context,
        }],
    })
}

/// `GET /health`: 200 while the server answers, with what it runs ([`super::app::Setup`]:
/// policy, weights, KV pool).
#[utoipa::path(get, path = "/health", security(()),
    responses((status = 200, description = "`status`, `model`, and what the server runs", body = Object)))]
pub async fn health(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    let mut health = serde_json::json!({"status": "ok", "model": app.served.name});
    if let (Some(h), Ok(serde_json::Value::Object(setup))) =
        (health.as_object_mut(), serde_json::to_value(&app.setup))
    {
        h.extend(setup);
    }
    Json(health)
}

/// `GET /metrics`: Prometheus' text format.
#[utoipa::path(get, path = "/metrics",
    responses((status = 200, description = "Prometheus' text format", body = String, content_type = "text/plain"), KeyRefusal))]
pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    let page = super::metrics::render(&app.engine.metrics(), app.counters());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        page,
    )
        .into_response()
}

impl App {
    /// The response, or the error's; refusals are counted for /metrics.
    fn answer(&self, result: Result<Response, ApiError>) -> Response {
        match result {
            Ok(response) => response,
            Err(e) => {
                let counter = match e.status.as_u16() {
                    429 => &self.rejected_queue_full,
                    400..=499 => &self.rejected_invalid,
                    _ => return e.into_response(),
                };
                counter.fetch_add(1, Ordering::Relaxed);
                e.into_response()
            }
        }
    }
}
