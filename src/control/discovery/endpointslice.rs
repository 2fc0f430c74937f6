//! EndpointSlices as nodes, for pools fronted by a Service. Each endpoint whose
//! `conditions.ready` is true, or unset (the API says a nil value is to be read as "true"),
//! is a node at its first address (the API lets consumers use only the first, the addresses
//! being fungible) on the configured port, named after its `targetRef` pod (else its
//! address). A slice that lists ports but none with the configured number is skipped: that
//! Service does not expose the vLLM port. FQDN slices are skipped.
//!
//! EndpointSlices carry no pod annotations, so nodes found this way have empty
//! [`NodeMetadata`]: pins are then checked from what the node itself reports (vLLM's
//! `/version`, its cache config) and the GPU price is unknown.

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::metadata::NodeMetadata;
use super::set::Discoverable;
use super::{origin_of, DiscoveredNode};

/// Whether `slice` serves `port`: it lists no ports, a port without a number ("all ports"),
/// or the number itself.
fn serves_port(slice: &EndpointSlice, port: u16) -> bool {
    match &slice.ports {
        None => true,
        Some(ports) if ports.is_empty() => true,
        Some(ports) => ports.iter().any(|p| p.port.is_none_or(|n| n == i32::from(port))),
    }
}

/// The ready nodes of `slice` on `port`.
pub(crate) fn ready_nodes(slice: &EndpointSlice, port: u16) -> Vec<DiscoveredNode> {
    if slice.address_type == "FQDN" || !serves_port(slice, port) {
        return Vec::new();
    }
    slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .filter_map(|e| {
            let ip = e.addresses.first().filter(|a| !a.is_empty())?;
            let name = e.target_ref.as_ref().and_then(|r| r.name.clone()).unwrap_or_else(|| ip.clone());
            Some(DiscoveredNode {
                name,
                origin: origin_of(ip, port),
                metadata: NodeMetadata::default(),
                host_ip: None,
            })
        })
        .collect()
}

impl Discoverable for EndpointSlice {
    fn ready_nodes(&self, port: u16) -> Vec<DiscoveredNode> {
        ready_nodes(self, port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(ports: serde_json::Value, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "vllm-abcde", "namespace": "llm",
                         "labels": {"kubernetes.io/service-name": "vllm"}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    fn names(nodes: &[DiscoveredNode]) -> Vec<(&str, &str)> {
        nodes.iter().map(|n| (n.name.as_str(), n.origin.as_str())).collect()
    }

    #[test]
    fn ready_true_or_unset_counts_false_does_not() {
        let s = slice(
            json!([{"name": "http", "port": 8000, "protocol": "TCP"}]),
            json!([
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true},
                 "targetRef": {"kind": "Pod", "name": "vllm-0", "namespace": "llm"}},
                {"addresses": ["10.0.0.2", "10.0.0.9"], "conditions": {},
                 "targetRef": {"kind": "Pod", "name": "vllm-1", "namespace": "llm"}},
                {"addresses": ["10.0.0.3"]},
                {"addresses": ["10.0.0.4"], "conditions": {"ready": false, "serving": true, "terminating": true},
                 "targetRef": {"kind": "Pod", "name": "vllm-3"}},
            ]),
        );
        let nodes = ready_nodes(&s, 8000);
        assert_eq!(
            names(&nodes),
            vec![
                ("vllm-0", "http://10.0.0.1:8000"),
                ("vllm-1", "http://10.0.0.2:8000"),
                ("10.0.0.3", "http://10.0.0.3:8000"),
            ]
        );
        assert!(nodes.iter().all(|n| n.metadata == NodeMetadata::default()));
    }

    #[test]
    fn port_must_match_when_listed() {
        let eps = json!([{"addresses": ["10.0.0.1"]}]);
        assert_eq!(ready_nodes(&slice(json!([{"port": 9000}]), eps.clone()), 8000), vec![]);
        assert_eq!(ready_nodes(&slice(json!([{"port": 9000}, {"port": 8000}]), eps.clone()), 8000).len(), 1);
        assert_eq!(ready_nodes(&slice(json!([]), eps.clone()), 8000).len(), 1);
        assert_eq!(ready_nodes(&slice(json!(null), eps.clone()), 8000).len(), 1);
        assert_eq!(ready_nodes(&slice(json!([{"name": "all"}]), eps), 8000).len(), 1);
    }

    #[test]
    fn fqdn_and_empty_slices_yield_nothing() {
        let mut s = slice(json!([{"port": 8000}]), json!([{"addresses": ["vllm.example"]}]));
        s.address_type = "FQDN".into();
        assert_eq!(ready_nodes(&s, 8000), vec![]);
        assert_eq!(ready_nodes(&slice(json!([{"port": 8000}]), json!(null)), 8000), vec![]);
    }
}
