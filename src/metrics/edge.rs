//! Client connections at the HTTP edge: how many are open and why each one ended, so that an
//! SRE can see slow or hostile clients being turned away (and tests can wait on it); and the
//! requests the router refused, by status.

use super::family::Registry;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};

/// Why a client connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionEnd {
    /// The client closed it, or it finished after a drain began.
    Closed,
    /// A protocol or I/O error (a malformed or oversized head, a reset).
    Error,
    /// The request head did not arrive within `limits.header_read_timeout_ms`.
    HeaderTimeout,
    /// No request within `limits.idle_timeout_ms`.
    Idle,
    /// Refused at accept: the client address was at `limits.max_connections_per_client`.
    PerClientLimit,
    /// Still open when the drain deadline passed.
    DrainDeadline,
}

impl ConnectionEnd {
    pub const ALL: [ConnectionEnd; 6] = [
        ConnectionEnd::Closed,
        ConnectionEnd::Error,
        ConnectionEnd::HeaderTimeout,
        ConnectionEnd::Idle,
        ConnectionEnd::PerClientLimit,
        ConnectionEnd::DrainDeadline,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionEnd::Closed => "closed",
            ConnectionEnd::Error => "error",
            ConnectionEnd::HeaderTimeout => "header_timeout",
            ConnectionEnd::Idle => "idle",
            ConnectionEnd::PerClientLimit => "per_client_limit",
            ConnectionEnd::DrainDeadline => "drain_deadline",
        }
    }
}

/// The edge's handles (cheap to clone).
#[derive(Clone)]
pub struct EdgeMetrics {
    pub open: IntGauge,
    ended: IntCounterVec,
    refused: IntCounterVec,
    /// Access lines a full queue turned away (`control::access`).
    pub access_dropped: IntCounter,
}

impl EdgeMetrics {
    pub(super) fn register(r: &Registry) -> EdgeMetrics {
        let open = IntGauge::new("spillway_client_connections_open", "Client connections open now.")
            .expect("static metric definition");
        r.register(Box::new(open.clone())).expect("each family is registered once");
        let ended = IntCounterVec::new(
            Opts::new(
                "spillway_client_connections_ended_total",
                "Client connections that ended, by reason (closed, error, header_timeout, idle, per_client_limit, drain_deadline).",
            ),
            &["reason"],
        )
        .expect("static metric definition");
        r.register(Box::new(ended.clone())).expect("each family is registered once");
        for end in ConnectionEnd::ALL {
            ended.with_label_values(&[end.as_str()]);
        }
        let refused = IntCounterVec::new(
            Opts::new(
                "spillway_refusals_total",
                "Requests the router answered with an error status (4xx or 5xx), by status (the health probes' answers aside); each is also logged as `refused` with its reason and field.",
            ),
            &["status"],
        )
        .expect("static metric definition");
        r.register(Box::new(refused.clone())).expect("each family is registered once");
        let access_dropped = IntCounter::new(
            "spillway_access_lines_dropped_total",
            "Access lines not written because the queue to the bookkeeping loop was full (the requests were served; only their lines are missing).",
        )
        .expect("static metric definition");
        r.register(Box::new(access_dropped.clone())).expect("each family is registered once");
        EdgeMetrics { open, ended, refused, access_dropped }
    }

    /// Count an answer with an error status.
    pub fn refused(&self, status: u16) {
        self.refused.with_label_values(&[&status.to_string()]).inc();
    }

    pub fn closed(&self, end: ConnectionEnd) {
        self.ended.with_label_values(&[end.as_str()]).inc();
    }
}
