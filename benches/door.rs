//! The chat door's own CPU at both sizes the edge bench sends (issue 50): a 60-byte chat and a
//! 100 KB coding agent's turn (`benches/agent_turn.py`), decoded and made canonical in process,
//! with no sockets, so a change to the door shows without the edge bench's noise. `scan` is the
//! floor of any reading that checks the JSON: one pass that builds nothing. `scan` is the
//! floor of any reading that checks the JSON: one pass that builds nothing.
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
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
