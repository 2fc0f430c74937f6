//! No credential the router sent leaves it, whoever echoes it back (issue 48). Every backend
//! kind against its simulator in echo mode (`echo_upstreams.rs`: each error it writes quotes
//! the credentials the request carried, whole and cut to 16 characters, and those the sim
//! holds to check them), for the three places an upstream's words come from: a whole error
//! (the provider's error body), an in-stream error before the first token (Bedrock's
//! `modelStreamErrorException`, the others' error events) and one after it. Each kind is asked
//! on `/v1/chat/completions` and `/v1/messages`, whole and streamed, and probed by a canary, of
//! `spillway serve` as a process with the clouds' credentials in its environment (AWS keys with
//! a session token, a service-account file per Vertex backend, a Microsoft Entra client
//! secret). Then no answer, no line of its log (at debug) and no row of its ledger (nor the
//! ledger's file) may hold any credential, nor its first 12 characters; and the answers that
//! carry the upstream's words show them, cut. The same holds for a provider batch's error file,
//! read back into a job's.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};
use spillway::sim::SimKind;

use crate::batches::{get, line, post, spill_config, upload, wait_status, LLAMA};
use crate::clouds::temp_dir;
use crate::common::{self, router, sim};
use crate::echo_upstreams::{credentials, upstreams, Mode, ADMIN_TOKEN, CLIENT_KEY};

const MARKER: &str = "[redacted]";

