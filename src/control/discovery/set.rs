//! Folding watcher events into one backend's set of ready nodes.
//!
//! The set is kept per watched object (a pod gives zero or one node, an EndpointSlice any
//! number), keyed by `namespace/name`, so an `Apply` replaces that object's nodes and a
//! `Delete` removes them. A relist (`Init`, `InitApply`…, `InitDone`) is buffered and then
//! replaces the whole set at once: objects missing from the relist leave, and readers never
//! see a half-listed pool. Until the first `InitDone` the set is not [`NodeSet::listed`].

use std::collections::BTreeMap;
use std::fmt::Debug;

use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::DiscoveredNode;

/// A Kubernetes object that yields ready nodes for a pool whose vLLM servers listen on `port`.
pub trait Discoverable:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    /// This object's ready nodes (none when it is not ready).
    fn ready_nodes(&self, port: u16) -> Vec<DiscoveredNode>;
}

/// The ready nodes of one backend, maintained from watch events.
#[derive(Debug, Clone, Default)]
pub struct NodeSet {
    port: u16,
    /// Object key → its ready nodes; objects without any are not stored.
    by_object: BTreeMap<String, Vec<DiscoveredNode>>,
    /// Relist in progress: what it has listed so far.
    relist: Option<BTreeMap<String, Vec<DiscoveredNode>>>,
    listed: bool,
}

impl NodeSet {
    /// An empty, not yet listed set for servers on `port`.
    pub fn new(port: u16) -> NodeSet {
        NodeSet { port, ..NodeSet::default() }
    }

    /// Whether a complete listing has arrived (the first `InitDone`).
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Apply one watcher event. Returns whether [`NodeSet::nodes`] changed, or the set became
    /// listed for the first time.
    pub(crate) fn apply<K: Discoverable>(&mut self, event: Event<K>) -> bool {
        let before = self.listed.then(|| self.nodes());
        match event {
            Event::Apply(obj) => {
                let nodes = obj.ready_nodes(self.port);
                put(&mut self.by_object, key_of(&obj), nodes);
            }
            Event::Delete(obj) => {
                self.by_object.remove(&key_of(&obj));
            }
            Event::Init => self.relist = Some(BTreeMap::new()),
            Event::InitApply(obj) => {
                let nodes = obj.ready_nodes(self.port);
                put(self.relist.get_or_insert_with(BTreeMap::new), key_of(&obj), nodes);
            }
            // The listing is complete: it is the whole truth. (An `InitDone` without `Init`
            // does not happen; it would mean an empty listing.)
            Event::InitDone => {
                self.by_object = self.relist.take().unwrap_or_default();
                self.listed = true;
            }
        }
        match before {
            None => self.listed,
            Some(before) => before != self.nodes(),
        }
    }

    /// The ready nodes, sorted by (name, origin); one node per origin (an address listed by
    /// two objects at once, as EndpointSlices may during a handover, counts once).
    pub fn nodes(&self) -> Vec<DiscoveredNode> {
        let mut all: Vec<DiscoveredNode> = self.by_object.values().flatten().cloned().collect();
        all.sort_by(|a, b| (&a.name, &a.origin).cmp(&(&b.name, &b.origin)));
        let mut seen = std::collections::HashSet::new();
        all.retain(|n| seen.insert(n.origin.clone()));
        all
    }
}

fn key_of<K: Resource>(obj: &K) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

