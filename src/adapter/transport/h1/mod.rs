//! A lean HTTP/1.1 client for plain-`http://` upstreams: the fleet's own engines, where every
//! streamed request holds one connection for as long as the answer takes.
//!
//! A general client (reqwest on hyper) runs each connection as its own task behind a request
//! channel, with 8 KiB read and write buffers: about 30 KiB and two task wake-ups per chunk for
//! every open stream. Here the task that writes the client's answer reads the upstream socket
//! itself: one request is written in one write, the response head is parsed with `httparse`,
//! and the body is read through a buffer of [`READ_CHUNK`] bytes that grows only for a larger
//! head. Idle connections are kept per host (bounded, with an idle timeout) and checked for a
//! close before reuse. A request is sent twice only when the first send proves nothing was
//! delivered: a kept connection whose first write is refused is replaced by a fresh one. Once
//! any of the request may have reached the node, a failure is the attempt's outcome and
//! dispatch decides what is next: generation is not idempotent, and the node may already be
//! computing the first copy. TLS upstreams (hosted APIs) go through reqwest instead.

mod framing;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::Stream;
use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::canonical::{ErrorClass, UpstreamError};
use framing::{Framing, Step};

/// Bytes read from the socket at a time; an SSE event or a small JSON answer fits.
pub const READ_CHUNK: usize = 4096;

/// The largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;

/// The most response headers accepted.
const MAX_HEADERS: usize = 64;

/// Kept-alive connections by authority, each with when it went idle.
type IdleConns = HashMap<String, Vec<(Conn, Instant)>>;

/// How the pool keeps connections.
#[derive(Debug, Clone, Copy)]
pub struct PoolConfig {
    pub connect_timeout: Duration,
    pub max_idle_per_host: usize,
    pub idle_timeout: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            connect_timeout: Duration::from_secs(2),
            max_idle_per_host: 256,
            idle_timeout: Duration::from_secs(90),
        }
    }
}

/// Kept-alive connections by `host:port`.
#[derive(Debug)]
pub struct Pool {
    cfg: PoolConfig,
    idle: Mutex<IdleConns>,
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    /// Read but not yet used: the rest of a head, a body, or nothing.
    buf: BytesMut,
}

/// A response: status and head, the body still on the wire.
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Body,
}

/// The body of a response, read on demand; a complete body gives its connection back.
pub struct Body {
    conn: Option<Conn>,
    framing: Framing,
    reusable: bool,
    pool: Arc<Pool>,
    authority: String,
}

impl Pool {
    pub fn new(cfg: PoolConfig) -> Arc<Pool> {
        Arc::new(Pool { cfg, idle: Mutex::new(HashMap::new()) })
    }

    /// `POST url` with `headers` (besides `host` and `content-length`) and `body`. Resolves
    /// once the response head is in.
    pub(in crate::adapter) async fn post(
        self: &Arc<Self>,
        url: &str,
        headers: &[(HeaderName, String)],
        body: &[u8],
    ) -> Result<Response, UpstreamError> {
        let uri: http::Uri = url.parse().map_err(|e| invalid(format!("bad upstream URL: {e}")))?;
        let authority = uri.authority().ok_or_else(|| invalid("upstream URL has no host".into()))?;
        let authority = match authority.port() {
            Some(_) => authority.to_string(),
            None => format!("{authority}:80"),
        };
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let request = request_bytes(path, uri.authority().map_or("", |a| a.as_str()), headers, body)?;
        if let Some(conn) = self.take_idle(&authority) {
            // A kept connection the server closed meanwhile refuses the first write: then once
            // more on a fresh one. Any other outcome is the answer.
            match exchange(conn, &request).await {
                Ok(head) => return Ok(self.response(head, authority)),
                Err(Failure::Closed) => {}
                Err(Failure::Error(e)) => return Err(e),
            }
        }
        let conn = self.connect(&authority).await?;
        match exchange(conn, &request).await {
            Ok(head) => Ok(self.response(head, authority)),
            Err(Failure::Closed) => {
                Err(UpstreamError::new(ErrorClass::Connect, None, "the new connection refused the request"))
            }
            Err(Failure::Error(e)) => Err(e),
        }
    }

    fn response(self: &Arc<Self>, head: Head, authority: String) -> Response {
        Response {
            status: head.status,
            headers: head.headers,
            body: Body {
                conn: Some(head.conn),
                framing: head.framing,
                reusable: head.keep_alive && head.framing.reusable(),
                pool: Arc::clone(self),
                authority,
            },
        }
    }

