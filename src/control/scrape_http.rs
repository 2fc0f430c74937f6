//! The scrape loop's HTTP: one kept-alive HTTP/1.1 connection per node, a request line and
//! headers written once per path, and the answer read into a buffer the connection keeps, so a
//! scrape of an idle node allocates nothing and wakes its task once or twice. A general client
//! (pools, header maps, URL parsing, a connection task per socket) cost more CPU per scrape than
//! parsing the page did.
//!
//! Plain `http://` only, GET only, for pages a few MiB at most: `Content-Length`, chunked and
//! read-to-close bodies. Anything else (`https://`, a redirect) is the caller's to send through
//! the general client. A failure on a connection that served before (the node closed an idle
//! keep-alive) is retried once on a fresh one; any failure drops the connection.

use std::io::ErrorKind;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::scrape_error::ScrapeError;

/// Most header lines read from an answer.
const MAX_HEADERS: usize = 32;
/// Longest answer head (status line and headers) read.
const MAX_HEAD_BYTES: usize = 64 << 10;

/// What a GET brought back.
pub(super) enum Answer {
    /// 2xx: the body is in [`KeepAlive::body`].
    Ok,
    /// Another status; a 3xx is worth asking again through a client that follows redirects.
    Status(u16),
}

/// One node's connection, and where its pages are read into.
pub(super) struct KeepAlive {
    /// `host:port` to connect to, and the `Host` header value.
    authority: String,
    conn: Option<TcpStream>,
    /// Bytes read past the end of the last answer's head, then the body itself.
    buf: Vec<u8>,
    /// The last answer's body: `buf[body.0..body.1]`.
    body: (usize, usize),
    /// The request bytes for the path asked last (rebuilt only when the path changes).
    request: Vec<u8>,
    path: String,
}

impl KeepAlive {
    /// A connection to `origin` (`http://host[:port]`, no path); `None` for any other scheme.
    pub(super) fn for_origin(origin: &str) -> Option<KeepAlive> {
        let rest = origin.strip_prefix("http://")?;
        let authority = rest.split('/').next().filter(|a| !a.is_empty())?;
        let has_port = authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok());
        let authority = if has_port { authority.to_string() } else { format!("{authority}:80") };
        Some(KeepAlive {
            authority,
            conn: None,
            buf: Vec::with_capacity(32 << 10),
            body: (0, 0),
            request: Vec::new(),
            path: String::new(),
        })
    }

    /// The body of the last [`Answer::Ok`].
    pub(super) fn body(&self) -> &[u8] {
        &self.buf[self.body.0..self.body.1]
    }

    /// GET `path` (starting with `/`) within `timeout`; `origin` and `path` name it in errors.
    pub(super) async fn get(
        &mut self,
        origin: &str,
        path: &str,
        timeout: Duration,
        limit: usize,
    ) -> Result<Answer, ScrapeError> {
        let url = || format!("{origin}{path}");
        if self.path != path {
            self.path = path.to_string();
            self.request = format!(
                "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: text/plain\r\nUser-Agent: spillway\r\n\r\n",
                self.authority
            )
            .into_bytes();
        }
        let attempt = async {
            let reused = self.conn.is_some();
            match self.exchange(limit).await {
                Err(e) if reused && !matches!(e.kind(), ErrorKind::InvalidData | ErrorKind::FileTooLarge) => {
                    self.conn = None;
                    self.exchange(limit).await
                }
                r => r,
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(a)) => Ok(a),
            Ok(Err(e)) => {
                self.conn = None;
                if e.kind() == ErrorKind::FileTooLarge {
                    return Err(ScrapeError::TooLarge { url: url(), limit });
                }
                Err(ScrapeError::Io { url: url(), source: e })
            }
            Err(_) => {
                self.conn = None;
                Err(ScrapeError::Timeout { url: url(), ms: timeout.as_millis() as u64 })
            }
        }
    }

    /// Send the request and read one answer (connecting first if need be).
    async fn exchange(&mut self, limit: usize) -> std::io::Result<Answer> {
        if self.conn.is_none() {
            let stream = TcpStream::connect(&self.authority).await?;
            stream.set_nodelay(true)?;
            self.conn = Some(stream);
        }
        let Some(stream) = self.conn.as_mut() else { unreachable!("connected above") };
        stream.write_all(&self.request).await?;
        self.buf.clear();
        // The head.
        let (status, head_len, framing, close) = loop {
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(invalid("answer head too long"));
            }
            read_more(stream, &mut self.buf).await?;
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(n) = resp.parse(&self.buf).map_err(invalid)? {
                let status = resp.code.unwrap_or(0);
                let (mut framing, close) = framing(resp.headers)?;
                if matches!(status, 100..=199 | 204 | 304) {
                    framing = Framing::Length(0);
                }
                break (status, n, framing, close || resp.version == Some(0));
            }
        };
        // The body is `buf[head_len..end]`; the answer took `buf[..used]`.
        let (end, used) = match framing {
            Framing::Length(len) => {
                if len > limit {
                    return Err(ErrorKind::FileTooLarge.into());
                }
                while self.buf.len() < head_len + len {
                    read_more(stream, &mut self.buf).await?;
                }
                (head_len + len, head_len + len)
            }
            Framing::Chunked => dechunk(stream, &mut self.buf, head_len, limit).await?,
            Framing::ToClose => {
                while read_more(stream, &mut self.buf).await.is_ok() {
                    if self.buf.len() > head_len + limit {
                        return Err(ErrorKind::FileTooLarge.into());
                    }
                }
                self.conn = None;
                (self.buf.len(), self.buf.len())
            }
        };
        self.body = (head_len, end);
        if close || self.buf.len() > used {
            // Told to close, or bytes beyond the answer: the connection is not reused.
            self.conn = None;
        }
        Ok(if (200..300).contains(&status) { Answer::Ok } else { Answer::Status(status) })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Length(usize),
    Chunked,
    ToClose,
}

