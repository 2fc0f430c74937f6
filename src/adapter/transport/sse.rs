//! Server-sent events read from an upstream's body, as the WHATWG rules define them: lines end
//! with LF, CRLF or CR (also split across reads), `data` lines of one event join with LF, a
//! blank line dispatches, comments and `id`/`retry` are skipped, a leading BOM is dropped.
//!
//! Every relayed token passes through here, so it is written for that: a read's bytes are
//! scanned in place, only an unfinished line is kept for the next read, and an event's data is
//! lent to the caller from a buffer kept for the whole stream (no allocation per event).

use std::fmt;
use std::str::Utf8Error;

/// Most bytes one event (or one line of it) may hold: past it the stream is refused, so an
/// upstream that never ends a line cannot grow the router's memory without bound.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Why a body is not an event stream.
#[derive(Debug, PartialEq)]
pub(crate) enum SseError {
    NotUtf8(Utf8Error),
    TooLong,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::NotUtf8(e) => write!(f, "event stream is not UTF-8: {e}"),
            SseError::TooLong => write!(f, "an event stream line or event over {MAX_EVENT_BYTES} bytes"),
        }
    }
}

/// The state between reads of one event stream.
#[derive(Default)]
pub(crate) struct SseDecoder {
    /// The start of a line whose end has not arrived.
    partial: Vec<u8>,
    /// The event being read: its type and its data lines so far (each followed by LF).
    event: String,
    data: String,
    /// The last read ended with CR: an LF opening the next one ends no further line.
    after_cr: bool,
    /// Past the start of the stream (where a byte order mark may stand).
    started: bool,
}

/// What the caller says after each event: read on, or stop here (the rest of the read is
/// dropped, and so is any event after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

