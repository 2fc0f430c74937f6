//! The HTTP edge as clients meet it on real sockets: TCP_NODELAY on accepted sockets,
//! HTTP/1.1 keep-alive and h2c, and slow or hostile clients (dribbled heads, stalled bodies,
//! too many connections from one address, connections left open at SIGTERM) that must not
//! hold the router's capacity or its shutdown.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;
use spillway::sim::SimKind;

const LLAMA: &str = "llama";

fn config(node: &str, limits: &str) -> String {
    format!(
        r#"
backends:
  - {{name: local, kind: vllm, endpoints: [{node}], model: {LLAMA}}}
tasks:
  - {{name: chat, backends: [local], slo: {{ttft_ms: 3000}}}}
limits: {{{limits}}}
"#
    )
}

async fn setup(limits: &str) -> (spillway::sim::SimHandle, Router) {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let router = router(&config(&node.base_url(), limits), &[]).await;
    (node, router)
}

fn addr(router: &Router) -> SocketAddr {
    router.handle.addr
}

fn chat_request(body: &str) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

const BODY: &str = r#"{"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}"#;

/// Read one HTTP/1.1 response with a content-length body off a kept-alive socket.
fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the connection closed mid-head");
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
        })
        .expect("a content-length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}

/// Whether the peer closed `stream` (EOF, or reset) within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// The router's end of `client`: the socket in this process whose local address is the
/// client's peer and whose peer is the client's local address.
fn server_side_nodelay(client: &TcpStream) -> Option<bool> {
    let want_local = client.peer_addr().unwrap();
    let want_peer = client.local_addr().unwrap();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        if fd == client.as_raw_fd() {
            continue;
        }
        let (Some(local), Some(peer)) = (sock_addr(fd, libc::getsockname), sock_addr(fd, libc::getpeername))
        else {
            continue;
        };
        if local == want_local && peer == want_peer {
            let mut value: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let rc = unsafe {
                libc::getsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&mut value as *mut i32).cast(),
                    &mut len,
                )
            };
            assert_eq!(rc, 0);
            return Some(value != 0);
        }
    }
    None
}

type NameFn = unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

