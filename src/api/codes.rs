//! The error codes only routes outside the pipeline answer with: the admin API's, the batch
//! routes' and the router's own for a route it does not have. Each is a row of the error table
//! ([`RouteCode`]) written here, beside the routes, so the pipeline's [`ErrorCode`] holds only
//! what serving a request can end in.

use crate::serve::error::{ErrorCode, RouteCode};

const INVALID: &str = "invalid_request_error";

/// A code of a route outside the pipeline.
const fn route(status: u16, kind: &'static str, code: &'static str, when: &'static str) -> RouteCode {
    RouteCode { status, kind, code, when }
}

pub const NOT_FOUND: ErrorCode = ErrorCode::Route(&route(
    404,
    INVALID,
    "not_found",
    "no such route or resource; also the admin API when it is off",
));
pub const METHOD_NOT_ALLOWED: ErrorCode = ErrorCode::Route(&route(
    405,
    INVALID,
    "method_not_allowed",
    "a known route with the wrong method; `Allow` lists the methods it takes",
));
pub const INVALID_ADMIN_TOKEN: ErrorCode = ErrorCode::Route(&route(
    401,
    "authentication_error",
    "invalid_admin_token",
    "an `/admin/…` route without the admin token",
));
pub const INVALID_CONFIG: ErrorCode = ErrorCode::Route(&route(
    422,
    INVALID,
    "invalid_config",
    "`POST /admin/reload`: the file does not load; nothing changed",
));
pub const GATE_RUNNING: ErrorCode = ErrorCode::Route(&route(
    409,
    INVALID,
    "gate_running",
    "`POST /admin/gate/run`: a run for this fingerprint is under way",
));
pub const GATE_RUN_FAILED: ErrorCode = ErrorCode::Route(&route(
    422,
    INVALID,
    "gate_run_failed",
    "`POST /admin/gate/run`: the run could not be made (the message says why)",
));
pub const LEDGER_OFF: ErrorCode = ErrorCode::Route(&route(
    404,
    INVALID,
    "ledger_off",
    "a route that needs the ledger store, with `ledger.enabled: false`",
));
pub const LEDGER_UNAVAILABLE: ErrorCode = ErrorCode::Route(&route(
    503,
    "service_unavailable",
    "ledger_unavailable",
    "an admin action while the ledger store is away; nothing changed",
));
pub const KEY_NOT_ACTIVE: ErrorCode =
    ErrorCode::Route(&route(409, INVALID, "key_not_active", "rotating a revoked or expired key"));

/// Every route code, for the reference's table beside the pipeline's ([`ErrorCode::all`]).
pub const ALL: [ErrorCode; 9] = [
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    INVALID_ADMIN_TOKEN,
    INVALID_CONFIG,
    GATE_RUNNING,
    GATE_RUN_FAILED,
    LEDGER_OFF,
    LEDGER_UNAVAILABLE,
    KEY_NOT_ACTIVE,
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_route_codes_fit_the_table_beside_the_pipelines() {
        let all = crate::serve::error::ErrorCode::all().into_iter().chain(super::ALL);
        crate::serve::error::tests::check_table(all);
    }
}
