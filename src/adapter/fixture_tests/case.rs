//! What a case sets up and what it records of the call: the wire and upstream of its `host`,
//! the client's own request (`native`, named by its `dialect`), the canned answer (a fixture of
//! the case's folder, with the `status` and `headers` the case gives), and what the upstream
//! got: its body (no member written twice), its path and selected headers, and a count call.

use std::path::Path;

use serde_json::{json, Value};

use super::super::provider::anthropic::Anthropic;
use super::super::provider::{bedrock::Bedrock, vertex::Vertex};
use super::super::transport::eventstream;
use super::super::transport::http::testing::Seen;
use super::super::{Upstream, WireFormat};
use crate::canonical::{Dialect, NativeRequest};

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

/// The wire and upstream of a case's `host` (none: the folder's wire), at the case's
/// `base_path` below the canned server, with its `api_key` (absent: `sk-fixture`; `null`: none).
pub(super) fn host(folder: &str, case: &Value, base: String) -> (WireFormat, Upstream) {
    let base_url = format!("{base}{}", case["base_path"].as_str().unwrap_or(""));
    let api_key = match case.get("api_key") {
        None => Some("sk-fixture".into()),
        Some(key) => key.as_str().map(String::from),
    };
    let upstream = Upstream { base_url, api_key, ..Upstream::default() };
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
        // OpenAI itself, which keeps the state a Responses request leans on.
        Some("responses") => return (WireFormat::OpenAi, Upstream { serves_responses: true, ..upstream }),
        Some(other) => panic!("no host {other}"),
    };
    (format, upstream)
}

/// The client's own request of a case (`native`: its `dialect`, its `body`, and for Messages
/// its `anthropic-version` / `anthropic-beta` `headers`), if it gives one.
pub(super) fn native(case: &Value) -> Option<NativeRequest> {
    let native = case.get("native")?;
    let dialect = match native["dialect"].as_str() {
        Some("anthropic_messages") => Dialect::AnthropicMessages,
        Some("openai_responses") => Dialect::OpenAiResponses,
        other => panic!("no dialect {other:?}"),
    };
    assert!(native["body"].is_object(), "a native body is an object");
    let headers = ["anthropic-version", "anthropic-beta"]
        .into_iter()
        .filter_map(|name| Some((name, native["headers"].get(name)?.as_str()?.to_string())))
        .collect();
    Some(NativeRequest { headers, ..NativeRequest::of_tree(dialect, &native["body"]) })
}

/// The headers of a call a case records: the version and betas, and the key as each wire sends it.
fn recorded(name: &str) -> bool {
    name.starts_with("anthropic-") || ["authorization", "x-api-key", "x-goog-api-key"].contains(&name)
}

/// The path and recorded headers a request reached the upstream with.
pub(super) fn head(seen: &Seen) -> Value {
    let mut headers = serde_json::Map::new();
    for (name, value) in &seen.headers {
        if recorded(name.as_str()) {
            headers.insert(name.to_string(), json!(value.to_str().unwrap()));
        }
    }
    json!({"path": seen.uri, "headers": headers})
}

/// A member some object of the JSON `text` writes twice, which a parsed `Value` would hide
/// (the last one winning): a typed body must not write a member the client's also passes on.
pub(super) fn twice(text: &str) -> Option<String> {
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
pub(super) fn counted(seen: &Seen) -> Value {
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

/// The canned answer of a case: its `status` (200 unless given), its headers (the replayed
/// file's media type and the case's `headers`), and the bytes of its `replay` file.
pub(super) fn canned(case: &Value, dir: &Path) -> (u16, Vec<(&'static str, &'static str)>, bytes::Bytes) {
    let replayed = case["replay"].as_str().expect("a replay file");
    let (media, body) = replay(&dir.join(replayed));
    let mut headers = vec![("content-type", media)];
    for (name, value) in case["headers"].as_object().into_iter().flatten() {
        let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
        headers.push((leak(name), leak(value.as_str().expect("a header is a string"))));
    }
    let status = case["status"].as_u64().map_or(200, |s| s as u16);
    (status, headers, body)
}

/// The media type and bytes of a replayed answer.
fn replay(file: &Path) -> (&'static str, bytes::Bytes) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
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
