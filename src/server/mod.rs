//! An OpenAI-compatible HTTP server over one engine (book: serving.md, §5.1 of the article).
//!
//! Many clients, one model: each HTTP request becomes an engine [`Request`](crate::engine::Request),
//! and the engine's scheduler (src/engine/) batches them on its own thread. The server is
//! the part that speaks HTTP: it renders chat messages with the model's template, turns
//! token ids back into text as they come, and refuses what cannot run with a status and
//! an OpenAI-style error body, so that the official clients work against it unchanged.
//!
//! | file | what it holds |
//! |---|---|
//! | `app.rs` | what every handler shares: the engine, the tokenizer, the limits, the counters |
//! | `openai.rs` | the wire format: requests, responses, chunks, errors (serde) |
//! | `validate.rs` | request → engine request; every refusal names its field |
//! | `text.rs` | ids → text pieces without broken UTF-8, cut at stop strings |
//! | `generation.rs` | one request's pieces, shared by streamed and whole answers |
//! | `sse.rs` | streamed answers; a client that leaves cancels its request |
//! | `api_doc.rs` | `GET /openapi.json`, generated from the wire types and each route's statuses |
//! | `routes.rs` | the endpoints |
//! | `router.rs` | the router: the endpoints behind the key and the body clock |
//! | `listen.rs` | the accept loop: a cap on connections, a clock on request heads, a drain on shutdown |
//! | `limits.rs` | what one client may hold: the caps and clocks, and the connection counts |
//! | `guard.rs` | the API key (`--api-key`) |
//! | `view.rs` | the live view: the page at `GET /`, the engine's snapshots at `GET /v1/engine/events` |
//! | `error.rs` | OpenAI-style error bodies, including axum's own rejections |
//! | `metrics.rs` | `GET /metrics` in Prometheus' text format |
//! | `loadtest.rs`, `workload.rs` | `kvlab loadtest`: a seeded Poisson workload against a server |

pub mod api_doc;
pub mod app;
pub mod error;
pub mod generation;
pub mod guard;
pub mod limits;
pub mod listen;
pub mod loadtest;
pub mod metrics;
pub mod openai;
pub mod router;
pub mod routes;
pub mod sse;
pub mod text;
pub mod validate;
pub mod view;
pub mod workload;

pub use app::{App, ServerConfig};
pub use limits::Limits;
pub use listen::{bind, serve, Drained};
pub use router::router;
