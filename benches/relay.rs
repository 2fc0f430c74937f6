//! The relay's own CPU per streamed answer (issue 50, part 2): the edge bench's 30-chunk chat
//! answer read by the OpenAI adapter and written by the chat door, in process and with no
//! socket, so a change to the stream's path shows without the edge bench's noise. Three ways
//! an answer is read: relayed alone (a chat client's stream), relayed with the canonical events
//! read beside it (a JSON check or a shadow reads the text), and read into canonical events
//! only (the chat door writes its own chunks, as for an upstream of another wire).
//!
//! `cargo bench --bench relay`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use futures::StreamExt;
use spillway::adapter::wire::openai::stream::events_of;
use spillway::api::doors::chat_frames;
use spillway::canonical::Relaying;

/// The edge bench's SSE answer (benches/edge.sh): a role chunk, 27 words, the finish, the usage.
fn answer() -> bytes::Bytes {
    let chunk = |choices: &str| {
        format!("data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1764547200,\"model\":\"bench\",\"choices\":[{choices}]}}\n\n")
    };
    let mut sse = chunk(r#"{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}"#);
    let words = "The printer on floor three is jammed again and a technician is on the way so it should be back within the hour thank you for your";
    for word in words.split(' ') {
        sse += &chunk(&format!(r#"{{"index":0,"delta":{{"content":" {word}"}},"finish_reason":null}}"#));
    }
    sse += &chunk(r#"{"index":0,"delta":{},"finish_reason":"stop"}"#);
    sse += "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1764547200,\"model\":\"bench\",\"choices\":[],\"usage\":{\"prompt_tokens\":24,\"completion_tokens\":27,\"total_tokens\":51}}\n\n";
    sse += "data: [DONE]\n\n";
    assert_eq!(sse.matches("data: {").count(), 30);
    sse.into()
}

fn bench(c: &mut Criterion) {
    let sse = answer();
    let mut group = c.benchmark_group("relay");
    for (name, relaying) in
        [("alone", Relaying::Alone), ("with_events", Relaying::WithEvents), ("canonical", Relaying::Off)]
    {
        let written = || {
            futures::executor::block_on(
                chat_frames(events_of(sse.clone(), relaying))
                    .fold(0, |n, frame| async move { n + frame.unwrap().len() }),
            )
        };
        assert!(written() > 1000, "{name}: the answer is written");
        group.bench_function(format!("30_chunks/{name}"), |b| b.iter(|| black_box(written())));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