/// How the body ends, and whether the server will close the connection after it.
fn framing(headers: &[httparse::Header<'_>]) -> std::io::Result<(Framing, bool)> {
    let mut framing = Framing::ToClose;
    let mut close = false;
    for h in headers {
        let value = std::str::from_utf8(h.value).map_err(invalid)?.trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            framing = Framing::Length(value.parse().map_err(invalid)?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if !value.eq_ignore_ascii_case("chunked") {
                return Err(invalid(format!("transfer-encoding {value}")));
            }
            framing = Framing::Chunked;
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    Ok((framing, close))
}

fn invalid(e: impl ToString) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidData, e.to_string())
}

/// Read what the socket has into `buf`; end of stream is an error.
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(16 << 10);
    }
    if stream.read_buf(buf).await? == 0 {
        return Err(ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The position of the next `\r\n` at or after `from`, reading more until there is one.
async fn line_end(stream: &mut TcpStream, buf: &mut Vec<u8>, from: usize) -> std::io::Result<usize> {
    loop {
        if let Some(i) = buf[from..].windows(2).position(|w| w == b"\r\n") {
            return Ok(from + i);
        }
        if buf.len() - from > MAX_HEAD_BYTES {
            return Err(invalid("chunk size line too long"));
        }
        read_more(stream, buf).await?;
    }
}

/// Decode a chunked body in place, `buf[start..]` becoming the body: returns its end and how
/// much of `buf` the answer took.
async fn dechunk(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    start: usize,
    limit: usize,
) -> std::io::Result<(usize, usize)> {
    // `out`: end of the decoded body so far; `at`: where the next chunk's size line starts.
    let (mut out, mut at) = (start, start);
    loop {
        let size_end = line_end(stream, buf, at).await?;
        let size_text = std::str::from_utf8(&buf[at..size_end]).map_err(invalid)?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(invalid)?;
        let data = size_end + 2;
        if size == 0 {
            // No trailers expected: the empty line that ends the body.
            let end = line_end(stream, buf, data).await?;
            if end != data {
                return Err(invalid("trailers in a chunked body"));
            }
            return Ok((out, data + 2));
        }
        if out - start + size > limit {
            return Err(ErrorKind::FileTooLarge.into());
        }
        while buf.len() < data + size + 2 {
            read_more(stream, buf).await?;
        }
        buf.copy_within(data..data + size, out);
        out += size;
        at = data + size + 2;
    }
}

#[cfg(test)]
#[path = "scrape_http_tests.rs"]
mod tests;
