//! Config reload on the real binary: `POST /admin/reload` and `SIGHUP` swap tasks and backends
//! while traffic flows and no request fails; a bad file changes nothing and says why; settings
//! of long-lived parts are reported as needing a restart.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::sim;
use serde_json::{json, Value};
use spillway::sim::SimKind;

fn config(node: &str, hosted: &str, extra: &str) -> String {
    format!(
        r#"listen: 127.0.0.1:0
admin_token_env: RELOAD_ADMIN
backends:
  - {{name: pool, kind: vllm, endpoints: ["{node}"], model: llama}}
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt}}
tasks:
  - {{name: a, backends: [pool], slo: {{ttft_ms: 3000}}}}
{extra}
telemetry: {{interval_ms: 200}}
ledger: {{enabled: false}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reload_by_admin_api_and_sighup_drops_no_request() {
    let node = sim(SimKind::Vllm, "llama", |_| {}).await;
    let hosted = sim(SimKind::OpenAi, "gpt", |_| {}).await;
    let dir = std::env::temp_dir().join(format!("spillway-reload-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.yaml");
    let write =
        |extra: &str| std::fs::write(&path, config(&node.base_url(), &hosted.base_url(), extra)).unwrap();
    write("");
    let (mut server, url, stderr) = common::serve_process(&path, &[("RELOAD_ADMIN", "adm")]).await;
    let client = reqwest::Client::new();
    let chat = {
        let (client, url) = (client.clone(), url.clone());
        move |task: &'static str| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                client
                .post(format!("{url}/v1/chat/completions"))
                .json(
                    &json!({"model": task, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
                )
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
            }
        }
    };
    // Traffic to task `a` throughout.
    let (stop, sent, failed) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let traffic = {
        let (stop, sent, failed, chat) = (stop.clone(), sent.clone(), failed.clone(), chat.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if chat("a").await != 200 {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    assert_eq!(chat("b").await, 404);
    let reload = || client.post(format!("{url}/admin/reload")).bearer_auth("adm").send();

    // 1. Admin API: a new task on the hosted backend.
    write("  - {name: b, backends: [hosted], slo: {ttft_ms: 3000}}");
    let done = reload().await.unwrap();
    assert_eq!(done.status(), 200);
    let done: Value = done.json().await.unwrap();
    assert_eq!(done["tasks"], json!(["a", "b"]));
    assert_eq!(done["restart_needed"], json!([]));
    common::next_snapshot(&url).await; // planning reads the new config from the next snapshot
    assert_eq!(chat("b").await, 200, "the new task serves");

    // 2. A bad file: refused with the reason, the config in effect stays.
    write("  - {name: c, backends: [nowhere], slo: {ttft_ms: 3000}}");
    let refused = reload().await.unwrap();
    assert_eq!(refused.status(), 422);
    let refused: Value = refused.json().await.unwrap();
    assert!(refused["error"]["message"].as_str().unwrap().contains("nowhere"), "{refused}");
    assert_eq!(chat("b").await, 200);

    // 3. SIGHUP: task `b` goes; a canary interval change is reported as needing a restart.
    write("canary: {interval_secs: 600}");
    unsafe { libc::kill(server.id() as i32, libc::SIGHUP) };
    let gone = common::poll_until(Duration::from_secs(5), || {
        let chat = chat.clone();
        async move { chat("b").await == 404 }
    })
    .await;
    assert!(gone.is_ok(), "SIGHUP reloaded the file");

    stop.store(true, Ordering::SeqCst);
    traffic.await.unwrap();
    assert!(sent.load(Ordering::SeqCst) >= 3, "traffic flowed across the reloads");
    assert_eq!(failed.load(Ordering::SeqCst), 0, "no request failed across three reloads");
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    server.wait().unwrap();
    let logs = stderr.into_text();
    let hup = logs
        .lines()
        .find(|l| l.contains("config reloaded") && l.contains("SIGHUP"))
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(hup.contains("canary"), "{hup}");
    assert!(
        logs.lines().any(|l| l.contains("config reload refused") && l.contains("\"who\":\"admin\"")),
        "{logs}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
