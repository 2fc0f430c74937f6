//! Secrets never leave: an upstream that echoes Spillway's provider key (and, for good measure,
//! a client key and the admin token) in a 400 body, a 401 body or an error event mid-stream,
//! for each wire format, and the planted values are looked for everywhere they could surface:
//! the client's JSON and streamed answers, the router's log output, the ledger's rows (and
//! its database file), and the `/admin` answers that show errors (canary results), plus the
//! results of a synthetic call (a gate item).
//!
//! The upstream is a small canned server written here (axum on 127.0.0.1:0) that answers in the
//! provider's own shapes and quotes back the key the request carried.

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use spillway::canonical::{ChatRequest, Message, Role};
use spillway::ledger::Store;

const PROVIDER_KEY: &str = "prov-PLANTED-provider-key-7777";
const CLIENT_KEY: &str = "cli-PLANTED-client-key-4242";
const ADMIN_TOKEN: &str = "adm-PLANTED-admin-token-1313";
const PLANTED: [&str; 3] = [PROVIDER_KEY, CLIENT_KEY, ADMIN_TOKEN];
const MARKER: &str = "[redacted]";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Wire {
    OpenAi,
    Anthropic,
    Gemini,
}

impl Wire {
    fn kind(self) -> &'static str {
        match self {
            Wire::OpenAi => "openai",
            Wire::Anthropic => "anthropic",
            Wire::Gemini => "gemini",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// A non-2xx answer with the provider's error body.
    Status(u16),
    /// A 2xx stream: one text event, then the provider's error event.
    MidStream,
}

/// The canned upstream: what it answers, and the key the last request carried.
struct Echo {
    wire: Wire,
    mode: Mode,
    seen: Mutex<Option<String>>,
}

/// The text a careless upstream sends back: our key, and other secrets it should not know.
fn echo_text(key: &str) -> String {
    format!(
        "Incorrect API key provided: {key}. (request quoted a client key {CLIENT_KEY} and token {ADMIN_TOKEN})"
    )
}

fn error_body(wire: Wire, status: u16, message: &str) -> Value {
    match (wire, status) {
        (Wire::OpenAi, 401) => {
            json!({"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}})
        }
        (Wire::OpenAi, _) => json!({"error": {"message": message, "type": "invalid_request_error"}}),
        (Wire::Anthropic, 401) => {
            json!({"type": "error", "error": {"type": "authentication_error", "message": message}})
        }
        (Wire::Anthropic, _) => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        }
        (Wire::Gemini, 401) => {
            json!({"error": {"code": 401, "message": message, "status": "UNAUTHENTICATED"}})
        }
        (Wire::Gemini, _) => {
            json!({"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}})
        }
    }
}

fn sse(events: &[(Option<&str>, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| match name {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        })
        .collect()
}

fn broken_stream(wire: Wire, message: &str) -> String {
    match wire {
        Wire::OpenAi => sse(&[
            (
                None,
                json!({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
            ),
            (None, json!({"error": {"message": message, "type": "server_error"}})),
        ]),
        Wire::Anthropic => sse(&[
            (
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "m1", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 3, "output_tokens": 0}}}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
            ),
            (
                Some("error"),
                json!({"type": "error", "error": {"type": "overloaded_error", "message": message}}),
            ),
        ]),
        Wire::Gemini => sse(&[
            (None, json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]})),
            (None, json!({"error": {"code": 500, "message": message, "status": "INTERNAL"}})),
        ]),
    }
}

async fn answer(State(echo): State<Arc<Echo>>, headers: HeaderMap, _body: Bytes) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let key = header("authorization")
        .map(|v| v.trim_start_matches("Bearer ").to_string())
        .or_else(|| header("x-api-key"))
        .or_else(|| header("x-goog-api-key"))
        .unwrap_or_default();
    let message = echo_text(&key);
    *echo.seen.lock().unwrap() = Some(key);
    match echo.mode {
        Mode::Status(status) => {
            let code = StatusCode::from_u16(status).unwrap();
            (code, axum::Json(error_body(echo.wire, status, &message))).into_response()
        }
        Mode::MidStream => {
            ([("content-type", "text/event-stream")], broken_stream(echo.wire, &message)).into_response()
        }
    }
}

/// Start the canned upstream; its base URL and its state.
async fn echo(wire: Wire, mode: Mode) -> (String, Arc<Echo>) {
    let state = Arc::new(Echo { wire, mode, seen: Mutex::new(None) });
    let app = axum::Router::new().fallback(answer).with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, state)
}

