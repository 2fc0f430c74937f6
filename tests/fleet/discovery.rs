//! Kubernetes discovery against a fake API server: an axum app on 127.0.0.1 that answers the
//! pod (and EndpointSlice) list and watch calls `kube-runtime`'s watcher makes, with the
//! real JSON shapes (a `PodList`, then newline-delimited `ADDED`/`MODIFIED`/`DELETED`/
//! `BOOKMARK`/`ERROR` watch events). Each watch call takes the next scripted stream, which
//! the test feeds one event at a time, so every step's published node set can be checked.
//! Also: the client starts for http and https URLs and from a kubeconfig, with one rustls
//! crypto provider.

use std::collections::{HashMap, VecDeque};
use std::future::ready;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use k8s_openapi::api::core::v1::Pod;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use spillway::config::{KubeResource, KubernetesDiscovery};
use spillway::control::discovery::{self, DiscoveredNode, DiscoveredNodes};
use tokio::sync::{mpsc, watch};

use crate::common::wait_until;

/// One scripted watch response: the lines the test sends, until it drops the sender.
type WatchScript = mpsc::UnboundedReceiver<Value>;

#[derive(Default)]
struct Fake {
    /// The list answer for each collection path (`/api/v1/namespaces/llm/pods`).
    lists: Mutex<HashMap<String, Value>>,
    /// Watch answers, taken in order; with none left a watch stays open and silent.
    watches: Mutex<VecDeque<WatchScript>>,
    /// Every request as `path?query`, in order.
    requests: Mutex<Vec<String>>,
}

impl Fake {
    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    fn set_list(&self, path: &str, list: Value) {
        self.lists.lock().unwrap().insert(path.to_string(), list);
    }

    /// Queue a watch response; returns the sender that feeds it.
    fn queue_watch(&self) -> mpsc::UnboundedSender<Value> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.watches.lock().unwrap().push_back(rx);
        tx
    }
}

async fn collection(
    State(fake): State<Arc<Fake>>,
    Path((group_path, ns, resource)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let path = format!("/{group_path}/namespaces/{ns}/{resource}");
    let query = query.unwrap_or_default();
    fake.requests.lock().unwrap().push(format!("{path}?{query}"));
    let is_watch = query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
    if !is_watch {
        let list = fake.lists.lock().unwrap().get(&path).cloned();
        return match list {
            Some(list) => json_response(200, list.to_string()),
            None => json_response(
                404,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "not found", "reason": "NotFound", "code": 404})
                .to_string(),
            ),
        };
    }
    let script = fake.watches.lock().unwrap().pop_front();
    let lines = futures::stream::unfold(script, |script| async move {
        match script {
            Some(mut rx) => {
                let event = rx.recv().await?;
                Some((Ok::<_, std::convert::Infallible>(format!("{event}\n")), Some(rx)))
            }
            None => futures::future::pending().await,
        }
    });
    Response::builder()
        .status(200)
        .header(CONTENT_TYPE, "application/json")
        .body(Body::from_stream(lines))
        .unwrap()
}

fn json_response(status: u16, body: String) -> Response {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap()
}

/// Serve the fake; returns its state and `http://127.0.0.1:PORT`.
async fn start_fake() -> (Arc<Fake>, String) {
    let fake = Arc::new(Fake::default());
    let app = Router::new()
        // `/api/v1/…` (core) and `/apis/discovery.k8s.io/v1/…` both end up here.
        .route("/api/v1/namespaces/{ns}/{resource}", get(core_collection))
        .route("/apis/{group}/{version}/namespaces/{ns}/{resource}", get(group_collection))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, url)
}

async fn core_collection(
    state: State<Arc<Fake>>,
    Path((ns, resource)): Path<(String, String)>,
    query: RawQuery,
) -> Response {
    collection(state, Path(("api/v1".to_string(), ns, resource)), query).await
}

async fn group_collection(
    state: State<Arc<Fake>>,
    Path((group, version, ns, resource)): Path<(String, String, String, String)>,
    query: RawQuery,
) -> Response {
    collection(state, Path((format!("apis/{group}/{version}"), ns, resource)), query).await
}

