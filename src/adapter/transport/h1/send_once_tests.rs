//! A request reaches a node at most once: on raw sockets, each way a connection can fail, and
//! how many copies of the request the server read.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::tests::read_request;
use super::*;

const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// What the server does after reading a request.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    Answer,
    /// Answer, then close the connection (no `connection: close`: the client keeps it).
    AnswerAndClose,
    /// Close without a byte of answer.
    Close,
    /// Reset the connection without a byte of answer.
    Reset,
}

/// A server that reads requests and does `script[n]` after the `n`th (the last entry from then
/// on); it counts connections and requests, and says on `closed` each time it closes one.
struct Scripted {
    base: String,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    closed: mpsc::UnboundedReceiver<()>,
}

async fn scripted(script: &'static [Then]) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (tx, closed) = mpsc::unbounded_channel();
    let (c, r) = (Arc::clone(&connections), Arc::clone(&requests));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let (r, tx) = (Arc::clone(&r), tx.clone());
            tokio::spawn(async move {
                let mut pending = Vec::new();
                while read_request(&mut stream, &mut pending).await.is_some() {
                    let n = r.fetch_add(1, Ordering::SeqCst);
                    let then = script[n.min(script.len() - 1)];
                    if matches!(then, Then::Answer | Then::AnswerAndClose) {
                        stream.write_all(OK.as_bytes()).await.unwrap();
                    }
                    if then == Then::Reset {
                        // A zero linger makes the close a reset; it does not block.
                        #[allow(deprecated)]
                        stream.set_linger(Some(Duration::ZERO)).unwrap();
                    }
                    if then != Then::Answer {
                        drop(stream);
                        let _ = tx.send(());
                        return;
                    }
                }
            });
        }
    });
    Scripted { base, connections, requests, closed }
}

impl Scripted {
    fn counts(&self) -> (usize, usize) {
        (self.connections.load(Ordering::SeqCst), self.requests.load(Ordering::SeqCst))
    }
}

async fn post(pool: &Arc<Pool>, base: &str) -> Result<Vec<u8>, UpstreamError> {
    let response = pool.post(&format!("{base}/v1/chat/completions"), &[], b"{}").await?;
    let mut body = response.body;
    let mut out = Vec::new();
    while let Some(piece) = body.next_bytes().await {
        out.extend_from_slice(&piece?);
    }
    Ok(out)
}

#[tokio::test]
async fn a_request_read_and_then_dropped_before_the_head_is_never_sent_again() {
    for then in [&[Then::Reset][..], &[Then::Close]] {
        // On a fresh connection.
        let server = scripted(then).await;
        let pool = Pool::new(PoolConfig::default());
        let error = post(&pool, &server.base).await.unwrap_err();
        assert_eq!(error.class, ErrorClass::StreamBroken, "{error}");
        assert_eq!(server.counts(), (1, 1), "one connection, the request read once");
    }
    for second in [&[Then::Answer, Then::Reset][..], &[Then::Answer, Then::Close]] {
        // On a kept connection: the first request is answered, the second read and dropped.
        let server = scripted(second).await;
        let pool = Pool::new(PoolConfig::default());
        assert_eq!(post(&pool, &server.base).await.unwrap(), b"ok");
        assert_eq!(pool.idle_count(), 1);
        let error = post(&pool, &server.base).await.unwrap_err();
        assert_eq!(error.class, ErrorClass::StreamBroken, "{error}");
        assert_eq!(server.counts(), (1, 2), "no second connection for the second request");
    }
}

#[tokio::test]
async fn a_kept_connection_found_closed_before_the_request_is_written_is_replaced() {
    let mut server = scripted(&[Then::AnswerAndClose]).await;
    let pool = Pool::new(PoolConfig::default());
    for round in 1..=3 {
        assert_eq!(post(&pool, &server.base).await.unwrap(), b"ok");
        server.closed.recv().await.unwrap();
        assert_eq!(server.counts(), (round, round), "each request read once, each on its own connection");
    }
}

#[tokio::test]
async fn a_first_write_the_connection_refuses_delivered_nothing_and_may_be_sent_again() {
    let mut server = scripted(&[Then::Reset]).await;
    let stream = TcpStream::connect(server.base.trim_start_matches("http://")).await.unwrap();
    // The server resets the connection after one request: send it one by hand, then wait.
    let mut first = Conn { stream, buf: BytesMut::new() };
    first.stream.write_all(b"POST / HTTP/1.1\r\ncontent-length: 0\r\n\r\n").await.unwrap();
    server.closed.recv().await.unwrap();
    assert!(!still_open(&first.stream), "the reset is visible before the next write");
    let request = request_bytes("/x", "h", &[], b"{}").unwrap();
    assert!(matches!(exchange(first, &request).await, Err(Failure::Closed)));
    assert_eq!(server.counts(), (1, 1), "the refused request never reached the server");
}
