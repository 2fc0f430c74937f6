//! A pool of mixed engines under `engine: auto`: one simulated node of each engine
//! (`spillway sim --engine`), each told apart by the router from its own page (TensorRT-LLM's at
//! `/prometheus/metrics`), read with its own adapter, and serving; a pool that names its engine
//! refuses another engine's page and says why.

use std::time::Duration;

use serde_json::{json, Value};
use spillway::fleet::engines::Engine;
use spillway::sim::{SimHandle, SimKind};

use crate::common::{admin_json, get_json, post_stream, router_unscraped, sim, wait_until};

const ADMIN: &str = "engines-admin";

async fn node(engine: Engine) -> SimHandle {
    sim(SimKind::Vllm, "org/model-8b", |a| {
        a.engine = engine;
        a.max_num_seqs = 4;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_every_engine_is_read_node_by_node_and_serves() {
    let mut nodes = Vec::new();
    for engine in Engine::ALL {
        nodes.push((engine, node(engine).await));
    }
    let wrong = node(Engine::Vllm).await;
    let endpoints: Vec<String> = nodes.iter().map(|(_, s)| format!("'{}'", s.base_url())).collect();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: mixed, kind: local, model: org/model-8b, max_running: 8, endpoints: [{}]}}\n\
         \x20 - {{name: named, kind: local, engine: sglang, model: org/model-8b, endpoints: ['{}']}}\n\
         tasks:\n\
         \x20 - {{name: t, backends: [mixed], slo: {{ttft_ms: 5000}}}}\n\
         admin_token_env: ADMIN_TOKEN\n",
        endpoints.join(", "),
        wrong.base_url()
    );
    let router = router_unscraped(&yaml, &[("ADMIN_TOKEN", ADMIN)], Default::default()).await;
    let backend = |listing: &Value, name: &str| -> Value {
        listing["backends"].as_array().unwrap().iter().find(|b| b["backend"] == name).unwrap().clone()
    };
    // Every node of the mixed pool read as its own engine.
    let listing = wait_until(Duration::from_secs(10), "each node read as its engine", || async {
        let listing = admin_json(&router.url, "/admin/backends", ADMIN).await;
        let mixed = backend(&listing, "mixed");
        let all = nodes.iter().all(|(engine, sim)| {
            mixed["nodes"].as_array().unwrap().iter().any(|n| {
                n["origin"].as_str().unwrap().starts_with(&sim.base_url())
                    && n["engine"] == engine.name()
                    && n["telemetry_age_s"].is_number()
            })
        });
        all.then_some(listing.clone()).ok_or(listing)
    })
    .await;
    let mixed = backend(&listing, "mixed");
    assert_eq!(mixed["engine"], "auto");
    let node_of = |engine: Engine| -> Value {
        let sim = &nodes.iter().find(|(e, _)| *e == engine).unwrap().1;
        let nodes = mixed["nodes"].as_array().unwrap();
        nodes.iter().find(|n| n["origin"].as_str().unwrap().starts_with(&sim.base_url())).unwrap().clone()
    };
    // Each engine's limit comes from where it says it: llama.cpp's `/props`, TGI's `/info`,
    // TensorRT-LLM's page; vLLM and SGLang do not say (the pool's max_running holds).
    for engine in [Engine::Llamacpp, Engine::Tgi, Engine::Trtllm] {
        assert_eq!(node_of(engine)["slots"], 4.0, "{engine}: {}", node_of(engine));
    }
    assert_eq!(node_of(Engine::Vllm)["slots"], Value::Null);
    assert_eq!(node_of(Engine::Vllm)["engine_version"].as_str().map(|v| v.ends_with("+sim")), Some(true));
    // What each had for the predictor: vLLM reports TTFT, llama.cpp and TGI do not.
    let measured = |engine: Engine| node_of(engine)["predictor_inputs"]["measured"].clone();
    let defaulted = |engine: Engine| node_of(engine)["predictor_inputs"]["defaulted"].clone();
    for engine in [Engine::Llamacpp, Engine::Tgi] {
        assert!(defaulted(engine).as_array().unwrap().contains(&json!("ttft")), "{engine}");
    }
    assert!(measured(Engine::Vllm).as_array().unwrap().contains(&json!("running")));

    // The pool that names SGLang does not read a vLLM page, and says so.
    let named = wait_until(Duration::from_secs(10), "the named pool to give its error", || async {
        let listing = admin_json(&router.url, "/admin/backends", ADMIN).await;
        let node = backend(&listing, "named")["nodes"][0].clone();
        node["telemetry_error"].is_string().then_some(node.clone()).ok_or(node)
    })
    .await;
    assert_eq!((&named["engine"], &named["telemetry_age_s"]), (&Value::Null, &Value::Null), "{named}");
    assert!(named["telemetry_error"].as_str().unwrap().contains("sglang"), "{named}");
    let ready = get_json(&router.url, "/readyz").await;
    let expected = json!({"vllm": 1, "sglang": 1, "llamacpp": 1, "trtllm": 1, "tgi": 1, "unknown": 1});
    assert_eq!((&ready["engines"], ready["fresh_local_nodes"].as_u64()), (&expected, Some(5)), "{ready}");

    // Requests are served by the pool's nodes, of whichever engine.
    for _ in 0..10 {
        let s = post_stream(&router.url, &crate::common::body("t", true)).await;
        assert_eq!((s.status, s.header("x-spillway-backend")), (200, Some("mixed")), "{:?}", s.data);
    }
}
