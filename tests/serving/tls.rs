//! Hosted upstreams over TLS: a simulator serving HTTPS with a certificate from its own CA, the
//! router trusting that CA through `tls.ca_file` or `SSL_CERT_FILE` (and refusing the upstream,
//! naming the certificate, without it), and hosted traffic going through `HTTPS_PROXY` unless
//! `NO_PROXY` names the host, as users of any HTTP client expect.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use spillway::sim::SimKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{self, router, sim};

fn config(openai: &str, tls: &str) -> String {
    format!(
        r#"
listen: 127.0.0.1:0
ledger: {{enabled: false}}
backends:
  - {{name: hosted, kind: openai, base_url: "{openai}/v1", model: gpt-5.6}}
tasks:
  - {{name: chat, backends: [hosted], slo: {{ttft_ms: 5000}}}}
{tls}
"#
    )
}

fn chat() -> Value {
    json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]})
}

/// The sim's CA written to a temporary file.
pub(crate) fn ca_file(pem: &str) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("spillway-sim-ca-{}-{}.pem", std::process::id(), rand_suffix()));
    std::fs::write(&path, pem).unwrap();
    path
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0u8)
}

#[tokio::test]
async fn a_tls_upstream_is_trusted_through_tls_ca_file_and_refused_naming_the_certificate_without_it() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |a| a.tls = true).await;
    assert!(openai.base_url().starts_with("https://"));
    let ca = ca_file(openai.ca_pem().expect("a TLS sim has a CA"));

    let trusting =
        router(&config(&openai.base_url(), &format!("tls: {{ca_file: \"{}\"}}", ca.display())), &[]).await;
    let (status, _, body) = common::post_json(&trusting.url, &chat()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "chat", "{body}");
    let (_, _, accepted) = openai.connections();
    assert!(accepted >= 1, "the answer came over TLS");

    let plain = router(&config(&openai.base_url(), ""), &[]).await;
    let (status, _, body) = common::post_json(&plain.url, &chat()).await;
    assert!(status >= 500, "an upstream whose certificate is not trusted is not reached: {status} {body}");
    let said = body.to_string().to_lowercase();
    assert!(said.contains("certificate"), "the error names the certificate: {body}");
    std::fs::remove_file(ca).ok();
}

#[test]
fn a_ca_file_that_is_missing_or_holds_no_certificate_is_a_config_problem() {
    let missing =
        spillway::config::parse(&config("https://127.0.0.1:1", "tls: {ca_file: /nonexistent/ca.pem}"));
    let problems = missing.unwrap_err();
    assert!(
        problems.iter().any(|p| p.path == "tls.ca_file" && p.message.contains("cannot read")),
        "{problems:?}"
    );
    let junk = ca_file("not a certificate\n");
    let problems = spillway::config::parse(&config(
        "https://127.0.0.1:1",
        &format!("tls: {{ca_file: \"{}\"}}", junk.display()),
    ))
    .unwrap_err();
    assert!(
        problems.iter().any(|p| p.path == "tls.ca_file" && p.message.contains("no PEM certificate")),
        "{problems:?}"
    );
    std::fs::remove_file(junk).ok();
}

/// A CONNECT proxy on loopback: the tunnels it opened, by target.
struct ConnectProxy {
    url: String,
    tunnels: Arc<std::sync::Mutex<Vec<String>>>,
    _task: tokio::task::JoinHandle<()>,
}

async fn connect_proxy() -> ConnectProxy {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let tunnels = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&tunnels);
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let Some(target) = head.strip_prefix("CONNECT ").and_then(|r| r.split(' ').next()) else {
                    let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n").await;
                    return;
                };
                seen.lock().unwrap().push(target.to_string());
                let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else { return };
                let _ = client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    ConnectProxy { url, tunnels, _task: task }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_cert_file_and_https_proxy_are_honoured_for_hosted_traffic() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |a| a.tls = true).await;
    let ca = ca_file(openai.ca_pem().unwrap());
    let proxy = connect_proxy().await;
    let path = std::env::temp_dir().join(format!("spillway-tls-proxy-{}.yaml", std::process::id()));
    std::fs::write(&path, config(&openai.base_url(), "")).unwrap();
    let target = openai.base_url().trim_start_matches("https://").to_string();
    let ca_path = ca.display().to_string();
    let served = Arc::new(AtomicUsize::new(0));

    for no_proxy in ["", "127.0.0.1"] {
        let env = [
            ("SSL_CERT_FILE", ca_path.as_str()),
            ("HTTPS_PROXY", proxy.url.as_str()),
            ("NO_PROXY", no_proxy),
        ];
        let (mut child, url, _stderr) = common::serve_process(&path, &env).await;
        let before = proxy.tunnels.lock().unwrap().len();
        let (status, _, body) = common::post_json(&url, &chat()).await;
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(status, 200, "NO_PROXY={no_proxy:?}: {body}");
        served.fetch_add(1, Ordering::Relaxed);
        let tunnels = proxy.tunnels.lock().unwrap()[before..].to_vec();
        if no_proxy.is_empty() {
            assert_eq!(tunnels, vec![target.clone()], "through the proxy, to the provider");
        } else {
            assert!(tunnels.is_empty(), "NO_PROXY names the host: straight to it, not {tunnels:?}");
        }
    }
    assert_eq!(served.load(Ordering::Relaxed), 2);
    std::fs::remove_file(ca).ok();
    std::fs::remove_file(path).ok();
}

