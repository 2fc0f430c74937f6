//! The NVML agent over HTTP, with a fake GPU source (and the real NVML source, which on a
//! machine without a driver must report down with a reason).

use std::time::Duration;

use spillway::agent::{self, AgentArgs, AgentHandle, FakeGpus, GpuReading, GpuSource, NvmlGpus, RetryInit};
use tokio::net::TcpListener;

fn gpu(index: u32, uuid: &str, util: u32, used: u64, total: u64, mw: u32, temp: u32) -> GpuReading {
    GpuReading {
        index,
        uuid: uuid.to_string(),
        utilization_percent: Some(util),
        memory_used_bytes: Some(used),
        memory_total_bytes: Some(total),
        power_milliwatts: Some(mw),
        temperature_celsius: Some(temp),
    }
}

fn two_gpus() -> Vec<GpuReading> {
    vec![
        gpu(0, "GPU-aaaa", 45, 30_000_000_000, 150_323_855_360, 412_250, 58),
        gpu(1, "GPU-bbbb", 100, 149_000_000_000, 150_323_855_360, 700_000, 77),
    ]
}

fn args() -> AgentArgs {
    AgentArgs { interval_ms: 20, ..AgentArgs::default() }
}

async fn start(source: Box<dyn GpuSource>) -> AgentHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    agent::spawn(args(), source, listener).await.unwrap()
}

async fn get(handle: &AgentHandle, path: &str) -> (u16, String, String) {
    let response = reqwest::get(format!("http://{}{path}", handle.addr)).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, content_type, response.text().await.unwrap())
}

/// Fetch /metrics until `done` holds (the sampler runs every 20 ms), or fail after 5 s.
async fn metrics_until(handle: &AgentHandle, what: &str, done: impl Fn(&str) -> bool) -> String {
    let done = &done;
    crate::common::wait_until(Duration::from_secs(5), what, || async move {
        let (_, _, text) = get(handle, "/metrics").await;
        if done(&text) {
            Ok(text)
        } else {
            Err(format!("/metrics:\n{text}"))
        }
    })
    .await
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

fn sample_value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
}

#[tokio::test]
async fn two_fake_gpus_are_served_with_exact_values_and_labels() {
    let handle = start(Box::new(FakeGpus::new(two_gpus()))).await;
    let (status, content_type, text) = get(&handle, "/metrics").await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");

    for line in [
        "spillway_nvml_up 1",
        r#"spillway_gpu_utilization_ratio{gpu="0",uuid="GPU-aaaa"} 0.45"#,
        r#"spillway_gpu_utilization_ratio{gpu="1",uuid="GPU-bbbb"} 1"#,
        r#"spillway_gpu_memory_used_bytes{gpu="0",uuid="GPU-aaaa"} 30000000000"#,
        r#"spillway_gpu_memory_used_bytes{gpu="1",uuid="GPU-bbbb"} 149000000000"#,
        r#"spillway_gpu_memory_total_bytes{gpu="0",uuid="GPU-aaaa"} 150323855360"#,
        r#"spillway_gpu_memory_total_bytes{gpu="1",uuid="GPU-bbbb"} 150323855360"#,
        r#"spillway_gpu_power_watts{gpu="0",uuid="GPU-aaaa"} 412.25"#,
        r#"spillway_gpu_power_watts{gpu="1",uuid="GPU-bbbb"} 700"#,
        r#"spillway_gpu_temperature_celsius{gpu="0",uuid="GPU-aaaa"} 58"#,
        r#"spillway_gpu_temperature_celsius{gpu="1",uuid="GPU-bbbb"} 77"#,
        "spillway_agent_read_errors_total 0",
    ] {
        assert!(has_line(&text, line), "missing {line:?} in\n{text}");
    }
    for type_line in [
        "# TYPE spillway_nvml_up gauge",
        "# TYPE spillway_gpu_utilization_ratio gauge",
        "# TYPE spillway_gpu_memory_used_bytes gauge",
        "# TYPE spillway_gpu_memory_total_bytes gauge",
        "# TYPE spillway_gpu_power_watts gauge",
        "# TYPE spillway_gpu_temperature_celsius gauge",
        "# TYPE spillway_agent_reads_total counter",
        "# TYPE spillway_agent_read_errors_total counter",
    ] {
        assert!(has_line(&text, type_line), "missing {type_line:?} in\n{text}");
    }
    assert!(!text.contains("spillway_nvml_info"), "info is only present while down:\n{text}");
    assert!(sample_value(&text, "spillway_agent_reads_total ").unwrap() >= 1.0);
    assert!(sample_value(&text, "spillway_agent_last_read_timestamp_seconds ").unwrap() > 1.6e9);

    // The whole exposition parses, and the parser sees the same values and labels.
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let find = |metric: &str, gpu: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && s.labels.get("gpu") == Some(gpu))
            .unwrap_or_else(|| panic!("{metric} gpu={gpu} not parsed"))
    };
    let used = find("spillway_gpu_memory_used_bytes", "1");
    assert_eq!(used.value, prometheus_parse::Value::Gauge(149_000_000_000.0));
    assert_eq!(used.labels.get("uuid"), Some("GPU-bbbb"));
    assert_eq!(find("spillway_gpu_power_watts", "0").value, prometheus_parse::Value::Gauge(412.25));
    let reads = scrape.samples.iter().find(|s| s.metric == "spillway_agent_reads_total").unwrap();
    assert!(matches!(reads.value, prometheus_parse::Value::Counter(n) if n >= 1.0));
    assert_eq!(scrape.samples.iter().filter(|s| s.metric.starts_with("spillway_gpu_")).count(), 10);

    let (status, _, body) = get(&handle, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok: nvml up, 2 GPU(s)\n"));
    assert_eq!(handle.nvml_status(), Ok(2));
}

