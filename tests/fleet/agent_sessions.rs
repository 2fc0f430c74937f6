//! Agent sessions on a real two-node llama.cpp fleet (2 slots each) beside a hosted simulator,
//! with an SLO the fleet meets easily: every turn is the fleet's. Each session resends its own
//! long preamble and its growing history every turn; more sessions run at once than the fleet
//! has slots, so some turns meet a full fleet and wait for a slot instead of being paid to the
//! hosted provider; the first turns go the moment `/readyz` turns 200, before every node may
//! have been read twice. Later turns go where their session's prefix is cached (the engines'
//! own count of cached prompt tokens says how much was).

use std::time::Duration;

use serde_json::{json, Value};
use spillway::sim::SimKind;

use crate::common::llama::{engine_or_skip, llama_server};
use crate::common::{sim, wait_until};
use crate::real_engine::{header, Router};

const SESSIONS: usize = 6;
const TURNS: usize = 3;

/// A session's own preamble of about 450 tokens: instructions and a tool list, numbered so no
/// two sessions share it.
fn preamble(session: usize) -> String {
    let tools: Vec<String> = (0..12)
        .map(|t| format!("Tool {t} of session {session}: reads file number {t} and returns its lines with their numbers."))
        .collect();
    format!(
        "You are coding agent {session}. Answer in one short sentence. Follow the house style of project {session}. {}",
        tools.join(" ")
    )
}

/// What one turn met: the served backend (and spill), the queue's word on it, and its prompt
/// tokens and those the engine found cached.
#[derive(Debug)]
struct Turn {
    backend: String,
    queue: Option<String>,
    prompt: u64,
    cached: u64,
}

/// One turn: the preamble, the history so far and the new question; what it met and the
/// answer's text.
async fn turn(router: &str, messages: &[Value]) -> (Turn, String) {
    let body = json!({"model": "t", "stream": true, "stream_options": {"include_usage": true},
        "max_tokens": 24, "temperature": 0, "messages": messages});
    let resp = reqwest::Client::new()
        .post(format!("{router}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("[DONE]"), "{text}");
    let backend = header(&headers, "x-spillway-backend").unwrap_or("?").to_string();
    let spill = header(&headers, "x-spillway-spill").map(str::to_string);
    let queue = header(&headers, "x-spillway-queue").map(str::to_string);
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .collect();
    let said = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    let usage = chunks.iter().rev().find(|c| c["usage"].is_object()).map(|c| c["usage"].clone());
    let usage = usage.unwrap_or_else(|| panic!("no usage: {text}"));
    let backend = format!("{backend} {}", spill.unwrap_or_default()).trim().to_string();
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    (Turn { backend, queue, prompt, cached }, said)
}

async fn session(router: String, s: usize) -> Vec<Turn> {
    let mut messages = vec![json!({"role": "system", "content": preamble(s)})];
    let mut served = Vec::new();
    for t in 0..TURNS {
        messages
            .push(json!({"role": "user", "content": format!("Turn {t}: name one step to fix bug {s}.{t}.")}));
        let (met, said) = turn(&router, &messages).await;
        messages.push(json!({"role": "assistant", "content": said}));
        served.push(met);
    }
    served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sessions_beyond_the_fleets_slots_wait_for_a_slot_and_none_is_paid_for() {
    let _one = crate::common::ONE_AT_A_TIME.lock().await;
    let Some(engine) = engine_or_skip() else { return };
    let a = llama_server(&engine, 2, 0).await;
    let b = llama_server(&engine, 2, 0).await;
    let hosted = sim(SimKind::OpenAi, "gpt-4o-mini", |_| {}).await;
    // The default telemetry settings, as a user runs them.
    let router = Router::unready(&[&a.url, &b.url], ", reserve: 0", &hosted.base_url(), 60_000, "{}").await;
    wait_until(Duration::from_secs(20), "/readyz to answer 200", || async {
        let resp = reqwest::get(format!("{}/readyz", router.url)).await.map_err(|e| e.to_string())?;
        (resp.status() == 200).then_some(()).ok_or(resp.status().to_string())
    })
    .await;
    let sessions = (0..SESSIONS).map(|s| tokio::spawn(session(router.url.clone(), s)));
    let served: Vec<Vec<Turn>> =
        futures::future::join_all(sessions).await.into_iter().map(Result::unwrap).collect();
    eprintln!("{SESSIONS} sessions × {TURNS} turns on 4 slots: {served:#?}");
    let all: Vec<&Turn> = served.iter().flatten().collect();
    let hosted_turns: Vec<_> = all.iter().filter(|t| t.backend != "pool").collect();
    assert!(hosted_turns.is_empty(), "paid to the hosted provider: {hosted_turns:?}");
    assert_eq!(all.len(), SESSIONS * TURNS);
    // Six sessions on four slots: some turns met a full fleet and waited for a slot.
    let waited = all.iter().filter(|t| t.queue.as_deref() == Some("waited")).count();
    assert!(waited > 0, "{served:?}");
    // Later turns found most of their prompt in the cache of the node they went to.
    let later = served.iter().flat_map(|s| &s[1..]);
    let (prompt, cached) = later.fold((0, 0), |(p, c), t| (p + t.prompt, c + t.cached));
    let share = cached as f64 / prompt as f64;
    eprintln!("later turns: {cached} of {prompt} prompt tokens cached ({:.0} %)", share * 100.0);
    assert!(share >= 0.8, "{served:#?}");

    // The metrics say so: the waits and their decisions, and an empty queue now.
    let page = reqwest::get(format!("{}/metrics", router.url)).await.unwrap().text().await.unwrap();
    let line = |name: &str| page.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string();
    assert!(
        line("spillway_queue_decisions_total{backend=\"pool\",decision=\"waited\",why=\"slot\"}")
            .ends_with(&format!(" {waited}")),
        "{page}"
    );
    assert!(line("spillway_queue_depth{backend=\"pool\"}").ends_with(" 0"), "{page}");
    assert!(line("spillway_spills_total").is_empty() || !page.contains("spillway_spills_total{"), "{page}");
    router.stop().await;
}
