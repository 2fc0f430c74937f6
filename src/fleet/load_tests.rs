//! The load model with exact numbers: a node scraped every second, the router's own requests
//! started and finished between readings, the engine's gauges as the reading shows them.

use super::*;

/// Seconds after the test's start.
fn at(t0: Instant, secs: f64) -> Instant {
    t0 + Duration::from_secs_f64(secs)
}

/// A reading taken and landed at `secs`, its gauges trailing by up to `lag_s`.
fn scrape(node: &NodeCounters, t0: Instant, secs: f64, lag_s: f64) {
    node.mark_scraped(at(t0, secs), at(t0, secs), Duration::from_secs_f64(lag_s));
}

#[test]
fn sequential_requests_faster_than_the_scrape_interval_are_never_load_once_finished() {
    // llama.cpp, 2 slots; one request at a time, five a second. The scrape at 1 s catches one
    // running; every request after it sees only itself, never the ones finished since.
    let t0 = Instant::now();
    let node = NodeCounters::default();
    scrape(&node, t0, 0.0, 1.0);
    let mut running = node.start(Priority::Standard);
    for i in 1..=20 {
        if i == 5 {
            scrape(&node, t0, 1.0, 1.0);
        }
        let (gauge_running, gauge_waiting) =
            if i < 5 { (Some(0.0), Some(0.0)) } else { (Some(1.0), Some(0.0)) };
        let v = node.view();
        assert_eq!(v.at_node(gauge_running, gauge_waiting), 1.0, "request {i}: itself only");
        drop(running);
        let v = node.view();
        assert_eq!(v.at_node(gauge_running, gauge_waiting), 0.0, "after request {i}: idle");
        assert_eq!(v.queued(gauge_waiting), 0.0);
        running = node.start(Priority::Standard);
    }
    let v = node.view();
    assert_eq!((v.sent, v.counted), (21, 1), "the reading held one of the router's own");
}

#[test]
fn a_burst_inside_one_interval_counts_in_full_at_once_and_leaves_as_it_finishes() {
    let t0 = Instant::now();
    let node = NodeCounters::default();
    scrape(&node, t0, 0.0, 1.0);
    let idle = (Some(0.0), Some(0.0));
    let mut burst: Vec<_> = (0..5).map(|_| node.start(Priority::Standard)).collect();
    let v = node.view();
    assert_eq!(v.at_node(idle.0, idle.1), 5.0, "the idle reading cannot hide the burst");
    assert_eq!(v.unseen, 5, "none of it is in the reading's KV cache either");
    // The next reading: 2 slots running, 3 queued, all of them the router's own.
    scrape(&node, t0, 1.0, 1.0);
    let (running, waiting) = (Some(2.0), Some(3.0));
    let v = node.view();
    assert_eq!((v.counted, v.unseen), (5, 0));
    assert_eq!(v.at_node(running, waiting), 5.0, "not 5 + 5");
    assert_eq!(v.queued(waiting), 3.0);
    // Three finish before the next reading: each freed a slot a queued request took.
    burst.truncate(2);
    let v = node.view();
    assert_eq!(v.freed, 3);
    assert_eq!((v.at_node(running, waiting), v.queued(waiting)), (2.0, 0.0));
    burst.clear();
    assert_eq!(node.view().at_node(running, waiting), 0.0);
}

