//! The lean client against raw sockets: what it writes, each way a body ends, keep-alive,
//! stale connections, and the errors it gives.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// Read one request (head and `content-length` body) off `stream`; `None` at EOF.
pub(super) async fn read_request(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().unwrap());
            while pending.len() < end + 4 + length {
                let mut more = [0u8; 4096];
                let n = stream.read(&mut more).await.ok()?;
                if n == 0 {
                    return None;
                }
                pending.extend_from_slice(&more[..n]);
            }
            let request = String::from_utf8_lossy(&pending[..end + 4 + length]).to_string();
            pending.drain(..end + 4 + length);
            return Some(request);
        }
        let mut more = [0u8; 4096];
        let n = stream.read(&mut more).await.ok()?;
        if n == 0 {
            return None;
        }
        pending.extend_from_slice(&more[..n]);
    }
}

/// A server that answers every request on a connection with `answer`, counting connections;
/// with `close_after_one`, it closes each connection after its first answer.
async fn server(
    answer: &'static str,
    close_after_one: bool,
) -> (String, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (count, record) = (Arc::clone(&connections), Arc::clone(&seen));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let mut pending = Vec::new();
                while let Some(request) = read_request(&mut stream, &mut pending).await {
                    record.lock().unwrap().push(request);
                    stream.write_all(answer.as_bytes()).await.unwrap();
                    if close_after_one {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), connections, seen)
}

async fn body_of(response: Response) -> Result<Vec<u8>, UpstreamError> {
    let mut body = response.body;
    let mut out = Vec::new();
    while let Some(piece) = body.next_bytes().await {
        out.extend_from_slice(&piece?);
    }
    Ok(out)
}

fn json_headers() -> Vec<(HeaderName, String)> {
    vec![
        (http::header::CONTENT_TYPE, "application/json".into()),
        (http::header::AUTHORIZATION, "Bearer k-1".into()),
    ]
}

#[tokio::test]
async fn a_request_is_one_clean_head_and_its_body() {
    let (base, _, seen) = server("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false).await;
    let pool = Pool::new(PoolConfig::default());
    let response =
        pool.post(&format!("{base}/v1/chat/completions?x=1"), &json_headers(), b"{\"a\":1}").await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(body_of(response).await.unwrap(), b"ok");
    let request = seen.lock().unwrap()[0].clone();
    let host = base.strip_prefix("http://").unwrap();
    assert_eq!(
        request,
        format!(
            "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\nauthorization: Bearer k-1\r\ncontent-length: 7\r\n\r\n{{\"a\":1}}"
        )
    );
}

#[tokio::test]
async fn a_complete_body_gives_its_connection_back_for_the_next_request() {
    let (base, connections, seen) =
        server("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false).await;
    let pool = Pool::new(PoolConfig::default());
    for _ in 0..3 {
        let response = pool.post(&format!("{base}/x"), &[], b"").await.unwrap();
        assert_eq!(body_of(response).await.unwrap(), b"abc");
        assert_eq!(pool.idle_count(), 1);
    }
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(connections.load(Ordering::SeqCst), 1, "three requests on one connection");
}

#[tokio::test]
async fn a_body_dropped_half_read_does_not_go_back() {
    let (base, connections, _) = server("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n01234", false).await;
    let pool = Pool::new(PoolConfig::default());
    let mut response = pool.post(&format!("{base}/x"), &[], b"").await.unwrap();
    assert_eq!(&response.body.next_bytes().await.unwrap().unwrap()[..], b"01234");
    drop(response);
    assert_eq!(pool.idle_count(), 0);
    let _ = pool.post(&format!("{base}/x"), &[], b"").await.unwrap();
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_body_until_close_is_read_to_the_end_and_not_kept() {
    let (base, _, _) =
        server("HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\n", true).await;
    let pool = Pool::new(PoolConfig::default());
    let response = pool.post(&format!("{base}/x"), &[], b"").await.unwrap();
    assert_eq!(response.headers["content-type"], "text/event-stream");
    assert_eq!(body_of(response).await.unwrap(), b"data: 1\n\n");
    assert_eq!(pool.idle_count(), 0);
}

#[tokio::test]
async fn a_body_cut_short_is_a_broken_stream() {
    let (base, _, _) = server("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n01234", true).await;
    let pool = Pool::new(PoolConfig::default());
    let response = pool.post(&format!("{base}/x"), &[], b"").await.unwrap();
    let error = body_of(response).await.unwrap_err();
    assert_eq!(error.class, ErrorClass::StreamBroken, "{error}");
    let (base, _, _) = server("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nZZ\r\n", true).await;
    let error = body_of(pool.post(&format!("{base}/x"), &[], b"").await.unwrap()).await.unwrap_err();
    assert!(error.message.contains("chunk size"), "{error}");
}

#[tokio::test]
async fn interim_answers_are_skipped_and_error_statuses_come_with_their_body() {
    let (base, _, _) =
        server("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\ncontent-length: 4\r\n\r\nslow", false)
            .await;
    let pool = Pool::new(PoolConfig::default());
    let response = pool.post(&format!("{base}/x"), &[], b"").await.unwrap();
    assert_eq!(response.status, 429);
    assert_eq!(response.headers["retry-after"], "3");
    assert_eq!(body_of(response).await.unwrap(), b"slow");
}

#[tokio::test]
async fn transport_failures_are_classified_and_a_bad_header_is_never_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let pool = Pool::new(PoolConfig::default());
    let error = pool.post(&format!("http://{addr}/x"), &[], b"").err_now().await;
    assert_eq!(error.class, ErrorClass::Connect, "{error}");

    let (base, connections, _) = server("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", false).await;
    let split = vec![(http::header::AUTHORIZATION, "Bearer sk-secret\r\nx-injected: 1".to_string())];
    let error = pool.post(&format!("{base}/x"), &split, b"").err_now().await;
    assert!(error.message.contains("authorization") && !error.message.contains("sk-secret"), "{error}");
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing was sent");

    let (base, _, _) = server("NOT HTTP AT ALL\r\n\r\n", false).await;
    let error = pool.post(&format!("{base}/x"), &[], b"").err_now().await;
    assert_eq!(error.class, ErrorClass::StreamBroken, "{error}");
}

/// The error of a call that must fail.
trait ErrNow {
    async fn err_now(self) -> UpstreamError;
}

impl<F: std::future::Future<Output = Result<Response, UpstreamError>>> ErrNow for F {
    async fn err_now(self) -> UpstreamError {
        match self.await {
            Ok(r) => panic!("expected an error, got status {}", r.status),
            Err(e) => e,
        }
    }
}

#[tokio::test]
async fn a_reader_that_stops_at_the_last_data_still_frees_the_connection() {
    let (base, connections, _) =
        server("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\n[DONE]\r\n0\r\n\r\n", false).await;
    let pool = Pool::new(PoolConfig::default());
    for _ in 0..2 {
        let mut response = pool.post(&format!("{base}/x"), &[], b"").await.unwrap();
        assert_eq!(&response.body.next_bytes().await.unwrap().unwrap()[..], b"[DONE]");
        drop(response);
        assert_eq!(pool.idle_count(), 1, "the end of the body was already in");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}
