//! The agent's Prometheus exposition. The metric names below are a contract: the router's
//! telemetry scraper parses them, so they change only together with it. One `Registry` per
//! agent instance (tests run many agents in one process), every family registered once in
//! `new`. Per-GPU families are rebuilt on every reading, so a GPU that disappears, or a
//! measurement that becomes unknown, leaves no stale series; a scrape never sees a half-built
//! reading because `record` and `render` take the same lock.

use std::sync::Mutex;

use prometheus::{Encoder, Gauge, GaugeVec, IntCounter, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

use super::source::GpuReading;

pub(crate) const NVML_UP: &str = "spillway_nvml_up";
pub(crate) const NVML_INFO: &str = "spillway_nvml_info";
pub(crate) const GPU_UTILIZATION_RATIO: &str = "spillway_gpu_utilization_ratio";
pub(crate) const GPU_MEMORY_USED_BYTES: &str = "spillway_gpu_memory_used_bytes";
pub(crate) const GPU_MEMORY_TOTAL_BYTES: &str = "spillway_gpu_memory_total_bytes";
pub(crate) const GPU_POWER_WATTS: &str = "spillway_gpu_power_watts";
pub(crate) const GPU_TEMPERATURE_CELSIUS: &str = "spillway_gpu_temperature_celsius";
pub(crate) const AGENT_READS_TOTAL: &str = "spillway_agent_reads_total";
pub(crate) const AGENT_READ_ERRORS_TOTAL: &str = "spillway_agent_read_errors_total";
pub(crate) const AGENT_LAST_READ_TIMESTAMP_SECONDS: &str = "spillway_agent_last_read_timestamp_seconds";

/// The labels of every per-GPU series: NVML's index (as a string) and the device UUID.
pub(crate) const GPU_LABELS: [&str; 2] = ["gpu", "uuid"];

/// Longest reason kept in the `reason` label; longer text is cut at a char boundary.
const MAX_REASON_CHARS: usize = 240;

/// The agent's metric families and their registry.
pub(crate) struct AgentMetrics {
    registry: Registry,
    up: IntGauge,
    info: IntGaugeVec,
    utilization: GaugeVec,
    memory_used: GaugeVec,
    memory_total: GaugeVec,
    power: GaugeVec,
    temperature: GaugeVec,
    reads: IntCounter,
    read_errors: IntCounter,
    last_read: Gauge,
    /// Held while a reading is applied and while the registry is gathered.
    consistent: Mutex<()>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let gpu = |name: &str, help: &str| {
            let family = GaugeVec::new(Opts::new(name, help), &GPU_LABELS).expect("valid metric");
            registry.register(Box::new(family.clone())).expect("registered once");
            family
        };
        let utilization = gpu(
            GPU_UTILIZATION_RATIO,
            "Fraction of the last NVML sample period in which a kernel was running (0-1).",
        );
        let memory_used = gpu(GPU_MEMORY_USED_BYTES, "GPU framebuffer memory in use, in bytes.");
        let memory_total = gpu(GPU_MEMORY_TOTAL_BYTES, "GPU framebuffer memory installed, in bytes.");
        let power = gpu(GPU_POWER_WATTS, "GPU power draw, in watts.");
        let temperature = gpu(GPU_TEMPERATURE_CELSIUS, "GPU core temperature, in degrees Celsius.");

        let up = IntGauge::new(NVML_UP, "1 when the last NVML read succeeded, 0 when NVML is down.")
            .expect("valid metric");
        let info = IntGaugeVec::new(
            Opts::new(NVML_INFO, "Present (value 1) only while NVML is down; the reason label says why."),
            &["reason"],
        )
        .expect("valid metric");
        let reads =
            IntCounter::new(AGENT_READS_TOTAL, "GPU reads attempted by the agent.").expect("valid metric");
        let read_errors = IntCounter::new(
            AGENT_READ_ERRORS_TOTAL,
            "GPU reads that failed (NVML down or a read error), a subset of reads_total.",
        )
        .expect("valid metric");
        let last_read = Gauge::new(
            AGENT_LAST_READ_TIMESTAMP_SECONDS,
            "Unix time of the last successful GPU read (0 before the first).",
        )
        .expect("valid metric");
        for collector in [
            Box::new(up.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(info.clone()),
            Box::new(reads.clone()),
            Box::new(read_errors.clone()),
            Box::new(last_read.clone()),
        ] {
            registry.register(collector).expect("registered once");
        }
        AgentMetrics {
            registry,
            up,
            info,
            utilization,
            memory_used,
            memory_total,
            power,
            temperature,
            reads,
            read_errors,
            last_read,
            consistent: Mutex::new(()),
        }
    }

    /// Apply one read result, taken at `unix_secs`. On error, every per-GPU series goes away
    /// (unknown, not zero) and the reason is published.
    pub fn record(&self, result: &Result<Vec<GpuReading>, String>, unix_secs: f64) {
        let _guard = self.consistent.lock().unwrap_or_else(|p| p.into_inner());
        self.reads.inc();
        for family in self.gpu_families() {
            family.reset();
        }
        self.info.reset();
        match result {
            Ok(readings) => {
                self.up.set(1);
                self.last_read.set(unix_secs);
                for reading in readings {
                    self.set_gpu(reading);
                }
            }
            Err(reason) => {
                self.up.set(0);
                self.read_errors.inc();
                self.info.with_label_values(&[truncate(reason)]).set(1);
            }
        }
    }

    /// The exposition in Prometheus text format 0.0.4.
    pub fn render(&self) -> String {
        let families = {
            let _guard = self.consistent.lock().unwrap_or_else(|p| p.into_inner());
            self.registry.gather()
        };
        let mut out = Vec::new();
        TextEncoder::new().encode(&families, &mut out).expect("text encoding to memory");
        String::from_utf8(out).expect("the text encoder writes UTF-8")
    }

    fn gpu_families(&self) -> [&GaugeVec; 5] {
        [&self.utilization, &self.memory_used, &self.memory_total, &self.power, &self.temperature]
    }

    fn set_gpu(&self, r: &GpuReading) {
        let index = r.index.to_string();
        let labels = [index.as_str(), r.uuid.as_str()];
        let values = [
            (&self.utilization, r.utilization_percent.map(|p| f64::from(p) / 100.0)),
            (&self.memory_used, r.memory_used_bytes.map(|b| b as f64)),
            (&self.memory_total, r.memory_total_bytes.map(|b| b as f64)),
            (&self.power, r.power_milliwatts.map(|mw| f64::from(mw) / 1000.0)),
            (&self.temperature, r.temperature_celsius.map(f64::from)),
        ];
        for (family, value) in values {
            if let Some(value) = value {
                family.with_label_values(&labels).set(value);
            }
        }
    }
}

fn truncate(reason: &str) -> &str {
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => &reason[..cut],
        None => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32) -> GpuReading {
        GpuReading {
            index,
            uuid: format!("GPU-{index}"),
            utilization_percent: Some(37),
            memory_used_bytes: Some(1 << 30),
            memory_total_bytes: Some(80 << 30),
            power_milliwatts: Some(312_500),
            temperature_celsius: Some(61),
        }
    }

    #[test]
    fn converts_units() {
        let m = AgentMetrics::new();
        m.record(&Ok(vec![gpu(0)]), 1.0);
        let text = m.render();
        for line in [
            r#"spillway_gpu_utilization_ratio{gpu="0",uuid="GPU-0"} 0.37"#,
            r#"spillway_gpu_memory_used_bytes{gpu="0",uuid="GPU-0"} 1073741824"#,
            r#"spillway_gpu_memory_total_bytes{gpu="0",uuid="GPU-0"} 85899345920"#,
            r#"spillway_gpu_power_watts{gpu="0",uuid="GPU-0"} 312.5"#,
            r#"spillway_gpu_temperature_celsius{gpu="0",uuid="GPU-0"} 61"#,
            "spillway_nvml_up 1",
            "spillway_agent_reads_total 1",
            "spillway_agent_read_errors_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains(NVML_INFO), "{text}");
    }

    #[test]
    fn unknown_measurement_has_no_series_and_down_clears_gpus() {
        let m = AgentMetrics::new();
        let mut partial = gpu(1);
        partial.power_milliwatts = None;
        m.record(&Ok(vec![gpu(0), partial]), 1.0);
        let text = m.render();
        assert_eq!(text.lines().filter(|l| l.starts_with("spillway_gpu_power_watts{")).count(), 1);

        m.record(&Err("NVIDIA driver not loaded".into()), 2.0);
        let text = m.render();
        assert!(!text.contains("spillway_gpu_"), "{text}");
        assert!(text.contains("spillway_nvml_up 0"));
        assert!(text.contains(r#"spillway_nvml_info{reason="NVIDIA driver not loaded"} 1"#));
        assert!(text.contains("spillway_agent_read_errors_total 1"));
        // The last good read's time stays, so staleness is visible.
        assert!(text.contains("spillway_agent_last_read_timestamp_seconds 1"));
    }

    #[test]
    fn long_reason_is_cut_and_quotes_are_escaped() {
        let m = AgentMetrics::new();
        let reason = format!("\"x\" {}", "é".repeat(1000));
        m.record(&Err(reason), 0.0);
        let text = m.render();
        let line = text.lines().find(|l| l.starts_with(NVML_INFO)).unwrap();
        assert!(line.starts_with(r#"spillway_nvml_info{reason="\"x\" é"#), "{line}");
        assert!(line.chars().count() < MAX_REASON_CHARS + 40, "{line}");
    }
}
