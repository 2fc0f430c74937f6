//! Clean rollouts: Kubernetes keeps sending new connections to a terminating pod for a few
//! seconds after SIGTERM (endpoints leave the Service asynchronously), so on the first signal
//! the router only reports itself unready (`/readyz` 503) and serves on for
//! `limits.shutdown_delay_ms`; only then does the listener close and the drain begin. A second
//! signal during the delay cuts it short.
//!
//! The sequence is pure timing over a channel of signals, so it is tested with paused time;
//! [`listen`] is the process side that feeds the channel from SIGTERM and ctrl-c.

use std::time::Duration;

use tokio::sync::mpsc;

use crate::api::readiness::Readiness;

/// A process signal that asks the router to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Terminate,
    Interrupt,
}

/// How the delay after the first signal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DelayEnd {
    /// The whole delay was served.
    Served,
    /// A second signal cut it short.
    SecondSignal,
}

/// Wait for the first signal, report unready, then serve on for `delay` (or until a second
/// signal); resolves when the listener should stop accepting. A closed channel before the
/// first signal means none can come: this never resolves then.
pub(crate) async fn sequence(
    signals: &mut mpsc::Receiver<Signal>,
    delay: Duration,
    readiness: &Readiness,
) -> DelayEnd {
    let Some(first) = signals.recv().await else {
        return std::future::pending().await;
    };
    readiness.leave();
    tracing::info!(signal = ?first, delay_ms = delay.as_millis() as u64, "shutting down: /readyz answers 503, serving on for the shutdown delay");
    let second = async {
        match signals.recv().await {
            Some(s) => s,
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        () = tokio::time::sleep(delay) => DelayEnd::Served,
        s = second => {
            tracing::info!(signal = ?s, "second signal: the rest of the shutdown delay is skipped");
            DelayEnd::SecondSignal
        }
    };
    tracing::info!("shutting down: no new connections, draining in-flight requests");
    end
}

/// Forward SIGTERM and ctrl-c (SIGINT) to a channel, every time they come.
pub fn listen() -> std::io::Result<mpsc::Receiver<Signal>> {
    let (tx, rx) = mpsc::channel(4);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::spawn(async move {
            loop {
                let s = tokio::select! {
                    Some(()) = term.recv() => Signal::Terminate,
                    Some(()) = int.recv() => Signal::Interrupt,
                    else => break,
                };
                if tx.send(s).await.is_err() {
                    break;
                }
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(Signal::Interrupt).await.is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::time::Instant;

    const DELAY: Duration = Duration::from_millis(5_000);

    /// Run the sequence on its own task; answers its end and how long after `start` it came.
    fn spawn(
        mut rx: mpsc::Receiver<Signal>,
        readiness: Arc<Readiness>,
        start: Instant,
    ) -> tokio::task::JoinHandle<(DelayEnd, Duration)> {
        tokio::spawn(async move {
            let end = sequence(&mut rx, DELAY, &readiness).await;
            (end, start.elapsed())
        })
    }

    #[tokio::test(start_paused = true)]
    async fn ready_until_the_first_signal_then_the_whole_delay_is_served() {
        let (tx, rx) = mpsc::channel(4);
        let readiness = Arc::new(Readiness::default());
        let start = Instant::now();
        let task = spawn(rx, Arc::clone(&readiness), start);
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert!(!readiness.leaving(), "no signal yet: still ready");
        tx.send(Signal::Terminate).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(readiness.leaving(), "unready as soon as the signal came");
        assert!(!task.is_finished(), "the delay is still running");
        let (end, took) = task.await.unwrap();
        assert_eq!(end, DelayEnd::Served);
        assert_eq!(took, Duration::from_millis(2_000) + DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_signal_skips_the_rest_of_the_delay() {
        let (tx, rx) = mpsc::channel(4);
        let readiness = Arc::new(Readiness::default());
        let start = Instant::now();
        let task = spawn(rx, Arc::clone(&readiness), start);
        tx.send(Signal::Terminate).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        tx.send(Signal::Interrupt).await.unwrap();
        let (end, took) = task.await.unwrap();
        assert_eq!(end, DelayEnd::SecondSignal);
        assert_eq!(took, Duration::from_millis(1_500));
        assert!(readiness.leaving());
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_delay_stops_accepting_at_the_first_signal() {
        let (tx, mut rx) = mpsc::channel(4);
        let readiness = Readiness::default();
        tx.send(Signal::Interrupt).await.unwrap();
        let start = Instant::now();
        assert_eq!(sequence(&mut rx, Duration::ZERO, &readiness).await, DelayEnd::Served);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn signals_gone_after_the_first_still_serve_the_delay() {
        let (tx, mut rx) = mpsc::channel(4);
        let readiness = Readiness::default();
        tx.send(Signal::Terminate).await.unwrap();
        drop(tx);
        let start = Instant::now();
        assert_eq!(sequence(&mut rx, DELAY, &readiness).await, DelayEnd::Served);
        assert_eq!(start.elapsed(), DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn no_signal_source_never_shuts_down() {
        let (tx, mut rx) = mpsc::channel::<Signal>(4);
        drop(tx);
        let readiness = Readiness::default();
        let waited =
            tokio::time::timeout(Duration::from_secs(3_600), sequence(&mut rx, DELAY, &readiness)).await;
        assert!(waited.is_err());
        assert!(!readiness.leaving());
    }
}
