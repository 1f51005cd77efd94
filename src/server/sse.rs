//! Streamed responses: one Server-Sent Event per text piece, `data: [DONE]` at the end
//! (book: serving.md).
//!
//! The request's [`Generation`] runs in a task of its own that sends events into a small
//! channel; the response body is that channel's other end. When the client goes away,
//! hyper drops the body, the channel closes, the task sees it (`tx.closed()`) and returns,
//! and dropping its [`RequestStream`](crate::engine::RequestStream) cancels the request:
//! the engine frees its KV blocks at its next iteration. Nothing waits for a reader that
//! will never come. Nor for one that stays but never reads: once the socket's buffers
//! and the channel are full, a send waits; after `--stream-stall-s` the task gives up
//! and returns, which cancels the request the same way.

use super::app::App;
use super::generation::{Generation, Piece};
use super::openai::{
    ChatCompletionChunk, ChunkChoice, Completion, CompletionChoice, Delta, Endpoint, Usage,
};
use crate::engine::RequestStream;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

/// Builds the chunks of one response: same id, time and model in each.
pub struct Chunks {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Chunks {
    fn event(value: &impl serde::Serialize) -> Event {
        // Serializing these plain structs cannot fail; if it ever did, say so in-band.
        Event::default().json_data(value).unwrap_or_else(|e| {
            Event::default().data(format!("{{\"error\":{{\"message\":\"{e}\"}}}}"))
        })
    }

    /// A chunk with `text` (and the role, for the first chat chunk), or the last one
    /// with `finish_reason`.
    fn chunk(
        &self,
        role: bool,
        text: Option<String>,
        finish_reason: Option<&'static str>,
    ) -> Event {
        match self.endpoint {
            Endpoint::Chat => Self::event(&ChatCompletionChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk",
                created: self.created,
                model: self.model.clone(),
                choices: vec![ChunkChoice {
                    index: 0,
                    delta: Delta {
                        role: role.then_some("assistant"),
                        content: text,
                    },
                    finish_reason,
                    logprobs: None,
                }],
                usage: None,
            }),
            Endpoint::Completion => Self::event(&Completion {
                id: self.id.clone(),
                object: "text_completion",
                created: self.created,
                model: self.model.clone(),
                choices: vec![CompletionChoice {
                    index: 0,
                    text: text.unwrap_or_default(),
                    finish_reason,
                    logprobs: None,
                }],
                usage: None,
            }),
        }
    }

    /// OpenAI's usage chunk: no choices, only `usage`.
    fn usage(&self, usage: Usage) -> Event {
        match self.endpoint {
            Endpoint::Chat => Self::event(&ChatCompletionChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk",
                created: self.created,
                model: self.model.clone(),
                choices: vec![],
                usage: Some(usage),
            }),
            Endpoint::Completion => Self::event(&Completion {
                id: self.id.clone(),
                object: "text_completion",
                created: self.created,
                model: self.model.clone(),
                choices: vec![],
                usage: Some(usage),
            }),
        }
    }
}

// ANCHOR: stream
/// The SSE response for a submitted request.
pub fn respond(
    app: Arc<App>,
    stream: RequestStream,
    chunks: Chunks,
    stops: Vec<String>,
    prompt_tokens: usize,
    include_usage: bool,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(16);
    tokio::spawn(async move {
        let mut generation = Generation::new(stream, &app.tokenizer, stops, prompt_tokens);
        if chunks.endpoint == Endpoint::Chat {
            let first = chunks.chunk(true, Some(String::new()), None);
            if !send(&app, &tx, first).await {
                return;
            }
        }
        loop {
            // Whichever comes first: the next piece, or the client hanging up.
            let piece = tokio::select! {
                piece = generation.next() => piece,
                _ = tx.closed() => return, // drops `generation`: the request is cancelled
            };
            let events = match piece {
                None => break,
                Some(Piece::Text(text)) => vec![chunks.chunk(false, Some(text), None)],
                Some(Piece::Done {
                    finish_reason,
                    usage,
                }) => {
                    let mut last = vec![chunks.chunk(false, None, Some(finish_reason))];
                    if include_usage {
                        last.push(chunks.usage(usage));
                    }
                    last
                }
                Some(Piece::Failed(message)) => {
                    let error = super::error::ApiError::engine_failed(message);
                    vec![Chunks::event(&super::openai::ErrorBody {
                        error: super::openai::ErrorDetail {
                            message: error.message,
                            kind: error.kind,
                            param: None,
                            code: None,
                        },
                    })]
                }
            };
            for event in events {
                if !send(&app, &tx, event).await {
                    return;
                }
            }
        }
        send(&app, &tx, Event::default().data("[DONE]")).await;
    });
    let body = ReceiverStream::new(rx).map(Ok::<Event, Infallible>);
    // A comment line every 10 s: proxies keep the connection, and a client that left
    // while its request waited in the queue is noticed at the next write.
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
// ANCHOR_END: stream

/// Sends one event (an answer's, or a snapshot to a watcher); false when the client has gone, or has read nothing for
/// `stream_stall` (a client that stops reading would otherwise hold its request's KV
/// blocks for as long as it keeps the connection open).
pub(super) async fn send(app: &App, tx: &tokio::sync::mpsc::Sender<Event>, event: Event) -> bool {
    use tokio::sync::mpsc::error::SendTimeoutError;
    match tx.send_timeout(event, app.limits.stream_stall).await {
        Ok(()) => true,
        Err(SendTimeoutError::Closed(_)) => false,
        Err(SendTimeoutError::Timeout(_)) => {
            app.streams_stalled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            false
        }
    }
}
