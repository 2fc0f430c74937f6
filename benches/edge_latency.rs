//! Latency a reverse proxy adds at low concurrency (issue "Latency at one connection": JSON p99
//! added ≤ 150 µs, stream first-token p99 added ≤ 300 µs, ≤ 20 µs added per frame with 512 streams
//! paced at 20 ms per frame, none lost). wrk measures throughput; this measures what a client waits.
//!
//! `cargo bench --bench edge_latency -- serve --listen 127.0.0.1:PORT [--pace-ms N]` runs an
//! OpenAI-style upstream (fixed chat completion, or SSE frames stamped with the wall clock).
//! `cargo bench --bench edge_latency -- measure --target NAME=URL,MODEL [--target ...]
//! --mode json|first|frames [--n N] [--concurrency C] [--frames F] [--rounds R]` measures the
//! first target (the upstream directly) and every other target (proxies in front of it) in
//! interleaved rounds, and prints a Markdown table of p50/p99 and what each proxy adds.
//! `frames` expects the upstream to pace its frames (`serve --pace-ms 20`). `--body FILE` sends
//! that chat request (an agent's turn: `benches/agent_turn.py`) in place of the one-line
//! question, with each target's model, the mode's `stream` and the frames' `max_tokens` set.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use std::{convert::Infallible, str::FromStr, sync::Arc};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::header::{CONTENT_TYPE, HOST};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

const USAGE: &str = "usage: edge_latency serve --listen ADDR [--pace-ms N]
       edge_latency measure --target NAME=URL,MODEL [--target NAME=URL,MODEL ...] \
[--mode json|first|frames] [--n N] [--concurrency C] [--frames F] [--rounds R] [--body FILE]";
const COMPLETION: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1764547200,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"The printer on floor three is jammed again."},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":9,"total_tokens":33}}"#;
const CHUNK: &str =
    r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764547200,"model":"bench","choices":"#;

/// Frames of each stream in `frames` mode not sampled (at 20 ms a frame, its first 200 ms).
const WARM_FRAMES: usize = 10;

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("edge_latency: {message}");
    std::process::exit(1)
}

fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The upstream's answer bodies: a fixed JSON body or a stream of SSE frames.
type Body = UnsyncBoxBody<Bytes, Infallible>;

fn answer(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let response = Response::builder().status(status).header(CONTENT_TYPE, content_type).body(body);
    response.unwrap_or_else(|e| fail(e))
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error",
        "param": null, "code": null}});
    answer(status, "application/json", Full::new(Bytes::from(body.to_string())).boxed_unsync())
}

async fn handle(request: Request<Incoming>, pace: Duration) -> Result<Response<Body>, Infallible> {
    // The peer registers a worker only once its health route answers.
    if request.method() == Method::GET && request.uri().path() == "/health" {
        return Ok(answer(StatusCode::OK, "text/plain", Full::new(Bytes::new()).boxed_unsync()));
    }
    if request.method() != Method::POST || request.uri().path() != "/v1/chat/completions" {
        return Ok(error(StatusCode::NOT_FOUND, "only POST /v1/chat/completions is served"));
    }
    let body = request.into_body().collect().await.ok();
    let parsed = body.and_then(|b| serde_json::from_slice::<Value>(&b.to_bytes()).ok());
    let Some(body) = parsed.filter(Value::is_object) else {
        return Ok(error(StatusCode::BAD_REQUEST, "the body is not a JSON object"));
    };
    if !body.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let json = Full::new(Bytes::from_static(COMPLETION.as_bytes())).boxed_unsync();
        return Ok(answer(StatusCode::OK, "application/json", json));
    }
    let max_tokens = body.get("max_tokens").or_else(|| body.get("max_completion_tokens"));
    let frames = max_tokens.and_then(Value::as_u64).unwrap_or(30).min(1000);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(produce(tx, frames, pace));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|bytes| (Ok(Frame::data(bytes)), rx))
    });
    Ok(answer(StatusCode::OK, "text/event-stream", StreamBody::new(stream).boxed_unsync()))
}