fn put(map: &mut BTreeMap<String, Vec<DiscoveredNode>>, key: String, nodes: Vec<DiscoveredNode>) {
    if nodes.is_empty() {
        map.remove(&key);
    } else {
        map.insert(key, nodes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::discovery::pod::tests::pod;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::json;

    fn ready(name: &str, ip: &str) -> Pod {
        pod(name, ip, json!({}))
    }

    fn unready(name: &str, ip: &str) -> Pod {
        pod(name, ip, json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}))
    }

    fn names(set: &NodeSet) -> Vec<String> {
        set.nodes().into_iter().map(|n| format!("{}@{}", n.name, n.origin)).collect()
    }

    /// Run a relist of `pods` through `set`, returning what each event reported.
    fn relist(set: &mut NodeSet, pods: Vec<Pod>) -> Vec<bool> {
        let mut changed = vec![set.apply(Event::<Pod>::Init)];
        changed.extend(pods.into_iter().map(|p| set.apply(Event::InitApply(p))));
        changed.push(set.apply(Event::<Pod>::InitDone));
        changed
    }

    #[test]
    fn first_listing_publishes_even_when_empty() {
        let mut set = NodeSet::new(8000);
        assert!(!set.listed());
        assert_eq!(relist(&mut set, vec![]), vec![false, true]);
        assert!(set.listed());
        assert_eq!(set.nodes(), vec![]);
    }

    #[test]
    fn nothing_is_reported_until_init_done() {
        let mut set = NodeSet::new(8000);
        assert_eq!(
            relist(&mut set, vec![ready("b", "10.0.0.2"), unready("c", "10.0.0.3"), ready("a", "10.0.0.1")]),
            vec![false, false, false, false, true]
        );
        assert_eq!(names(&set), ["a@http://10.0.0.1:8000", "b@http://10.0.0.2:8000"]);
    }

    #[test]
    fn apply_and_delete_track_readiness() {
        let mut set = NodeSet::new(8000);
        relist(&mut set, vec![ready("a", "10.0.0.1"), unready("c", "10.0.0.3")]);

        assert!(set.apply(Event::Apply(ready("d", "10.0.0.4"))));
        assert_eq!(names(&set), ["a@http://10.0.0.1:8000", "d@http://10.0.0.4:8000"]);

        // A status update that leaves the node as it was is not a change.
        assert!(!set.apply(Event::Apply(ready("a", "10.0.0.1"))));
        // Turning ready, turning unready.
        assert!(set.apply(Event::Apply(ready("c", "10.0.0.3"))));
        assert!(set.apply(Event::Apply(unready("a", "10.0.0.1"))));
        assert_eq!(names(&set), ["c@http://10.0.0.3:8000", "d@http://10.0.0.4:8000"]);
        // Deleting an unready pod changes nothing; deleting a ready one does.
        assert!(!set.apply(Event::Delete(unready("a", "10.0.0.1"))));
        assert!(set.apply(Event::Delete(ready("d", "10.0.0.4"))));
        assert_eq!(names(&set), ["c@http://10.0.0.3:8000"]);
        // Terminating: leaves before it is gone.
        let terminating =
            pod("c", "10.0.0.3", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert!(set.apply(Event::Apply(terminating)));
        assert_eq!(set.nodes(), vec![]);
    }

    #[test]
    fn metadata_change_is_a_change() {
        let mut set = NodeSet::new(8000);
        relist(&mut set, vec![ready("a", "10.0.0.1")]);
        let pinned = pod(
            "a",
            "10.0.0.1",
            json!({"metadata": {"annotations": {"spillway.dev/engine-version": "0.7.0"}}}),
        );
        assert!(set.apply(Event::Apply(pinned)));
        assert_eq!(set.nodes()[0].metadata.engine_version.as_deref(), Some("0.7.0"));
    }

    #[test]
    fn relist_replaces_the_set_atomically() {
        let mut set = NodeSet::new(8000);
        relist(&mut set, vec![ready("a", "10.0.0.1"), ready("b", "10.0.0.2")]);

        // During the relist the old set stands.
        assert!(!set.apply(Event::<Pod>::Init));
        assert!(!set.apply(Event::InitApply(ready("b", "10.0.0.2"))));
        assert!(!set.apply(Event::InitApply(ready("e", "10.0.0.5"))));
        assert_eq!(names(&set), ["a@http://10.0.0.1:8000", "b@http://10.0.0.2:8000"]);
        // Then `a`, missing from the relist, has left; `e` has joined.
        assert!(set.apply(Event::<Pod>::InitDone));
        assert_eq!(names(&set), ["b@http://10.0.0.2:8000", "e@http://10.0.0.5:8000"]);

        // A relist that finds the same set reports no change.
        assert_eq!(relist(&mut set, vec![ready("e", "10.0.0.5"), ready("b", "10.0.0.2")]), vec![false; 4]);
        // A restarted relist (Init again before InitDone) drops what the first half listed.
        set.apply(Event::<Pod>::Init);
        set.apply(Event::InitApply(ready("x", "10.0.0.9")));
        assert_eq!(relist(&mut set, vec![ready("b", "10.0.0.2")]), vec![false, false, true]);
        assert_eq!(names(&set), ["b@http://10.0.0.2:8000"]);
    }

    #[test]
    fn a_pod_that_moves_ip_replaces_its_node() {
        let mut set = NodeSet::new(8000);
        relist(&mut set, vec![ready("a", "10.0.0.1")]);
        assert!(set.apply(Event::Apply(ready("a", "10.0.0.7"))));
        assert_eq!(names(&set), ["a@http://10.0.0.7:8000"]);
    }

    #[test]
    fn endpointslices_group_nodes_per_slice_and_dedupe_origins() {
        let slice = |name: &str, ips: &[&str]| -> EndpointSlice {
            let eps: Vec<_> = ips
                .iter()
                .enumerate()
                .map(|(i, ip)| json!({"addresses": [ip], "targetRef": {"kind": "Pod", "name": format!("{name}-{i}")}}))
                .collect();
            serde_json::from_value(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": "llm"},
                "addressType": "IPv4", "ports": [{"port": 8000}], "endpoints": eps,
            }))
            .unwrap()
        };
        let mut set = NodeSet::new(8000);
        set.apply(Event::<EndpointSlice>::Init);
        set.apply(Event::InitApply(slice("s1", &["10.0.0.1", "10.0.0.2"])));
        set.apply(Event::InitApply(slice("s2", &["10.0.0.2"])));
        assert!(set.apply(Event::<EndpointSlice>::InitDone));
        assert_eq!(set.nodes().len(), 2, "10.0.0.2 counts once");
        assert!(!set.apply(Event::Delete(slice("s2", &["10.0.0.2"]))));
        assert!(set.apply(Event::Apply(slice("s1", &["10.0.0.3"]))));
        assert_eq!(names(&set), ["s1-0@http://10.0.0.3:8000"]);
    }
}
