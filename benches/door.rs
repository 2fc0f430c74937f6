//! The chat door's own CPU at both sizes the edge bench sends (issue 50): a 60-byte chat and a
//! 100 KB coding agent's turn (`benches/agent_turn.py`), decoded and made canonical in process,
//! with no sockets, so a change to the door shows without the edge bench's noise. `scan` is the
//! floor of any reading that checks the JSON: one pass that builds nothing. The recorded Claude
//! Code and Codex turns go through their own doors (Messages, Responses) the same way.
//!
//! `cargo bench --bench door`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use spillway::api::wire;

fn agent_turn() -> Vec<u8> {
    let out = std::process::Command::new("python3")
        .args(["benches/agent_turn.py", "--model", "bench"])
        .output()
        .expect("python3 runs benches/agent_turn.py");
    assert!(out.status.success(), "agent_turn.py: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The body of a coding agent's recorded request (tests/fixtures/agents/).
fn recorded(agent: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/agents/{agent}.json", env!("CARGO_MANIFEST_DIR"));
    let captured: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    serde_json::to_vec(&captured["body"]).unwrap()
}

fn bench(c: &mut Criterion) {
    let small = br#"{"model":"bench","messages":[{"role":"user","content":"hi"}],"max_tokens":16}"#.to_vec();
    let mut group = c.benchmark_group("door");
    for (size, body) in [("60B", small), ("100KB", agent_turn())] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        let body = bytes::Bytes::from(body);
        let decode = || wire::decode_bytes(&body).unwrap();
        group.bench_function(format!("decode/{size}"), |b| b.iter(|| black_box(decode())));
        group.bench_function(format!("decode_to_canonical/{size}"), |b| {
            b.iter(|| black_box(decode().to_canonical(Some(4096)).unwrap()))
        });
        group.bench_function(format!("scan/{size}"), |b| {
            b.iter(|| black_box(serde_json::from_slice::<serde::de::IgnoredAny>(&body).unwrap()))
        });
    }
    // The coding agents' recorded turns, each through its own door: Claude Code's Messages
    // (32 KB of its 50 KB are tool schemas) and Codex's Responses.
    for (agent, door) in [
        ("claude-code-2.1.332", spillway::api::doors::messages as fn(&bytes::Bytes, Option<u32>) -> _),
        ("codex-0.171.0", spillway::api::doors::responses),
    ] {
        let body = bytes::Bytes::from(recorded(agent));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("to_canonical/{agent}"), |b| {
            b.iter(|| black_box(door(&body, Some(4096)).unwrap()))
        });
        if agent.starts_with("claude") {
            let req = door(&body, Some(4096)).unwrap();
            group.bench_function(format!("anthropics_body/{agent}"), |b| {
                let anthropic = &spillway::adapter::provider::anthropic::Anthropic;
                b.iter(|| black_box(spillway::adapter::wire::anthropic::body_for(&req, anthropic)))
            });
        }
        group.bench_function(format!("scan/{agent}"), |b| {
            b.iter(|| black_box(serde_json::from_slice::<serde::de::IgnoredAny>(&body).unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