/// Everything the router logs in this test binary, at debug level.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    Arc::clone(LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Arc::clone(&buffer);
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other test of the serving binary sets a global subscriber");
        buffer
    }))
}

fn log_text() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}

#[track_caller]
fn assert_clean(what: &str, text: &str) {
    for planted in PLANTED {
        assert!(!text.contains(planted), "`{planted}` leaked into {what}: {text}");
    }
}

#[track_caller]
fn assert_scrubbed(what: &str, text: &str) {
    assert_clean(what, text);
    assert!(text.contains(MARKER), "{what} shows the upstream's text, scrubbed: {text}");
}

fn config(wire: Wire, url: &str, ledger: &str) -> String {
    let base_url = match wire {
        Wire::OpenAi => format!("{url}/v1"),
        Wire::Anthropic => url.to_string(),
        Wire::Gemini => format!("{url}/v1beta"),
    };
    format!(
        r#"
client_keys_env: [SECRETS_CLIENT_KEY]
admin_token_env: SECRETS_ADMIN_TOKEN
backends:
  - {{name: echo, kind: {kind}, base_url: "{base_url}", model: m, api_key_env: SECRETS_PROVIDER_KEY}}
  - {{name: spare, kind: openai, base_url: "{url}/v1", model: m}}
tasks:
  - {{name: t, backends: [echo], slo: {{ttft_ms: 5000}}}}
  - {{name: probe, backends: [spare, echo], strategy: priority, slo: {{ttft_ms: 5000}}}}
canary: {{interval_secs: 0}}
ledger: {{url: "{ledger}"}}
"#,
        kind = wire.kind(),
    )
}

