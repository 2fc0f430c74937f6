//! Unit tests for the pure engine model: admission, KV accounting, prefix hits, preemption
//! and step time. Kept apart so that `engine.rs` stays about the model itself.

use super::*;

fn cfg() -> EngineConfig {
    EngineConfig {
        max_num_seqs: 2,
        num_gpu_blocks: 10,
        block_size: 16,
        prefill_us_per_token: 100.0,
        itl_base_ms: 10.0,
        itl_per_seq_ms: 1.0,
        prefix_caching: true,
    }
}

fn spec(id: u64, prompt: u32, out: u32, hashes: Vec<u64>) -> SeqSpec {
    SeqSpec { id, prompt_tokens: prompt, block_hashes: hashes, output_tokens: out, limited: false }
}

#[test]
fn admits_at_most_max_num_seqs_fifo() {
    let mut e = EngineCore::new(cfg());
    for id in 0..3 {
        e.submit(spec(id, 8, 5, vec![]));
    }
    let out = e.step();
    assert_eq!(out.admitted.iter().map(|a| a.id).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(out.tokens, vec![0, 1]);
    assert_eq!((e.num_running(), e.num_waiting()), (2, 1));
    // step time = base + per_seq × 2 + prefill 16 tokens × 100 µs
    assert_eq!(out.duration, Duration::from_micros(10_000 + 2_000 + 1_600));
}

#[test]
fn kv_fills_and_frees() {
    let mut e = EngineCore::new(cfg());
    e.submit(spec(1, 40, 3, vec![]));
    e.step();
    assert_eq!(e.used_blocks(), 3); // ceil(41/16)
    assert!(e.kv_usage() > 0.0);
    let mut finished = vec![];
    while !e.is_idle() {
        finished.extend(e.step().finished);
    }
    assert_eq!(finished, vec![(1, FinishReason::Stop)]);
    assert_eq!(e.used_blocks(), 0);
    assert_eq!(e.kv_usage(), 0.0);
}

#[test]
fn admission_waits_for_kv_blocks() {
    let mut e = EngineCore::new(cfg());
    e.submit(spec(1, 100, 2, vec![])); // 7 blocks
    e.submit(spec(2, 100, 2, vec![])); // does not fit beside it
    let out = e.step();
    assert_eq!(out.admitted.len(), 1);
    assert_eq!(e.num_waiting(), 1);
    e.step(); // 1 finishes
    let out = e.step();
    assert_eq!(out.admitted[0].id, 2);
}

#[test]
fn prefix_hits_skip_prefill() {
    let mut e = EngineCore::new(cfg());
    let hashes = vec![11, 12, 13];
    e.submit(spec(1, 50, 1, hashes.clone()));
    let first = e.step();
    assert_eq!(first.admitted[0].cached_tokens, 0);
    assert!(e.is_idle());
    assert_eq!(e.used_blocks(), 0, "cached blocks are evictable, not in use");
    e.submit(spec(2, 50, 1, hashes));
    let second = e.step();
    assert_eq!(second.admitted[0].cached_tokens, 48);
    assert!(second.duration < first.duration);
}

#[test]
fn limited_output_finishes_with_length() {
    let mut e = EngineCore::new(cfg());
    e.submit(SeqSpec { limited: true, ..spec(1, 4, 2, vec![]) });
    e.step();
    let out = e.step();
    assert_eq!(out.finished, vec![(1, FinishReason::Length)]);
}

#[test]
fn preempts_newest_when_blocks_run_out() {
    let mut e = EngineCore::new(EngineConfig { num_gpu_blocks: 4, ..cfg() });
    e.submit(spec(1, 31, 40, vec![])); // 2 blocks, grows
    e.submit(spec(2, 31, 40, vec![])); // 2 blocks
    e.step();
    assert_eq!(e.num_running(), 2);
    let out = e.step();
    assert_eq!(out.preempted, vec![2]);
    assert_eq!((e.num_running(), e.num_waiting()), (1, 1));
    assert!(e.used_blocks() <= 4);
}

#[test]
fn abort_frees_blocks() {
    let mut e = EngineCore::new(cfg());
    e.submit(spec(1, 60, 10, vec![]));
    e.submit(spec(2, 60, 10, vec![]));
    e.submit(spec(3, 60, 10, vec![]));
    e.step();
    e.abort(1);
    e.abort(3);
    assert_eq!((e.num_running(), e.num_waiting()), (1, 0));
    e.abort(2);
    assert_eq!(e.used_blocks(), 0);
    assert!(!e.fits_ever(1000, 10));
}