#[tokio::test]
async fn a_failing_source_is_down_with_its_reason_and_the_agent_keeps_serving() {
    let fake = FakeGpus::failing("NVML library not found: libnvidia-ml.so.1: cannot open shared object file");
    let handle = start(Box::new(fake.clone())).await;
    assert!(handle.nvml_status().unwrap_err().starts_with("NVML library not found"));

    let (status, _, text) = get(&handle, "/metrics").await;
    assert_eq!(status, 200);
    assert!(has_line(&text, "spillway_nvml_up 0"), "{text}");
    assert!(has_line(
        &text,
        r#"spillway_nvml_info{reason="NVML library not found: libnvidia-ml.so.1: cannot open shared object file"} 1"#
    ));
    assert!(has_line(&text, "# TYPE spillway_nvml_info gauge"), "{text}");
    assert!(!text.contains("spillway_gpu_"), "no GPU series while down:\n{text}");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let info = scrape.samples.iter().find(|s| s.metric == "spillway_nvml_info").unwrap();
    assert!(info.labels.get("reason").unwrap().starts_with("NVML library not found"));

    // Reads keep happening (the sampler retries) and each failure is counted.
    let text = metrics_until(&handle, "more failed reads", |t| {
        sample_value(t, "spillway_agent_read_errors_total ").unwrap_or(0.0) >= 3.0
    })
    .await;
    assert_eq!(
        sample_value(&text, "spillway_agent_read_errors_total "),
        sample_value(&text, "spillway_agent_reads_total ")
    );
    let (status, _, body) = get(&handle, "/healthz").await;
    assert_eq!(status, 200, "NVML down is not an agent failure: {body}");
    assert!(body.starts_with("ok: nvml down: NVML library not found"), "{body}");

    // The driver appears: the agent comes up without a restart.
    fake.set_readings(two_gpus());
    let text = metrics_until(&handle, "nvml up", |t| has_line(t, "spillway_nvml_up 1")).await;
    assert!(!text.contains("spillway_nvml_info"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("spillway_gpu_memory_total_bytes{")).count(), 2);

    // And goes down again, dropping the GPU series.
    fake.fail("NVIDIA driver not loaded");
    let text = metrics_until(&handle, "nvml down", |t| has_line(t, "spillway_nvml_up 0")).await;
    assert!(has_line(&text, r#"spillway_nvml_info{reason="NVIDIA driver not loaded"} 1"#), "{text}");
    assert!(!text.contains("spillway_gpu_"), "{text}");
}

#[tokio::test]
async fn a_gpu_removed_from_the_source_disappears_from_the_output() {
    let fake = FakeGpus::new(two_gpus());
    let handle = start(Box::new(fake.clone())).await;
    let (_, _, text) = get(&handle, "/metrics").await;
    assert!(text.contains(r#"gpu="1",uuid="GPU-bbbb""#));

    fake.set_readings(vec![two_gpus().remove(0)]);
    let text = metrics_until(&handle, "GPU 1 to disappear", |t| !t.contains("GPU-bbbb")).await;
    for family in [
        "spillway_gpu_utilization_ratio",
        "spillway_gpu_memory_used_bytes",
        "spillway_gpu_memory_total_bytes",
        "spillway_gpu_power_watts",
        "spillway_gpu_temperature_celsius",
    ] {
        let series: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("{family}{{"))).collect();
        assert_eq!(series.len(), 1, "{family}: {series:?}");
        assert!(series[0].contains(r#"gpu="0",uuid="GPU-aaaa""#), "{series:?}");
    }

    // A measurement that becomes unknown loses its series too (unknown, not zero).
    let mut no_power = two_gpus().remove(0);
    no_power.power_milliwatts = None;
    fake.set_readings(vec![no_power]);
    let text =
        metrics_until(&handle, "power to disappear", |t| !t.contains("spillway_gpu_power_watts{")).await;
    assert!(text.contains(r#"spillway_gpu_temperature_celsius{gpu="0",uuid="GPU-aaaa"} 58"#), "{text}");
}

#[tokio::test]
async fn dropping_the_handle_stops_serving_and_reading() {
    let fake = FakeGpus::new(two_gpus());
    let handle = start(Box::new(fake.clone())).await;
    let addr = handle.addr;
    drop(handle);
    crate::common::wait_until(Duration::from_secs(5), "the sampling thread to drop its source", || {
        let holders = fake.holders();
        async move {
            if holders == 1 {
                Ok(())
            } else {
                Err(format!("{holders} holders"))
            }
        }
    })
    .await;
    let reads = fake.reads();
    // A real sleep: five sampling periods pass, and no read may happen in them.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fake.reads(), reads, "the sampling thread kept reading after drop");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    assert!(client.get(format!("http://{addr}/metrics")).send().await.is_err());
}

/// The real NVML path. On a machine without an NVIDIA driver (every CI machine) it must be
/// down with a readable reason, never a panic; where a GPU is present it must read it.
#[tokio::test]
async fn the_real_nvml_source_reports_down_with_a_reason_or_reads_real_gpus() {
    match NvmlGpus::open(None) {
        Err(reason) => {
            assert!(reason.starts_with("NVML") || reason.starts_with("NVIDIA"), "{reason}");
            // Served through the retrying wrapper, exactly as `spillway agent` does.
            let source = RetryInit::new(|| NvmlGpus::open(None), Duration::from_secs(1));
            let handle = start(Box::new(source)).await;
            let (status, _, text) = get(&handle, "/metrics").await;
            assert_eq!(status, 200);
            assert!(has_line(&text, "spillway_nvml_up 0"), "{text}");
            assert!(
                has_line(
                    &text,
                    &format!(r#"spillway_nvml_info{{reason="{}"}} 1"#, reason.replace('"', "\\\""))
                ),
                "{text}"
            );
        }
        Ok(mut nvml) => {
            let readings = nvml.read().expect("NVML opened, so it reads");
            for r in &readings {
                assert!(r.uuid.starts_with("GPU-") || r.uuid.starts_with("MIG-"), "{r:?}");
                assert!(r.memory_total_bytes.unwrap_or(0) > 0, "{r:?}");
            }
        }
    }
    // An explicit library path that does not exist is always down, whatever the machine.
    let missing = std::path::PathBuf::from("/nonexistent/libnvidia-ml.so.1");
    let reason = NvmlGpus::open(Some(&missing)).err().unwrap();
    assert!(reason.starts_with("NVML library not found: "), "{reason}");
}

/// The contract with the router: its parser reads exactly what the agent serves.
#[tokio::test]
async fn the_router_side_parser_reads_the_agent_page() {
    use spillway::fleet::metrics::{parse_agent, GpuStats};

    let fake = FakeGpus::new(two_gpus());
    let handle = start(Box::new(fake.clone())).await;
    let (_, _, text) = get(&handle, "/metrics").await;
    let sample = parse_agent(&text).unwrap();
    assert!(sample.up);
    assert_eq!(sample.reason, None);
    assert_eq!(
        sample.gpus,
        vec![
            GpuStats {
                index: 0,
                uuid: "GPU-aaaa".into(),
                utilization: Some(0.45),
                memory_used_bytes: Some(30_000_000_000.0),
                memory_total_bytes: Some(150_323_855_360.0),
                power_watts: Some(412.25),
                temperature_celsius: Some(58.0),
            },
            GpuStats {
                index: 1,
                uuid: "GPU-bbbb".into(),
                utilization: Some(1.0),
                memory_used_bytes: Some(149_000_000_000.0),
                memory_total_bytes: Some(150_323_855_360.0),
                power_watts: Some(700.0),
                temperature_celsius: Some(77.0),
            },
        ]
    );

    fake.fail("NVML library not found: libnvidia-ml.so.1: cannot open shared object file");
    let text = metrics_until(&handle, "nvml down", |t| has_line(t, "spillway_nvml_up 0")).await;
    let sample = parse_agent(&text).unwrap();
    assert!(!sample.up);
    assert_eq!(
        sample.reason.as_deref(),
        Some("NVML library not found: libnvidia-ml.so.1: cannot open shared object file")
    );
    assert!(sample.gpus.is_empty());
}