impl SseDecoder {
    /// Read `bytes`, calling `on_event(event_type, data)` for each event they complete.
    /// Returns `Flow::Stop` when `on_event` did; an error when a line is not UTF-8 or an event
    /// grows past [`MAX_EVENT_BYTES`].
    pub fn feed(
        &mut self,
        bytes: &[u8],
        on_event: &mut impl FnMut(&str, &str) -> Flow,
    ) -> Result<Flow, SseError> {
        let mut rest = bytes;
        if rest.is_empty() {
            // An empty read ends nothing; a CR just before it still pairs with an LF after it.
            return Ok(Flow::Continue);
        }
        if !std::mem::replace(&mut self.started, true) {
            rest = rest.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(rest);
        }
        if std::mem::take(&mut self.after_cr) {
            rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', rest) {
            let flow = if self.partial.is_empty() {
                self.line(&rest[..end], on_event)?
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&rest[..end]);
                let flow = self.line(&line, on_event);
                line.clear();
                self.partial = line;
                flow?
            };
            let cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if flow == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLong);
        }
        Ok(Flow::Continue)
    }

    /// One whole line, without its end.
    fn line(&mut self, line: &[u8], on_event: &mut impl FnMut(&str, &str) -> Flow) -> Result<Flow, SseError> {
        if line.is_empty() {
            return Ok(self.dispatch(on_event));
        }
        let line = std::str::from_utf8(line).map_err(SseError::NotUtf8)?;
        let (field, value) = match line.split_once(':') {
            Some(("", _)) => return Ok(Flow::Continue),
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            _ => {}
        }
        Ok(Flow::Continue)
    }

    /// A blank line: the event read so far, if it has data (its type defaults to `message`).
    fn dispatch(&mut self, on_event: &mut impl FnMut(&str, &str) -> Flow) -> Flow {
        if self.data.is_empty() {
            self.event.clear();
            return Flow::Continue;
        }
        let data = self.data.strip_suffix('\n').unwrap_or(&self.data);
        let event = if self.event.is_empty() { "message" } else { &self.event };
        let flow = on_event(event, data);
        self.data.clear();
        self.event.clear();
        flow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The events of a body read in these pieces, as (type, data).
    fn events(reads: &[&[u8]]) -> Vec<(String, String)> {
        let mut decoder = SseDecoder::default();
        let mut seen = Vec::new();
        for read in reads {
            decoder
                .feed(read, &mut |event, data| {
                    seen.push((event.to_string(), data.to_string()));
                    Flow::Continue
                })
                .unwrap();
        }
        seen
    }

    fn pair(event: &str, data: &str) -> (String, String) {
        (event.to_string(), data.to_string())
    }

    #[test]
    fn lines_may_end_with_lf_crlf_or_cr_also_across_reads() {
        let want = vec![pair("message", "a"), pair("message", "b"), pair("message", "c")];
        assert_eq!(events(&[b"data: a\n\ndata: b\r\n\r\ndata: c\r\r"]), want);
        // A CR at the end of one read and the LF opening the next end one line, not two.
        assert_eq!(events(&[b"data: a\r", b"\n\r", b"\ndata: b\r", b"\r", b"data: c\n", b"\n"]), want);
        // An empty read between them changes nothing: still one line end, not a blank line.
        assert_eq!(events(&[b"data: a\r", b"", b"\ndata: b\r\n\r\n"]), [pair("message", "a\nb")]);
    }

    #[test]
    fn data_lines_join_and_types_comments_and_other_fields_are_read_as_the_rules_say() {
        let body = b"\xEF\xBB\xBF: a comment\nid: 7\nretry: 10\nevent: delta\ndata: one\ndata:two\ndata\n\n\
                     event: ignored\n\ndata: {\"x\": \"a:b\"}\n\n";
        assert_eq!(events(&[body]), vec![pair("delta", "one\ntwo\n"), pair("message", "{\"x\": \"a:b\"}")]);
        // An event with no data is not dispatched; `data:` alone is, with empty data.
        assert_eq!(events(&[b"event: ping\n\ndata:\n\n"]), vec![pair("message", "")]);
    }

    #[test]
    fn an_event_left_open_when_the_body_ends_is_dropped() {
        assert_eq!(events(&[b"data: a\n\ndata: b\n"]), vec![pair("message", "a")]);
    }

    #[test]
    fn a_line_that_is_not_utf8_or_never_ends_is_an_error_and_stop_drops_the_rest() {
        let mut decoder = SseDecoder::default();
        assert!(matches!(
            decoder.feed(b"data: \xff\n\n", &mut |_, _| Flow::Continue),
            Err(SseError::NotUtf8(_))
        ));
        let mut decoder = SseDecoder::default();
        let piece = vec![b'x'; 1024 * 1024];
        let fed: Vec<_> = (0..17).map(|_| decoder.feed(&piece, &mut |_, _| Flow::Continue)).collect();
        assert_eq!(fed[15], Ok(Flow::Continue));
        assert_eq!(fed[16], Err(SseError::TooLong));
        let mut decoder = SseDecoder::default();
        let mut seen = 0;
        let flow = decoder.feed(b"data: a\n\ndata: b\n\n", &mut |_, _| {
            seen += 1;
            Flow::Stop
        });
        assert_eq!((flow, seen), (Ok(Flow::Stop), 1));
    }

    proptest! {
        /// Whatever the reads, the events are those a standard client reads (eventsource-stream).
        #[test]
        fn any_split_of_a_body_reads_as_a_standard_client_reads_it(
            lines in proptest::collection::vec(
                prop_oneof![
                    "data: [a-z{}\":, ]{0,12}",
                    "event: [a-z_.]{1,8}",
                    Just(String::new()),
                    Just(": keep-alive".to_string()),
                    Just("data: é中".to_string()),
                ],
                0..24,
            ),
            crlf in any::<bool>(),
            cuts in proptest::collection::vec(0usize..400, 0..8),
        ) {
            let end = if crlf { "\r\n" } else { "\n" };
            let body: String = lines.iter().map(|l| format!("{l}{end}")).collect::<String>() + end;
            let bytes = body.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut reads = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                reads.push(&bytes[from..cut]);
                from = cut;
            }
            let ours = events(&reads);
            use eventsource_stream::Eventsource;
            use futures::StreamExt;
            let chunks: Vec<Result<bytes::Bytes, std::io::Error>> =
                reads.iter().map(|r| Ok(bytes::Bytes::copy_from_slice(r))).collect();
            let theirs: Vec<(String, String)> = futures::executor::block_on(
                futures::stream::iter(chunks).eventsource().map(|e| {
                    let e = e.unwrap();
                    (e.event, e.data)
                }).collect(),
            );
            prop_assert_eq!(ours, theirs);
        }
    }
}
