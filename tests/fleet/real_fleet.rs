//! A fleet of real engines: two llama.cpp `llama-server`s (2 slots each) in one pool with no
//! reserve, beside a hosted simulator, behind a router that scrapes every 500 ms. Nothing here
//! waits for a node to look idle: each request goes as soon as the one before it has ended, so
//! the lag between the engines' gauges and the router's own sends is what the router meets.
//!
//! In turn: the first requests after `/readyz` turns ready are the fleet's; 20 sequential short
//! requests and rounds of as many at once as there are slots stay on the fleet; more long
//! requests than slots fill the fleet and the rest spill before the SLO breaks; traffic comes
//! home once they end; an engine stopped and started again on its port costs no request that
//! was not in flight on it and takes its share again within a few scrape intervals.

use std::time::{Duration, Instant};

use futures::StreamExt;
use spillway::sim::SimKind;

use crate::common::llama::{engine_or_skip, llama_server};
use crate::common::{sim, wait_until};
use crate::real_engine::{ask, header, send, Router};

const SLOTS: u32 = 2;
const SLO_MS: u32 = 5000;
const INTERVAL_MS: u64 = 500;

/// Which backend served each answer, and the spill reasons of those that left the fleet.
#[derive(Debug, Default)]
struct Tally {
    local: usize,
    hosted: Vec<String>,
}

impl Tally {
    fn add(&mut self, status: u16, headers: &reqwest::header::HeaderMap, text: &str) {
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("[DONE]"), "{text}");
        match header(headers, "x-spillway-backend") {
            Some("pool") => self.local += 1,
            _ => self.hosted.push(header(headers, "x-spillway-spill").unwrap_or("?").to_string()),
        }
    }
}

/// A streamed request through the router whose head has come (the first token is in); the
/// rest of its body is read by a task that gives back whether it ended cleanly.
async fn open_stream(
    router: &str,
    prompt: &str,
    max_tokens: u32,
) -> (reqwest::header::HeaderMap, tokio::task::JoinHandle<bool>) {
    let resp = send(router, prompt, max_tokens).await;
    assert_eq!(resp.status(), 200);
    let headers = resp.headers().clone();
    let rest = tokio::spawn(async move {
        let mut bytes = resp.bytes_stream();
        let mut last = Vec::new();
        while let Some(chunk) = bytes.next().await {
            let Ok(chunk) = chunk else { return false };
            last = chunk.to_vec();
        }
        String::from_utf8_lossy(&last).contains("[DONE]")
    });
    (headers, rest)
}