fn sock_addr(fd: i32, get: NameFn) -> Option<SocketAddr> {
    let mut storage: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let rc = unsafe { get(fd, (&mut storage as *mut libc::sockaddr_in).cast(), &mut len) };
    if rc != 0 || storage.sin_family != libc::AF_INET as libc::sa_family_t {
        return None;
    }
    let ip = std::net::Ipv4Addr::from(u32::from_be(storage.sin_addr.s_addr));
    Some(SocketAddr::from((ip, u16::from_be(storage.sin_port))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_sockets_have_tcp_nodelay_and_keep_alive_serves_many_requests_on_one() {
    let (_node, router) = setup("").await;
    let addr = addr(&router);
    let outcome = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut answers = Vec::new();
        for _ in 0..3 {
            stream.write_all(chat_request(BODY).as_bytes()).unwrap();
            answers.push(read_response(&mut stream).0);
        }
        (answers, server_side_nodelay(&stream))
    })
    .await
    .unwrap();
    assert_eq!(outcome.0, vec![200, 200, 200], "three requests on one kept-alive connection");
    assert_eq!(outcome.1, Some(true), "the router's socket has TCP_NODELAY");
}

#[tokio::test]
async fn h2c_with_prior_knowledge_is_served() {
    let (_node, router) = setup("").await;
    let client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let resp = client
        .post(format!("{}/v1/chat/completions", router.url))
        .json(&body("chat", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_dribbled_heads_neither_block_requests_nor_stay_open() {
    let (_node, router) = setup("header_read_timeout_ms: 2000, max_concurrency: 4").await;
    let addr = addr(&router);
    let mut slow = Vec::new();
    for _ in 0..1000 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(
            &mut stream,
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-a: ",
        )
        .await
        .unwrap();
        slow.push(stream);
    }
    // Ordinary requests are served while the thousand hang (and none of them holds a permit).
    for _ in 0..8 {
        let (status, _, json) = post_json(&router.url, &body("chat", false)).await;
        assert_eq!(status, 200, "{json}");
    }
    let ended = wait_metric(
        &router,
        "spillway_client_connections_ended_total{reason=\"header_timeout\"}",
        1000.0,
        Duration::from_secs(30),
    )
    .await;
    assert!(ended >= 1000.0, "only {ended} dribbling connections were closed for their head");
    for stream in slow.iter_mut() {
        let mut buf = [0u8; 64];
        let read =
            tokio::time::timeout(Duration::from_secs(5), tokio::io::AsyncReadExt::read(stream, &mut buf))
                .await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "a dribbling connection is still open: {read:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_hold_no_admission_permit_and_get_408() {
    let (_node, router) = setup("body_read_timeout_ms: 1500, max_concurrency: 4").await;
    let addr = addr(&router);
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(addr).unwrap();
        let request = chat_request(BODY);
        stream.write_all(&request.as_bytes()[..request.len() - BODY.len() / 2]).unwrap();
        stalled.push(stream);
    }
    // Four half-sent bodies and max_concurrency 4: everyone else is still served.
    for _ in 0..4 {
        let (status, _, json) = post_json(&router.url, &body("chat", false)).await;
        assert_eq!(status, 200, "a stalled body held a permit: {json}");
    }
    let answers =
        tokio::task::spawn_blocking(move || stalled.iter_mut().map(read_response).collect::<Vec<_>>())
            .await
            .unwrap();
    for (status, body) in answers {
        assert_eq!(status, 408, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["error"]["code"], "body_timeout", "{json}");
    }
}

/// A connection to the router from the loopback address `from` (the test's other calls come
/// from 127.0.0.1, a different client address).
async fn connect_from(from: &str, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_gets_at_most_its_connection_cap() {
    let (_node, router) = setup("max_connections_per_client: 3").await;
    let addr = addr(&router);
    let refused = "spillway_client_connections_ended_total{reason=\"per_client_limit\"}";
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_from("127.0.0.2", addr).await);
    }
    let served = "spillway_client_connections_open";
    assert!(
        wait_metric(&router, served, 4.0, Duration::from_secs(5)).await >= 4.0,
        "three held and the metrics call"
    );
    assert_eq!(metric(&router, refused).await, 0.0);
    let mut fourth = connect_from("127.0.0.2", addr).await;
    let mut buf = [0u8; 16];
    let read =
        tokio::time::timeout(Duration::from_secs(5), tokio::io::AsyncReadExt::read(&mut fourth, &mut buf))
            .await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the fourth connection from one address was kept: {read:?}"
    );
    assert_eq!(metric(&router, refused).await, 1.0);
    // Another address is not affected; and once the three are gone, the first may connect again.
    let other = connect_from("127.0.0.3", addr).await;
    drop(held);
    drop(other);
    let again = wait_until(Duration::from_secs(5), "the address to be let back in", || async {
        let mut stream = connect_from("127.0.0.2", addr).await;
        tokio::io::AsyncWriteExt::write_all(&mut stream, chat_request(BODY).as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        tokio::io::AsyncReadExt::read_exact(&mut stream, &mut head).await.map(|_| head)
    })
    .await;
    assert_eq!(&again[9..12], b"200");
}

#[tokio::test]
async fn oversized_heads_get_431() {
    let (_node, router) = setup("max_header_bytes: 8192, max_headers: 20").await;
    let client = reqwest::Client::new();
    let big = "x".repeat(10_000);
    let resp = client.get(format!("{}/healthz", router.url)).header("x-big", big).send().await.unwrap();
    assert_eq!(resp.status(), 431);
    let mut many = client.get(format!("{}/healthz", router.url));
    for i in 0..30 {
        many = many.header(format!("x-h{i}"), "v");
    }
    assert_eq!(many.send().await.unwrap().status(), 431);
    assert_eq!(client.get(format!("{}/healthz", router.url)).send().await.unwrap().status(), 200);
}

/// `spillway serve` stops within its drain deadline after SIGTERM although clients hold
/// connections open with half-sent heads and bodies, and writes its ledger before it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_within_the_deadline_despite_stalled_clients() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let dir = std::env::temp_dir().join(format!("spillway-edge-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.yaml");
    let ledger = dir.join("ledger.db");
    let yaml = format!(
        "listen: 127.0.0.1:0\n{}\ntelemetry: {{interval_ms: 200}}\nledger: {{url: \"sqlite://{}\"}}\n",
        config(
            &node.base_url(),
            "shutdown_delay_ms: 0, drain_timeout_ms: 1000, header_read_timeout_ms: 60000, body_read_timeout_ms: 60000"
        ),
        ledger.display()
    );
    std::fs::write(&path, yaml).unwrap();
    let (mut server, url, _stderr) = serve_process(&path, &[]).await;
    let (status, _, _) = post_json(&url, &body("chat", false)).await;
    assert_eq!(status, 200);
    let addr: SocketAddr = url.strip_prefix("http://").unwrap().parse().unwrap();
    let mut stalled = Vec::new();
    for i in 0..20 {
        let mut stream = TcpStream::connect(addr).unwrap();
        let request = chat_request(BODY);
        let cut = if i % 2 == 0 { 30 } else { request.len() - 10 };
        stream.write_all(&request.as_bytes()[..cut]).unwrap();
        stalled.push(stream);
    }
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let exited = poll_until(Duration::from_secs(20), || {
        let status = server.try_wait().unwrap();
        async move { status }
    })
    .await;
    let Ok(status) = exited else {
        let _ = server.kill();
        panic!("spillway serve was still running 20 s after SIGTERM");
    };
    assert!(status.success(), "{status:?}");
    for stream in stalled.iter_mut() {
        assert!(closed_within(stream, Duration::from_secs(1)), "a stalled connection outlived the router");
    }
    let store = spillway::ledger::Store::open(&format!("sqlite://{}", ledger.display())).await.unwrap();
    let rows = store.query(0, i64::MAX).await.unwrap();
    assert!(!rows.is_empty(), "the served request's ledger row was flushed before exit");
    std::fs::remove_dir_all(&dir).ok();
}

/// Send `raw` on a fresh connection (then half-close it when `half_close`), and read the answer.
fn exchange(addr: SocketAddr, raw: &[u8], half_close: bool) -> (u16, serde_json::Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(raw).unwrap();
    if half_close {
        stream.shutdown(std::net::Shutdown::Write).unwrap();
    }
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (status, body) = read_response(&mut stream);
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_bodies_are_400_invalid_body_and_other_content_types_415() {
    let (_node, router) = setup("").await;
    let addr = addr(&router);
    let answers = tokio::task::spawn_blocking(move || {
        let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n";
        let bad_chunk = format!("{head}transfer-encoding: chunked\r\n\r\n5\r\n{{\"mod\r\nzz\r\n");
        let cut_short = format!("{head}content-length: {}\r\n\r\n{}", BODY.len(), &BODY[..BODY.len() / 2]);
        let text_plain = chat_request(BODY).replace("application/json", "text/plain");
        [
            exchange(addr, bad_chunk.as_bytes(), false),
            exchange(addr, cut_short.as_bytes(), true),
            exchange(addr, text_plain.as_bytes(), false),
        ]
    })
    .await
    .unwrap();
    let [bad_chunk, cut_short, text_plain] = answers;
    for (status, json) in [bad_chunk, cut_short] {
        assert_eq!((status, json["error"]["code"].as_str()), (400, Some("invalid_body")), "{json}");
    }
    assert_eq!(text_plain.0, 415, "{}", text_plain.1);
    assert_eq!(text_plain.1["error"]["param"], "content-type");
}