/// A client request with the planted client key; the status and the whole body as text.
async fn chat(url: &str, request_id: &str, stream: bool) -> (u16, String) {
    let resp = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(CLIENT_KEY)
        .header("x-request-id", request_id)
        .json(&json!({"model": "t", "stream": stream, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

async fn admin(url: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, String) {
    let mut req = reqwest::Client::new().request(method, format!("{url}{path}")).bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// Wait (up to 10 s) until the ledger holds `n` rows; every row.
async fn ledger_rows(url: &str, n: usize) -> Vec<spillway::ledger::LedgerRecord> {
    let store = Store::open(url).await.unwrap();
    let rows = common::wait_until(Duration::from_secs(10), format!("{n} rows in the ledger"), || async {
        let rows = store.query(i64::MIN, i64::MAX).await.unwrap();
        if rows.len() >= n {
            Ok(rows)
        } else {
            Err(format!("{} rows", rows.len()))
        }
    })
    .await;
    store.close().await;
    rows
}

async fn no_secret_leaves(wire: Wire, mode: Mode) {
    logs();
    let (url, upstream) = echo(wire, mode).await;
    let ledger = common::temp_ledger_url();
    let env = [
        ("SECRETS_PROVIDER_KEY", PROVIDER_KEY),
        ("SECRETS_CLIENT_KEY", CLIENT_KEY),
        ("SECRETS_ADMIN_TOKEN", ADMIN_TOKEN),
    ];
    let router = common::router(&config(wire, &url, &ledger), &env).await;
    let case = format!("{wire:?} {mode:?}");

    // The client's answers, whole and streamed.
    let (status, body) = chat(&router.url, "secrets-whole", false).await;
    let want = match mode {
        Mode::Status(400) => 400,
        _ => 502,
    };
    assert_eq!(status, want, "{case}: {body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert!(error["error"]["message"].is_string(), "{case}: an OpenAI-shaped error: {body}");
    assert_scrubbed(&format!("{case}: the JSON answer"), &body);
    assert_eq!(upstream.seen.lock().unwrap().as_deref(), Some(PROVIDER_KEY), "the upstream got our key");

    let (status, body) = chat(&router.url, "secrets-streamed", true).await;
    match mode {
        Mode::MidStream => {
            assert_eq!(status, 200, "{case}: committed at the first token: {body}");
            assert!(body.contains("Hel"), "{case}: the text before the break: {body}");
        }
        Mode::Status(_) => assert_eq!(status, want, "{case}: {body}"),
    }
    assert_scrubbed(&format!("{case}: the streamed answer"), &body);

    // The admin API's view of errors: a canary probe of the backend, then the fleet listing.
    let (status, body) =
        admin(&router.url, reqwest::Method::POST, "/admin/canary", Some(json!({"backend": "echo"}))).await;
    assert_eq!(status, 200, "{case}: {body}");
    let results: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(results["results"][0]["ok"], false, "{case}: {body}");
    assert_scrubbed(&format!("{case}: POST /admin/canary"), &body);
    let (status, body) = admin(&router.url, reqwest::Method::GET, "/admin/backends", None).await;
    assert_eq!(status, 200, "{case}: {body}");
    assert_clean(&format!("{case}: GET /admin/backends"), &body);

    // The ledger: two client requests and the canary. The bookkeeping logs a request's lines
    // before it hands the row to the ledger, so once the rows are in, so are the log lines.
    let rows = ledger_rows(&ledger, 3).await;
    assert_clean(&format!("{case}: the ledger rows"), &format!("{rows:?}"));
    let path = ledger.strip_prefix("sqlite://").unwrap();
    for file in [path.to_string(), format!("{path}-wal")] {
        if let Ok(bytes) = std::fs::read(&file) {
            assert_clean(&format!("{case}: the ledger file {file}"), &String::from_utf8_lossy(&bytes));
        }
    }

    // The logs (of every test in this binary: none may carry a planted value).
    let logged = log_text();
    assert!(logged.contains("canary failed"), "{case}: the failed canary was logged");
    assert_clean(&format!("{case}: the router's logs"), &logged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_400_body() {
    no_secret_leaves(Wire::OpenAi, Mode::Status(400)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_401_body() {
    no_secret_leaves(Wire::OpenAi, Mode::Status(401)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_error_mid_stream() {
    no_secret_leaves(Wire::OpenAi, Mode::MidStream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_400_body() {
    no_secret_leaves(Wire::Anthropic, Mode::Status(400)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_401_body() {
    no_secret_leaves(Wire::Anthropic, Mode::Status(401)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_error_mid_stream() {
    no_secret_leaves(Wire::Anthropic, Mode::MidStream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_400_body() {
    no_secret_leaves(Wire::Gemini, Mode::Status(400)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_401_body() {
    no_secret_leaves(Wire::Gemini, Mode::Status(401)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_error_mid_stream() {
    no_secret_leaves(Wire::Gemini, Mode::MidStream).await;
}

/// Calls made beside live traffic (gate items, judges, shadows) go through the dispatcher's
/// synthetic entry point and scrub their errors the same way (here as the CLI makes them: only
/// the provider keys known, a named node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_call_never_shows_the_key() {
    use spillway::dispatch::synthetic::{Destination, Purpose, SyntheticCall};
    use spillway::dispatch::{Dispatcher, Keys};
    for wire in [Wire::OpenAi, Wire::Anthropic, Wire::Gemini] {
        for mode in [Mode::Status(400), Mode::Status(401), Mode::MidStream] {
            let (url, upstream) = echo(wire, mode).await;
            let yaml = config(wire, &url, &common::temp_ledger_url());
            let config = Arc::new(spillway::config::parse(&yaml).unwrap());
            let (records, _kept) = tokio::sync::mpsc::unbounded_channel();
            let dispatcher = Dispatcher::new(
                config.dispatch.clone(),
                &config.tls,
                Keys {
                    api_keys: HashMap::from([("echo".to_string(), PROVIDER_KEY.to_string())]),
                    ..Keys::default()
                },
                records,
                spillway::guard::quota::QuotaBoard::new(&config, None),
            );
            let snap = spillway::snapshot::Snapshot::from_config(Arc::clone(&config));
            let request = ChatRequest {
                messages: vec![Message::new(Role::User, "hi")].into(),
                max_tokens: Some(8),
                ..Default::default()
            };
            let call = SyntheticCall {
                purpose: Purpose::Gate,
                task: &config.tasks[0],
                request,
                to: Destination::Node { backend: spillway::config::BackendId::new(0), node: 0 },
            };
            let err = dispatcher.synthetic(&snap, call).await.unwrap_err();
            assert_eq!(upstream.seen.lock().unwrap().as_deref(), Some(PROVIDER_KEY));
            assert!(!err.to_string().contains(PROVIDER_KEY), "{wire:?} {mode:?}: {err:?}");
            assert!(err.message().contains(MARKER), "{wire:?} {mode:?}: {err:?}");
        }
    }
}
