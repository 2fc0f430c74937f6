//! The agent's one reader of GPUs: a dedicated OS thread that reads the source every
//! interval and publishes the result into the metrics and the status that HTTP handlers read.
//! NVML calls block (for seconds when a GPU is failing), so they live here and never on the
//! async runtime; a request only ever sees the last finished reading. A panicking source is
//! reported as down instead of silently killing the thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::exposition::AgentMetrics;
use super::source::{GpuReading, GpuSource};

/// What the HTTP side reads: the metrics, and a summary of the last reading.
pub struct Shared {
    pub metrics: AgentMetrics,
    status: Mutex<Status>,
}

#[derive(Debug, Clone)]
pub struct Status {
    /// GPU count when up, the reason when down.
    pub nvml: Result<usize, String>,
    /// When the last read finished (`None` before the first).
    pub last_read_done: Option<Instant>,
}

impl Shared {
    pub fn new() -> Self {
        Shared {
            metrics: AgentMetrics::new(),
            status: Mutex::new(Status { nvml: Err("no read yet".to_string()), last_read_done: None }),
        }
    }

    pub fn status(&self) -> Status {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn publish(&self, result: &Result<Vec<GpuReading>, String>) {
        let unix_secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        self.metrics.record(result, unix_secs);
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        status.nvml = result.as_ref().map(Vec::len).map_err(Clone::clone);
        status.last_read_done = Some(Instant::now());
    }
}

/// Read `source` now and then every `interval` (measured start to start) until `stop` is
/// dropped or sent to. `first` fires after the first reading is published.
pub fn run(
    mut source: Box<dyn GpuSource>,
    interval: Duration,
    shared: Arc<Shared>,
    stop: Receiver<()>,
    first: tokio::sync::oneshot::Sender<()>,
) {
    let mut first = Some(first);
    loop {
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| source.read()))
            .unwrap_or_else(|panic| Err(format!("GPU source panicked: {}", panic_text(&*panic))));
        shared.publish(&result);
        if let Some(first) = first.take() {
            let _ = first.send(());
        }
        let wait = interval.saturating_sub(started.elapsed());
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => continue,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        text.to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Panics;
    impl GpuSource for Panics {
        fn read(&mut self) -> Result<Vec<GpuReading>, String> {
            panic!("boom")
        }
    }

    #[test]
    fn a_panicking_source_is_down_and_the_thread_stops_on_drop() {
        let shared = Arc::new(Shared::new());
        let (stop_tx, stop_rx) = std::sync::mpsc::channel();
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let thread = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                run(Box::new(Panics), Duration::from_millis(5), shared, stop_rx, first_tx)
            })
        };
        first_rx.blocking_recv().unwrap();
        assert_eq!(shared.status().nvml, Err("GPU source panicked: boom".to_string()));
        drop(stop_tx);
        thread.join().unwrap();
    }
}