/// A pod as the API server sends it, at resource version `rv`. Round-tripped through
/// `k8s_openapi`'s `Pod` so the field names and types are the real ones.
fn pod(name: &str, ip: &str, ready: bool, rv: u64, annotations: Value) -> Value {
    let v = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "llm",
            "uid": format!("uid-{name}"),
            "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "vllm", "pool": "llama-8b"},
            "annotations": annotations,
        },
        "spec": {
            "containers": [{
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.6.3",
                "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
            }],
            "nodeName": "gpu-node-1",
        },
        "status": {
            "phase": "Running",
            "hostIP": "192.168.1.10",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": "2026-01-01T00:00:05Z",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"},
                {"type": "ContainersReady", "status": if ready { "True" } else { "False" },
                 "lastTransitionTime": "2026-01-01T00:00:30Z"},
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "lastTransitionTime": "2026-01-01T00:00:30Z"},
            ],
        },
    });
    let typed: Pod = serde_json::from_value(v).unwrap();
    serde_json::to_value(typed).unwrap()
}

fn pod_list(rv: u64, items: Vec<Value>) -> Value {
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": rv.to_string()}, "items": items})
}

fn event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

fn discovery_cfg(resource: KubeResource) -> KubernetesDiscovery {
    KubernetesDiscovery {
        namespace: "llm".into(),
        selector: "app=vllm,pool=llama-8b".into(),
        port: 8000,
        resource,
    }
}

/// `name@origin` of each node.
fn names(nodes: &[DiscoveredNode]) -> Vec<String> {
    nodes.iter().map(|n| format!("{}@{}", n.name, n.origin)).collect()
}

/// Wait until `backend`'s published nodes are `want` (as `name@origin`); returns them.
async fn expect(
    rx: &mut watch::Receiver<DiscoveredNodes>,
    backend: &str,
    want: &[&str],
) -> Vec<DiscoveredNode> {
    let got = tokio::time::timeout(
        Duration::from_secs(15),
        rx.wait_for(|m| m.get(backend).is_some_and(|nodes| names(nodes) == want)),
    )
    .await
    .ok()
    .and_then(|r| r.ok().map(|m| m[backend].clone()));
    match got {
        Some(nodes) => nodes,
        None => panic!("waited for {want:?}, published: {:?}", rx.borrow().get(backend).map(|n| names(n))),
    }
}

fn param<'a>(request: &'a str, key: &str) -> Option<&'a str> {
    let query = request.split_once('?')?.1;
    query.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

