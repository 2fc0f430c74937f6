//! How an HTTP/1.1 response body ends, and reading it out of the connection's buffer: a known
//! length, chunked transfer coding (RFC 9112 §7.1: sizes in hex, extensions ignored, trailers
//! skipped), or the close of the connection. Pure: bytes in, body pieces out.

use bytes::{Buf, Bytes, BytesMut};

/// The longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4096;

/// Where a body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// This many bytes are still to come.
    Length(u64),
    /// Chunked: at a size line.
    ChunkSize,
    /// Chunked: this many bytes of the current chunk are still to come.
    ChunkData(u64),
    /// Chunked: the CRLF after a chunk's data.
    ChunkEnd,
    /// Chunked: after the last (zero-size) chunk, up to the blank line.
    Trailers,
    /// Everything until the connection closes.
    UntilClose,
    /// The body is complete.
    Done,
}

/// One step of reading.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Data(Bytes),
    /// Nothing complete in the buffer: read more from the connection.
    NeedMore,
    Done,
}

impl Framing {
    /// Whether the connection may carry another request once the body is done.
    pub fn reusable(&self) -> bool {
        !matches!(self, Framing::UntilClose)
    }

    /// Read past what is framing only (a chunk's CRLF, the last chunk, trailers) as far as
    /// `buf` allows, without taking any body bytes: a body whose last bytes have just been taken
    /// is then `Done` at once, so its connection is free before anyone asks for more.
    pub fn settle(&mut self, buf: &mut BytesMut) -> Result<(), String> {
        while matches!(self, Framing::Length(0) | Framing::ChunkEnd | Framing::ChunkSize | Framing::Trailers)
        {
            if self.advance(buf)?.is_some() {
                break;
            }
        }
        Ok(())
    }

    /// Take the next piece of the body out of `buf` (what follows the body stays in it).
    /// `Err` names what is malformed.
    pub fn step(&mut self, buf: &mut BytesMut) -> Result<Step, String> {
        loop {
            if let Some(step) = self.advance(buf)? {
                return Ok(step);
            }
        }
    }

    /// One move: a step to report, or `None` when only the state changed.
    fn advance(&mut self, buf: &mut BytesMut) -> Result<Option<Step>, String> {
        match *self {
            Framing::Done => return Ok(Some(Step::Done)),
            Framing::Length(0) => *self = Framing::Done,
            Framing::Length(left) | Framing::ChunkData(left) => {
                if buf.is_empty() {
                    return Ok(Some(Step::NeedMore));
                }
                let n = left.min(buf.len() as u64);
                let data = buf.split_to(n as usize).freeze();
                *self = match *self {
                    Framing::Length(_) => Framing::Length(left - n),
                    _ if left == n => Framing::ChunkEnd,
                    _ => Framing::ChunkData(left - n),
                };
                return Ok(Some(Step::Data(data)));
            }
            Framing::UntilClose => {
                if buf.is_empty() {
                    return Ok(Some(Step::NeedMore));
                }
                return Ok(Some(Step::Data(buf.split().freeze())));
            }
            Framing::ChunkEnd => {
                if buf.len() < 2 {
                    return Ok(Some(Step::NeedMore));
                }
                if &buf[..2] != b"\r\n" {
                    return Err("chunk data is not followed by CRLF".into());
                }
                buf.advance(2);
                *self = Framing::ChunkSize;
            }
            Framing::ChunkSize => {
                let Some(line) = take_line(buf)? else { return Ok(Some(Step::NeedMore)) };
                let size = line[..].split(|&b| b == b';').next().unwrap_or_default();
                let size = std::str::from_utf8(size)
                    .ok()
                    .map(|s| s.trim_matches([' ', '\t']))
                    .filter(|s| !s.is_empty() && s.len() <= 16)
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
                    .ok_or_else(|| format!("bad chunk size line {:?}", String::from_utf8_lossy(&line)))?;
                *self = if size == 0 { Framing::Trailers } else { Framing::ChunkData(size) };
            }
            Framing::Trailers => {
                let Some(line) = take_line(buf)? else { return Ok(Some(Step::NeedMore)) };
                if line.is_empty() {
                    *self = Framing::Done;
                }
            }
        }
        Ok(None)
    }
}

