//! The spool directory: numbered segment files (`<seq>.spool`), the one being appended to and the
//! sealed ones whose rows wait for the store. A segment is deleted once every row in it is
//! committed; a segment found at start is replayed. The directory is locked so that two
//! routers never append to the same files. This module does file I/O only, never awaits and
//! never decides prices; the stage decides when to fsync.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::frame::{self, Scan};
use crate::ledger::record::LedgerRow;

/// A new segment is started past this size, or once the current one is a second old, so
/// committed rows free their space soon.
const SEGMENT_BYTES: u64 = 1 << 20;
const SEGMENT_AGE_SECS: u64 = 1;

/// What identifies a row for its acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RowKey {
    Request(String),
    Minute(String, i64),
}

fn key(row: &LedgerRow) -> RowKey {
    match row {
        LedgerRow::Request(r) => RowKey::Request(r.id.clone()),
        LedgerRow::NodeMinute(m) => RowKey::Minute(m.node.clone(), m.minute_ms),
    }
}

struct Segment {
    bytes: u64,
    /// Rows spooled here and not yet committed.
    pending: usize,
    /// When its first row was appended (for a replayed segment: when it was found).
    since: Instant,
}

/// How full the spool is, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpoolStats {
    pub bytes: u64,
    /// Age of the oldest segment holding an uncommitted row, seconds; 0 when none.
    pub oldest_secs: f64,
    /// Rows found at start and handed to the writer again.
    pub replayed: u64,
    /// Times the spool filled up (each episode once).
    pub full_events: u64,
    /// Rows that found the spool full and went to the writer in memory only.
    pub at_risk: u64,
}

/// The open spool. Not thread-safe by itself: the stage and the writer share it behind a mutex.
pub(crate) struct Segments {
    dir: PathBuf,
    max_bytes: u64,
    /// Held for the directory lock.
    _lock: File,
    current: File,
    current_seq: u64,
    /// Sealed segments written since the stage last took the files to fsync.
    sealed_unsynced: Vec<File>,
    segments: BTreeMap<u64, Segment>,
    keys: HashMap<RowKey, VecDeque<u64>>,
    full: bool,
    stats: SpoolStats,
}

