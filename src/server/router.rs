//! The router: every route, behind the API key and the body clock (book: serving-http.md).

use super::app::App;
use super::{api_doc, error, guard, routes, view};
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{middleware, Router};
use std::sync::Arc;

// ANCHOR: router
/// Every route, with OpenAI-style errors for unknown paths, wrong methods and bodies
/// over the limit, behind the API key when the server has one.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(routes::chat_completions))
        .route("/v1/completions", post(routes::completions))
        .route("/v1/models", get(routes::models))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .route("/openapi.json", get(api_doc::openapi))
        .route("/v1/engine/events", get(view::events))
        .route("/", get(view::page))
        .route("/ui/{file}", get(view::asset))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        // The body arrives whole and in time before a route parses it; the route's own
        // limit then never fires, and is kept for a body that came some other way.
        .layer(middleware::from_fn_with_state(
            app.clone(),
            guard::body_in_time,
        ))
        .layer(DefaultBodyLimit::max(app.max_body_bytes))
        // Outermost, so that an unknown path without the key is a 401, not a 404 that
        // tells a stranger which routes exist.
        .layer(middleware::from_fn_with_state(
            app.clone(),
            guard::require_key,
        ))
        .with_state(app)
}
// ANCHOR_END: router
