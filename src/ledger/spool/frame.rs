//! The spool's on-disk record and its group-commit rule, as pure functions: no files, no clock.
//!
//! A record is `len: u32 LE | check: u32 LE | payload` where the payload is the row as JSON and
//! `check` is the first four bytes of the payload's SHA-256. A crash mid-write leaves a torn
//! last record: [`scan`] stops at the first record whose length runs past the end or whose
//! checksum does not match, keeps every whole record before it and says that it stopped, so a
//! torn tail is skipped, never fatal. This module must not touch the disk.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::ledger::record::LedgerRow;

/// Bytes before each payload: length and checksum.
pub(crate) const HEADER: usize = 8;

/// A payload longer than this is not a record (a corrupt length), so the scan stops there.
const MAX_PAYLOAD: usize = 1 << 20;

/// Append one record for `row` to `out`; returns the record's length in bytes.
pub fn encode(row: &LedgerRow, out: &mut Vec<u8>) -> usize {
    let payload = serde_json::to_vec(row).expect("a ledger row always serialises");
    let start = out.len();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&check(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out.len() - start
}

/// What a segment holds.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Scan {
    /// Every whole record, in the order written.
    pub rows: Vec<LedgerRow>,
    /// Bytes covered by those records.
    pub valid_len: usize,
    /// True when bytes after `valid_len` were not a whole record (a torn or corrupt tail).
    pub torn: bool,
}

/// Read records from the start of `bytes` until the end or the first torn or corrupt one.
pub fn scan(bytes: &[u8]) -> Scan {
    let mut s = Scan::default();
    let mut at = 0;
    while at < bytes.len() {
        let Some(head) = bytes.get(at..at + HEADER) else { break };
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let sum = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len).filter(|_| len <= MAX_PAYLOAD) else {
            break;
        };
        if check(payload) != sum {
            break;
        }
        let Ok(row) = serde_json::from_slice::<LedgerRow>(payload) else { break };
        s.rows.push(row);
        at += HEADER + len;
        s.valid_len = at;
    }
    s.torn = s.valid_len < bytes.len();
    s
}

fn check(payload: &[u8]) -> u32 {
    let digest = Sha256::digest(payload);
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// When to fsync: group commit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyncRule {
    /// At most one fsync per this interval…
    pub interval: Duration,
    /// …unless this many rows wait for one.
    pub max_rows: usize,
}

impl SyncRule {
    /// Is an fsync due for `unsynced` rows, `since_last` after the previous one? When not, the
    /// answer says how long until it is.
    pub(crate) fn due(&self, unsynced: usize, since_last: Duration) -> Result<(), Duration> {
        if unsynced == 0 {
            return Err(self.interval);
        }
        if unsynced >= self.max_rows || since_last >= self.interval {
            Ok(())
        } else {
            Err(self.interval - since_last)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::usage::NodeMinute;

    /// A request row (the spool tests' fixture), `n` its id.
    fn request(n: usize) -> LedgerRow {
        super::super::tests::row(n)
    }

    fn minute() -> LedgerRow {
        LedgerRow::NodeMinute(NodeMinute {
            minute_ms: 60_000,
            backend: "pool".into(),
            node: "pool/llama@http://a".into(),
            gpu_count: 2,
            gpu_hourly_usd: Some("1.5".parse().unwrap()),
            busy: true,
            occupancy: None,
        })
    }

    #[test]
    fn records_round_trip_in_order() {
        let mut bytes = Vec::new();
        let a = encode(&request(1), &mut bytes);
        let b = encode(&minute(), &mut bytes);
        assert_eq!(a + b, bytes.len());
        let s = scan(&bytes);
        assert_eq!(s.rows, vec![request(1), minute()]);
        assert_eq!((s.valid_len, s.torn), (bytes.len(), false));
    }

    #[test]
    fn a_torn_tail_is_skipped_at_every_cut() {
        let mut bytes = Vec::new();
        let first = encode(&request(1), &mut bytes);
        encode(&request(2), &mut bytes);
        for cut in first + 1..bytes.len() {
            let s = scan(&bytes[..cut]);
            assert_eq!(s.rows, vec![request(1)], "cut at {cut}");
            assert_eq!((s.valid_len, s.torn), (first, true), "cut at {cut}");
        }
    }

    #[test]
    fn a_flipped_byte_stops_the_scan_there() {
        let mut bytes = Vec::new();
        let first = encode(&request(1), &mut bytes);
        encode(&request(2), &mut bytes);
        encode(&request(3), &mut bytes);
        bytes[first + HEADER + 3] ^= 0x20;
        let s = scan(&bytes);
        assert_eq!((s.rows.len(), s.valid_len, s.torn), (1, first, true));
        // A garbage length (4 GiB) is not read as a record.
        let s = scan(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1]);
        assert_eq!((s.rows.len(), s.valid_len, s.torn), (0, 0, true));
        assert_eq!(scan(&[]), Scan::default());
    }

    #[test]
    fn fsync_is_grouped_by_interval_or_rows() {
        let rule = SyncRule { interval: Duration::from_millis(20), max_rows: 64 };
        let ms = Duration::from_millis;
        assert_eq!(rule.due(0, ms(500)), Err(ms(20)), "nothing to sync");
        assert_eq!(rule.due(1, ms(500)), Ok(()), "idle: the first row syncs at once");
        assert_eq!(rule.due(5, ms(8)), Err(ms(12)), "8 ms after the last sync: wait 12 more");
        assert_eq!(rule.due(5, ms(20)), Ok(()));
        assert_eq!(rule.due(64, ms(1)), Ok(()), "a full group goes early");
    }
}
