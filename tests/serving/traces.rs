//! OpenTelemetry traces end to end: a router exporting to an OTLP/HTTP receiver on loopback,
//! a failed-over request with a client `traceparent`, and the spans the receiver decodes.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use common::*;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Span};
use prost::Message;
use serde_json::json;
use spillway::sim::{SimArgs, SimKind};

const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
/// Text that must never reach a span.
const PROMPT: &str = "the-secret-prompt-7f3a9c: summarise our merger plans";

/// An OTLP/HTTP traces receiver: every body posted to `/v1/traces`, as sent, and the
/// `authorization` header of each post.
struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<Bytes>>>,
    authorizations: Arc<Mutex<Vec<String>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Receiver {
        let bodies: Arc<Mutex<Vec<Bytes>>> = Arc::default();
        let authorizations: Arc<Mutex<Vec<String>>> = Arc::default();
        let (kept, auth) = (Arc::clone(&bodies), Arc::clone(&authorizations));
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
                let (kept, auth) = (Arc::clone(&kept), Arc::clone(&auth));
                async move {
                    assert_eq!(headers["content-type"], "application/x-protobuf");
                    if let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
                        auth.lock().unwrap().push(value.to_string());
                    }
                    kept.lock().unwrap().push(body);
                    // An empty ExportTraceServiceResponse: every span accepted.
                    ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { url, bodies, authorizations, _task: task }
    }

    fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        let bodies = self.bodies.lock().unwrap();
        bodies.iter().map(|b| ExportTraceServiceRequest::decode(b.as_ref()).unwrap()).collect()
    }

    /// The spans of every export of service `spillway`.
    fn spans(&self) -> Vec<Span> {
        self.spans_of("spillway")
    }

    fn spans_of(&self, service: &str) -> Vec<Span> {
        self.requests()
            .into_iter()
            .flat_map(|r| r.resource_spans)
            .inspect(|rs| {
                let resource = rs.resource.as_ref().expect("a resource");
                let name = resource.attributes.iter().find(|kv| kv.key == "service.name");
                assert_eq!(name.map(|kv| string(&kv.value)).as_deref(), Some(service));
            })
            .flat_map(|rs| rs.scope_spans)
            .flat_map(|ss| ss.spans)
            .collect()
    }

    fn bytes(&self) -> Vec<u8> {
        self.bodies.lock().unwrap().iter().flat_map(|b| b.to_vec()).collect()
    }
}

fn string(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// A span's attribute as JSON (strings, integers, arrays of strings), `null` when absent.
fn attr(span: &Span, key: &str) -> serde_json::Value {
    let Some(kv) = span.attributes.iter().find(|kv| kv.key == key) else {
        return serde_json::Value::Null;
    };
    fn json_of(value: &Value) -> serde_json::Value {
        match value {
            Value::StringValue(s) => json!(s),
            Value::IntValue(i) => json!(i),
            Value::BoolValue(b) => json!(b),
            Value::ArrayValue(a) => {
                a.values.iter().filter_map(|v| v.value.as_ref()).map(json_of).collect::<Vec<_>>().into()
            }
            other => panic!("unexpected attribute value {other:?}"),
        }
    }
    json_of(kv.value.as_ref().and_then(|v| v.value.as_ref()).expect("a value"))
}

fn config(local: &str, hosted: &str) -> String {
    format!(
        r#"
backends:
  - {{name: local, kind: vllm, endpoints: [{local}], model: {LLAMA}}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt-5.6}}
tasks:
  - {{name: t, backends: [local, hosted], slo: {{ttft_ms: 300}}}}
dispatch: {{ttft_deadline_factor: 1.0, backoff_base_ms: 1, backoff_max_ms: 5}}
"#
    )
}

fn failing_503(a: &mut SimArgs) {
    a.error_rate = 1.0;
    a.error_status = 503;
}

/// A streamed chat request for task `t` with `traceparent`: status, attempts header, the
/// usage chunk and the finish reason the client saw.
async fn chat(router: &str, traceparent: &str) -> (u16, String, serde_json::Value, String) {
    let body = json!({
        "model": "t",
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": 12,
        "messages": [{"role": "user", "content": PROMPT}],
    });
    let resp = reqwest::Client::new()
        .post(format!("{router}/v1/chat/completions"))
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let attempts = resp.headers().get("x-spillway-attempts").map_or("", |v| v.to_str().unwrap()).to_string();
    let (mut usage, mut finish) = (serde_json::Value::Null, String::new());
    let mut events = resp.bytes_stream().eventsource();
    while let Some(Ok(event)) = events.next().await {
        let Ok(chunk) = serde_json::from_str::<serde_json::Value>(&event.data) else { continue };
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
        if let Some(reason) = chunk["choices"][0]["finish_reason"].as_str() {
            finish = reason.to_string();
        }
    }
    (status, attempts, usage, finish)
}

