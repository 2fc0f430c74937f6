//! Keeps trying to open a GPU source that is not there yet. On a node the NVIDIA driver or the
//! device plugin can appear (or come back) after the agent started, so a failed NVML init is a
//! state to report and retry, never a reason to exit. This wrapper owns that schedule so that
//! it is tested with a fake opener and explicit instants; it must not sleep or spawn: the
//! sampling loop calls it once per tick and it decides whether this tick may retry.

use std::time::{Duration, Instant};

use super::source::{GpuReading, GpuSource};

/// A [`GpuSource`] that opens its inner source lazily with `open` and reopens it after
/// failures.
///
/// - Not open: try `open` at once, then at most once per `retry_every`; in between, reads fail
///   with the last open error (unchanged text, so the reason label does not churn).
/// - Open and a read fails: the inner source is dropped (for NVML, that shuts the library
///   down). If that source had read successfully before, the next tick reopens at once
///   (a driver reload, a transient fault); if it never had, the next open waits `retry_every`,
///   so a source that opens but cannot read is not reopened every tick.
pub struct RetryInit<S, F> {
    open: F,
    retry_every: Duration,
    inner: Option<S>,
    inner_has_read: bool,
    next_open: Option<Instant>,
    last_reason: String,
}

impl<S, F> RetryInit<S, F>
where
    S: GpuSource,
    F: FnMut() -> Result<S, String> + Send,
{
    pub fn new(open: F, retry_every: Duration) -> Self {
        RetryInit {
            open,
            retry_every,
            inner: None,
            inner_has_read: false,
            next_open: None,
            last_reason: "not opened yet".to_string(),
        }
    }

    /// Whether the inner source is open now.
    pub fn is_open(&self) -> bool {
        self.inner.is_some()
    }

    /// One tick at `now` (the trait's `read` passes `Instant::now()`).
    pub(crate) fn read_at(&mut self, now: Instant) -> Result<Vec<GpuReading>, String> {
        if self.inner.is_none() {
            if self.next_open.is_some_and(|at| now < at) {
                return Err(self.last_reason.clone());
            }
            match (self.open)() {
                Ok(source) => {
                    tracing::info!("GPU source opened");
                    self.inner = Some(source);
                    self.inner_has_read = false;
                    self.next_open = None;
                }
                Err(reason) => {
                    if reason != self.last_reason {
                        tracing::warn!(%reason, retry_secs = self.retry_every.as_secs_f64(), "GPU source unavailable");
                    }
                    self.last_reason = reason.clone();
                    self.next_open = Some(now + self.retry_every);
                    return Err(reason);
                }
            }
        }
        let inner = self.inner.as_mut().expect("opened above");
        match inner.read() {
            Ok(readings) => {
                self.inner_has_read = true;
                Ok(readings)
            }
            Err(reason) => {
                tracing::warn!(%reason, "GPU read failed; closing the source to reopen it");
                self.inner = None;
                self.next_open = if self.inner_has_read { None } else { Some(now + self.retry_every) };
                self.last_reason = reason.clone();
                Err(reason)
            }
        }
    }
}

impl<S, F> GpuSource for RetryInit<S, F>
where
    S: GpuSource,
    F: FnMut() -> Result<S, String> + Send,
{
    fn read(&mut self) -> Result<Vec<GpuReading>, String> {
        self.read_at(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::agent::source::FakeGpus;

    /// An opener that fails while `fail` is set, counting its calls.
    fn opener(
        fake: FakeGpus,
        fail: Arc<std::sync::Mutex<Option<String>>>,
        opens: Arc<AtomicU32>,
    ) -> impl FnMut() -> Result<FakeGpus, String> + Send {
        move || {
            opens.fetch_add(1, Ordering::SeqCst);
            match fail.lock().unwrap().clone() {
                Some(reason) => Err(reason),
                None => Ok(fake.clone()),
            }
        }
    }

    #[test]
    fn retries_open_on_schedule_then_reads() {
        let fake = FakeGpus::new(vec![GpuReading::blank(0, "GPU-a")]);
        let fail = Arc::new(std::sync::Mutex::new(Some("NVML library not found: x".to_string())));
        let opens = Arc::new(AtomicU32::new(0));
        let mut source = RetryInit::new(opener(fake, fail.clone(), opens.clone()), Duration::from_secs(10));
        let t0 = Instant::now();

        assert_eq!(source.read_at(t0), Err("NVML library not found: x".into()));
        assert_eq!(opens.load(Ordering::SeqCst), 1);
        // Within the retry interval: no new open, same reason.
        assert_eq!(source.read_at(t0 + Duration::from_secs(9)), Err("NVML library not found: x".into()));
        assert_eq!(opens.load(Ordering::SeqCst), 1);
        // The driver appears; the next scheduled attempt opens and reads.
        *fail.lock().unwrap() = None;
        assert!(source.read_at(t0 + Duration::from_secs(9)).is_err());
        assert_eq!(source.read_at(t0 + Duration::from_secs(10)).unwrap().len(), 1);
        assert_eq!(opens.load(Ordering::SeqCst), 2);
        assert!(source.is_open());
        // Open: reads do not reopen.
        source.read_at(t0 + Duration::from_secs(11)).unwrap();
        assert_eq!(opens.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn read_failure_after_success_reopens_at_once() {
        let fake = FakeGpus::new(vec![GpuReading::blank(0, "GPU-a")]);
        let fail = Arc::new(std::sync::Mutex::new(None));
        let opens = Arc::new(AtomicU32::new(0));
        let mut source = RetryInit::new(opener(fake.clone(), fail, opens.clone()), Duration::from_secs(10));
        let t0 = Instant::now();
        source.read_at(t0).unwrap();
        fake.fail("GPU is lost");
        assert_eq!(source.read_at(t0 + Duration::from_secs(1)), Err("GPU is lost".into()));
        assert!(!source.is_open());
        fake.recover();
        assert_eq!(source.read_at(t0 + Duration::from_secs(2)).unwrap().len(), 1);
        assert_eq!(opens.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn source_that_opens_but_never_reads_waits_between_opens() {
        let fake = FakeGpus::failing("no devices readable");
        let fail = Arc::new(std::sync::Mutex::new(None));
        let opens = Arc::new(AtomicU32::new(0));
        let mut source = RetryInit::new(opener(fake, fail, opens.clone()), Duration::from_secs(10));
        let t0 = Instant::now();
        for s in 0..10 {
            assert!(source.read_at(t0 + Duration::from_secs(s)).is_err());
        }
        assert_eq!(opens.load(Ordering::SeqCst), 1);
        assert!(source.read_at(t0 + Duration::from_secs(10)).is_err());
        assert_eq!(opens.load(Ordering::SeqCst), 2);
    }
}