/// The counter `name` on a llama-server's own metrics page (0 when absent).
async fn engine_counter(node: &str, name: &str) -> f64 {
    let Ok(resp) = reqwest::get(format!("{node}/metrics")).await else { return 0.0 };
    let page = resp.text().await.unwrap_or_default();
    page.lines().find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_two_node_fleet_serves_what_it_has_room_for_and_spills_only_the_rest() {
    let _one = crate::common::ONE_AT_A_TIME.lock().await;
    let Some(engine) = engine_or_skip() else { return };
    let a = llama_server(&engine, SLOTS, 0).await;
    let mut b = llama_server(&engine, SLOTS, 0).await;
    let hosted = sim(SimKind::OpenAi, "gpt-4o-mini", |_| {}).await;
    // Requests that meet a full fleet spill at once here (no queue): waiting for a slot is
    // `agent_sessions`' test.
    let telemetry =
        format!("{{interval_ms: {INTERVAL_MS}, stale_after_ms: 3000, backoff_max_ms: 1000}}\nqueue: {{enabled: false}}");
    let started = Instant::now();
    let router =
        Router::unready(&[&a.url, &b.url], ", reserve: 0", &hosted.base_url(), SLO_MS, &telemetry).await;

    // Ready means measured; the first requests after that are the fleet's: two at once (what
    // one node has room for), then two more one after another.
    wait_until(Duration::from_secs(20), "/readyz to answer 200", || async {
        let resp = reqwest::get(format!("{}/readyz", router.url)).await.map_err(|e| e.to_string())?;
        (resp.status() == 200).then_some(()).ok_or(resp.status().to_string())
    })
    .await;
    eprintln!("ready {} ms after the router started", started.elapsed().as_millis());
    let mut first = Tally::default();
    let pair = ["Say yes. (0)", "Say yes. (1)"].map(|prompt| ask(&router.url, prompt, 4));
    for (status, headers, text) in futures::future::join_all(pair).await {
        first.add(status, &headers, &text);
    }
    for prompt in ["Say no.", "Say maybe."] {
        let (status, headers, text) = ask(&router.url, prompt, 4).await;
        first.add(status, &headers, &text);
    }
    eprintln!("first requests after ready: {first:?}");
    assert_eq!((first.local, first.hosted.len()), (4, 0), "{first:?}");

    // 20 short requests, one after another.
    let mut sequential = Tally::default();
    for i in 0..20 {
        let (status, headers, text) = ask(&router.url, &format!("Name a fruit. ({i})"), 8).await;
        sequential.add(status, &headers, &text);
    }
    eprintln!("20 sequential: {sequential:?}");
    assert_eq!((sequential.local, sequential.hosted.len()), (20, 0), "{sequential:?}");

    // Rounds of four at once, the fleet's four slots, each round as soon as the last ended.
    let mut rounds = Tally::default();
    for round in 0..5 {
        let prompts: Vec<String> = (0..4).map(|i| format!("Name an animal. ({round}.{i})")).collect();
        let asks = prompts.iter().map(|prompt| ask(&router.url, prompt, 8));
        for (status, headers, text) in futures::future::join_all(asks).await {
            rounds.add(status, &headers, &text);
        }
    }
    eprintln!("5 rounds of 4 at once: {rounds:?}");
    assert_eq!((rounds.local, rounds.hosted.len()), (20, 0), "{rounds:?}");

    // Eight long streams, each sent once the one before has its first token: four fill the
    // fleet, four spill, before the SLO and because of the queue they would wait in.
    let mut long = Vec::new();
    let mut overload = Tally::default();
    for i in 0..8 {
        // A prompt SmolLM2 answers to the token limit, so each local one holds its slot.
        let prompt = format!("Write a very long story about a dragon, at least two thousand words. ({i})");
        let (headers, rest) = open_stream(&router.url, &prompt, 200).await;
        let ttft: u32 = header(&headers, "x-spillway-ttft-ms").unwrap().parse().unwrap();
        assert!(ttft < SLO_MS, "request {i}: {ttft} ms to the first token");
        match header(&headers, "x-spillway-backend") {
            Some("pool") => overload.local += 1,
            _ => overload.hosted.push(header(&headers, "x-spillway-spill").unwrap_or("?").to_string()),
        }
        long.push(rest);
        if i == 7 {
            // The fleet is full while the last spills: every slot holds one of the router's.
            let nodes = router.nodes().await;
            let in_flight: Vec<_> = nodes.iter().map(|n| n["in_flight"].as_u64()).collect();
            assert_eq!(in_flight, [Some(2), Some(2)], "{nodes:?}");
        }
    }
    eprintln!("8 long streams on 4 slots: {overload:?}");
    assert_eq!(overload.local, 4, "{overload:?}");
    assert_eq!(overload.hosted, ["queue"; 4], "{overload:?}");

    // They end: traffic comes home at once.
    for rest in long {
        assert!(rest.await.unwrap(), "a long stream did not end cleanly");
    }
    let mut home = Tally::default();
    for i in 0..4 {
        let (status, headers, text) = ask(&router.url, &format!("Name a city. ({i})"), 8).await;
        home.add(status, &headers, &text);
    }
    assert_eq!((home.local, home.hosted.len()), (4, 0), "{home:?}");

    // Node b stops and starts again on its port while two clients send one request after
    // another. A request that fails must have been in flight when it stopped.
    let port: u16 = b.url.rsplit(':').next().unwrap().parse().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..2)
        .map(|c| {
            let (url, stop) = (router.url.clone(), std::sync::Arc::clone(&stop));
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let sent = Instant::now();
                    let (status, headers, text) = ask(&url, &format!("Say a number. ({c}.{i})"), 4).await;
                    let ok = status == 200 && text.contains("[DONE]");
                    out.push((sent, ok, header(&headers, "x-spillway-backend").map(str::to_string)));
                }
                out
            })
        })
        .collect();
    let before = engine_counter(&a.url, "llamacpp:prompt_tokens_total").await;
    wait_until(Duration::from_secs(20), "node a to serve the clients", || async {
        engine_counter(&a.url, "llamacpp:prompt_tokens_total").await > before
    })
    .await;
    let b_url = b.url.clone();
    let killed = Instant::now();
    drop(b);
    // Down for at least the staleness bound: the router must have stopped trusting it.
    wait_until(Duration::from_secs(20), "node b to be stale", || async {
        let nodes = router.nodes().await;
        let node = nodes.into_iter().find(|n| n["origin"] == b_url.as_str()).unwrap();
        (node["telemetry_age_s"].as_f64().unwrap_or(f64::MAX) > 3.0).then_some(()).ok_or(node)
    })
    .await;
    b = llama_server(&engine, SLOTS, port).await;
    let back = Instant::now();
    wait_until(Duration::from_secs(20), "node b to serve again", || async {
        engine_counter(&b.url, "llamacpp:prompt_tokens_total").await > 0.0
    })
    .await;
    let share_again = back.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut sent = Vec::new();
    for client in clients {
        sent.extend(client.await.unwrap());
    }
    let failed: Vec<_> = sent.iter().filter(|(_, ok, _)| !ok).collect();
    eprintln!(
        "restart: {} requests, {} failed, node b serving again {} ms after it was back",
        sent.len(),
        failed.len(),
        share_again.as_millis()
    );
    assert!(failed.iter().all(|(at, _, _)| *at < killed), "a request sent after the stop failed: {failed:?}");
    assert!(failed.len() <= 2, "more failed than were in flight: {failed:?}");
    assert!(
        share_again < Duration::from_millis(8 * INTERVAL_MS),
        "node b took {share_again:?} to take its share again"
    );
    router.stop().await;
}