#[test]
fn gauges_lagging_one_and_two_intervals_are_not_added_to_the_routers_own() {
    // Gauges trail by up to 2 s (the `gauge_lag_ms` setting); scrapes every second. Four
    // requests run from 0.5 s to 1.5 s; the engine reports them one and two intervals late.
    let t0 = Instant::now();
    let node = NodeCounters::default();
    scrape(&node, t0, 0.0, 2.0);
    let four: Vec<_> = (0..4).map(|_| node.start(Priority::Standard)).collect();
    scrape(&node, t0, 1.0, 2.0);
    assert_eq!(node.view().at_node(Some(0.0), Some(0.0)), 4.0, "reading lags: the router's count stands");
    drop(four);
    scrape(&node, t0, 2.0, 2.0);
    assert_eq!(node.view().counted, 4);
    assert_eq!(node.view().at_node(Some(4.0), Some(0.0)), 0.0, "one interval late: all the router's own");
    scrape(&node, t0, 3.0, 2.0);
    assert_eq!(node.view().at_node(Some(4.0), Some(0.0)), 0.0, "two intervals late: still");
    // Three intervals late is beyond the lag the model allows: the four count as others.
    scrape(&node, t0, 5.0, 2.0);
    let v = node.view();
    assert_eq!(v.counted, 0);
    assert_eq!(v.others(Some(4.0), Some(0.0)), Some(4.0));
    assert_eq!(v.at_node(Some(4.0), Some(0.0)), 4.0);
}

#[test]
fn a_node_restart_that_resets_its_gauges_leaves_only_what_is_in_flight() {
    let t0 = Instant::now();
    let node = NodeCounters::default();
    let mine: Vec<_> = (0..2).map(|_| node.start(Priority::Standard)).collect();
    scrape(&node, t0, 0.0, 1.0);
    // Two of the router's and one other client's.
    assert_eq!(node.view().at_node(Some(3.0), Some(0.0)), 3.0);
    // The engine restarts: the router's two fail, its counters and gauges start from zero.
    drop(mine);
    let v = node.view();
    assert_eq!(v.at_node(Some(3.0), Some(0.0)), 1.0, "before the new reading: the other client's");
    scrape(&node, t0, 1.0, 1.0);
    assert_eq!(node.view().at_node(Some(0.0), Some(0.0)), 0.0, "never below zero");
    let _next = node.start(Priority::Standard);
    scrape(&node, t0, 2.0, 1.0);
    let v = node.view();
    assert_eq!((v.at_node(Some(1.0), Some(0.0)), v.sent, v.freed), (1.0, 3, 2));
}

#[test]
fn what_a_second_router_sends_shows_through_the_gauges() {
    let t0 = Instant::now();
    let (a, b) = (NodeCounters::default(), NodeCounters::default());
    let b_steady: Vec<_> = (0..3).map(|_| b.start(Priority::Standard)).collect();
    let a_one = a.start(Priority::Standard);
    scrape(&a, t0, 1.0, 1.0);
    scrape(&b, t0, 1.0, 1.0);
    // The node runs 4: three of B's, one of A's.
    let (running, waiting) = (Some(4.0), Some(0.0));
    assert_eq!(a.view().others(running, waiting), Some(3.0));
    assert_eq!(b.view().others(running, waiting), Some(1.0));
    assert_eq!((a.view().at_node(running, waiting), b.view().at_node(running, waiting)), (4.0, 4.0));
    // A's request finishes: A sees B's three; B still counts A's one until its next reading.
    drop(a_one);
    assert_eq!(a.view().at_node(running, waiting), 3.0);
    assert_eq!(b.view().at_node(running, waiting), 4.0);
    drop(b_steady);
    assert_eq!(b.view().at_node(running, waiting), 1.0);
}

#[test]
fn a_node_without_a_running_gauge_is_the_routers_own_count() {
    let t0 = Instant::now();
    let node = NodeCounters::default();
    let two: Vec<_> = (0..2).map(|_| node.start(Priority::Standard)).collect();
    scrape(&node, t0, 1.0, 1.0);
    let v = node.view();
    assert_eq!(v.others(None, Some(1.0)), None, "others unknown, not zero");
    assert_eq!(v.at_node(None, Some(1.0)), 2.0);
    assert_eq!(v.queued(Some(1.0)), 1.0, "its queue gauge still counts");
    drop(two);
    let v = node.view();
    assert_eq!((v.at_node(None, Some(1.0)), v.queued(Some(1.0))), (0.0, 0.0));
    assert_eq!(v.at_node(None, None), 0.0);
}

