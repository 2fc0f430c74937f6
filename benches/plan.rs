//! Planning cost: `route::plan` over 2, 8, 64 and 1,024 backends, for each baseline strategy.
//! Planning runs on every request, so it must stay far below a millisecond.

use std::fmt::Write;
use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use spillway::config::Priority;
use spillway::fleet::load::LoadView;
use spillway::route::{plan, RequestFacts};
use spillway::snapshot::Snapshot;
use tokio::time::Instant;

/// A config with `n` backends (every fourth a two-node vLLM pool, the rest hosted with prices)
/// and one task per strategy over all of them.
fn config(n: usize) -> String {
    let mut yaml = String::from("backends:\n");
    for i in 0..n {
        if i % 4 == 0 {
            writeln!(yaml, "  - {{name: b{i}, kind: vllm, endpoints: [http://10.{}.{}.1:8000, http://10.{}.{}.2:8000], model: m, region: eu}}", i / 256, i % 256, i / 256, i % 256).unwrap();
        } else {
            writeln!(yaml, "  - {{name: b{i}, kind: openai, base_url: https://h{i}.example/v1, model: m, region: us, price: {{input_per_mtok: {}.5, output_per_mtok: {}}}}}", i % 7, 10 + i % 13).unwrap();
        }
    }
    let names: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
    let weights: Vec<String> = (0..n).map(|i| format!("b{i}: {}", 1 + i % 5)).collect();
    let list = names.join(", ");
    writeln!(yaml, "tasks:").unwrap();
    writeln!(yaml, "  - {{name: priority, backends: [{list}], slo: {{ttft_ms: 800}}}}").unwrap();
    writeln!(yaml, "  - {{name: cost, strategy: cost, backends: [{list}], slo: {{ttft_ms: 800}}}}").unwrap();
    writeln!(yaml, "  - {{name: weighted, strategy: weighted, weights: {{{}}}, backends: [{list}], slo: {{ttft_ms: 800}}}}", weights.join(", ")).unwrap();
    yaml
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    for n in [2usize, 8, 64, 1024] {
        let cfg = spillway::config::parse(&config(n)).expect("bench config is valid");
        let snap = Snapshot::from_config(Arc::new(cfg));
        for strategy in ["priority", "weighted", "cost"] {
            let task = snap.config.task(strategy).unwrap();
            let mut seed = 0u64;
            group.bench_with_input(BenchmarkId::new(strategy, n), &n, |b, _| {
                b.iter(|| {
                    seed = seed.wrapping_add(1);
                    let facts = RequestFacts {
                        task,
                        prompt_tokens: 900,
                        max_output_tokens: 300,
                        seed,
                        affinity: Some(seed % 7),
                        window: 0,
                        priority: Priority::Standard,
                        load: &|_| LoadView::default(),
                        request: None,
                        candidates: None,
                        waits: None,
                        cached: None,
                    };
                    black_box(plan(&facts, &snap, Instant::now()).unwrap())
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