impl Segments {
    /// Open (creating) `dir`, lock it, and return the rows of every segment left there, in the
    /// order written, with how many segments ended in a torn record. The replayed rows stay on
    /// disk until acknowledged like any other.
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<(Segments, Vec<LedgerRow>, usize)> {
        fs::create_dir_all(dir)?;
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("lock"))?;
        lock.try_lock()
            .map_err(|_| std::io::Error::other(format!("{} is in use by another router", dir.display())))?;
        let mut found: Vec<(u64, PathBuf)> = fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let path = e.path();
                let seq = path.file_name()?.to_str()?.strip_suffix(".spool")?.parse().ok()?;
                Some((seq, path))
            })
            .collect();
        found.sort();
        let mut segments = BTreeMap::new();
        let mut keys: HashMap<RowKey, VecDeque<u64>> = HashMap::new();
        let (mut rows, mut torn) = (Vec::new(), 0);
        let now = Instant::now();
        for (seq, path) in &found {
            let bytes = fs::read(path)?;
            let Scan { rows: found_rows, torn: was_torn, .. } = frame::scan(&bytes);
            torn += usize::from(was_torn);
            if found_rows.is_empty() {
                fs::remove_file(path)?;
                continue;
            }
            for row in &found_rows {
                keys.entry(key(row)).or_default().push_back(*seq);
            }
            let seg = Segment { bytes: bytes.len() as u64, pending: found_rows.len(), since: now };
            segments.insert(*seq, seg);
            rows.extend(found_rows);
        }
        let current_seq = found.last().map_or(1, |(seq, _)| seq + 1);
        let current = new_segment(dir, current_seq)?;
        segments.insert(current_seq, Segment { bytes: 0, pending: 0, since: now });
        let stats = SpoolStats { replayed: rows.len() as u64, ..SpoolStats::default() };
        let s = Segments {
            dir: dir.to_path_buf(),
            max_bytes,
            _lock: lock,
            current,
            current_seq,
            sealed_unsynced: Vec::new(),
            segments,
            keys,
            full: false,
            stats,
        };
        Ok((s, rows, torn))
    }

    /// Append `rows` (not yet synced); `false` at a row that did not fit (the spool is full: it
    /// goes on in memory only). Rotates the segment first when it is due.
    pub(crate) fn append(&mut self, rows: &[LedgerRow], now: Instant) -> std::io::Result<Vec<bool>> {
        self.rotate_if_due(now)?;
        let mut buf = Vec::new();
        let mut spooled = Vec::with_capacity(rows.len());
        let mut keys = Vec::with_capacity(rows.len());
        let mut total = self.bytes();
        for row in rows {
            let start = buf.len();
            let len = frame::encode(row, &mut buf) as u64;
            if total + len > self.max_bytes {
                buf.truncate(start);
                spooled.push(false);
                self.stats.at_risk += 1;
                if !self.full {
                    self.full = true;
                    self.stats.full_events += 1;
                    tracing::error!(
                        max_bytes = self.max_bytes,
                        "the ledger spool is full: rows go on in memory only until the store catches up"
                    );
                }
                continue;
            }
            total += len;
            spooled.push(true);
            keys.push(key(row));
        }
        if let Err(e) = self.current.write_all(&buf) {
            // What reached the file may end in a torn record: later rows go to a new segment,
            // so that a replay (which stops at a torn record) does not lose them.
            let seg = self.segments.get_mut(&self.current_seq).expect("the current segment is listed");
            seg.bytes += buf.len() as u64;
            let _ = self.start_segment(now);
            self.delete_done();
            return Err(e);
        }
        for k in keys {
            self.keys.entry(k).or_default().push_back(self.current_seq);
        }
        let seg = self.segments.get_mut(&self.current_seq).expect("the current segment is listed");
        if seg.bytes == 0 {
            seg.since = now;
        }
        seg.bytes += buf.len() as u64;
        seg.pending += spooled.iter().filter(|s| **s).count();
        Ok(spooled)
    }

    /// The files that rows appended so far may sit in unsynced (the segments sealed since the
    /// last call, and the current one), for an fsync outside the lock.
    pub(crate) fn files_to_sync(&mut self) -> std::io::Result<Vec<File>> {
        let current = self.current.try_clone()?;
        let mut files = std::mem::take(&mut self.sealed_unsynced);
        files.push(current);
        Ok(files)
    }

    /// `rows` are committed to the store: forget them, and delete every sealed segment left
    /// with none pending.
    pub(crate) fn ack(&mut self, rows: &[LedgerRow]) {
        for row in rows {
            let k = key(row);
            let Some(seqs) = self.keys.get_mut(&k) else { continue };
            let seq = seqs.pop_front();
            if seqs.is_empty() {
                self.keys.remove(&k);
            }
            if let Some(seg) = seq.and_then(|s| self.segments.get_mut(&s)) {
                seg.pending = seg.pending.saturating_sub(1);
            }
        }
        self.delete_done();
    }

    /// A clean stop: the current segment goes too when the store has every row in it.
    pub fn close(&mut self) {
        let seq = self.current_seq;
        if self.segments.get(&seq).is_some_and(|s| s.pending == 0) {
            match fs::remove_file(segment_path(&self.dir, seq)) {
                Ok(()) => {
                    self.segments.remove(&seq);
                }
                Err(e) => tracing::warn!("could not delete the ledger spool's last segment: {e}"),
            }
        }
    }

    pub fn stats(&self, now: Instant) -> SpoolStats {
        let oldest = self.segments.values().filter(|s| s.pending > 0).map(|s| s.since).min();
        SpoolStats {
            bytes: self.bytes(),
            oldest_secs: oldest.map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64()),
            ..self.stats
        }
    }

    fn bytes(&self) -> u64 {
        self.segments.values().map(|s| s.bytes).sum()
    }

    fn rotate_if_due(&mut self, now: Instant) -> std::io::Result<()> {
        let seg = &self.segments[&self.current_seq];
        let old = now.saturating_duration_since(seg.since).as_secs() >= SEGMENT_AGE_SECS;
        if seg.bytes == 0 || (seg.bytes < SEGMENT_BYTES && !old) {
            return Ok(());
        }
        self.start_segment(now)?;
        self.delete_done();
        Ok(())
    }

    /// Seal the current segment and append to a new one from now on. The stage's next fsync
    /// covers the sealed file too, before the rows in it are handed on.
    fn start_segment(&mut self, now: Instant) -> std::io::Result<()> {
        let next = new_segment(&self.dir, self.current_seq + 1)?;
        self.sealed_unsynced.push(std::mem::replace(&mut self.current, next));
        self.current_seq += 1;
        self.segments.insert(self.current_seq, Segment { bytes: 0, pending: 0, since: now });
        Ok(())
    }

    fn delete_done(&mut self) {
        let done: Vec<u64> = self
            .segments
            .iter()
            .filter(|(seq, s)| **seq != self.current_seq && s.pending == 0)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in done {
            match fs::remove_file(segment_path(&self.dir, seq)) {
                Ok(()) => {
                    self.segments.remove(&seq);
                }
                Err(e) => tracing::warn!("could not delete a committed ledger spool segment: {e}"),
            }
        }
        if self.full && self.bytes() < self.max_bytes / 2 {
            self.full = false;
            tracing::info!("the ledger spool has room again");
        }
    }
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:012}.spool"))
}

fn new_segment(dir: &Path, seq: u64) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(segment_path(dir, seq))
}
