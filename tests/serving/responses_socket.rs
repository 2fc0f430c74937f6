//! The Responses WebSocket mode end to end, as Codex speaks it: a real router, a real
//! WebSocket client, simulators behind. A warm-up (`generate: false`) is answered with no
//! backend asked; a `response.create` is served through the same door as a POST and its
//! events come one per message up to `response.completed`; a continuation
//! (`previous_response_id` and only the new items) reaches the backend as the whole
//! conversation; one naming another response closes the socket; bad input is an `error`
//! message with the status a POST gets; the key is checked at the upgrade.

use crate::common;

use common::*;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use spillway::sim::{SimHandle, SimKind};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A task `t` over hosted OpenAI (a simulator, which keeps each body it gets), behind the key
/// `sk-codex`.
async fn setup() -> (SimHandle, Router) {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let yaml = format!(
        "client_keys_env: [KEY_CODEX]\n\
         backends: [{{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6}}]\n\
         tasks: [{{name: t, aliases: [gpt-6.2-sol], backends: [hosted], slo: {{ttft_ms: 2000}}}}]\n",
        openai.base_url()
    );
    let router = router(&yaml, &[("KEY_CODEX", "sk-codex")]).await;
    (openai, router)
}

/// Open the socket as Codex does, with `key`.
async fn connect(
    router: impl AsRef<str>,
    key: &str,
) -> Result<Socket, tokio_tungstenite::tungstenite::Error> {
    let url = format!("{}/v1/responses", router.as_ref().replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert("authorization", format!("Bearer {key}").parse().unwrap());
    headers.insert("openai-beta", "responses_websockets=2026-02-06".parse().unwrap());
    headers.insert("session-id", "s-1".parse().unwrap());
    tokio_tungstenite::connect_async(request).await.map(|(socket, _)| socket)
}

/// Send one `response.create` and read its messages up to a final one.
async fn create(socket: &mut Socket, body: Value) -> Vec<Value> {
    let mut message = json!({"type": "response.create"});
    message.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
    socket.send(Message::text(message.to_string())).await.unwrap();
    let mut events = Vec::new();
    while let Some(message) = socket.next().await {
        let Message::Text(text) = message.unwrap() else { continue };
        let event: Value = serde_json::from_str(&text).unwrap();
        let last = ["response.completed", "response.failed", "response.incomplete", "error"]
            .contains(&event["type"].as_str().unwrap_or_default());
        events.push(event);
        if last {
            return events;
        }
    }
    panic!("the socket closed before a final message: {events:#?}");
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap_or_default()).collect()
}

/// Codex's request fields beside `input`, sent again with every message.
fn codex(input: Value) -> Value {
    json!({"model": "gpt-6.2-sol", "instructions": "be brief", "input": input, "stream": true, "store": false,
           "tools": [], "tool_choice": "auto", "parallel_tool_calls": false, "prompt_cache_key": "s-1",
           "client_metadata": {"x-codex-turn-metadata": "{\"request_kind\":\"turn\"}"}})
}

#[tokio::test]
async fn a_socket_serves_a_warm_up_a_turn_and_its_continuation_as_codex_sends_them() {
    let (openai, router) = setup().await;
    let mut socket = connect(&router, "sk-codex").await.unwrap();

    // The warm-up: an empty response, from no backend.
    let mut warm_up = codex(json!([]));
    warm_up["generate"] = json!(false);
    let warmed = create(&mut socket, warm_up).await;
    assert_eq!(types(&warmed), ["response.created", "response.in_progress", "response.completed"]);
    let warm_id = warmed[2]["response"]["id"].as_str().unwrap().to_string();
    assert_eq!(warmed[2]["response"]["output"], json!([]));
    assert!(openai.requests().is_empty(), "the warm-up reached no backend");

    // The first turn continues the warm-up with its new items: the backend gets those.
    let hello =
        json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}]);
    let mut turn = codex(hello.clone());
    turn["previous_response_id"] = json!(warm_id);
    let first = create(&mut socket, turn).await;
    assert_eq!(types(&first)[..2], ["response.created", "response.in_progress"], "{first:#?}");
    assert_eq!(types(&first).last(), Some(&"response.completed"), "{first:#?}");
    assert!(types(&first).contains(&"response.output_text.delta"));
    let done = &first.last().unwrap()["response"];
    assert_eq!(done["model"], "t", "the task the alias names: {done}");
    let answer = first.iter().find(|e| e["type"] == "response.output_item.done").unwrap()["item"].clone();
    let sent = openai.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["input"], hello, "the warm-up added nothing");
    for field in ["previous_response_id", "client_metadata", "generate", "type"] {
        assert!(sent[0].get(field).is_none(), "{field} is the socket's, not the backend's: {}", sent[0]);
    }

    // The next continues the first: the backend gets the whole conversation.
    let more =
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]});
    let mut turn = codex(json!([more]));
    turn["previous_response_id"] = done["id"].clone();
    let second = create(&mut socket, turn).await;
    assert_eq!(types(&second).last(), Some(&"response.completed"), "{second:#?}");
    let whole = openai.requests()[1]["input"].clone();
    assert_eq!(whole, json!([hello[0], answer, more]), "the input, the answer, then the new item");

    // A continuation of a response this socket did not answer closes it: the client starts
    // again with the whole conversation.
    let mut stale = codex(json!([more]));
    stale["previous_response_id"] = json!("resp_elsewhere");
    let mut message = json!({"type": "response.create"});
    message.as_object_mut().unwrap().extend(stale.as_object().unwrap().clone());
    socket.send(Message::text(message.to_string())).await.unwrap();
    let closed = loop {
        match socket.next().await {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => panic!("the router closed the socket with a frame: {other:?}"),
        }
    };
    assert_eq!(closed.map(|f| u16::from(f.code)), Some(1011));
    assert_eq!(openai.requests().len(), 2, "the stale request reached no backend");
}