/// One client request: its status and whole body (a stream's every event).
async fn ask(url: &str, path: &str, task: &str, stream: bool) -> (u16, String) {
    let body = json!({"model": task, "stream": stream, "max_tokens": 8,
                      "messages": [{"role": "user", "content": "hi"}]});
    let resp = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .bearer_auth(CLIENT_KEY)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// What `text` holds of `credentials` (any one's first 12 characters), said for `what`.
pub(super) fn leaked(what: &str, text: &str, credentials: &[String]) -> Option<String> {
    let heads: Vec<String> = credentials
        .iter()
        .map(|c| c.chars().take(12).collect::<String>())
        .filter(|head| text.contains(head.as_str()))
        .collect();
    let shown: String = text.chars().take(2000).collect();
    (!heads.is_empty()).then(|| format!("{what} holds {heads:?} (of credentials):\n{shown}"))
}

async fn nothing_echoed_leaves(mode: Mode) {
    let dir = temp_dir("echoes");
    let upstreams = upstreams(mode, &dir).await;
    let config = dir.join("spillway.yaml");
    std::fs::write(&config, &upstreams.yaml).unwrap();
    let env: Vec<(&str, &str)> = upstreams.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (mut router, url, stderr) = common::serve_process(&config, &env).await;
    let url = url.as_str();
    let mut asked = Vec::new();
    for backend in &upstreams.backends {
        for path in ["/v1/chat/completions", "/v1/messages"] {
            for stream in [false, true] {
                let what = format!("{mode:?}: {backend} {path} stream={stream}");
                asked.push(async move { (what, ask(url, path, &format!("t-{backend}"), stream).await) });
            }
        }
    }
    let answers = join_all(asked).await;
    // A canary's result names the last upstream error, whichever kind it was.
    let probes = upstreams.backends.iter().map(|backend| async move {
        let body =
            common::admin_post(url, "/admin/canary", ADMIN_TOKEN, "test", json!({"backend": backend})).await;
        (format!("{mode:?}: POST /admin/canary {backend}"), body.to_string())
    });
    let canaries = join_all(probes).await;
    let credentials = credentials(&upstreams);
    let mut leaks = Vec::new();
    for (what, (status, body)) in &answers {
        leaks.extend(leaked(&format!("{what} ({status})"), body, &credentials));
        // Before the first token the client is told only each attempt's class.
        if mode != Mode::BeforeFirstToken && !body.contains(MARKER) {
            leaks.push(format!("{what} ({status}): the upstream's words are not shown, cut:\n{body}"));
        }
    }
    for (what, body) in &canaries {
        leaks.extend(leaked(what, body, &credentials));
        if !body.contains(MARKER) {
            leaks.push(format!("{what}: the upstream's words are not shown, cut:\n{body}"));
        }
    }
    // One row per client request.
    let ledger = format!("sqlite://{}", dir.join("ledger.db").display());
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let rows = common::wait_until(Duration::from_secs(10), "every request in the ledger", || async {
        let rows = store.query(i64::MIN, i64::MAX).await.unwrap();
        if rows.len() >= answers.len() {
            Ok(rows)
        } else {
            Err(format!("{} rows", rows.len()))
        }
    })
    .await;
    store.close().await;
    leaks.extend(leaked(&format!("{mode:?}: the ledger's rows"), &format!("{rows:?}"), &credentials));
    let _ = router.kill();
    let _ = router.wait();
    let logged = stderr.into_text();
    leaks.extend(leaked(&format!("{mode:?}: the router's log"), &logged, &credentials));
    assert!(
        logged.contains("canary failed") && logged.contains(MARKER),
        "{mode:?}: the log shows the upstream's words, cut"
    );
    for file in ["ledger.db", "ledger.db-wal"] {
        if let Ok(bytes) = std::fs::read(dir.join(file)) {
            leaks.extend(leaked(
                &format!("{mode:?}: {file}"),
                &String::from_utf8_lossy(&bytes),
                &credentials,
            ));
        }
    }
    assert!(leaks.is_empty(), "{} findings:\n{}", leaks.len(), leaks.join("\n\n"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_leaves_in_a_whole_error() {
    nothing_echoed_leaves(Mode::Whole).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_leaves_in_an_error_before_the_first_token() {
    nothing_echoed_leaves(Mode::BeforeFirstToken).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_leaves_in_an_error_after_the_first_token() {
    nothing_echoed_leaves(Mode::AfterFirstToken).await;
}

/// A job too big for the fleet spills to OpenAI's batch API, whose every line fails there with
/// an error body quoting the key: the job's error file shows the errors, the key cut.
#[tokio::test]
async fn no_credential_leaves_in_a_provider_batchs_error_file() {
    const KEY: &str = "batch-provider-key-0123456789abcdef";
    let node = sim(SimKind::Vllm, LLAMA, |a| a.token_delay_ms = 200).await;
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |a| {
        (a.batch_delay_ms, a.api_key, a.echo_credentials) = (100, Some(KEY.into()), true);
    })
    .await;
    let config = spill_config(&node, &openai, "api_key_env: ECHO_BATCH_KEY", "");
    let router = router(&config, &[("ECHO_BATCH_KEY", KEY)]).await;
    let lines: Vec<String> = (0..30)
        .map(|i| {
            let mut line = line(&format!("r{i}"), "chat");
            line["body"]["metadata"] = json!({"sim_fault": "status=400"});
            line.to_string()
        })
        .collect();
    let file: Value = upload(&router, "batch", &lines.join("\n")).await.json().await.unwrap();
    let create =
        json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "30s"});
    let job: Value = post(&router, "/v1/batches", &create).await.json().await.unwrap();
    let path = format!("/v1/batches/{}", job["id"].as_str().unwrap());
    let job = wait_status(&router, &path, "status", &["completed", "expired"]).await;
    assert_eq!(job["metadata"]["spillway_route"], "hosted_batch", "{job}");
    let errors = job["error_file_id"].as_str().unwrap();
    let errors = get(&router, &format!("/v1/files/{errors}/content")).await.text().await.unwrap();
    assert!(errors.contains("echoed credentials") && errors.contains(MARKER), "{errors}");
    let credentials = [KEY.to_string()];
    assert_eq!(leaked("the job's error file", &errors, &credentials), None);
    let output = job["output_file_id"].as_str().map(|id| format!("/v1/files/{id}/content"));
    if let Some(output) = output {
        let output = get(&router, &output).await.text().await.unwrap();
        assert_eq!(leaked("the job's output file", &output, &credentials), None);
    }
}
