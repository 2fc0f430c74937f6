//! The real GPU source: NVIDIA's NVML through `nvml-wrapper`. The library is loaded at run
//! time (`dlopen` of `libnvidia-ml.so.1`), so the binary builds and starts on machines without
//! a driver; there `open` fails with a reason an operator can act on, and `RetryInit` tries
//! again later. Every call here blocks and may take milliseconds (seconds on a sick GPU), so
//! this module is only ever used from the agent's sampling thread.

use std::ffi::OsString;
use std::path::PathBuf;

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::source::{GpuReading, GpuSource};

/// An initialised NVML handle. Dropping it shuts NVML down.
pub struct NvmlGpus {
    nvml: Nvml,
    /// The devices skipped on the last read, so that a persistent fault is logged once.
    last_skipped: Vec<(u32, String)>,
}

impl NvmlGpus {
    /// Load and initialise NVML, from `lib` when given (a path or a library name), otherwise
    /// from the default `libnvidia-ml.so.1` on the loader's search path.
    pub fn open(lib: Option<&PathBuf>) -> Result<NvmlGpus, String> {
        let result = match lib {
            Some(path) => {
                let path: OsString = path.clone().into_os_string();
                Nvml::builder().lib_path(&path).init()
            }
            None => Nvml::init(),
        };
        match result {
            Ok(nvml) => Ok(NvmlGpus { nvml, last_skipped: Vec::new() }),
            Err(e) => Err(describe_init_error(&e)),
        }
    }
}

/// A short, stable, actionable reason for a failed NVML init.
pub(crate) fn describe_init_error(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(inner) => format!("NVML library not found: {inner}"),
        NvmlError::FailedToLoadSymbol(inner) => {
            format!("NVML library lacks a required function (driver too old?): {inner}")
        }
        NvmlError::DriverNotLoaded => "NVIDIA driver not loaded".to_string(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_string(),
        NvmlError::LibraryNotFound => "NVML library not found".to_string(),
        other => format!("NVML init failed: {other}"),
    }
}

impl GpuSource for NvmlGpus {
    fn read(&mut self) -> Result<Vec<GpuReading>, String> {
        let count = self.nvml.device_count().map_err(|e| format!("NVML device count failed: {e}"))?;
        let mut readings = Vec::with_capacity(count as usize);
        let mut skipped = Vec::new();
        for index in 0..count {
            // A device that cannot even be named (fallen off the bus) is left out, so that its
            // series disappear instead of going stale; the others are still reported.
            let device = match self.nvml.device_by_index(index) {
                Ok(device) => device,
                Err(e) => {
                    skipped.push((index, e.to_string()));
                    continue;
                }
            };
            let uuid = match device.uuid() {
                Ok(uuid) => uuid,
                Err(e) => {
                    skipped.push((index, e.to_string()));
                    continue;
                }
            };
            let memory = device.memory_info().ok();
            readings.push(GpuReading {
                index,
                uuid,
                utilization_percent: device.utilization_rates().ok().map(|u| u.gpu),
                memory_used_bytes: memory.as_ref().map(|m| m.used),
                memory_total_bytes: memory.as_ref().map(|m| m.total),
                power_milliwatts: device.power_usage().ok(),
                temperature_celsius: device.temperature(TemperatureSensor::Gpu).ok(),
            });
        }
        if skipped != self.last_skipped {
            for (index, error) in &skipped {
                tracing::warn!(gpu = index, %error, "GPU left out of the reading");
            }
            self.last_skipped = skipped;
        }
        Ok(readings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_readable_reason_not_a_panic() {
        let path = PathBuf::from("/nonexistent/spillway-test/libnvidia-ml.so.1");
        let reason = NvmlGpus::open(Some(&path)).err().expect("no library at that path");
        assert!(reason.starts_with("NVML library not found: "), "{reason}");
        assert!(reason.contains("libnvidia-ml.so.1"), "{reason}");
    }
}