    async fn connect(&self, authority: &str) -> Result<Conn, UpstreamError> {
        let connecting = TcpStream::connect(authority);
        let stream = match tokio::time::timeout(self.cfg.connect_timeout, connecting).await {
            Err(_) => {
                return Err(UpstreamError::new(
                    ErrorClass::Timeout,
                    None,
                    format!("could not connect within {} ms", self.cfg.connect_timeout.as_millis()),
                ))
            }
            Ok(Err(e)) => {
                return Err(UpstreamError::new(ErrorClass::Connect, None, format!("could not connect: {e}")))
            }
            Ok(Ok(stream)) => stream,
        };
        stream.set_nodelay(true).map_err(|e| UpstreamError::new(ErrorClass::Connect, None, e.to_string()))?;
        Ok(Conn { stream, buf: BytesMut::new() })
    }

    /// The idle connections. A panic elsewhere while holding the lock leaves nothing half
    /// done (each change is one push or pop), so a poisoned lock is taken as it is.
    fn idle(&self) -> std::sync::MutexGuard<'_, IdleConns> {
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The most recently kept live connection to `authority`, if any.
    fn take_idle(&self, authority: &str) -> Option<Conn> {
        let mut idle = self.idle();
        let conns = idle.get_mut(authority)?;
        while let Some((conn, since)) = conns.pop() {
            if since.elapsed() < self.cfg.idle_timeout && still_open(&conn.stream) {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, authority: String, conn: Conn) {
        let mut idle = self.idle();
        let conns = idle.entry(authority).or_default();
        conns.retain(|(_, since)| since.elapsed() < self.cfg.idle_timeout);
        if conns.len() < self.cfg.max_idle_per_host {
            conns.push((conn, Instant::now()));
        }
    }

    /// Idle connections kept now, all hosts together.
    pub fn idle_count(&self) -> usize {
        self.idle().values().map(Vec::len).sum()
    }
}

/// An idle socket with nothing to read is still open; a closed one reads 0 (or data nobody
/// asked for, which makes it unusable too).
fn still_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// The request on the wire: request line, `host`, the headers, `content-length`, the body.
fn request_bytes(
    path: &str,
    host: &str,
    headers: &[(HeaderName, String)],
    body: &[u8],
) -> Result<Vec<u8>, UpstreamError> {
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host.as_bytes());
    for (name, value) in headers {
        // A value that is not a valid header value (a line break in a key) is refused: it
        // would split the head. The value itself is never named.
        HeaderValue::from_str(value)
            .map_err(|_| invalid(format!("header {name} has a value that is not valid")))?;
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
    }
    out.extend_from_slice(format!("\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// A response head read off a connection.
struct Head {
    status: u16,
    headers: HeaderMap,
    framing: Framing,
    keep_alive: bool,
    conn: Conn,
}

enum Failure {
    /// The connection refused the request's first write: nothing was delivered, safe to send
    /// again.
    Closed,
    /// Anything else, the request possibly delivered.
    Error(UpstreamError),
}

/// Write the request, read the response head.
async fn exchange(mut conn: Conn, request: &[u8]) -> Result<Head, Failure> {
    let first = match conn.stream.write(request).await {
        Ok(0) | Err(_) => return Err(Failure::Closed),
        Ok(n) => n,
    };
    if let Err(e) = conn.stream.write_all(&request[first..]).await {
        return Err(Failure::Error(broken(format!("writing the request, part of it sent: {e}"))));
    }
    loop {
        if !conn.buf.is_empty() {
            match parse_head(&mut conn.buf).map_err(|e| Failure::Error(broken(e)))? {
                Some(Parsed::Interim) => continue,
                Some(Parsed::Final { status, headers, framing, keep_alive }) => {
                    return Ok(Head { status, headers, framing, keep_alive, conn })
                }
                None if conn.buf.len() > MAX_HEAD => {
                    return Err(Failure::Error(broken(format!("response head over {MAX_HEAD} bytes"))))
                }
                None => {}
            }
        }
        conn.buf.reserve(READ_CHUNK);
        match conn.stream.read_buf(&mut conn.buf).await {
            Ok(0) | Err(_) if conn.buf.is_empty() => {
                return Err(Failure::Error(broken(
                    "the upstream closed the connection before answering".into(),
                )))
            }
            Ok(0) => {
                return Err(Failure::Error(broken("the upstream closed the connection mid-head".into())))
            }
            Ok(_) => {}
            Err(e) => return Err(Failure::Error(broken(format!("reading the response head: {e}")))),
        }
    }
}

enum Parsed {
    /// A 1xx answer, taken out of the buffer: the real one follows.
    Interim,
    Final {
        status: u16,
        headers: HeaderMap,
        framing: Framing,
        keep_alive: bool,
    },
}

/// A complete head at the front of `buf` (taken out of it), `None` if more is needed.
fn parse_head(buf: &mut BytesMut) -> Result<Option<Parsed>, String> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed response head: {e}")),
    };
    let status = response.code.unwrap_or(0);
    let http11 = response.version == Some(1);
    let mut headers = HeaderMap::with_capacity(response.headers.len());
    for h in response.headers.iter() {
        let name =
            HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| format!("bad header name {:?}", h.name))?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| format!("bad value for header {name}"))?;
        headers.append(name, value);
    }
    let _ = buf.split_to(len);
    if (100..200).contains(&status) && status != 101 {
        return Ok(Some(Parsed::Interim));
    }
    let framing = framing_of(status, &headers)?;
    let connection = header_tokens(&headers, http::header::CONNECTION);
    let keep_alive = if http11 {
        !connection.iter().any(|t| t == "close")
    } else {
        connection.iter().any(|t| t == "keep-alive")
    };
    Ok(Some(Parsed::Final { status, headers, framing, keep_alive }))
}

