//! The local pools that did not serve a request although it was theirs to serve: its plan
//! spilled past their nodes, or dispatch reached one of their nodes and skipped it (no slot, an
//! open breaker) or saw it fail, and then another backend served the request or nothing did.
//! Dispatch sends them as a record once the request commits or is refused, so that the
//! bookkeeping loop can keep each pool's spilled tokens per second (`metrics::unserved`); it
//! does no I/O and takes no lock.

use tokio::time::Instant;

use crate::canonical::BackendName;
use crate::outcome::SpillRecord;

/// `pools` (the pools the request spilled past or that a target of failed, in any order, with
/// repeats), each once, less `served` (the backend that answered, if one did); `None` when that
/// leaves none.
pub(super) fn unserved<'a>(
    pools: impl IntoIterator<Item = &'a str>,
    served: Option<&str>,
    prompt_tokens: u32,
    at: Instant,
) -> Option<SpillRecord> {
    let mut unserved: Vec<BackendName> = Vec::new();
    for pool in pools {
        if Some(pool) != served && !unserved.iter().any(|p| p == pool) {
            unserved.push(BackendName::from(pool));
        }
    }
    (!unserved.is_empty()).then_some(SpillRecord { pools: unserved, prompt_tokens, at })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(pools: &[&str], served: Option<&str>) -> Option<Vec<String>> {
        let at = Instant::now();
        let record = unserved(pools.iter().copied(), served, 700, at)?;
        assert_eq!((record.prompt_tokens, record.at), (700, at));
        Some(record.pools.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn each_pool_that_did_not_serve_counts_once() {
        let both = ["east", "east", "west", "east"];
        assert_eq!(pools(&both, Some("hosted")), Some(vec!["east".into(), "west".into()]), "hosted served");
        assert_eq!(pools(&both, None), Some(vec!["east".into(), "west".into()]), "nothing served");
        assert_eq!(pools(&both, Some("west")), Some(vec!["east".into()]), "the other pool served");
        assert_eq!(pools(&["east", "east"], Some("east")), None, "another node of the same pool served");
        assert_eq!(pools(&[], Some("hosted")), None, "no pool was in the way");
    }
}
