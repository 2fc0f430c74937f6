//! Open connections per client address, so that one address cannot take every socket the
//! router has. Off (no limit) unless `limits.max_connections_per_client` is set: behind a load
//! balancer or NAT every client may share one address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections by client address.
#[derive(Default)]
pub(crate) struct PerClient {
    limit: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerClient {
    /// `limit` 0: no limit (nothing is counted).
    pub fn new(limit: usize) -> Arc<PerClient> {
        Arc::new(PerClient { limit, open: Mutex::default() })
    }

    /// A slot for one more connection from `ip`, or `None` when it already has `limit` open.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        if self.limit == 0 {
            return Some(ClientSlot(None));
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(ClientSlot(Some((Arc::clone(self), ip))))
    }
}

/// One admitted connection; frees its slot when dropped.
pub(crate) struct ClientSlot(Option<(Arc<PerClient>, IpAddr)>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Some((per_client, ip)) = self.0.take() {
            let mut open = per_client.open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(count) = open.get_mut(&ip) {
                *count -= 1;
                if *count == 0 {
                    open.remove(&ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_at_most_the_limit_and_a_closed_slot_is_reused() {
        let per_client = PerClient::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = per_client.admit(a).unwrap();
        let _second = per_client.admit(a).unwrap();
        assert!(per_client.admit(a).is_none());
        assert!(per_client.admit(b).is_some());
        drop(first);
        assert!(per_client.admit(a).is_some());
    }

    #[test]
    fn no_limit_counts_nothing() {
        let per_client = PerClient::new(0);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let slots: Vec<_> = (0..1000).map(|_| per_client.admit(a).unwrap()).collect();
        assert_eq!(slots.len(), 1000);
        assert!(per_client.open.lock().unwrap().is_empty());
    }
}
