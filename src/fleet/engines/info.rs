//! What an engine says about itself beside `/metrics`: the path of its Prometheus page, and the
//! side page that tells its version and limits (vLLM `/version`, llama.cpp `/props`, TGI
//! `/info`), read into [`EngineInfo`]. Pure: paths and JSON text in, figures out.

use serde_json::Value;

use super::{llamacpp, Engine};

/// Where `engine` serves its Prometheus text (`None`: not yet known, try `/metrics` first).
pub fn metrics_path(engine: Option<Engine>) -> &'static str {
    match engine {
        // trtllm-serve's `/metrics` is JSON iteration stats; its Prometheus page is apart.
        Some(Engine::Trtllm) => "/prometheus/metrics",
        _ => "/metrics",
    }
}

/// Where else a page of no known engine's names might be: TensorRT-LLM's, when `/metrics` was
/// not Prometheus text.
pub(crate) const OTHER_METRICS_PATH: &str = "/prometheus/metrics";

/// The page that tells `engine`'s version and limits, if it has one.
pub(crate) fn info_path(engine: Engine) -> Option<&'static str> {
    match engine {
        Engine::Vllm | Engine::Trtllm => Some("/version"),
        Engine::Llamacpp => Some("/props"),
        Engine::Tgi => Some("/info"),
        Engine::Sglang => None,
    }
}

/// What a node's side page told; `None` where it told nothing.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EngineInfo {
    /// The engine's version or build.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Requests the engine runs at once: llama.cpp's slots, TGI's `max_batch_size` (when set;
    /// its `max_concurrent_requests` bounds the queue, not the batch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_running: Option<f64>,
    /// Tokens the engine's batch (its KV cache) holds at most: TGI's `max_batch_total_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_capacity_tokens: Option<f64>,
}

/// Read `engine`'s side page (the JSON of [`info_path`]).
pub(crate) fn read_info(engine: Engine, body: &str) -> EngineInfo {
    let Ok(v) = serde_json::from_str::<Value>(body) else { return EngineInfo::default() };
    let text = |key: &str| v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let positive = |key: &str| v.get(key).and_then(Value::as_f64).filter(|n| n.is_finite() && *n > 0.0);
    match engine {
        Engine::Vllm | Engine::Trtllm => EngineInfo { version: text("version"), ..EngineInfo::default() },
        Engine::Llamacpp => EngineInfo {
            version: text("build_info"),
            max_running: llamacpp::slots_from_props(body).map(f64::from),
            kv_capacity_tokens: None,
        },
        Engine::Tgi => EngineInfo {
            version: text("version"),
            max_running: positive("max_batch_size"),
            kv_capacity_tokens: positive("max_batch_total_tokens"),
        },
        Engine::Sglang => EngineInfo::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_is_read_where_it_serves() {
        assert_eq!(metrics_path(None), "/metrics");
        assert_eq!(metrics_path(Some(Engine::Trtllm)), "/prometheus/metrics");
        for e in [Engine::Vllm, Engine::Sglang, Engine::Llamacpp, Engine::Tgi] {
            assert_eq!(metrics_path(Some(e)), "/metrics", "{e}");
        }
        assert_eq!(info_path(Engine::Llamacpp), Some("/props"));
        assert_eq!(info_path(Engine::Trtllm), Some("/version"));
        assert_eq!(info_path(Engine::Sglang), None);
    }

    #[test]
    fn side_pages_give_version_and_limits() {
        let props = include_str!("../../../tests/fixtures/engines/llamacpp_props.json");
        let info = read_info(Engine::Llamacpp, props);
        assert_eq!(info.max_running, Some(2.0));
        assert_eq!(info.version.as_deref(), Some("b5000-0123abcd"));
        let tgi = r#"{"model_id":"m","max_concurrent_requests":128,"max_batch_total_tokens":32000,
                      "max_batch_size":8,"max_input_tokens":1024,"version":"3.0.1","sha":"abc"}"#;
        assert_eq!(
            read_info(Engine::Tgi, tgi),
            EngineInfo {
                version: Some("3.0.1".into()),
                max_running: Some(8.0),
                kv_capacity_tokens: Some(32000.0)
            }
        );
        // TGI's default: no batch size limit of its own; the queue bound is not one.
        let unbounded =
            read_info(Engine::Tgi, &tgi.replace(r#""max_batch_size":8,"#, r#""max_batch_size":null,"#));
        assert_eq!(unbounded.max_running, None);
        assert_eq!(read_info(Engine::Vllm, r#"{"version":"0.8.5"}"#).version.as_deref(), Some("0.8.5"));
        // Not JSON, or missing figures: nothing is invented.
        assert_eq!(read_info(Engine::Tgi, "<html>"), EngineInfo::default());
        assert_eq!(read_info(Engine::Llamacpp, r#"{"total_slots":0}"#), EngineInfo::default());
    }
}