#[tokio::test]
async fn the_key_is_checked_at_the_upgrade_and_a_plain_get_is_told_what_the_route_is() {
    let (_openai, router) = setup().await;
    match connect(&router, "sk-wrong").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("a wrong key is refused at the upgrade: {:?}", other.map(|_| ())),
    }
    let plain = reqwest::get(format!("{}/v1/responses", router.url)).await.unwrap();
    assert_eq!(plain.status(), 400);
    let envelope: Value = plain.json().await.unwrap();
    let message = envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains("WebSocket") && message.contains("POST"), "{envelope}");
    // The socket's requests are the POST door's: refused as there, with the status as a field
    // (the socket stays open), and counted there, once each.
    let mut socket = connect(&router, "sk-codex").await.unwrap();
    let refused = create(&mut socket, json!({"input": "hi"})).await;
    assert_eq!((refused[0]["type"].as_str(), refused[0]["status"].as_u64()), (Some("error"), Some(400)));
    assert_eq!(refused[0]["error"]["param"], "model", "{refused:?}");
    let unknown = create(&mut socket, json!({"type": "response.cancel"})).await;
    assert_eq!(unknown[0]["status"], 400, "{unknown:?}");
    let answered = create(&mut socket, codex(json!("hi"))).await;
    assert_eq!(types(&answered).last(), Some(&"response.completed"));
    let series = r#"spillway_requests_total{backend="hosted",outcome="completed",task="t"}"#;
    assert_eq!(wait_metric(&router, series, 1.0, std::time::Duration::from_secs(5)).await, 1.0);
}

/// An open socket is its client's connection until it closes (counted, under the per-client
/// cap, held open through a drain's wait), and SIGTERM closes it with 1001 (going away) so
/// the client reconnects elsewhere, within the drain deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_counts_as_a_connection_and_a_drain_closes_it_going_away() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let dir = std::env::temp_dir().join(format!("spillway-socket-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.yaml");
    let yaml = format!(
        "listen: 127.0.0.1:0\n\
         backends: [{{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt-5.6}}]\n\
         tasks: [{{name: t, aliases: [gpt-6.2-sol], backends: [hosted], slo: {{ttft_ms: 2000}}}}]\n\
         limits: {{shutdown_delay_ms: 0, drain_timeout_ms: 5000}}\n",
        openai.base_url()
    );
    std::fs::write(&path, yaml).unwrap();
    let (server, url, _stderr) = serve_process(&path, &[]).await;
    let mut server = common::Child(server);
    let mut socket = connect(&url, "any").await.unwrap();
    let answered = create(&mut socket, codex(json!("hi"))).await;
    assert_eq!(types(&answered).last(), Some(&"response.completed"));
    // The socket and the metrics call itself.
    let open = "spillway_client_connections_open";
    assert_eq!(wait_metric(&url, open, 2.0, std::time::Duration::from_secs(5)).await, 2.0);

    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    let closed = tokio::time::timeout(std::time::Duration::from_secs(4), async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                other => panic!("the router closed the socket with a frame: {other:?}"),
            }
        }
    })
    .await
    .expect("the socket closed before the drain deadline");
    assert_eq!(closed, Some(1001));
    let status = tokio::task::spawn_blocking(move || server.0.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status:?}");
    std::fs::remove_dir_all(&dir).ok();
}
