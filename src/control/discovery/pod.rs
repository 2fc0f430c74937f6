//! Pods as nodes: a pod is a ready node when its phase is `Running`, its `Ready` condition
//! is `True`, it has a pod IP and it is not being deleted (no `deletionTimestamp`, so a
//! terminating pod leaves at once, before its endpoints are torn down). Its origin is
//! `http://<podIP>:<port>` and its metadata comes from its `spillway.dev/*` annotations.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::metadata::NodeMetadata;
use super::set::Discoverable;
use super::{origin_of, DiscoveredNode};

/// Whether `pod` may take traffic (see the module docs).
pub(crate) fn is_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else { return false };
    pod.metadata.deletion_timestamp.is_none()
        && status.phase.as_deref() == Some("Running")
        && status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        && status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The node `pod` stands for, if it is ready.
pub(crate) fn ready_node(pod: &Pod, port: u16) -> Option<DiscoveredNode> {
    if !is_ready(pod) {
        return None;
    }
    let ip = pod.status.as_ref()?.pod_ip.as_deref()?;
    let name = pod.name_any();
    let metadata = NodeMetadata::from_annotations(pod.metadata.annotations.as_ref(), &name);
    let host_ip = pod.status.as_ref()?.host_ip.clone().filter(|h| !h.is_empty());
    Some(DiscoveredNode { origin: origin_of(ip, port), name, metadata, host_ip })
}

impl Discoverable for Pod {
    fn ready_nodes(&self, port: u16) -> Vec<DiscoveredNode> {
        ready_node(self, port).into_iter().collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A pod as the API server returns it: ready unless `patch` says otherwise.
    pub(crate) fn pod(name: &str, ip: &str, patch: serde_json::Value) -> Pod {
        let mut v = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "llm", "labels": {"app": "vllm"}},
            "status": {
                "phase": "Running",
                "podIP": ip,
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
            },
        });
        merge(&mut v, patch);
        serde_json::from_value(v).unwrap()
    }

    fn merge(into: &mut serde_json::Value, patch: serde_json::Value) {
        match (into, patch) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    #[test]
    fn ready_pod_is_a_node_with_its_annotations() {
        let p = pod(
            "vllm-0",
            "10.0.0.5",
            json!({"metadata": {"annotations": {"spillway.dev/quantization": "fp8", "spillway.dev/gpu-hourly-usd": "2.5"}}}),
        );
        let n = ready_node(&p, 8000).unwrap();
        assert_eq!(n.name, "vllm-0");
        assert_eq!(n.origin, "http://10.0.0.5:8000");
        assert_eq!(n.metadata.quantization.as_deref(), Some("fp8"));
        assert_eq!(n.metadata.gpu_hourly_usd, Some(rust_decimal::Decimal::new(25, 1)));
        assert_eq!(n.host_ip, None, "no status.hostIP in this pod");
        let on_node = pod("vllm-1", "10.0.0.6", json!({"status": {"hostIP": "192.168.1.7"}}));
        assert_eq!(ready_node(&on_node, 8000).unwrap().host_ip.as_deref(), Some("192.168.1.7"));
    }

    #[test]
    fn each_readiness_rule_excludes() {
        let not_ready = [
            json!({"status": {"phase": "Pending"}}),
            json!({"status": {"phase": "Succeeded"}}),
            json!({"status": {"podIP": ""}}),
            json!({"status": {"podIP": null}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
            json!({"status": {"conditions": [{"type": "ContainersReady", "status": "True"}]}}),
            json!({"status": {"conditions": null}}),
            json!({"status": null}),
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        ];
        assert!(is_ready(&pod("p", "10.0.0.1", json!({}))));
        for patch in not_ready {
            let p = pod("p", "10.0.0.1", patch.clone());
            assert!(!is_ready(&p), "{patch}");
            assert_eq!(p.ready_nodes(8000), vec![], "{patch}");
        }
    }

    #[test]
    fn ipv6_pod_ip_is_bracketed() {
        assert_eq!(
            ready_node(&pod("p", "fd00::7", json!({})), 8000).unwrap().origin,
            "http://[fd00::7]:8000"
        );
    }
}