#[tokio::test]
async fn a_failed_over_request_is_one_server_span_with_a_client_span_per_attempt() {
    let receiver = Receiver::start().await;
    let local = sim(SimKind::Vllm, LLAMA, failing_503).await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = spillway::app::Options {
        tracing: spillway::trace::Settings::to(format!("{}/v1/traces", receiver.url)),
        ..Default::default()
    };
    let shutdown = async move {
        let _ = stopped.await;
    };
    let mut router =
        router_until(&config(&local.base_url(), &hosted.base_url()), &[], options, shutdown).await;
    router.wait_fresh().await;

    let (trace_id, client_span) = (format!("{:032x}", rand::random::<u128>() | 1), "00f067aa0ba902b7");
    let (status, attempts, usage, finish) =
        chat(&router.url, &format!("00-{trace_id}-{client_span}-01")).await;
    assert_eq!((status, attempts.as_str()), (200, "2"));
    assert!(usage["completion_tokens"].as_u64().is_some_and(|n| n > 0), "{usage}");
    assert!(usage["prompt_tokens"].as_u64().is_some_and(|n| n > 0), "{usage}");
    assert!(!finish.is_empty(), "the client saw a finish reason");

    // A graceful stop exports what is queued.
    let _ = stop.send(());
    (&mut router.handle.task).await.unwrap().unwrap();
    let spans = wait_until(Duration::from_secs(5), "three spans at the receiver", || {
        let spans = receiver.spans();
        async move {
            if spans.len() >= 3 {
                Ok(spans)
            } else {
                Err(format!("{} spans", spans.len()))
            }
        }
    })
    .await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let hex = |bytes: &[u8]| hex::encode(bytes);

    let servers: Vec<&Span> = spans.iter().filter(|s| s.kind == SpanKind::Server as i32).collect();
    assert_eq!(servers.len(), 1, "one server span");
    let server = servers[0];
    assert_eq!(hex(&server.trace_id), trace_id, "the client's trace");
    assert_eq!(hex(&server.parent_span_id), client_span, "the client's span is the parent");
    assert_eq!(server.name, "chat t");
    assert_eq!(attr(server, "gen_ai.operation.name"), "chat");
    assert_eq!(attr(server, "gen_ai.request.model"), "t");
    assert_eq!(attr(server, "gen_ai.response.model"), "gpt-5.6");
    assert_eq!(attr(server, "gen_ai.provider.name"), "openai");
    assert_eq!(attr(server, "spillway.task"), "t");
    assert_eq!(attr(server, "spillway.backend"), "hosted");
    assert_eq!(attr(server, "spillway.attempt"), 2);
    assert_eq!(attr(server, "http.response.status_code"), 200);
    assert_eq!(attr(server, "error.type"), serde_json::Value::Null);

    let mut clients: Vec<&Span> = spans.iter().filter(|s| s.kind == SpanKind::Client as i32).collect();
    clients.sort_by_key(|s| attr(s, "spillway.attempt").as_i64());
    assert_eq!(clients.len(), 2, "a client span per attempt");
    for client in &clients {
        assert_eq!(client.trace_id, server.trace_id);
        assert_eq!(client.parent_span_id, server.span_id, "attempts are children of the request");
        assert_eq!(attr(client, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(client, "spillway.task"), "t");
        assert!(client.start_time_unix_nano >= server.start_time_unix_nano);
        assert!(client.end_time_unix_nano <= server.end_time_unix_nano, "the request outlives its calls");
    }
    let (failed, served) = (clients[0], clients[1]);
    assert_eq!(attr(failed, "spillway.attempt"), 1);
    assert_eq!(attr(failed, "spillway.backend"), "local");
    assert_eq!(attr(failed, "gen_ai.provider.name"), "local");
    assert_eq!(attr(failed, "gen_ai.request.model"), LLAMA);
    assert_eq!(attr(failed, "spillway.node"), format!("local/{LLAMA}@{}/v1", local.base_url()));
    assert_eq!(attr(failed, "error.type"), "overloaded");
    assert_eq!(attr(failed, "http.response.status_code"), 503);
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    assert_eq!(attr(failed, "gen_ai.usage.output_tokens"), serde_json::Value::Null);

    assert_eq!(attr(served, "spillway.attempt"), 2);
    assert_eq!(attr(served, "spillway.backend"), "hosted");
    assert_eq!(attr(served, "gen_ai.provider.name"), "openai");
    assert_eq!(attr(served, "gen_ai.request.model"), "gpt-5.6");
    assert_eq!(attr(served, "gen_ai.response.model"), "gpt-5.6");
    assert_eq!(attr(served, "error.type"), serde_json::Value::Null);
    for span in [server, served] {
        assert_eq!(attr(span, "gen_ai.usage.input_tokens"), usage["prompt_tokens"], "{}", span.name);
        assert_eq!(attr(span, "gen_ai.usage.output_tokens"), usage["completion_tokens"]);
        let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
        assert_eq!(attr(span, "gen_ai.usage.cache_read.input_tokens"), cached);
        assert_eq!(attr(span, "gen_ai.response.finish_reasons"), json!([finish]));
    }

    // Each upstream was called as the child of its attempt's span, in the client's trace.
    let sent = |span: &Span| format!("00-{trace_id}-{}-01", hex(&span.span_id));
    assert_eq!(local.traceparents(), vec![sent(failed)]);
    assert_eq!(hosted.traceparents(), vec![sent(served)]);

    let exported = String::from_utf8_lossy(&receiver.bytes()).to_string();
    assert!(!exported.contains("the-secret-prompt"), "prompt text in the exported spans");
}

#[tokio::test]
async fn tracing_is_off_by_default_and_sends_nothing_upstream() {
    assert!(!spillway::trace::Tracing::start(&spillway::trace::Settings::default()).unwrap().is_on());
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let yaml = format!(
        "backends: [{{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6}}]\n\
         tasks: [{{name: t, backends: [hosted], slo: {{ttft_ms: 300}}}}]\n",
        hosted.base_url()
    );
    let router = router(&yaml, &[]).await;
    let (status, ..) = chat(&router.url, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").await;
    assert_eq!(status, 200);
    assert!(hosted.traceparents().is_empty(), "no trace context goes upstream when tracing is off");
}

#[tokio::test]
async fn a_malformed_traceparent_starts_a_new_trace() {
    let receiver = Receiver::start().await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let yaml = format!(
        "backends: [{{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6}}]\n\
         tasks: [{{name: t, backends: [hosted], slo: {{ttft_ms: 300}}}}]\n",
        hosted.base_url()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = spillway::app::Options {
        tracing: spillway::trace::Settings::to(format!("{}/v1/traces", receiver.url)),
        ..Default::default()
    };
    let mut router = router_until(&yaml, &[], options, async move {
        let _ = stopped.await;
    })
    .await;
    let (status, ..) = chat(&router.url, "00-not-a-trace-01").await;
    assert_eq!(status, 200, "a bad traceparent is no error");
    let _ = stop.send(());
    (&mut router.handle.task).await.unwrap().unwrap();
    let spans = receiver.spans();
    let server = spans.iter().find(|s| s.kind == SpanKind::Server as i32).expect("a server span");
    assert!(server.parent_span_id.is_empty(), "a root span");
    assert_eq!(server.trace_id.len(), 16);
    let sent = hosted.traceparents();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].starts_with(&format!("00-{}-", hex::encode(&server.trace_id))), "{sent:?}");
}

/// `spillway serve` reads the standard variables: the endpoint, the export headers (sent to
/// the receiver, never logged) and the service name; SIGTERM exports what is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spillway_serve_exports_where_the_otel_variables_say() {
    const TOKEN: &str = "otlp-PLANTED-token-3131";
    let receiver = Receiver::start().await;
    let hosted = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let dir = std::env::temp_dir().join(format!("spillway-traces-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.yaml");
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         backends: [{{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6}}]\n\
         tasks: [{{name: t, backends: [hosted], slo: {{ttft_ms: 3000}}}}]\n\
         limits: {{shutdown_delay_ms: 0}}\n\
         ledger: {{url: \"sqlite://{}\"}}\n",
        hosted.base_url(),
        dir.join("ledger.db").display()
    );
    std::fs::write(&path, yaml).unwrap();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_EXPORTER_OTLP_HEADERS", &format!("authorization=Bearer%20{TOKEN}")),
        ("OTEL_SERVICE_NAME", "router-eu"),
        ("RUST_LOG", "debug"),
    ];
    let (mut server, url, stderr) = serve_process(&path, &env).await;
    let (status, ..) = chat(&url, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").await;
    assert_eq!(status, 200);
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    let logs = stderr.into_text();

    let spans = receiver.spans_of("router-eu");
    let server_span = spans.iter().find(|s| s.kind == SpanKind::Server as i32).expect("a server span");
    assert_eq!(server_span.name, "chat t");
    assert_eq!(hex::encode(&server_span.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(spans.iter().any(|s| s.kind == SpanKind::Client as i32), "{spans:#?}");
    let authorizations = receiver.authorizations.lock().unwrap().clone();
    assert!(!authorizations.is_empty() && authorizations.iter().all(|a| a == &format!("Bearer {TOKEN}")));
    assert!(logs.contains("exporting traces over OTLP/HTTP"), "{logs}");
    assert!(!logs.contains(TOKEN), "the export header leaked into the logs");
    let _ = std::fs::remove_dir_all(&dir);
}