fn streaming() -> Value {
    json!({"model": "chat", "max_tokens": 8, "stream": true, "messages": [{"role": "user", "content": "hello"}]})
}

/// `spillway_upstream_waiting` of backend `hosted` on the router's `/metrics`.
async fn waiting(url: &str) -> i64 {
    let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("spillway_upstream_waiting{backend=\"hosted\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1)
}

/// Send `n` streams at once; each one's status and who answered.
async fn burst(url: &str, n: usize) -> Vec<(u16, String)> {
    let client = reqwest::Client::new();
    let sends = (0..n).map(|_| {
        let send = client.post(format!("{url}/v1/chat/completions")).json(&streaming()).send();
        async move {
            let resp = send.await.unwrap();
            let status = resp.status().as_u16();
            let backend = resp
                .headers()
                .get("x-spillway-backend")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let _ = resp.text().await;
            (status, backend)
        }
    });
    futures::future::join_all(sends).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streams_past_a_connections_limit_open_more_connections_and_past_the_last_wait_in_the_open() {
    // 100 streams at once to a provider advertising 10 per connection: ten connections, no wait.
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |a| {
        a.tls = true;
        a.max_concurrent_streams = 10;
        a.ttft_ms = 300;
    })
    .await;
    let ca = ca_file(openai.ca_pem().unwrap());
    let tls =
        format!("tls: {{ca_file: \"{}\"}}\ndispatch: {{hosted_streams_per_connection: 10}}", ca.display());
    let r = router(&config(&openai.base_url(), &tls), &[]).await;
    let answers = burst(&r.url, 100).await;
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
    let (_, peak, accepted) = openai.connections();
    eprintln!("100 streams, 10 per connection: {peak} connections at once, {accepted} in all");
    assert!(
        peak >= 10 && accepted <= 64,
        "connections: at most 10 streams on each ({peak} at once, {accepted} in all)"
    );
    assert_eq!(waiting(&r.url).await, 0);

    // A provider that also takes 2 connections only: 20 in flight, the rest wait in the open
    // and, past the deadline (2 × 1000 ms), fail over as attempts to the second backend.
    let limited = sim(SimKind::OpenAi, "gpt-5.6", |a| {
        a.tls = true;
        a.max_concurrent_streams = 10;
        a.max_connections = 2;
        a.ttft_ms = 2500;
    })
    .await;
    let spare = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let ca = ca_file(limited.ca_pem().unwrap());
    let yaml = format!(
        r#"
listen: 127.0.0.1:0
ledger: {{enabled: false}}
tls: {{ca_file: "{}"}}
dispatch: {{hosted_streams_per_connection: 10, hosted_max_connections: 2}}
backends:
  - {{name: hosted, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
  - {{name: spare, kind: openai, base_url: "{}/v1", model: gpt-5.6}}
tasks:
  - {{name: chat, backends: [hosted, spare], strategy: priority, slo: {{ttft_ms: 1000}}}}
"#,
        ca.display(),
        limited.base_url(),
        spare.base_url()
    );
    let r = router(&yaml, &[]).await;
    let url = r.url.clone();
    let sent = tokio::spawn(async move { burst(&url, 60).await });
    let seen =
        common::wait_until(std::time::Duration::from_secs(10), "requests waiting for a slot", || async {
            let n = waiting(&r.url).await;
            if n > 0 {
                Ok(n)
            } else {
                Err(n)
            }
        })
        .await;
    assert!(seen > 0);
    let answers =
        tokio::time::timeout(std::time::Duration::from_secs(30), sent).await.expect("none hangs").unwrap();
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
    let spared = answers.iter().filter(|(_, b)| b == "spare").count();
    eprintln!("60 streams, 2 connections of 10: {seen} seen waiting, {spared} failed over to spare");
    assert!(spared >= 40, "past the deadline, the waiting ones failed over: {spared} of 60 on spare");
    assert!(limited.connections().1 <= 2, "never more than the provider's connections");
}