#[tokio::test]
async fn pods_list_watch_relist_against_a_fake_api_server() {
    let (fake, url) = start_fake().await;
    const PODS: &str = "/api/v1/namespaces/llm/pods";
    let pinned = json!({
        "spillway.dev/weights-digest": "sha256:1111",
        "spillway.dev/quantization": "fp8",
        "spillway.dev/engine-version": "0.6.3",
        "spillway.dev/gpu-hourly-usd": "2.49",
    });
    fake.set_list(
        PODS,
        pod_list(
            10,
            vec![
                pod("vllm-a", "10.0.0.1", true, 7, pinned.clone()),
                pod("vllm-b", "10.0.0.2", true, 8, json!({"spillway.dev/gpu-hourly-usd": "two dollars"})),
                pod("vllm-c", "10.0.0.3", false, 9, json!({})),
            ],
        ),
    );
    let first_watch = fake.queue_watch();

    let client = discovery::client_for_url(&url).unwrap();
    let (tx, mut rx) = watch::channel(DiscoveredNodes::new());
    // Another backend's entry on the same channel is left alone.
    tx.send_modify(|m| {
        m.insert("static".into(), vec![]);
    });
    let task = tokio::spawn(discovery::run("llama".into(), discovery_cfg(KubeResource::Pods), client, tx));

    // Initial list: the two ready pods, with their annotations; the bad price is dropped.
    let nodes =
        expect(&mut rx, "llama", &["vllm-a@http://10.0.0.1:8000", "vllm-b@http://10.0.0.2:8000"]).await;
    assert_eq!(nodes[0].metadata.weights_digest.as_deref(), Some("sha256:1111"));
    assert_eq!(nodes[0].metadata.quantization.as_deref(), Some("fp8"));
    assert_eq!(nodes[0].metadata.engine_version.as_deref(), Some("0.6.3"));
    assert_eq!(nodes[0].metadata.gpu_hourly_usd, Some(Decimal::new(249, 2)));
    assert_eq!(nodes[1].metadata, discovery::NodeMetadata::default());
    assert!(rx.borrow().contains_key("static"));

    let list_request = fake.requests()[0].clone();
    assert!(list_request.starts_with(&format!("{PODS}?")), "{list_request}");
    assert_eq!(param(&list_request, "labelSelector"), Some("app%3Dvllm%2Cpool%3Dllama-8b"));
    assert_eq!(param(&list_request, "watch"), None);
    wait_until(Duration::from_secs(15), "the first watch call", || ready(fake.requests().len() >= 2)).await;
    let watch_request = fake.requests()[1].clone();
    assert_eq!(param(&watch_request, "watch"), Some("true"), "{watch_request}");
    assert_eq!(param(&watch_request, "resourceVersion"), Some("10"));
    assert_eq!(param(&watch_request, "labelSelector"), Some("app%3Dvllm%2Cpool%3Dllama-8b"));
    assert_eq!(param(&watch_request, "allowWatchBookmarks"), Some("true"));
    assert!(param(&watch_request, "timeoutSeconds").is_some());

    // A pod is added.
    first_watch.send(event("ADDED", pod("vllm-d", "10.0.0.4", true, 11, json!({})))).unwrap();
    expect(
        &mut rx,
        "llama",
        &["vllm-a@http://10.0.0.1:8000", "vllm-b@http://10.0.0.2:8000", "vllm-d@http://10.0.0.4:8000"],
    )
    .await;
    // One turns not ready.
    first_watch.send(event("MODIFIED", pod("vllm-a", "10.0.0.1", false, 12, pinned.clone()))).unwrap();
    expect(&mut rx, "llama", &["vllm-b@http://10.0.0.2:8000", "vllm-d@http://10.0.0.4:8000"]).await;
    // One is deleted.
    first_watch.send(event("DELETED", pod("vllm-b", "10.0.0.2", true, 13, json!({})))).unwrap();
    expect(&mut rx, "llama", &["vllm-d@http://10.0.0.4:8000"]).await;
    // A bookmark moves the resource version; then the not-ready pod becomes ready.
    let bookmark = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "14"}});
    first_watch.send(event("BOOKMARK", bookmark)).unwrap();
    first_watch.send(event("MODIFIED", pod("vllm-c", "10.0.0.3", true, 15, json!({})))).unwrap();
    expect(&mut rx, "llama", &["vllm-c@http://10.0.0.3:8000", "vllm-d@http://10.0.0.4:8000"]).await;

    // The watch call ends (as at its timeout): the watcher watches again from where it was,
    // without a relist and without a change.
    let second_watch = fake.queue_watch();
    drop(first_watch);
    wait_until(Duration::from_secs(15), "the second watch call", || ready(fake.requests().len() >= 3)).await;
    let rewatch = fake.requests()[2].clone();
    assert_eq!(param(&rewatch, "watch"), Some("true"), "{rewatch}");
    assert_eq!(param(&rewatch, "resourceVersion"), Some("15"));

    // The version expires (410 Gone): the watcher relists. The relist has vllm-c (now on a
    // new engine) and a new vllm-e; vllm-d, missing from it, leaves.
    fake.set_list(
        PODS,
        pod_list(
            20,
            vec![
                pod("vllm-c", "10.0.0.3", true, 18, json!({"spillway.dev/engine-version": "0.7.0"})),
                pod("vllm-e", "10.0.0.5", true, 19, json!({})),
            ],
        ),
    );
    let _third_watch = fake.queue_watch();
    let gone = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": "too old resource version: 15 (20)", "reason": "Expired", "code": 410});
    second_watch.send(event("ERROR", gone)).unwrap();
    let nodes =
        expect(&mut rx, "llama", &["vllm-c@http://10.0.0.3:8000", "vllm-e@http://10.0.0.5:8000"]).await;
    assert_eq!(nodes[0].metadata.engine_version.as_deref(), Some("0.7.0"));
    let lists = fake.requests().iter().filter(|r| param(r, "watch").is_none()).count();
    assert_eq!(lists, 2, "{:?}", fake.requests());

    // Once nobody listens, the loop ends.
    drop(rx);
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("run returns").unwrap();
}

