//! The issued-keys refresh loop: every `issued_keys.refresh_ms` it reads the `client_keys`
//! table into the router's [`KeyBoard`], so a key created, rotated or revoked through any
//! replica (or the CLI) takes effect on this one within one period. When the store cannot be
//! read the last view stays (a warning when it starts failing, a line when it recovers); it
//! never empties the board, which would turn authentication off.

use std::sync::Arc;
use std::time::Duration;

use crate::keys::{self, KeyBoard};
use crate::ledger::Store;

pub async fn run(board: Arc<KeyBoard>, store: Store, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticks.tick().await;
        match keys::reload(&board, &store).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!(keys = board.issued_count(), "issued keys: the store is readable again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "issued keys: cannot read the store; the last view stays");
            }
            Err(_) => {}
        }
    }
}
