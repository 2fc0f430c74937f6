//! The access line of each HTTP answer, written off the request's task: the edge hands a small
//! record to a bounded queue ([`AccessLog::send`], which never waits: a full queue drops the
//! line and counts it in `spillway_access_lines_dropped_total`), and the bookkeeping loop words
//! and writes it. Only ids, names, the status and the time: never a prompt, an answer or a key.

use prometheus::IntCounter;
use tokio::sync::mpsc::{self, error::TrySendError};

/// Lines waiting for the bookkeeping loop, at most.
pub const QUEUE: usize = 16 * 1024;

/// One answer's access line, as the edge saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLine {
    pub request_id: String,
    pub method: http::Method,
    pub path: String,
    pub status: u16,
    pub ms: u64,
    /// `info` or `debug`, as `access_log.level` says.
    pub level: tracing::Level,
}

impl AccessLine {
    /// Write the line (on the bookkeeping loop).
    pub fn write(&self) {
        let AccessLine { request_id, method, path, status, ms, .. } = self;
        match self.level {
            tracing::Level::INFO => {
                tracing::info!(request_id = %request_id, method = %method, path = %path, status, ms, "http response")
            }
            _ => {
                tracing::debug!(request_id = %request_id, method = %method, path = %path, status, ms, "http response")
            }
        }
    }
}

/// The edge's end of the queue (cheap to clone).
#[derive(Clone)]
pub struct AccessLog {
    queue: mpsc::Sender<AccessLine>,
    dropped: IntCounter,
}

impl AccessLog {
    /// The queue, and the bookkeeping loop's end of it; `dropped` counts the lines a full queue
    /// turned away.
    pub fn new(capacity: usize, dropped: IntCounter) -> (AccessLog, mpsc::Receiver<AccessLine>) {
        let (queue, lines) = mpsc::channel(capacity);
        (AccessLog { queue, dropped }, lines)
    }

    /// Queue `line` for writing, or count it when the queue is full (or the loop has stopped).
    pub fn send(&self, line: AccessLine) {
        if let Err(TrySendError::Full(_) | TrySendError::Closed(_)) = self.queue.try_send(line) {
            self.dropped.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: u64) -> AccessLine {
        let (method, path) = (http::Method::POST, "/v1/chat/completions".to_string());
        AccessLine {
            request_id: format!("r{n}"),
            method,
            path,
            status: 200,
            ms: n,
            level: tracing::Level::INFO,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let dropped = IntCounter::new("dropped", "test").unwrap();
        let (log, mut lines) = AccessLog::new(2, dropped.clone());
        for n in 0..5 {
            log.send(line(n));
        }
        assert_eq!(dropped.get(), 3);
        assert_eq!(lines.try_recv().unwrap(), line(0));
        assert_eq!(lines.try_recv().unwrap(), line(1));
        assert!(lines.try_recv().is_err());
        drop(lines);
        log.send(line(9));
        assert_eq!(dropped.get(), 4, "a stopped loop's lines are counted too");
    }
}
