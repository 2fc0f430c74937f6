//! One harness over recorded cases per wire (`tests/fixtures/<wire>/cases/*.json`): a canonical
//! request in (with the task's cache placement, if the case names one), the body the upstream
//! must get, the upstream's answer replayed (a fixture file of the same wire: SSE, JSON, or for
//! Converse a list of `[event type, payload]` written as event-stream frames), and the answer the
//! client must get from its events. Each case goes through
//! `adapter::send` against a local server that records what it was sent, so the wire's request
//! builder and its stream or JSON parser are held to the recorded bytes together.
//!
//! A case of Claude's wire may also give the client's request as it wrote it (`native`: its
//! Messages body and its `anthropic-*` headers), the task's prompt `variant`, and the `host` that
//! serves it (`anthropic`, a Messages `node`, `bedrock`, `vertex`); such a case records the
//! path and the `anthropic-*` headers the upstream got (`upstream_head`), and with `count` also
//! the path and body of the host's token count route (`count_upstream`, Bedrock's base64 body
//! decoded). No object of a body sent may write a member twice (a parsed `Value` keeps only
//! the last, so that is checked on the text).
//!
//! `SPILLWAY_BLESS=1 cargo test --lib fixture` writes what the code does now into each case's
//! `upstream` and `answer`: for a new case, or after a deliberate change of wire (read the diff).

use std::path::{Path, PathBuf};

use futures::StreamExt;
use serde_json::{json, Value};

use super::provider::anthropic::Anthropic;
use super::provider::{bedrock::Bedrock, vertex::Vertex};
use super::transport::eventstream;
use super::transport::http::testing::{canned_server, Seen};
use super::{Call, Upstream, WireFormat};
use crate::canonical::{ChatRequest, Dialect, Event, NativeRequest};

/// The wire of each fixture folder.
fn wire(folder: &str) -> WireFormat {
    match folder {
        "openai" => WireFormat::OpenAi,
        "anthropic" => WireFormat::Claude(&Anthropic),
        "gemini" => WireFormat::Gemini,
        "converse" => WireFormat::BedrockConverse,
        other => panic!("no wire for fixture folder {other}"),
    }
}

/// The wire and upstream of a case's `host` (Claude's wire only; none: the folder's wire).
fn host(folder: &str, case: &Value, base: String) -> (WireFormat, Upstream) {
    let upstream = Upstream { base_url: base, api_key: Some("sk-fixture".into()), ..Upstream::default() };
    let format = match case["host"].as_str() {
        None => wire(folder),
        Some("anthropic") => WireFormat::Claude(&Anthropic),
        Some("bedrock") => WireFormat::Claude(&Bedrock),
        Some("vertex") => WireFormat::Claude(&Vertex),
        // A node serves the Messages API beside its OpenAI routes, below `/v1`.
        Some("node") => {
            let base_url = format!("{}/v1", upstream.base_url);
            return (WireFormat::OpenAi, Upstream { base_url, serves_messages: true, ..upstream });
        }
        Some(other) => panic!("no host {other}"),
    };
    (format, upstream)
}

/// The client's own Messages request of a case (`native`: `body` and `headers`), if it gives one.
fn native(case: &Value) -> Option<NativeRequest> {
    let native = case.get("native")?;
    let body = native["body"].as_object().expect("a Messages body is an object").clone();
    let headers = ["anthropic-version", "anthropic-beta"]
        .into_iter()
        .filter_map(|name| Some((name, native["headers"].get(name)?.as_str()?.to_string())))
        .collect();
    Some(NativeRequest { dialect: Dialect::AnthropicMessages, body: std::sync::Arc::new(body), headers })
}

/// The path and `anthropic-*` headers a request reached the upstream with.
fn head(seen: &Seen) -> Value {
    let mut headers = serde_json::Map::new();
    for (name, value) in &seen.headers {
        if name.as_str().starts_with("anthropic-") {
            headers.insert(name.to_string(), json!(value.to_str().unwrap()));
        }
    }
    json!({"path": seen.uri, "headers": headers})
}

