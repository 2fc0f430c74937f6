//! The evaluation gate: no backend serves a task until it has shown it can do that task.
//!
//! Started here: golden sets (`golden`, JSONL per task) and graders (`grade`: exact, contains,
//! regex, JSON schema, numeric, and the judge's score parsing). Running a set through the
//! adapters, storing results per fingerprint, gating pools and re-running on a pin change come
//! next (issue 8).

pub mod golden;
pub mod grade;
