//! Every refusal the server sends, as an OpenAI-style error body (book: serving.md).
//!
//! A client library reads `{"error": {"message", "type", "param", "code"}}` and shows the
//! message; axum's own rejections (bad JSON, a body over the limit, an unknown path) are
//! plain text, so every one of them is turned into this shape too. The status says who
//! must act: 4xx the client (fix the request, or wait: 429 comes with `Retry-After`),
//! 5xx the server.

use super::openai::{ErrorBody, ErrorDetail};
use crate::engine::SubmitError;
use axum::extract::rejection::JsonRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::IntoResponses;

/// One refused request: its status and the four fields of the error body.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds, sent as `Retry-After` (429).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: String) -> ApiError {
        ApiError {
            status,
            message,
            kind,
            param: None,
            code: None,
            retry_after_s: None,
        }
    }

    /// 400: the request names something kvlab cannot do; `param` is the field at fault.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                message.into(),
            )
        }
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// 404 for a model this server does not serve (OpenAI answers the same).
    pub fn unknown_model(asked: &str, served: &str) -> ApiError {
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the model `{asked}` does not exist here: this server serves `{served}` (see GET /v1/models)"),
            )
        }
    }

    /// 401: no `Authorization: Bearer <key>` header, or another key (OpenAI's answer and
    /// code for a wrong key, so its clients raise `AuthenticationError`).
    pub fn unauthorized(sent_one: bool) -> ApiError {
        let message = if sent_one {
            "incorrect API key: send the key `kvlab serve` was started with (--api-key or KVLAB_API_KEY)"
        } else {
            "no API key: send the header `Authorization: Bearer <key>` with the key `kvlab serve` was started with"
        };
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                message.to_string(),
            )
        }
    }

    /// 408: the body did not arrive whole within `--body-timeout-s`.
    pub fn body_timeout(seconds: f64) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("the request body did not arrive within {seconds} s (kvlab serve --body-timeout-s): send it at once"),
        )
    }

    /// 413: the body is over `--max-body-bytes`.
    pub fn body_too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            TOO_LARGE.to_string(),
        )
    }

    /// 400: the body could not be read (the client broke its chunked encoding, or left).
    pub fn body_unreadable(why: &str) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("the request body could not be read ({why}): send it again"),
        )
    }

    /// 500: the engine failed while running the request.
    pub fn engine_failed(message: String) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        match e {
            SubmitError::QueueFull { retry_after_s } => ApiError {
                code: Some("rate_limit_exceeded"),
                retry_after_s: Some(retry_after_s),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    format!("the server's waiting queue is full: retry after {retry_after_s} s"),
                )
            },
            // What validate.rs cannot see: the request is over the whole KV pool.
            SubmitError::Invalid(e) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                e.to_string(),
            ),
            SubmitError::ShutDown => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the engine has shut down: restart the server".into(),
            ),
        }
    }
}

/// The 413's message, from axum's limit or the body clock's (src/server/guard.rs).
const TOO_LARGE: &str = "the request body is larger than this server accepts (kvlab serve --max-body-bytes): send a shorter prompt";

// ANCHOR: json_rejection
/// axum's rejections of a JSON body, in OpenAI's shape. A wrong type or a missing field
/// is 422 in axum and 400 in OpenAI's API: clients expect 400.
impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        let status = match rejection.status() {
            StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
            other => other,
        };
        let message = match status {
            StatusCode::PAYLOAD_TOO_LARGE => TOO_LARGE.to_string(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                "the body must be JSON: send the header `Content-Type: application/json`"
                    .to_string()
            }
            _ => format!(
                "{}: send one JSON object with the fields of the OpenAI API",
                rejection.body_text()
            ),
        };
        ApiError::new(status, "invalid_request_error", message)
    }
}
// ANCHOR_END: json_rejection

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                message: self.message,
                kind: self.kind,
                param: self.param,
                code: self.code,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750 §3: a 401 names the scheme the client should use.
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(seconds) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// Any path the server does not have.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no route {uri}: the server has POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics and GET /openapi.json"),
    )
}

/// A known path with the wrong method (`GET /v1/completions`).
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!(
            "{method} is not allowed on {uri}: the /v1 generation routes take POST, the others GET"
        ),
    )
}

// ANCHOR: refusals
/// What any generation request may get instead of an answer: each status in OpenAI's
/// error body (`error.message` says what to change).
#[derive(IntoResponses)]
pub enum Refusals {
    /// Broken JSON, a wrong type, a setting kvlab cannot honour, a prompt over the context.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No API key, or another one (the server runs with `--api-key`).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// A model this server does not serve.
    #[response(status = 404)]
    UnknownModel(ErrorBody),
    /// The body did not arrive within `--body-timeout-s`.
    #[response(status = 408)]
    BodyTimeout(ErrorBody),
    /// The body is over `--max-body-bytes`.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The body is not `application/json`.
    #[response(status = 415)]
    NotJson(ErrorBody),
    /// The waiting queue is full (`--max-waiting`): retry after `Retry-After` seconds.
    #[response(status = 429)]
    QueueFull(ErrorBody),
    /// The engine failed while running the request (it starts again on a fresh pool).
    #[response(status = 500)]
    EngineFailed(ErrorBody),
    /// The engine has stopped (the server is shutting down).
    #[response(status = 503)]
    ShutDown(ErrorBody),
}
// ANCHOR_END: refusals

/// What a route without a body may get instead of an answer.
#[derive(IntoResponses)]
pub enum KeyRefusal {
    /// No API key, or another one (the server runs with `--api-key`).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
}
