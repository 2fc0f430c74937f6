//! A loopback HTTP balancer in front of router replicas, as an L7 proxy (Envoy's
//! `retry_on: reset,connect-failure`, nginx's `proxy_next_upstream error`) would run it: new
//! requests go round-robin to the replicas whose `/readyz` last answered 200 (checked every
//! 100 ms, a readiness probe's period), and a request whose replica fails before sending a
//! response head (refused, reset, gone) is sent to the next one. Once a head has arrived the
//! answer is passed through as it comes; a replica dying after that breaks the answer, as it
//! would behind any balancer. Spillway sends no head before the first token, so a retry here
//! never repeats text a client has seen.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;

pub struct Balancer {
    pub url: String,
    shared: Arc<Shared>,
}

struct Shared {
    replicas: Vec<String>,
    ready: Mutex<Vec<bool>>,
    next: AtomicUsize,
    /// Requests sent again to another replica after one failed before its head.
    retried: AtomicUsize,
    http: reqwest::Client,
}

impl Balancer {
    /// Balance over the replicas' base URLs (`http://ADDR`).
    pub async fn start(replicas: Vec<String>) -> Balancer {
        let shared = Arc::new(Shared {
            ready: Mutex::new(vec![false; replicas.len()]),
            replicas,
            next: AtomicUsize::new(0),
            retried: AtomicUsize::new(0),
            http: reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap(),
        });
        let probed = Arc::clone(&shared);
        tokio::spawn(async move {
            let probe = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
            loop {
                for (i, replica) in probed.replicas.iter().enumerate() {
                    let answer = probe.get(format!("{replica}/readyz")).send().await;
                    probed.ready.lock().unwrap()[i] = answer.is_ok_and(|r| r.status() == 200);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let app = axum::Router::new().fallback(forward).with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Balancer { url, shared }
    }

    /// Ok once every replica answered its last probe with 200.
    pub fn all_ready(&self) -> Result<(), String> {
        let ready = self.shared.ready.lock().unwrap().clone();
        ready.iter().all(|r| *r).then_some(()).ok_or_else(|| format!("ready: {ready:?}"))
    }

    /// Ok once replica `i` has failed its probe.
    pub fn out(&self, i: usize) -> Result<(), String> {
        (!self.shared.ready.lock().unwrap()[i])
            .then_some(())
            .ok_or_else(|| format!("replica {i} still ready"))
    }

    pub fn retried(&self) -> usize {
        self.shared.retried.load(Ordering::Relaxed)
    }
}

impl Shared {
    /// Replicas in the order this request tries them: the ready ones from the next in turn.
    fn order(&self) -> Vec<usize> {
        let ready = self.ready.lock().unwrap().clone();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..ready.len()).map(|k| (start + k) % ready.len()).filter(|&i| ready[i]).collect()
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body): Result<Bytes, _> = axum::body::to_bytes(body, 1 << 20).await else {
        return status(StatusCode::BAD_REQUEST, "request body unreadable");
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    for (tried, i) in shared.order().into_iter().enumerate() {
        if tried > 0 {
            shared.retried.fetch_add(1, Ordering::Relaxed);
        }
        let mut upstream = shared
            .http
            .request(parts.method.clone(), format!("{}{path}", shared.replicas[i]))
            .body(body.clone());
        for (name, value) in &parts.headers {
            if name != "host" && name != "content-length" {
                upstream = upstream.header(name, value);
            }
        }
        // An error here came before the response head: nothing reached the client yet.
        let Ok(answer) = upstream.send().await else { continue };
        let mut response = Response::builder().status(answer.status());
        for (name, value) in answer.headers() {
            if name != "content-length" && name != "transfer-encoding" && name != "connection" {
                response = response.header(name, value);
            }
        }
        return response.body(Body::from_stream(answer.bytes_stream())).unwrap();
    }
    status(StatusCode::BAD_GATEWAY, "no replica answered")
}

fn status(code: StatusCode, why: &'static str) -> Response {
    Response::builder().status(code).body(Body::from(why)).unwrap()
}