/// A member some object of the JSON `text` writes twice, which a parsed `Value` would hide
/// (the last one winning): a typed body must not write a member the client's also passes on.
fn twice(text: &str) -> Option<String> {
    use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Unique;
    macro_rules! scalars {
        ($($visit:ident: $t:ty),*) => { $(fn $visit<E>(self, _: $t) -> Result<Unique, E> { Ok(Unique) })* };
    }
    impl<'de> Deserialize<'de> for Unique {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
            d.deserialize_any(Unique)
        }
    }
    impl<'de> Visitor<'de> for Unique {
        type Value = Unique;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<Unique>()?;
                if !seen.insert(key.clone()) {
                    return Err(de::Error::custom(key));
                }
            }
            Ok(Unique)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
            while seq.next_element::<Unique>()?.is_some() {}
            Ok(Unique)
        }
        scalars!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64, visit_str: &str);
        fn visit_unit<E>(self) -> Result<Unique, E> {
            Ok(Unique)
        }
    }
    serde_json::from_str::<Unique>(text).err().map(|e| e.to_string())
}

/// The path and body of a count call, Bedrock's base64 InvokeModel body read back as JSON.
fn counted(seen: &Seen) -> Value {
    use base64::Engine;
    assert_eq!(twice(&seen.body), None, "a member written twice");
    let mut body: Value = serde_json::from_str(&seen.body).unwrap();
    if let Some(Value::String(encoded)) = body.pointer_mut("/input/invokeModel/body") {
        let bytes = base64::engine::general_purpose::STANDARD.decode(&*encoded).unwrap();
        assert_eq!(twice(std::str::from_utf8(&bytes).unwrap()), None, "a member written twice");
        *body.pointer_mut("/input/invokeModel/body").unwrap() = serde_json::from_slice(&bytes).unwrap();
    }
    json!({"path": seen.uri, "body": body})
}

/// The answer a client gets from `events`: its text, reasoning, tool calls (pieces joined by
/// index), finish reason, usage, and the error that ended it, if one did.
fn answer(events: Vec<Result<Event, crate::canonical::UpstreamError>>) -> Value {
    let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::<Value>::new());
    let (mut finish, mut usage, mut error) = (Value::Null, Value::Null, Value::Null);
    for event in events {
        match event {
            Ok(Event::TextDelta(t)) => text += &t,
            Ok(Event::ReasoningDelta(t)) => reasoning += &t,
            Ok(Event::ToolCallDelta { index, id, name, arguments }) => {
                let at = match calls.iter().position(|c| c["index"] == index) {
                    Some(at) => at,
                    None => {
                        calls.push(json!({"index": index, "id": null, "name": null, "arguments": ""}));
                        calls.len() - 1
                    }
                };
                let call = &mut calls[at];
                if let Some(id) = id {
                    call["id"] = json!(minted(&id));
                }
                if let Some(name) = name {
                    call["name"] = json!(name);
                }
                call["arguments"] = json!(format!("{}{arguments}", call["arguments"].as_str().unwrap_or("")));
            }
            Ok(Event::Finish(reason)) => finish = json!(format!("{reason:?}")),
            Ok(Event::Usage(u)) => usage = serde_json::to_value(u).unwrap(),
            Ok(_) => {}
            Err(e) => error = json!(format!("{:?}: {}", e.class, e.message)),
        }
    }
    json!({"text": text, "reasoning": reasoning, "tool_calls": calls, "finish": finish, "usage": usage, "error": error})
}

/// A call id the adapter minted for a wire that has none (Gemini's: `call_<12 hex>_<n>`), with
/// its random part written as `minted`; any other id as it is.
fn minted(id: &str) -> String {
    let parts: Vec<&str> = id.split('_').collect();
    match parts.as_slice() {
        ["call", hex, n] if hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit()) => {
            format!("call_minted_{n}")
        }
        _ => id.to_string(),
    }
}

