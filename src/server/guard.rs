//! The API key: every route but `GET /health` asks for it when the server has one (book:
//! serving-http.md, "Running kvlab serve safely").
//!
//! OpenAI's clients send `Authorization: Bearer <key>` (RFC 6750). A plain `==` on the
//! key returns at the first byte that differs, so the time a refusal takes tells an
//! attacker how many leading bytes were right, and the key can be guessed byte by byte;
//! `subtle`'s comparison reads every byte whatever they hold.

use super::app::App;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use subtle::ConstantTimeEq;

// ANCHOR: require_key
/// Lets a request through when the server has no key, when it asks for `/health` (a load
/// balancer's probe carries no key), or when it carries the key; else 401.
pub async fn require_key(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let Some(key) = &app.api_key else {
        return next.run(request).await;
    };
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    let sent = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match sent {
        Some(sent) if keys_equal(sent, key) => next.run(request).await,
        _ => {
            app.rejected_unauthorized.fetch_add(1, Ordering::Relaxed);
            ApiError::unauthorized(sent.is_some()).into_response()
        }
    }
}
// ANCHOR_END: require_key

/// `sent == key`, in a time that depends on the lengths only.
fn keys_equal(sent: &str, key: &str) -> bool {
    sent.as_bytes().ct_eq(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::keys_equal;

    #[test]
    fn keys_equal_only_when_every_byte_is() {
        assert!(keys_equal("sk-abc", "sk-abc"));
        assert!(!keys_equal("sk-abd", "sk-abc"));
        assert!(!keys_equal("sk-ab", "sk-abc"));
        assert!(!keys_equal("", "sk-abc"));
    }
}
