//! Memory per open stream: holds N streamed chat requests open through a running router and
//! reads the router's resident memory (`VmRSS`) while they are open and after they end.
//!
//! `cargo bench --bench edge_streams -- URL PID MODEL N[,N...] [h1|h2]` (run by
//! `benches/edge.sh`, against a slow upstream that sends its first token at once and the rest
//! many seconds later). HTTP/2 clients hold many streams on a few sockets, so that 10,000
//! streams fit this machine's 20,000 file descriptors (the router needs one upstream socket per
//! stream); HTTP/1.1 clients use one connection per stream.

use std::time::{Duration, Instant};

use futures::StreamExt;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Clients for `n` streams: HTTP/2 clients carry 100 streams each (below the router's
/// concurrent-stream limit); HTTP/1.1 shares one client with one connection per stream.
fn clients(n: usize, h2: bool) -> Vec<reqwest::Client> {
    if h2 {
        (0..n.div_ceil(100))
            .map(|_| reqwest::Client::builder().http2_prior_knowledge().build().unwrap())
            .collect()
    } else {
        vec![reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap()]
    }
}

/// Open `n` streams, wait until each has its first bytes, measure, then drop them all.
async fn hold(url: &str, pid: u32, model: &str, n: usize, h2: bool) -> (u64, u64, usize) {
    let clients = clients(n, h2);
    let (first_tx, mut first_rx) = tokio::sync::mpsc::channel::<bool>(n);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let body = serde_json::json!({
        "model": model, "stream": true, "max_tokens": 4,
        "messages": [{"role": "user", "content": "hold this stream open"}],
    });
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let client = clients[i % clients.len()].clone();
        let (url, body, first_tx, mut stop_rx) =
            (url.to_string(), body.clone(), first_tx.clone(), stop_rx.clone());
        tasks.push(tokio::spawn(async move {
            let sent = client.post(format!("{url}/v1/chat/completions")).json(&body).send().await;
            let Ok(response) = sent.and_then(|r| r.error_for_status()) else {
                let _ = first_tx.send(false).await;
                return;
            };
            let mut bytes = response.bytes_stream();
            let ok = matches!(bytes.next().await, Some(Ok(_)));
            let _ = first_tx.send(ok).await;
            let _ = stop_rx.changed().await;
        }));
    }
    drop(first_tx);
    let mut open = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..n {
        match tokio::time::timeout_at(deadline.into(), first_rx.recv()).await {
            Ok(Some(true)) => open += 1,
            Ok(Some(false)) => {}
            _ => break,
        }
    }
    let during = rss_kib(pid);
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = task.await;
    }
    drop(clients);
    drop(stop_rx);
    // Let the router see the closed sockets and its upstream calls end.
    tokio::time::sleep(Duration::from_secs(3)).await;
    (during, rss_kib(pid), open)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let [url, pid, model, counts, rest @ ..] = args.as_slice() else {
        eprintln!("usage: edge_streams URL PID MODEL N[,N...] [h1|h2]");
        std::process::exit(2);
    };
    let pid: u32 = pid.parse().expect("a pid");
    let h2 = rest.first().is_some_and(|p| p == "h2");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(async {
        let idle = rss_kib(pid);
        println!(
            "| protocol | open streams | RSS idle MiB | RSS open MiB | per stream KiB | RSS after MiB |"
        );
        println!("|---|---|---|---|---|---|");
        for n in counts.split(',').map(|c| c.parse::<usize>().expect("a count")) {
            let before = rss_kib(pid);
            let (during, after, open) = hold(url, pid, model, n, h2).await;
            let per_stream = during.saturating_sub(before) as f64 / open.max(1) as f64;
            println!(
                "| {} | {open} of {n} | {:.1} | {:.1} | {per_stream:.1} | {:.1} |",
                if h2 { "h2c" } else { "HTTP/1.1" },
                before as f64 / 1024.0,
                during as f64 / 1024.0,
                after as f64 / 1024.0
            );
        }
        eprintln!("router RSS at start: {:.1} MiB", idle as f64 / 1024.0);
    });
}