/// A CRLF-terminated line taken from the front of `buf` (without its CRLF), if it is all in.
fn take_line(buf: &mut BytesMut) -> Result<Option<BytesMut>, String> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(at) => {
            let line = buf.split_to(at);
            buf.advance(2);
            Ok(Some(line))
        }
        None if buf.len() > MAX_LINE => Err(format!("a chunk line longer than {MAX_LINE} bytes")),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `wire` in pieces of `size` bytes; the body read and what was left after it.
    fn read(mut framing: Framing, wire: &[u8], size: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut pieces = wire.chunks(size);
        loop {
            match framing.step(&mut buf)? {
                Step::Data(d) => body.extend_from_slice(&d),
                Step::Done => return Ok((body, buf.to_vec())),
                Step::NeedMore => match pieces.next() {
                    Some(piece) => buf.extend_from_slice(piece),
                    None => return Err("the wire ended first".into()),
                },
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_in_any_chopping() {
        let wire =
            b"5;name=value\r\nhello\r\n1A\r\n0123456789abcdef0123456789\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for size in [1, 2, 3, 7, 64, wire.len()] {
            let (body, rest) = read(Framing::ChunkSize, wire, size).unwrap();
            assert_eq!(body, b"hello0123456789abcdef0123456789", "pieces of {size}");
            // What follows the body (a pipelined answer) is not eaten, bar what arrived with it.
            assert!(b"NEXT".starts_with(&rest), "{rest:?}");
        }
    }

    #[test]
    fn a_length_body_stops_at_its_length() {
        let (body, rest) = read(Framing::Length(5), b"helloEXTRA", 100).unwrap();
        assert_eq!((body.as_slice(), rest.as_slice()), (&b"hello"[..], &b"EXTRA"[..]));
        assert_eq!(read(Framing::Length(0), b"", 1).unwrap().0, b"");
        assert!(read(Framing::Length(9), b"short", 2).is_err(), "a short body never ends");
    }

    #[test]
    fn malformed_chunking_is_an_error_not_a_hang() {
        assert!(read(Framing::ChunkSize, b"zz\r\nhello\r\n0\r\n\r\n", 4).unwrap_err().contains("chunk size"));
        assert!(read(Framing::ChunkSize, b"5\r\nhelloXX0\r\n\r\n", 4).unwrap_err().contains("CRLF"));
        assert!(read(Framing::ChunkSize, b"\r\n", 4).is_err(), "an empty size line");
        assert!(read(Framing::ChunkSize, b"12345678901234567\r\n", 4).is_err(), "a size beyond 64 bits");
        let long = vec![b'1'; MAX_LINE + 1];
        assert!(read(Framing::ChunkSize, &long, 512).unwrap_err().contains("longer"));
    }

    #[test]
    fn only_a_body_until_close_makes_the_connection_unusable() {
        assert!(Framing::ChunkSize.reusable() && Framing::Length(3).reusable());
        assert!(!Framing::UntilClose.reusable());
    }

    #[test]
    fn a_body_whose_end_is_in_the_buffer_settles_to_done_without_losing_data() {
        let mut buf = BytesMut::from(&b"4\r\nlast\r\n0\r\n\r\n"[..]);
        let mut framing = Framing::ChunkSize;
        framing.settle(&mut buf).unwrap();
        assert_eq!(framing, Framing::ChunkData(4), "settling stops before body bytes");
        assert_eq!(framing.step(&mut buf).unwrap(), Step::Data(Bytes::from_static(b"last")));
        framing.settle(&mut buf).unwrap();
        assert_eq!(framing, Framing::Done);
        let mut partial = BytesMut::from(&b"\r\n0\r\n"[..]);
        let mut framing = Framing::ChunkEnd;
        framing.settle(&mut partial).unwrap();
        assert_eq!(framing, Framing::Trailers, "as far as the bytes go");
        let mut framing = Framing::Length(0);
        framing.settle(&mut BytesMut::new()).unwrap();
        assert_eq!(framing, Framing::Done);
    }
}
