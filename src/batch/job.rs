//! A batch job's status machine and its lines' states, as the providers name them: OpenAI's
//! statuses (`validating` … `cancelled`) and Anthropic's `processing_status` read from them, the
//! counts a job shows, and the step a job takes from what its lines say. Pure: no I/O.

use serde::Serialize;

/// Which provider's batch API a job was created through: its ids, objects and files follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    OpenAi,
    Anthropic,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
        }
    }

    pub fn parse(text: &str) -> Option<Dialect> {
        [Dialect::OpenAi, Dialect::Anthropic].into_iter().find(|d| d.as_str() == text)
    }

    /// The prefix of its job ids.
    pub fn id_prefix(self) -> &'static str {
        match self {
            Dialect::OpenAi => "batch_",
            Dialect::Anthropic => "msgbatch_",
        }
    }
}

/// A job's status, OpenAI's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Validating,
    Failed,
    InProgress,
    Finalizing,
    Completed,
    Expired,
    Cancelling,
    Cancelled,
}

impl Status {
    pub const ALL: [Status; 8] = [
        Status::Validating,
        Status::Failed,
        Status::InProgress,
        Status::Finalizing,
        Status::Completed,
        Status::Expired,
        Status::Cancelling,
        Status::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Validating => "validating",
            Status::Failed => "failed",
            Status::InProgress => "in_progress",
            Status::Finalizing => "finalizing",
            Status::Completed => "completed",
            Status::Expired => "expired",
            Status::Cancelling => "cancelling",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether the job has ended (nothing of it runs any more).
    pub fn ended(self) -> bool {
        matches!(self, Status::Failed | Status::Completed | Status::Expired | Status::Cancelled)
    }

    /// Anthropic's `processing_status` for it.
    pub fn processing_status(self) -> &'static str {
        match self {
            Status::Cancelling => "canceling",
            s if s.ended() => "ended",
            _ => "in_progress",
        }
    }
}

/// A line's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineState {
    Queued,
    Running,
    Succeeded,
    Errored,
    Canceled,
    Expired,
}

impl LineState {
    pub const ALL: [LineState; 6] = [
        LineState::Queued,
        LineState::Running,
        LineState::Succeeded,
        LineState::Errored,
        LineState::Canceled,
        LineState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LineState::Queued => "queued",
            LineState::Running => "running",
            LineState::Succeeded => "succeeded",
            LineState::Errored => "errored",
            LineState::Canceled => "canceled",
            LineState::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<LineState> {
        LineState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// How many of a job's lines are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub queued: u64,
    pub running: u64,
    pub succeeded: u64,
    pub errored: u64,
    pub canceled: u64,
    pub expired: u64,
}

impl Counts {
    pub fn add(&mut self, state: LineState, n: u64) {
        let slot = match state {
            LineState::Queued => &mut self.queued,
            LineState::Running => &mut self.running,
            LineState::Succeeded => &mut self.succeeded,
            LineState::Errored => &mut self.errored,
            LineState::Canceled => &mut self.canceled,
            LineState::Expired => &mut self.expired,
        };
        *slot += n;
    }

    pub fn total(&self) -> u64 {
        self.queued + self.running + self.succeeded + self.errored + self.canceled + self.expired
    }

    /// Lines still to run or running.
    pub fn open(&self) -> u64 {
        self.queued + self.running
    }

    /// OpenAI's `request_counts.failed`: every line that ended without an answer.
    pub fn failed(&self) -> u64 {
        self.errored + self.canceled + self.expired
    }
}

/// What the runner does with a job next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Validated at creation: start it.
    Start,
    /// Run more of its lines.
    Run,
    /// Its window has passed: its queued lines expire, and so does it once none runs.
    Expire,
    /// Every line has ended: completed.
    Complete,
    /// Cancelled by the client: queued lines are cancelled, and so is it once none runs.
    Cancel,
    /// Nothing (it has ended, or waits for its running lines).
    Wait,
}

/// The step for a job in `status` whose lines are `counts`, at `now_ms`, its window ending at
/// `expires_ms`.
pub fn step(status: Status, counts: &Counts, now_ms: i64, expires_ms: i64) -> Step {
    match status {
        Status::Validating => Step::Start,
        // Every line ended in time (an expired line means the window ended first).
        Status::InProgress if counts.open() == 0 && counts.expired == 0 => Step::Complete,
        Status::InProgress if now_ms >= expires_ms => Step::Expire,
        Status::InProgress => Step::Run,
        Status::Cancelling => Step::Cancel,
        _ => Step::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(queued: u64, running: u64, succeeded: u64) -> Counts {
        Counts { queued, running, succeeded, ..Counts::default() }
    }

    #[test]
    fn a_job_runs_until_its_lines_end_or_its_window_does() {
        assert_eq!(step(Status::Validating, &counts(3, 0, 0), 0, 10), Step::Start);
        assert_eq!(step(Status::InProgress, &counts(3, 0, 0), 0, 10), Step::Run);
        assert_eq!(step(Status::InProgress, &counts(0, 1, 2), 0, 10), Step::Run, "one still runs");
        assert_eq!(step(Status::InProgress, &counts(0, 0, 3), 20, 10), Step::Complete, "done beats late");
        assert_eq!(step(Status::InProgress, &counts(1, 0, 2), 10, 10), Step::Expire);
        let expired = Counts { expired: 1, ..counts(0, 0, 2) };
        assert_eq!(
            step(Status::InProgress, &expired, 10, 10),
            Step::Expire,
            "its last line ran past the window"
        );
        assert_eq!(step(Status::Cancelling, &counts(1, 1, 1), 0, 10), Step::Cancel);
        for ended in [Status::Completed, Status::Expired, Status::Cancelled, Status::Failed] {
            assert_eq!(step(ended, &counts(0, 0, 3), 0, 10), Step::Wait);
            assert_eq!(ended.processing_status(), "ended");
        }
        assert_eq!(Status::Cancelling.processing_status(), "canceling");
        assert_eq!(Status::Finalizing.processing_status(), "in_progress");
    }

    #[test]
    fn names_read_back() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        for s in LineState::ALL {
            assert_eq!(LineState::parse(s.as_str()), Some(s));
        }
        let mut c = Counts::default();
        c.add(LineState::Errored, 2);
        c.add(LineState::Expired, 1);
        c.add(LineState::Succeeded, 4);
        assert_eq!((c.total(), c.failed(), c.open()), (7, 3, 0));
    }
}