/// Sends `frames` content frames, each stamped `t<NANOS>` just before it is handed to the body.
async fn produce(tx: tokio::sync::mpsc::Sender<Bytes>, frames: u64, pace: Duration) {
    // The first tick is immediate; pace 0 skips the interval (whose period must not be 0).
    let mut interval = tokio::time::interval(pace.max(Duration::from_millis(1)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..frames {
        if !pace.is_zero() {
            interval.tick().await;
        }
        let role = if i == 0 { r#""role":"assistant","# } else { "" };
        let delta =
            format!(r#"{{"index":0,"delta":{{{role}"content":"t{}"}},"finish_reason":null}}"#, now_nanos());
        if tx.send(Bytes::from(format!("data: {CHUNK}[{delta}]}}\n\n"))).await.is_err() {
            return;
        }
    }
    let stop = format!(r#"data: {CHUNK}[{{"index":0,"delta":{{}},"finish_reason":"stop"}}]}}"#);
    let total = 24 + frames;
    let usage = r#""usage":{"prompt_tokens":24,"completion_tokens":"#;
    let usage = format!(r#"data: {CHUNK}[],{usage}{frames},"total_tokens":{total}}}}}"#);
    let _ = tx.send(Bytes::from(format!("{stop}\n\n{usage}\n\ndata: [DONE]\n\n"))).await;
}

async fn serve(listen: String, pace: Duration) {
    let listener = TcpListener::bind(&listen).await.unwrap_or_else(|e| fail(format!("bind {listen}: {e}")));
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                eprintln!("edge_latency: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| handle(request, pace));
            let _ =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), service).await;
        });
    }
}

/// A path to measure: the upstream directly (the first) or a proxy in front of it.
struct Target {
    name: String,
    addr: String,
    path: String,
    model: String,
}

/// `NAME=http://HOST:PORT/PATH,MODEL`.
fn parse_target(spec: &str) -> Option<Target> {
    let (name, rest) = spec.split_once('=')?;
    let (url, model) = rest.rsplit_once(',')?;
    let uri: Uri = url.parse().ok()?;
    let authority = uri.authority().filter(|_| uri.scheme_str() == Some("http"))?;
    Some(Target {
        name: name.to_string(),
        addr: format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80)),
        path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        model: model.to_string(),
    })
}

type Sender = SendRequest<Full<Bytes>>;

async fn connect(target: &Target) -> Result<Sender, String> {
    let failed = |e: &dyn std::fmt::Display| format!("connect {}: {e}", target.name);
    let tcp = TcpStream::connect(&target.addr).await.map_err(|e| failed(&e))?;
    tcp.set_nodelay(true).map_err(|e| failed(&e))?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| failed(&e))?;
    tokio::spawn(connection);
    Ok(sender)
}

fn request(target: &Target, body: &Bytes) -> Request<Full<Bytes>> {
    let request = Request::post(&target.path).header(HOST, &target.addr);
    let request = request.header(CONTENT_TYPE, "application/json").body(Full::new(body.clone()));
    request.unwrap_or_else(|e| fail(format!("{}: {e}", target.name)))
}

/// The value of an SSE event's `data:` line.
fn data_of(event: &[u8]) -> Option<&[u8]> {
    event.split(|&b| b == b'\n').find_map(|line| line.strip_prefix(b"data:")).map(<[u8]>::trim_ascii)
}

/// The string value of the first `"content":` key (the relay may re-serialise the JSON).
fn content_of(data: &[u8]) -> Option<&[u8]> {
    let rest = data[find(data, b"\"content\":")? + 10..].trim_ascii_start().strip_prefix(b"\"")?;
    Some(&rest[..find(rest, b"\"")?])
}

#[derive(Default)]
struct Streamed {
    first_us: Option<u64>,
    lag_ns: Vec<u64>,
    done: bool,
}

/// One streamed call: when the first token arrived, each stamped frame's transit time, `[DONE]`.
async fn stream_once(sender: &mut Sender, request: Request<Full<Bytes>>) -> Streamed {
    let (mut out, start) = (Streamed::default(), Instant::now());
    let response = sender.send_request(request).await.ok().filter(|r| r.status().is_success());
    let Some(response) = response else { return out };
    let (mut body, mut pending) = (response.into_body(), Vec::new());
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(chunk) = frame.into_data() else { continue };
        let (arrived, elapsed) = (now_nanos(), start.elapsed());
        pending.extend(chunk.iter().filter(|&&b| b != b'\r'));
        let mut used = 0;
        while let Some(end) = find(&pending[used..], b"\n\n") {
            let data = data_of(&pending[used..used + end]).unwrap_or_default();
            used += end + 2;
            out.done |= data == b"[DONE]";
            let Some(content) = data.starts_with(b"{").then(|| content_of(data)).flatten() else { continue };
            if !content.is_empty() && out.first_us.is_none() {
                out.first_us = Some(elapsed.as_micros() as u64);
            }
            let stamp = content.strip_prefix(b"t").and_then(|d| std::str::from_utf8(d).ok()?.parse().ok());
            out.lag_ns.extend(stamp.map(|nanos: u64| arrived.saturating_sub(nanos)));
        }
        pending.drain(..used);
    }
    out
}