/// How the body of this answer ends (RFC 9112 §6.3).
fn framing_of(status: u16, headers: &HeaderMap) -> Result<Framing, String> {
    if status == 204 || status == 304 {
        return Ok(Framing::Done);
    }
    let codings = header_tokens(headers, http::header::TRANSFER_ENCODING);
    if let Some(last) = codings.last() {
        return Ok(if last == "chunked" { Framing::ChunkSize } else { Framing::UntilClose });
    }
    let mut lengths = headers.get_all(http::header::CONTENT_LENGTH).iter();
    match (lengths.next(), lengths.next()) {
        (None, _) => Ok(Framing::UntilClose),
        (Some(v), None) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Framing::Length)
            .ok_or_else(|| "bad content-length".to_string()),
        (Some(_), Some(_)) => Err("more than one content-length".into()),
    }
}

/// A comma-separated header's tokens, lowercased.
fn header_tokens(headers: &HeaderMap, name: HeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

impl Body {
    /// The next piece of the body; `None` once it is complete.
    pub(in crate::adapter) async fn next_bytes(&mut self) -> Option<Result<Bytes, UpstreamError>> {
        loop {
            let conn = self.conn.as_mut()?;
            match self.framing.step(&mut conn.buf) {
                Ok(Step::Data(data)) => {
                    // A reader that stops at the answer's own end marker never asks again.
                    if self.framing.settle(&mut conn.buf).is_ok() && self.framing == Framing::Done {
                        self.release();
                    }
                    return Some(Ok(data));
                }
                Ok(Step::Done) => {
                    self.release();
                    return None;
                }
                Ok(Step::NeedMore) => {}
                Err(e) => {
                    self.conn = None;
                    return Some(Err(broken(format!("malformed response body: {e}"))));
                }
            }
            if conn.buf.capacity() - conn.buf.len() < READ_CHUNK / 4 {
                conn.buf.reserve(READ_CHUNK);
            }
            match conn.stream.read_buf(&mut conn.buf).await {
                Ok(0) if self.framing == Framing::UntilClose => {
                    self.conn = None;
                    return None;
                }
                Ok(0) => {
                    self.conn = None;
                    return Some(Err(broken(
                        "the upstream closed the connection before the body ended".into(),
                    )));
                }
                Ok(_) => {}
                Err(e) => {
                    self.conn = None;
                    return Some(Err(broken(format!("reading the response body: {e}"))));
                }
            }
        }
    }

    /// The body as a stream of pieces.
    pub(in crate::adapter) fn into_stream(self) -> impl Stream<Item = Result<Bytes, UpstreamError>> + Send {
        futures::stream::unfold(
            self,
            |mut body| async move { body.next_bytes().await.map(|item| (item, body)) },
        )
    }

    /// A complete body: its connection goes back to the pool if it may carry another request
    /// and nothing beyond the body was read.
    fn release(&mut self) {
        if let Some(conn) = self.conn.take().filter(|c| self.reusable && c.buf.is_empty()) {
            let mut conn = conn;
            conn.buf = BytesMut::new();
            self.pool.put_idle(std::mem::take(&mut self.authority), conn);
        }
    }
}

fn broken(message: String) -> UpstreamError {
    UpstreamError::new(ErrorClass::StreamBroken, None, message)
}

fn invalid(message: String) -> UpstreamError {
    UpstreamError::new(ErrorClass::Connect, None, message)
}

#[cfg(test)]
mod send_once_tests;
#[cfg(test)]
mod tests;
