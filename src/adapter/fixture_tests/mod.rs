//! One harness over recorded cases per wire (`tests/fixtures/<wire>/cases/*.json`): a canonical
//! request in (with the task's cache placement, if the case names one), the body the upstream
//! must get, the upstream's answer replayed (a fixture file of the same wire: SSE, JSON, or for
//! Converse a list of `[event type, payload]` written as event-stream frames, with the `status`
//! and `headers` the case gives, so an error answer is a case too), and the answer the client
//! must get from its events (`answer.rs`). Each case goes through `adapter::send` against a
//! local server that records what it was sent, so the wire's request builder and its stream or
//! JSON parser are held to the recorded bytes together.
//!
//! A case may name the `host` that serves it (for Claude's wire `anthropic`, a Messages `node`,
//! `bedrock`, `vertex`; for OpenAI's, `responses`: OpenAI itself, which serves Responses), a
//! `base_path` below the server and an `api_key` (`null`: none), and give the client's request
//! as it wrote it (`native`: its `dialect`, `anthropic_messages` or `openai_responses`, its body
//! and for Messages its `anthropic-*` headers), the task's prompt `variant`, and `count` to ask
//! the host's token count. The path and the version, beta and key headers of the call are
//! recorded as `upstream_head` (`case.rs`), and with `count` the path and body of the count
//! route as `count_upstream` (Bedrock's base64 body decoded). No object of a body sent may
//! write a member twice (a parsed `Value` keeps only the last, so that is checked on the text).
//! Every body goes as `content-type: application/json`; a request refused before any call
//! records `upstream: null`.
//!
//! `SPILLWAY_BLESS=1 cargo test --lib fixture` records what the code does now into each NEW case
//! (one without an `answer`); the others are checked as usual. To re-record a case after a
//! deliberate change of wire, delete its recorded members and read the diff.

mod answer;
mod case;

use std::path::{Path, PathBuf};

use futures::StreamExt;
use serde_json::{json, Value};

use super::transport::http::testing::canned_server;
use super::Call;
use crate::canonical::ChatRequest;
use answer::answer;
use case::{canned, counted, head, host, native, twice};

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
        let new = case.get("answer").is_none();
        let mut request: ChatRequest =
            serde_json::from_value(case["request"].clone()).unwrap_or_else(|e| panic!("{named}: {e}"));
        let (status, headers, body) = canned(&case, &path.parent().unwrap().join(".."));
        let (base, seen) = canned_server(status, &headers, body).await;
        let (format, upstream) = host(&folder, &case, base);
        request.native = native(&case);
        // A door of the client's own dialect relays its upstream's events; the case reads the
        // canonical events beside them, as a shadow's grade would.
        request.relay = request.native.is_some();
        request.shadowed = request.relay;
        let placement = serde_json::from_value(case["cache_placement"].clone())
            .unwrap_or_else(|e| panic!("{named}: {e}"));
        let call = Call { cache_placement: placement, ..Call::as_written(format, upstream, &request) }
            .with_variant(case["variant"].as_str());
        let transport = reqwest::Client::new().into();
        let events = send_all(&transport, &call, &request).await;
        let seen = seen.lock().unwrap().clone();
        // A request refused before any call leaves nothing seen: its `upstream` is `null`.
        let sent: Value = match seen.body.as_str() {
            "" => Value::Null,
            body => serde_json::from_str(body).unwrap_or_else(|e| panic!("{named}: {e}")),
        };
        assert_eq!(twice(&seen.body), None, "{named}: a member written twice");
        if !sent.is_null() {
            assert_eq!(seen.headers["content-type"], "application/json", "{named}: every body is JSON");
        }
        let head_kept = new || ["host", "native", "upstream_head"].iter().any(|m| case.get(m).is_some());
        let sent_head = head_kept.then(|| head(&seen));
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
        if request.relay {
            // Relayed alone, each event stands for the output read from it, and no more.
            let (base, _) =
                canned_server(status, &headers, canned(&case, &path.parent().unwrap().join("..")).2).await;
            let (format, upstream) = host(&folder, &case, base);
            let alone = ChatRequest { shadowed: false, ..request.clone() };
            let call = Call { format, upstream, ..call.clone() };
            let got = send_all(&transport, &call, &alone).await;
            assert_eq!(format!("{got:?}"), format!("{:?}", answer::alone(&events)), "{named}: relayed alone");
        }
        let got = answer(events);
        if bless && new {
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
        assert!(!new, "{named}: a new case: record it with SPILLWAY_BLESS=1 and read it");
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

/// Every item of the answer to `request`, or the error that refused it.
async fn send_all(
    transport: &super::Transport,
    call: &Call<'_>,
    request: &ChatRequest,
) -> Vec<Result<crate::canonical::Event, crate::canonical::UpstreamError>> {
    match super::send(transport, call, request).await {
        Ok(stream) => stream.collect().await,
        Err(e) => vec![Err(e)],
    }
}
