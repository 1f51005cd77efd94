//! One request's output as the server sees it: text pieces, then how it ended
//! (book: serving.md).
//!
//! The engine sends token ids; a client wants text. [`Generation::next`] turns one into
//! the other ([`Detokenizer`]) and is the only loop both response kinds use: a
//! non-streamed response collects the pieces, a streamed one sends each as an SSE chunk.
//! So the two cannot disagree on the text.

use super::openai::{PromptTokensDetails, Usage};
use super::text::Detokenizer;
use crate::engine::{Event, FinishReason, RequestStream};
use crate::tokenizer::Tokenizer;

/// What a request produced next.
#[derive(Debug)]
pub enum Piece {
    /// More text (never empty).
    Text(String),
    /// The request is done: `"stop"` (end-of-turn token or stop string) or `"length"`.
    Done {
        finish_reason: &'static str,
        usage: Usage,
    },
    /// The engine failed while running it.
    Failed(String),
}

// ANCHOR: generation
/// A submitted request, read as text.
pub struct Generation<'t> {
    /// `None` once finished: dropping the stream cancels the request in the engine,
    /// which is how a stop string frees its KV blocks at once.
    stream: Option<RequestStream>,
    text: Detokenizer<'t>,
    prompt_tokens: usize,
    completion_tokens: usize,
    /// Pieces decided but not yet returned (text flushed at the end, then Done).
    queued: std::collections::VecDeque<Piece>,
}

impl<'t> Generation<'t> {
    pub fn new(
        stream: RequestStream,
        tokenizer: &'t Tokenizer,
        stops: Vec<String>,
        prompt_tokens: usize,
    ) -> Generation<'t> {
        Generation {
            stream: Some(stream),
            text: Detokenizer::new(tokenizer, stops),
            prompt_tokens,
            completion_tokens: 0,
            queued: Default::default(),
        }
    }

    /// The next piece; `None` after `Done` or `Failed`.
    pub async fn next(&mut self) -> Option<Piece> {
        loop {
            if let Some(piece) = self.queued.pop_front() {
                return Some(piece);
            }
            let event = match &mut self.stream {
                Some(stream) => stream.next().await,
                None => return None,
            };
            match event {
                Some(Event::Token { id }) => {
                    self.completion_tokens += 1;
                    let (text, stopped) = self.text.push(id);
                    if stopped {
                        self.stream = None; // cancels: the engine frees the blocks
                        self.push_text(text);
                        self.finish("stop", 0);
                    } else if !text.is_empty() {
                        return Some(Piece::Text(text));
                    }
                }
                Some(Event::Finished {
                    reason,
                    cached_prompt_tokens,
                    ..
                }) => {
                    self.stream = None;
                    let rest = self.text.finish();
                    self.push_text(rest);
                    let finish_reason = match reason {
                        FinishReason::Stop => "stop",
                        FinishReason::Length => "length",
                    };
                    self.finish(finish_reason, cached_prompt_tokens);
                }
                Some(Event::Failed { message }) => {
                    self.stream = None;
                    return Some(Piece::Failed(message));
                }
                None => {
                    self.stream = None;
                    return Some(Piece::Failed(
                        "the engine dropped the request without finishing it".into(),
                    ));
                }
            }
        }
    }

    fn push_text(&mut self, text: String) {
        if !text.is_empty() {
            self.queued.push_back(Piece::Text(text));
        }
    }

    fn finish(&mut self, finish_reason: &'static str, cached_tokens: usize) {
        let usage = Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self.prompt_tokens + self.completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        };
        self.queued.push_back(Piece::Done {
            finish_reason,
            usage,
        });
    }
}
// ANCHOR_END: generation