/// The media type and bytes of a replayed answer.
fn replay(file: &Path) -> (&'static str, bytes::Bytes) {
    let text = std::fs::read_to_string(file).unwrap();
    let name = file.to_string_lossy();
    if name.ends_with(".sse") {
        return ("text/event-stream", text.into());
    }
    if !name.ends_with(".events.json") {
        return ("application/json", text.into());
    }
    let events: Vec<(String, Value)> = serde_json::from_str(&text).unwrap();
    let mut frames = Vec::new();
    for (kind, payload) in events {
        let headers = [
            (":event-type", kind.as_str()),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ];
        frames.extend_from_slice(&eventstream::frame(&headers, payload.to_string().as_bytes()));
    }
    (eventstream::CONTENT_TYPE, frames.into())
}

fn cases() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut found = Vec::new();
    for folder in ["openai", "anthropic", "gemini", "converse"] {
        let dir = root.join(folder).join("cases");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        found.extend(files.into_iter().map(|f| (folder.to_string(), f)));
    }
    found
}

#[tokio::test]
async fn every_wire_sends_and_reads_its_recorded_cases() {
    let bless = std::env::var_os("SPILLWAY_BLESS").is_some();
    let cases = cases();
    assert!(cases.len() >= 6, "the cases are found: {cases:?}");
    assert_eq!(twice(r#"{"a": [{"b": null, "c": 1, "b": 2}]}"#).as_deref().map(|e| &e[..1]), Some("b"));
    for (folder, path) in cases {
        let mut case: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let named = path.display().to_string();
        let request: ChatRequest =
            serde_json::from_value(case["request"].clone()).unwrap_or_else(|e| panic!("{named}: {e}"));
        let replayed = case["replay"].as_str().unwrap_or_else(|| panic!("{named}: no replay file"));
        let (media, body) = replay(&path.parent().unwrap().join("..").join(replayed));
        let (base, seen) = canned_server(200, &[("content-type", media)], body).await;
        let (format, upstream) = host(&folder, &case, base);
        let mut request = request;
        request.native = native(&case);
        // A Messages door relays its upstream's events.
        request.relay = request.native.is_some();
        let placement = serde_json::from_value(case["cache_placement"].clone())
            .unwrap_or_else(|e| panic!("{named}: {e}"));
        let call = Call { cache_placement: placement, ..Call::as_written(format, upstream, &request) }
            .with_variant(case["variant"].as_str());
        let transport = reqwest::Client::new().into();
        let events: Vec<_> = match super::send(&transport, &call, &request).await {
            Ok(stream) => stream.collect().await,
            Err(e) => vec![Err(e)],
        };
        let seen = seen.lock().unwrap().clone();
        let sent: Value = serde_json::from_str(&seen.body).unwrap_or_else(|e| panic!("{named}: {e}"));
        assert_eq!(twice(&seen.body), None, "{named}: a member written twice");
        let sent_head = (case.get("host").is_some() || case.get("native").is_some()).then(|| head(&seen));
        let count = match case["count"].as_bool() {
            Some(true) => {
                let answered = json!({"input_tokens": 12, "inputTokens": 12}).to_string();
                let (base, seen) =
                    canned_server(200, &[("content-type", "application/json")], answered).await;
                let (format, upstream) = host(&folder, &case, base);
                let call = Call { format, upstream, ..call.clone() };
                let tokens = super::count_tokens(&transport, &call, &request).await;
                assert_eq!(tokens.ok(), Some(12), "{named}: the count");
                let seen = seen.lock().unwrap().clone();
                Some(counted(&seen))
            }
            _ => None,
        };
        let got = answer(events);
        if bless {
            case["upstream"] = sent;
            case["answer"] = got;
            if let Some(sent_head) = sent_head {
                case["upstream_head"] = sent_head;
            }
            if let Some(count) = count {
                case["count_upstream"] = count;
            }
            std::fs::write(&path, serde_json::to_string_pretty(&case).unwrap() + "\n").unwrap();
            continue;
        }
        assert_eq!(sent, case["upstream"], "{named}: the body the upstream got");
        assert_eq!(got, case["answer"], "{named}: the answer the client gets");
        if let Some(sent_head) = sent_head {
            assert_eq!(sent_head, case["upstream_head"], "{named}: the path and headers the upstream got");
        }
        if let Some(count) = count {
            assert_eq!(count, case["count_upstream"], "{named}: the count call");
        }
    }
}
