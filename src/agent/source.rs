//! What the agent reads, and from where. `GpuSource` is the seam between the agent's logic
//! (sampling, exposition, HTTP) and NVML, so that all of that logic is tested with `FakeGpus`
//! on machines without a GPU. A reading keeps NVML's own units (percent, milliwatts); the
//! conversion to Prometheus base units happens once, in `exposition`. A field NVML cannot give
//! for a device is `None` (unknown), never zero.

use std::sync::{Arc, Mutex};

/// One GPU as read at one moment. `index` and `uuid` identify it; every measurement is
/// optional because some devices do not support some queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuReading {
    /// NVML's device index (0-based, in PCI bus order).
    pub index: u32,
    /// NVML's device UUID (`GPU-…`): stable across reboots, unlike the index.
    pub uuid: String,
    /// Percent of the last sample period in which a kernel was running (0–100).
    pub utilization_percent: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub power_milliwatts: Option<u32>,
    pub temperature_celsius: Option<u32>,
}

impl GpuReading {
    /// A reading with identity only; every measurement unknown.
    pub fn blank(index: u32, uuid: impl Into<String>) -> Self {
        GpuReading {
            index,
            uuid: uuid.into(),
            utilization_percent: None,
            memory_used_bytes: None,
            memory_total_bytes: None,
            power_milliwatts: None,
            temperature_celsius: None,
        }
    }
}

/// Something that can read the GPUs of this machine. `read` may block (NVML calls do), so the
/// agent only calls it from its own sampling thread, never from the async request path.
///
/// `Err(reason)` means "down": the reason is shown to operators as
/// `spillway_nvml_info{reason="…"}`, so it should be short, stable from one read to the next
/// (it is a label value) and say what to fix. Retrying initialisation is the job of
/// [`RetryInit`](super::retry::RetryInit), not of each source.
pub trait GpuSource: Send {
    fn read(&mut self) -> Result<Vec<GpuReading>, String>;
}

impl<S: GpuSource + ?Sized> GpuSource for Box<S> {
    fn read(&mut self) -> Result<Vec<GpuReading>, String> {
        (**self).read()
    }
}

/// A programmable fake. Clones share state: keep one clone in the test, hand another (boxed)
/// to the agent, then change the GPUs or make reads fail while the agent runs.
#[derive(Debug, Clone, Default)]
pub struct FakeGpus {
    state: Arc<Mutex<FakeState>>,
}

#[derive(Debug, Default)]
struct FakeState {
    readings: Vec<GpuReading>,
    failure: Option<String>,
    reads: u64,
}

impl FakeGpus {
    /// A fake whose reads return `readings`.
    pub fn new(readings: Vec<GpuReading>) -> Self {
        let fake = FakeGpus::default();
        fake.set_readings(readings);
        fake
    }

    /// A fake whose reads fail with `reason` (as NVML does on a machine without a driver).
    pub fn failing(reason: impl Into<String>) -> Self {
        let fake = FakeGpus::default();
        fake.fail(reason);
        fake
    }

    /// Later reads return `readings` (and stop failing).
    pub fn set_readings(&self, readings: Vec<GpuReading>) {
        let mut state = self.lock();
        state.readings = readings;
        state.failure = None;
    }

    /// Later reads fail with `reason` until `set_readings` or `recover`.
    pub fn fail(&self, reason: impl Into<String>) {
        self.lock().failure = Some(reason.into());
    }

    /// Later reads succeed again with the last readings set.
    pub fn recover(&self) {
        self.lock().failure = None;
    }

    /// How many times `read` has been called, failures included.
    pub fn reads(&self) -> u64 {
        self.lock().reads
    }

    /// How many clones of this fake are alive: the test's, and the agent's until its sampling
    /// thread ends and drops it.
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.state)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        // A test that panicked while holding the lock must not hide its own failure behind a
        // poison error here.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl GpuSource for FakeGpus {
    fn read(&mut self) -> Result<Vec<GpuReading>, String> {
        let mut state = self.lock();
        state.reads += 1;
        match &state.failure {
            Some(reason) => Err(reason.clone()),
            None => Ok(state.readings.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clones_share_state_and_count_reads() {
        let fake = FakeGpus::new(vec![GpuReading::blank(0, "GPU-a")]);
        let mut boxed: Box<dyn GpuSource> = Box::new(fake.clone());
        assert_eq!(boxed.read().unwrap().len(), 1);
        fake.fail("gone");
        assert_eq!(boxed.read(), Err("gone".to_string()));
        fake.recover();
        assert_eq!(boxed.read().unwrap()[0].uuid, "GPU-a");
        fake.set_readings(vec![]);
        assert!(boxed.read().unwrap().is_empty());
        assert_eq!(fake.reads(), 4);
    }
}