#[tokio::test]
async fn endpointslices_are_listed_from_the_discovery_group() {
    let (fake, url) = start_fake().await;
    const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/llm/endpointslices";
    fake.set_list(
        SLICES,
        json!({
            "kind": "EndpointSliceList",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {"resourceVersion": "30"},
            "items": [{
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "vllm-x1", "namespace": "llm", "resourceVersion": "29",
                             "labels": {"kubernetes.io/service-name": "vllm"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.0.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false},
                     "targetRef": {"kind": "Pod", "name": "vllm-0", "namespace": "llm", "uid": "u0"}},
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true},
                     "targetRef": {"kind": "Pod", "name": "vllm-1", "namespace": "llm", "uid": "u1"}},
                ],
            }],
        }),
    );
    let _watch = fake.queue_watch();
    let client = discovery::client_for_url(&url).unwrap();
    let (tx, mut rx) = watch::channel(DiscoveredNodes::new());
    let mut cfg = discovery_cfg(KubeResource::Endpointslices);
    cfg.selector = "kubernetes.io/service-name=vllm".into();
    let task = tokio::spawn(discovery::run("llama".into(), cfg, client, tx));
    let nodes = expect(&mut rx, "llama", &["vllm-0@http://10.0.0.1:8000"]).await;
    assert_eq!(nodes[0].metadata, discovery::NodeMetadata::default());
    assert!(fake.requests()[0].starts_with(&format!("{SLICES}?")));
    task.abort();
}

#[tokio::test]
async fn watch_errors_are_retried_until_the_server_answers() {
    let (fake, url) = start_fake().await;
    // No list answer yet: the list call gets 404 and the watcher backs off and retries.
    let client = discovery::client_for_url(&url).unwrap();
    let (tx, mut rx) = watch::channel(DiscoveredNodes::new());
    let task = tokio::spawn(discovery::run("llama".into(), discovery_cfg(KubeResource::Pods), client, tx));
    wait_until(Duration::from_secs(15), "a failed list call", || ready(!fake.requests().is_empty())).await;
    assert!(!rx.borrow().contains_key("llama"), "nothing is published before a listing");
    fake.set_list(
        "/api/v1/namespaces/llm/pods",
        pod_list(5, vec![pod("vllm-a", "10.0.0.1", true, 4, json!({}))]),
    );
    let _watch = fake.queue_watch();
    expect(&mut rx, "llama", &["vllm-a@http://10.0.0.1:8000"]).await;
    task.abort();
}

#[tokio::test]
async fn https_client_builds_with_one_crypto_provider_and_fails_cleanly() {
    // A TCP listener that drops every connection: the TLS handshake starts, then fails.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
        }
    });
    let client = discovery::client_for_url(&format!("https://{addr}")).expect("https client builds");
    assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "llm");
    let err = pods.list(&Default::default()).await.expect_err("no server there");
    assert!(!err.to_string().is_empty());

    assert!(discovery::client_for_url("not a url").is_err());
    assert!(discovery::client_for_url("http://127.0.0.1:1").is_ok());
}

