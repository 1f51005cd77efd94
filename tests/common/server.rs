//! A `kvlab serve` of the real model on a free loopback port, for the tests that talk
//! HTTP to it (server_hostile.rs, live_view.rs).

use super::MODEL_DIR;
use kvlab::engine::EngineConfig;
use kvlab::server::metrics::read_value;
use kvlab::server::{App, Drained, Limits, ServerConfig};
use kvlab::tokenizer::Tokenizer;
use kvlab::{loader, Model};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

pub fn model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            Arc::new(loader::load_model(Path::new(MODEL_DIR)).expect("the model loads"))
        })
        .clone()
}

/// A server on a free loopback port with `limits` and `api_key`.
pub struct Server {
    pub addr: SocketAddr,
    pub app: Arc<App>,
    pub client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: JoinHandle<std::io::Result<Drained>>,
}

impl Server {
    pub async fn start(limits: Limits, api_key: Option<&str>) -> Server {
        Server::start_with(ServerConfig {
            engine: EngineConfig::default(),
            limits,
            api_key: api_key.map(str::to_string),
            ..ServerConfig::new("smollm2")
        })
        .await
    }

    /// A server of `config` (the real model) on a free loopback port.
    pub async fn start_with(config: ServerConfig) -> Server {
        let limits = config.limits;
        let tokenizer = Tokenizer::from_dir(Path::new(MODEL_DIR)).expect("the tokenizer loads");
        let app = App::new(model(), tokenizer, config).expect("the engine starts");
        let listener =
            kvlab::server::bind("127.0.0.1:0".parse().unwrap(), &limits).expect("a free port");
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(kvlab::server::serve(listener, app.clone(), async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            app,
            client: reqwest::Client::new(),
            stop: Some(stop),
            served,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn get(
        &self,
        path: &str,
        key: Option<&str>,
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let mut request = self.client.get(self.url(path));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.text().await.unwrap())
    }

    pub async fn chat(&self, body: Value, key: Option<&str>) -> (u16, Value) {
        let mut request = self
            .client
            .post(self.url("/v1/chat/completions"))
            .json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON body"))
    }

    pub async fn metric(&self, name: &str) -> f64 {
        let (_, _, page) = self.get("/metrics", None).await;
        read_value(&page, name).unwrap_or_else(|| panic!("{name} missing from /metrics"))
    }

    /// Waits (up to 60 s) until `/metrics` shows `name` at `value`.
    pub async fn wait_for_metric(&self, name: &str, value: f64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = self.metric(name).await;
            if now == value {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} is {now}, expected {value}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends the shutdown and waits for the drain.
    pub async fn stop(mut self) -> Drained {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(60), self.served)
            .await
            .expect("the server stops")
            .unwrap()
            .expect("no socket error")
    }
}
