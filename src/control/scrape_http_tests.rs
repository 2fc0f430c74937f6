//! The kept-alive scrape connection against a loopback server that answers canned bytes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

const SECOND: Duration = Duration::from_secs(2);

/// A server that answers the n-th request (over all connections) with `answers[n]` (the last
/// one again after that), closing the connection after it when `close_after` says so. Returns
/// its origin and how many connections it accepted.
async fn server(answers: Vec<&'static str>, close_after: bool) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let (answers, served) = (answers.clone(), Arc::clone(&served));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 1024];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let n = served.fetch_add(1, Ordering::SeqCst);
                        let answer = answers[n.min(answers.len() - 1)];
                        if answer.is_empty() {
                            // Never answer.
                            std::future::pending::<()>().await;
                        }
                        s.write_all(answer.as_bytes()).await.unwrap();
                        if close_after {
                            return;
                        }
                    }
                }
            });
        }
    });
    (origin, accepted)
}

const LENGTH: &str = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";
const CHUNKED: &str =
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nvllm\r\n6;ext=1\r\n:x 1\n\n\r\n0\r\n\r\n";

async fn get_text(conn: &mut KeepAlive, origin: &str) -> Result<String, ScrapeError> {
    match conn.get(origin, "/metrics", SECOND, 1 << 20).await? {
        Answer::Ok => Ok(String::from_utf8(conn.body().to_vec()).unwrap()),
        Answer::Status(s) => Ok(format!("status {s}")),
    }
}

#[tokio::test]
async fn reads_length_and_chunked_bodies_on_one_connection() {
    let (origin, accepted) = server(vec![LENGTH, CHUNKED, LENGTH], false).await;
    let mut conn = KeepAlive::for_origin(&origin).unwrap();
    assert_eq!(get_text(&mut conn, &origin).await.unwrap(), "hello");
    assert_eq!(get_text(&mut conn, &origin).await.unwrap(), "vllm:x 1\n\n");
    assert_eq!(get_text(&mut conn, &origin).await.unwrap(), "hello");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for every scrape");
}

#[tokio::test]
async fn a_closed_connection_is_replaced_and_the_scrape_still_answers() {
    // Closing after each answer without saying so: the next request finds the socket dead.
    let (origin, accepted) = server(vec![LENGTH], true).await;
    let mut conn = KeepAlive::for_origin(&origin).unwrap();
    for _ in 0..3 {
        assert_eq!(get_text(&mut conn, &origin).await.unwrap(), "hello");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    let (origin, accepted) =
        server(vec!["HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end"], true).await;
    let mut conn = KeepAlive::for_origin(&origin).unwrap();
    assert_eq!(get_text(&mut conn, &origin).await.unwrap(), "to the end");
    assert_eq!(get_text(&mut conn, &origin).await.unwrap(), "to the end");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn statuses_limits_and_timeouts_are_errors_that_name_the_url() {
    let (origin, _) =
        server(vec!["HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", LENGTH], false).await;
    let mut conn = KeepAlive::for_origin(&origin).unwrap();
    assert_eq!(get_text(&mut conn, &origin).await.unwrap(), "status 404");
    let too_large = conn.get(&origin, "/metrics", SECOND, 4).await.err().unwrap();
    assert!(matches!(too_large, ScrapeError::TooLarge { limit: 4, .. }), "{too_large}");
    let (origin, _) = server(vec![""], false).await;
    let mut conn = KeepAlive::for_origin(&origin).unwrap();
    let slow = conn.get(&origin, "/metrics", Duration::from_millis(50), 1 << 20).await.err().unwrap();
    assert_eq!(slow.to_string(), format!("{origin}/metrics: no answer within 50 ms"));
    let mut refused = KeepAlive::for_origin("http://127.0.0.1:1").unwrap();
    let e = refused.get("http://127.0.0.1:1", "/metrics", SECOND, 1 << 20).await.err().unwrap();
    assert!(e.to_string().starts_with("http://127.0.0.1:1/metrics: "), "{e}");
}

#[test]
fn only_plain_http_origins_get_a_connection() {
    assert_eq!(KeepAlive::for_origin("http://10.0.0.5:8000").unwrap().authority, "10.0.0.5:8000");
    assert_eq!(KeepAlive::for_origin("http://node-a").unwrap().authority, "node-a:80");
    assert_eq!(KeepAlive::for_origin("http://[::1]:8000").unwrap().authority, "[::1]:8000");
    assert!(KeepAlive::for_origin("https://node-a:8443").is_none());
}
