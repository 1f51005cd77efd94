//! `GET /openapi.json`: the API described from the types that parse and build it (book:
//! serving-http.md, "An API that documents itself").
//!
//! The request and response structs of `openai.rs` derive their schemas, and each route
//! declares its statuses next to its handler (`routes.rs`; the refusals are in
//! `error.rs`), so the description cannot
//! drift from the code: a field added to a request is in the spec at the next build.
//! `scripts/api-fuzz.sh` runs Schemathesis from this spec against a live server: every
//! answer must match it, and none may be a 5xx.

use super::app::App;
use super::error::KeyRefusal;
use super::openai::{ChatCompletionChunk, ErrorBody, ErrorDetail};
use axum::extract::State;
use axum::Json;
use std::sync::Arc;
use utoipa::OpenApi;

/// The whole description: every route, every body.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "kvlab serve",
        description = "An OpenAI-compatible server over kvlab's batching engine."
    ),
    paths(
        super::routes::chat_completions,
        super::routes::completions,
        super::routes::models,
        super::routes::health,
        super::routes::metrics,
        super::view::events,
        super::view::page,
        super::view::asset,
        openapi,
    ),
    components(schemas(ChatCompletionChunk, ErrorBody, ErrorDetail)),
    modifiers(&BearerKey),
    security(("api_key" = []))
)]
pub struct ApiDoc;

/// `GET /openapi.json`: this API's description (src/server/api_doc.rs).
#[utoipa::path(get, path = "/openapi.json",
    responses((status = 200, description = "OpenAPI 3.1", body = Object), KeyRefusal))]
pub async fn openapi(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(for_model(&app.served.name))
}

/// The spec as this server serves it: `model` can take one value, the served model's
/// name (a client, or a fuzzer, reading the spec then sends requests that can run).
pub fn for_model(name: &str) -> serde_json::Value {
    let mut spec = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let model = &mut spec["components"]["schemas"]["GenerationParams"]["properties"]["model"];
    if model.is_object() {
        model["enum"] = serde_json::json!([name]);
    }
    spec
}

/// The `Authorization: Bearer <key>` scheme `--api-key` asks for.
struct BearerKey;

impl utoipa::Modify for BearerKey {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::ApiDoc;
    use utoipa::OpenApi;

    #[test]
    fn the_spec_has_every_route_and_its_refusals() {
        let spec = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let paths = spec["paths"].as_object().unwrap();
        let mut names: Vec<&str> = paths.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "/",
                "/health",
                "/metrics",
                "/openapi.json",
                "/ui/{file}",
                "/v1/chat/completions",
                "/v1/completions",
                "/v1/engine/events",
                "/v1/models"
            ]
        );
        let chat = &paths["/v1/chat/completions"]["post"];
        for status in [
            "200", "400", "401", "404", "408", "413", "415", "429", "500", "503",
        ] {
            assert!(
                chat["responses"][status].is_object(),
                "chat has no {status}"
            );
        }
        let request = &spec["components"]["schemas"]["ChatCompletionRequest"];
        assert!(request.to_string().contains("messages"), "{request}");
        assert_eq!(paths["/health"]["get"]["security"], serde_json::json!([{}]));
        for name in ["ErrorBody", "ErrorDetail", "ChatCompletionChunk"] {
            assert!(spec["components"]["schemas"][name].is_object(), "{name}");
        }
        let served = super::for_model("smollm2");
        assert_eq!(
            served["components"]["schemas"]["GenerationParams"]["properties"]["model"]["enum"],
            serde_json::json!(["smollm2"])
        );
    }
}