#[tokio::test]
async fn client_from_env_reads_the_kubeconfig_and_the_router_follows_pods() {
    let (fake, url) = start_fake().await;
    fake.set_list(
        "/api/v1/namespaces/llm/pods",
        pod_list(3, vec![pod("vllm-a", "10.0.0.1", true, 2, json!({}))]),
    );
    let dir = std::env::temp_dir().join(format!("spillway-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: nobody\n    namespace: llm\n\
             current-context: fake\nusers:\n- name: nobody\n  user: {{}}\n"
        ),
    )
    .unwrap();
    // Only this test reads KUBECONFIG.
    std::env::set_var("KUBECONFIG", &path);
    let client = discovery::client_from_env().await.expect("client from kubeconfig");
    let pods: kube::Api<Pod> = kube::Api::default_namespaced(client);
    let list = pods.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(fake.requests()[0].split('?').next(), Some("/api/v1/namespaces/llm/pods"));

    // The router itself, started with `discovery.kubernetes`, finds the pod through the same
    // kubeconfig, serves from it, and stops when the pod is deleted: no restart.
    let mut node = spillway::sim::SimArgs::for_kind(spillway::sim::SimKind::Vllm, "m");
    node.model = Some("m".into());
    let node = spillway::sim::spawn(node, tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap())
        .await
        .unwrap();
    let hosted = spillway::sim::spawn(
        spillway::sim::SimArgs::for_kind(spillway::sim::SimKind::OpenAi, "gpt"),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    )
    .await
    .unwrap();
    let the_pod = pod("vllm-a", "127.0.0.1", true, 2, json!({"spillway.dev/gpu-hourly-usd": "3.75"}));
    fake.set_list("/api/v1/namespaces/llm/pods", pod_list(3, vec![the_pod.clone()]));
    let watch_events = fake.queue_watch();
    let yaml = format!(
        "backends:\n  - {{name: pool, kind: vllm, model: m, gpu_count: 2, gpu_hourly_usd: \"1.00\", discovery: {{kubernetes: {{namespace: llm, selector: app=vllm, port: {}}}}}}}\n\
         \x20 - {{name: hosted, kind: openai, base_url: \"{}/v1\", model: gpt}}\n\
         tasks:\n  - {{name: t, backends: [pool, hosted], slo: {{ttft_ms: 2000}}}}\n\
         telemetry: {{interval_ms: 100, stale_after_ms: 1000}}\n",
        node.addr.port(),
        hosted.base_url()
    );
    let config = spillway::config::parse(&yaml).unwrap_or_else(|p| panic!("{p:?}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ledger_url = format!("sqlite://{}", dir.join("ledger.db").display());
    let secrets =
        spillway::config::secrets::Secrets { ledger_url: Some(ledger_url.clone()), ..Default::default() };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = spillway::app::start(config, secrets, listener, async {
        let _ = stopped.await;
    })
    .await
    .unwrap();
    let url = format!("http://{}", router.addr);
    let served_by = |url: String| async move {
        let resp = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({"model": "t", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        resp.headers()["x-spillway-backend"].to_str().unwrap().to_string()
    };
    let served_by_now = |want: &'static str| {
        let (url, served_by) = (url.clone(), &served_by);
        async move {
            let backend = served_by(url).await;
            if backend == want {
                Ok(())
            } else {
                Err(backend)
            }
        }
    };
    crate::common::wait_until(Duration::from_secs(5), "the discovered pod to serve", || {
        served_by_now("pool")
    })
    .await;
    // The GPU-time sampler has seen the pod serving (a sample of it marked busy).
    let busy = r#"spillway_gpu_samples_total{backend="pool",busy="true"}"#;
    let sampled = crate::common::wait_metric(&url, busy, 1.0, Duration::from_secs(5)).await;
    assert!(sampled >= 1.0, "the GPU-time sampler never saw the pod busy: {busy} = {sampled}");
    watch_events.send(event("DELETED", pod("vllm-a", "127.0.0.1", true, 4, json!({})))).unwrap();
    crate::common::wait_until(Duration::from_secs(5), "a deleted pod to leave the pool", || {
        served_by_now("hosted")
    })
    .await;
    let ready: Value = reqwest::get(format!("{url}/readyz")).await.unwrap().json().await.unwrap();
    assert_eq!(ready["local_nodes"], 0);
    stop.send(()).unwrap();
    router.task.await.unwrap().unwrap();
    // The pod's GPU price annotation overrides the pool's configured price in the ledger.
    let store = spillway::ledger::Store::open(&ledger_url).await.unwrap();
    let minutes = store.query_minutes(0, i64::MAX).await.unwrap();
    assert!(!minutes.is_empty());
    for m in &minutes {
        assert_eq!((m.backend.as_str(), m.gpu_count), ("pool", 2));
        assert_eq!(m.gpu_hourly_usd, Some("3.75".parse().unwrap()), "{m:?}");
    }
    assert!(minutes.iter().any(|m| m.busy), "it served: {minutes:?}");
    store.close().await;
    std::fs::remove_dir_all(&dir).ok();
}