async fn json_once(sender: &mut Sender, request: Request<Full<Bytes>>) -> Option<u64> {
    let start = Instant::now();
    let response = sender.send_request(request).await.ok()?;
    let ok = response.status().is_success();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    let micros = start.elapsed().as_micros() as u64;
    (ok && find(&body, br#""finish_reason":"stop""#).is_some()).then_some(micros)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Json,
    First,
    Frames,
}

/// What every request of a measure looks like.
struct Shape {
    mode: Mode,
    frames: u64,
    /// The chat request; its model, stream and max_tokens are set per target and mode.
    body: Value,
}

/// One run against one target, one kept-alive connection per concurrent client, all clients
/// starting together: (samples, lost, streams that did not end with `[DONE]`).
async fn run(target: &Arc<Target>, shape: &Shape, n: usize, c: usize) -> (Vec<u64>, u64, u64) {
    let (mode, frames) = (shape.mode, shape.frames);
    let mut body = shape.body.clone();
    body["model"] = target.model.clone().into();
    body["stream"] = (mode != Mode::Json).into();
    body["max_tokens"] = frames.into();
    let body = Bytes::from(body.to_string());
    let barrier = Arc::new(tokio::sync::Barrier::new(c));
    let mut tasks = Vec::with_capacity(c);
    for i in 0..c {
        let (target, body, barrier) = (target.clone(), body.clone(), barrier.clone());
        let calls = if mode == Mode::Frames { 1 } else { n / c + usize::from(i < n % c) };
        tasks.push(tokio::spawn(async move {
            let connected = connect(&target).await;
            barrier.wait().await;
            let (mut sender, mut out) = (connected?, (Vec::new(), 0, 0));
            for _ in 0..calls {
                if sender.ready().await.is_err() {
                    sender = connect(&target).await?;
                    sender.ready().await.map_err(|e| format!("{}: not ready: {e}", target.name))?;
                }
                let request = request(&target, &body);
                let sample = match mode {
                    Mode::Json => json_once(&mut sender, request).await,
                    Mode::First => {
                        let streamed = stream_once(&mut sender, request).await;
                        streamed.first_us.filter(|_| streamed.done)
                    }
                    Mode::Frames => {
                        let streamed = stream_once(&mut sender, request).await;
                        out.1 += frames.saturating_sub(streamed.lag_ns.len() as u64);
                        out.2 += u64::from(!streamed.done);
                        // Frames once every stream is open: the first frames wait behind the
                        // setup of the streams opening at once (`first` measures one alone).
                        out.0.extend(streamed.lag_ns.into_iter().skip(WARM_FRAMES));
                        continue;
                    }
                };
                out.1 += u64::from(sample.is_none());
                out.0.extend(sample);
            }
            Ok::<_, String>(out)
        }));
    }
    let mut out = (Vec::new(), 0, 0);
    for task in tasks {
        let (samples, lost, undone) = task.await.unwrap_or_else(|e| fail(e)).unwrap_or_else(|e| fail(e));
        (out.1, out.2) = (out.1 + lost, out.2 + undone);
        out.0.extend(samples);
    }
    out
}

/// Warm-up, then `rounds` rounds of every target in turn, pooled per target, printed as a table.
async fn measure(targets: &[Arc<Target>], shape: &Shape, n: usize, c: usize, rounds: usize) {
    let mode = shape.mode;
    for target in targets.iter().filter(|_| mode != Mode::Frames) {
        run(target, shape, 200, c).await; // warm-up, not recorded
    }
    let histogram = || Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap_or_else(|e| fail(e));
    let mut pooled: Vec<_> = targets.iter().map(|_| (histogram(), 0, 0)).collect();
    for _ in 0..rounds {
        for (target, (histogram, lost, undone)) in targets.iter().zip(&mut pooled) {
            let (samples, l, u) = run(target, shape, n, c).await;
            samples.into_iter().for_each(|v| histogram.saturating_record(v));
            (*lost, *undone) = (*lost + l, *undone + u);
        }
    }
    // json and first record µs; frames records ns, printed as µs with one decimal.
    let (scale, d) = if mode == Mode::Frames { (1000.0, 1) } else { (1.0, 0) };
    let at = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / scale;
    println!("| path | samples | p50 µs | p99 µs | added p50 µs | added p99 µs | lost |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (i, (target, (h, lost, _))) in targets.iter().zip(&pooled).enumerate() {
        let added =
            |q| if i == 0 { "—".into() } else { format!("{:+.*}", d, at(h, q) - at(&pooled[0].0, q)) };
        let (p50, p99, a50, a99) = (at(h, 0.5), at(h, 0.99), added(0.5), added(0.99));
        println!("| {} | {} | {p50:.d$} | {p99:.d$} | {a50} | {a99} | {lost} |", target.name, h.len());
    }
    if mode == Mode::Frames {
        let undone: Vec<_> =
            targets.iter().zip(&pooled).map(|(t, p)| format!("{} {}", t.name, p.2)).collect();
        println!("\nstreams not ended with [DONE]: {}", undone.join(", "));
    }
}

/// The last value given for `--name`, or `default`.
fn flag<T: FromStr>(flags: &[(String, String)], name: &str, default: T) -> T {
    let Some((_, value)) = flags.iter().rev().find(|(f, _)| f == name) else { return default };
    value.parse().unwrap_or_else(|_| fail(format!("--{name} {value}: not valid\n{USAGE}")))
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let command = args.next().unwrap_or_else(|| fail(USAGE));
    let known = match command.as_str() {
        "serve" => "listen pace-ms",
        "measure" => "target mode n concurrency frames rounds body",
        _ => fail(USAGE),
    };
    let mut flags = Vec::new();
    while let Some(arg) = args.next() {
        let name = arg.strip_prefix("--").filter(|name| known.split(' ').any(|k| k == *name));
        let Some(name) = name else { fail(format!("unexpected {arg} for {command}\n{USAGE}")) };
        let value = args.next().unwrap_or_else(|| fail(format!("--{name} needs a value\n{USAGE}")));
        flags.push((name.to_string(), value));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build();
    let runtime = runtime.unwrap_or_else(|e| fail(e));
    if command == "serve" {
        let listen = flags.iter().find(|(f, _)| f == "listen").map(|(_, listen)| listen.clone());
        let listen = listen.unwrap_or_else(|| fail(format!("serve needs --listen\n{USAGE}")));
        return runtime.block_on(serve(listen, Duration::from_millis(flag(&flags, "pace-ms", 0))));
    }
    let target = |t| parse_target(t).unwrap_or_else(|| fail(format!("--target {t}: want NAME=URL,MODEL")));
    let targets: Vec<_> =
        flags.iter().filter(|(f, _)| f == "target").map(|(_, t)| Arc::new(target(t))).collect();
    let name = flag(&flags, "mode", "json".to_string());
    let modes = [("json", Mode::Json), ("first", Mode::First), ("frames", Mode::Frames)];
    let mode = modes.iter().find(|(m, _)| *m == name).map(|(_, mode)| *mode);
    let mode = mode.unwrap_or_else(|| fail(format!("--mode {name}: want json, first or frames\n{USAGE}")));
    let (frames_mode, n, rounds) = (mode == Mode::Frames, flag(&flags, "n", 2000), flag(&flags, "rounds", 3));
    let concurrency = flag(&flags, "concurrency", if frames_mode { 512 } else { 1 });
    let frames = flag(&flags, "frames", if frames_mode { 50 } else { 4 });
    if targets.is_empty() || concurrency == 0 || rounds == 0 {
        fail(format!("measure needs a --target, and --concurrency and --rounds above 0\n{USAGE}"));
    }
    let what = match mode {
        Mode::Frames => format!("{concurrency} streams × {frames} frames (each stream's first {WARM_FRAMES} frames not sampled: the streams opening)"),
        Mode::First => format!("n {n} at concurrency {concurrency}, {frames} frames per stream"),
        Mode::Json => format!("n {n} at concurrency {concurrency}"),
    };
    let body = match flags.iter().rev().find(|(f, _)| f == "body") {
        Some((_, path)) => {
            let text = std::fs::read(path).unwrap_or_else(|e| fail(format!("--body {path}: {e}")));
            let body: Value =
                serde_json::from_slice(&text).unwrap_or_else(|e| fail(format!("--body {path}: {e}")));
            println!("mode {name}, body {path} ({} bytes), {rounds} rounds of {what}\n", text.len());
            body
        }
        None => {
            println!("mode {name}, {rounds} rounds of {what}\n");
            serde_json::json!({"messages": [{"role": "user", "content": "Is the printer on floor three working?"}]})
        }
    };
    runtime.block_on(measure(&targets, &Shape { mode, frames, body }, n, concurrency, rounds));
}