#[test]
fn a_late_reading_from_another_replica_is_judged_by_the_window_it_was_taken_in() {
    let t0 = Instant::now();
    let node = NodeCounters::default();
    scrape(&node, t0, 0.0, 1.0);
    let six: Vec<_> = (0..6).map(|_| node.start(Priority::Standard)).collect();
    scrape(&node, t0, 1.0, 1.0);
    drop(six);
    for s in 2..=4 {
        scrape(&node, t0, f64::from(s), 1.0);
    }
    assert_eq!(node.view().counted, 0, "a fresh reading: the six are long gone");
    // A peer's reading taken at 1.5 s lands at 4.5 s: the six may be in it.
    node.mark_scraped(at(t0, 4.5), at(t0, 1.5), Duration::from_secs(1));
    assert_eq!(node.view().counted, 6);
    assert_eq!(node.view().at_node(Some(6.0), Some(0.0)), 0.0);
}

#[test]
fn counters_are_shared_by_key_and_by_handle() {
    let load = NodeLoad::new();
    let n = NodeKey::from("n");
    let a = load.start(&n, Priority::Standard);
    let b = load.node(&n).start(Priority::Standard);
    assert_eq!(
        load.view("n"),
        LoadView { in_flight: 2, unseen: 2, sent: 2, counted: 0, freed: 0, ..LoadView::default() }
    );
    let t0 = Instant::now();
    load.mark_scraped(&n, t0, t0, Duration::from_secs(1));
    assert_eq!(
        load.view("n"),
        LoadView { in_flight: 2, unseen: 0, sent: 2, counted: 2, freed: 0, ..LoadView::default() }
    );
    drop(a);
    let _c = load.start(&n, Priority::Standard);
    assert_eq!(
        load.view("n"),
        LoadView { in_flight: 2, unseen: 1, sent: 3, counted: 2, freed: 1, ..LoadView::default() }
    );
    drop(b);
    assert_eq!(load.view("n").in_flight, 1);
    assert_eq!(load.view("other"), LoadView::default());
    assert!(load.node(&n).same(&load.node(&n)), "one node, one set of counters");
    assert_eq!(load.node(&n).view(), load.view("n"));
}

#[test]
fn in_flight_is_counted_by_priority_until_each_request_ends() {
    let node = NodeCounters::default();
    let batch: Vec<_> = (0..3).map(|_| node.start(Priority::Batch)).collect();
    let chat = node.start(Priority::Interactive);
    let count = |p| node.in_flight_of(p);
    assert_eq!((count(Priority::Interactive), count(Priority::Standard), count(Priority::Batch)), (1, 0, 3));
    assert_eq!(node.view().in_flight, 4);
    drop(chat);
    drop(batch);
    assert_eq!((count(Priority::Interactive), count(Priority::Batch), node.view().in_flight), (0, 0, 0));
}

#[test]
fn a_late_request_bounds_the_nodes_prefill_speed_until_one_gets_its_first_token() {
    let node = NodeCounters::default();
    let (a, b) = (node.start(Priority::Standard), node.start(Priority::Standard));
    a.progress().describe(300, 24);
    b.progress().describe(500, 24);
    // Both still prefilling when the first is given up on 0.8 s after it was sent: the node
    // prefilled at most their 800 tokens in that time.
    node.late(Duration::from_millis(800));
    assert_eq!(node.view().prefill_ceiling_tps, Some(1000));
    drop(a);
    // A later, tighter bound wins; a looser one does not loosen it.
    node.late(Duration::from_secs(1));
    assert_eq!(node.view().prefill_ceiling_tps, Some(500));
    node.late(Duration::from_millis(100));
    assert_eq!(node.view().prefill_ceiling_tps, Some(500));
    // A request that gets its first token there lifts it.
    b.progress().observe(&crate::canonical::Event::TextDelta("hi".into()));
    b.progress().touch(crate::fleet::progress::Touch {
        keys: PrefixKeys::default(),
        prompt_tokens: 500,
        predicted_cached: 0,
        generation: 0,
    });
    drop(b);
    assert_eq!(node.view().prefill_ceiling_tps, None);
}
