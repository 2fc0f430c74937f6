//! The Grafana dashboard (`helm/spillway/files/grafana-dashboard.json`) works against a real
//! Prometheus server scraping a running Spillway: the JSON has the shape Grafana needs (unique
//! panel ids, titles, grid positions, the `${datasource}` variable on every panel and target, a
//! `task` variable), every metric it names is one Spillway registers, and every panel's PromQL,
//! with Grafana's variables substituted, parses, evaluates and returns series while traffic flows
//! (locally served, failed over from a failing hosted backend, spilled and shed). The few panels
//! that cannot have data in this setup are listed, with why, and must come back empty instead.

use crate::common;

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{body, router, sim};
use serde_json::Value;
use spillway::sim::SimKind;

const DASHBOARD: &str = include_str!("../../helm/spillway/files/grafana-dashboard.json");
/// Where every family is registered: a panel may only name metrics defined here.
const METRICS_SRC: [&str; 5] = [
    include_str!("../../src/metrics/families.rs"),
    include_str!("../../src/metrics/mod.rs"),
    include_str!("../../src/metrics/edge.rs"),
    include_str!("../../src/metrics/queue.rs"),
    include_str!("../../src/metrics/unserved.rs"),
];

/// Panels (by title) that legitimately have no data in this setup; their queries must still
/// succeed, and must come back empty (so the list cannot go stale).
const NO_DATA_HERE: &[(&str, &str)] = &[(
    "GPU utilisation",
    "spillway_gpu_utilization_ratio comes from the NVML agent beside each vLLM node; the simulated \
     node has none, so the family has no series",
)];

/// Grafana's variables as the queries see them, longest names first. `$task` is used with `=~`
/// and its "All" value is `.*`; the rate interval is at least four scrapes (1 s here).
const SUBSTITUTIONS: &[(&str, &str)] = &[
    ("${__rate_interval}", "30s"),
    ("$__rate_interval", "30s"),
    ("${__interval}", "15s"),
    ("$__interval_ms", "15000"),
    ("$__interval", "15s"),
    ("${__range}", "5m"),
    ("$__range_s", "300"),
    ("$__range_ms", "300000"),
    ("$__range", "5m"),
    ("${task:regex}", ".*"),
    ("${task}", ".*"),
    ("$task", ".*"),
];

fn substitute(expr: &str) -> String {
    let out = SUBSTITUTIONS.iter().fold(expr.to_string(), |e, (var, value)| e.replace(var, value));
    assert!(!out.contains('$'), "a Grafana variable the test does not know is left in: {out}");
    out
}

/// Every panel, rows' nested panels included, in order.
fn all_panels(panels: &[Value], out: &mut Vec<Value>) {
    for p in panels {
        out.push(p.clone());
        if let Some(nested) = p["panels"].as_array() {
            all_panels(nested, out);
        }
    }
}

/// The `spillway_*` metric names an expression uses.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("spillway_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Whether `src/metrics/` registers `name`, or the histogram it is a series of.
fn registered(name: &str) -> bool {
    let quoted = |n: &str| METRICS_SRC.iter().any(|src| src.contains(&format!("\"{n}\"")));
    quoted(name) || ["_bucket", "_count", "_sum"].iter().any(|s| name.strip_suffix(s).is_some_and(quoted))
}

fn check_shape(dash: &Value, panels: &[Value]) {
    assert_eq!(dash["uid"], "spillway");
    assert_eq!(dash["title"], "Spillway");
    assert!(dash["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "schemaVersion");
    let vars = dash["templating"]["list"].as_array().expect("templating.list");
    let var =
        |name: &str| vars.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("variable {name}"));
    let ds = var("datasource");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    let task = var("task");
    assert_eq!(task["type"], "query");
    assert_eq!(task["datasource"]["uid"], "${datasource}");
    let query = task["query"]["query"].as_str().or(task["query"].as_str()).unwrap_or_default();
    assert_eq!(query, "label_values(spillway_requests_total, task)");
    assert_eq!(task["multi"], true);
    assert_eq!(task["includeAll"], true);
    assert_eq!(task["allValue"], ".*", "the panels use task=~\"$task\"");

    let (mut ids, mut titles) = (HashSet::new(), HashSet::new());
    let mut boxes: Vec<(&str, [u64; 4])> = Vec::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or_default();
        assert!(!title.trim().is_empty(), "a panel without a title: {p}");
        let id = p["id"].as_u64().unwrap_or_else(|| panic!("{title}: no numeric id"));
        assert!(ids.insert(id), "{title}: panel id {id} is used twice");
        assert!(titles.insert(title), "title {title:?} is used twice (the allow-list goes by title)");
        let g = &p["gridPos"];
        let [h, w, x, y] = ["h", "w", "x", "y"]
            .map(|k| g[k].as_u64().unwrap_or_else(|| panic!("{title}: gridPos.{k} missing or not a number")));
        assert!(h > 0 && w > 0 && x + w <= 24, "{title}: gridPos {g} outside the 24-column grid");
        for (other, [ox, oy, ow, oh]) in &boxes {
            let apart = x + w <= *ox || ox + ow <= x || y + h <= *oy || oy + oh <= y;
            assert!(apart, "{title}: gridPos {g} overlaps {other:?}");
        }
        boxes.push((title, [x, y, w, h]));
        if p["type"] == "row" {
            assert!(p.get("targets").is_none(), "{title}: a row has no queries");
            continue;
        }
        assert!(p["type"].as_str().is_some_and(|t| !t.is_empty()), "{title}: no type");
        assert_eq!(p["datasource"]["type"], "prometheus", "{title}: datasource type");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}: datasource uid");
        let targets = p["targets"].as_array().filter(|t| !t.is_empty());
        let targets = targets.unwrap_or_else(|| panic!("{title}: no targets"));
        let mut refs = HashSet::new();
        for t in targets {
            assert!(t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()), "{title}: target without expr");
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}: target datasource uid");
            let r = t["refId"].as_str().unwrap_or_else(|| panic!("{title}: target without refId"));
            assert!(refs.insert(r.to_string()), "{title}: refId {r} twice");
            for name in metric_names(t["expr"].as_str().unwrap()) {
                assert!(registered(&name), "{title}: {name} is not a metric Spillway exports");
            }
        }
    }
    for (title, _) in NO_DATA_HERE {
        assert!(
            panels.iter().any(|p| p["title"] == *title),
            "allow-listed panel {title:?} is not on the board"
        );
    }
}

/// A Prometheus server in a temporary directory, killed (and the directory removed) on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Prometheus {
    /// Start one scraping `target` (host:port) every second.
    fn start(target: &str) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("spillway-grafana-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n\
             \x20 - job_name: spillway\n\
             \x20   metrics_path: /metrics\n\
             \x20   static_configs: [{{targets: [\"{target}\"]}}]\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        // Prometheus logs the address it was given, not the one it bound, so port 0 cannot be
        // read back: the one port here found by bind-and-drop.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian package prometheus; .ci/run installs it)");
        Prometheus { child, dir, url: format!("http://127.0.0.1:{port}") }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    fn fail(&self, why: &str) -> ! {
        panic!("{why}\n--- prometheus log ---\n{}", self.log());
    }

    async fn wait_ready(&mut self, client: &reqwest::Client) {
        let ready = format!("{}/-/ready", self.url);
        let (child, ready) = (&mut self.child, &ready);
        let up = common::poll_until(Duration::from_secs(30), || {
            let exited = child.try_wait().ok().flatten();
            async move {
                if let Some(status) = exited {
                    return Ok(Err(format!("prometheus exited: {status}")));
                }
                match client.get(ready).send().await {
                    Ok(r) if r.status().is_success() => Ok(Ok(())),
                    Ok(r) => Err(format!("{ready}: {}", r.status())),
                    Err(e) => Err(format!("{ready}: {e}")),
                }
            }
        })
        .await;
        match up {
            Ok(Ok(())) => {}
            Ok(Err(exited)) => self.fail(&exited),
            Err(seen) => self.fail(&format!("prometheus never became ready: {seen}")),
        }
    }

    /// An instant query at now: the whole API answer (`status`, `data` or `error`).
    async fn query(&self, client: &reqwest::Client, expr: &str) -> Value {
        let resp = client.get(format!("{}/api/v1/query", self.url)).query(&[("query", expr)]).send().await;
        let resp = resp.unwrap_or_else(|e| self.fail(&format!("query {expr}: {e}")));
        // Parse and evaluation errors come back as 400/422 with a JSON body too.
        resp.json().await.unwrap_or_else(|e| self.fail(&format!("query {expr}: not JSON: {e}")))
    }

    /// Poll `expr` until it returns at least `min` series whose first value is at least `at_least`.
    async fn wait_for(&self, client: &reqwest::Client, expr: &str, at_least: f64) {
        let reached = common::poll_until(Duration::from_secs(30), || async {
            let v = self.query(client, expr).await;
            let ok = v["data"]["result"].as_array().is_some_and(|r| {
                !r.is_empty()
                    && r.iter().all(|s| {
                        s["value"][1]
                            .as_str()
                            .and_then(|x| x.parse::<f64>().ok())
                            .is_some_and(|x| x >= at_least)
                    })
            });
            if ok {
                Ok(())
            } else {
                Err(v)
            }
        })
        .await;
        if let Err(v) = reached {
            self.fail(&format!("{expr} never reached {at_least}: last answer {v}"));
        }
    }
}

/// Background request loops, aborted on drop (before the router they call is dropped).
struct Traffic(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Traffic {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

fn traffic(url: &str, tasks: &[&str]) -> Traffic {
    let client = reqwest::Client::new();
    Traffic(
        tasks
            .iter()
            .map(|task| {
                let (client, url, body) =
                    (client.clone(), format!("{url}/v1/chat/completions"), body(task, false));
                tokio::spawn(async move {
                    loop {
                        // Outcomes vary on purpose (429 for the shed task); the metrics say what happened.
                        if let Ok(resp) = client.post(&url).json(&body).send().await {
                            let _ = resp.bytes().await;
                        }
                        // A real sleep: it paces the background traffic, it waits for nothing.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                })
            })
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_panel_queries_a_real_prometheus_scraping_spillway() {
    let started = Instant::now();
    let dash: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is valid JSON");
    let mut panels = Vec::new();
    all_panels(dash["panels"].as_array().expect("panels"), &mut panels);
    check_shape(&dash, &panels);

    let node = sim(SimKind::Vllm, "llama", |_| {}).await;
    let broken = sim(SimKind::OpenAi, "gpt", |a| a.error_rate = 1.0).await;
    let hosted = sim(SimKind::Anthropic, "claude", |_| {}).await;
    // local: served by the pool. hosted: `flaky` fails every call, so requests fail over to
    // claude (failovers, provider failures by status). spill: the pool is planned first but a
    // margin of 0.999 leaves a 2 ms TTFT budget no node meets, so it spills (reason ttft) to
    // claude (hosted cost). shed: the same with no hosted backend behind it, so it is shed (429).
    // The local task is gated (not required), so the gate panel has series.
    let golden = std::env::temp_dir().join(format!("spillway-grafana-golden-{}.jsonl", std::process::id()));
    std::fs::write(&golden, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"grader\": {\"type\": \"regex\", \"pattern\": \".\"}}\n")
        .unwrap();
    let yaml = format!(
        r#"
backends:
  - {{name: pool, kind: vllm, endpoints: ["{node}"], model: llama, max_running: 8}}
  - {{name: flaky, kind: openai, base_url: "{broken}/v1", model: gpt, price: {{input_per_mtok: 1, output_per_mtok: 2}}}}
  - {{name: claude, kind: anthropic, base_url: "{hosted}", model: claude, price: {{input_per_mtok: 3, output_per_mtok: 15}}}}
tasks:
  - {{name: local, backends: [pool], slo: {{ttft_ms: 2000}}, gate: {{golden: "{golden}", required: false}}}}
  - {{name: hosted, backends: [flaky, claude], strategy: priority, slo: {{ttft_ms: 2000, objective: 0.95}}}}
  - {{name: spill, backends: [pool, claude], slo: {{ttft_ms: 2000, margin: 0.999}}}}
  - {{name: shed, backends: [pool], slo: {{ttft_ms: 2000, margin: 0.999}}}}
dispatch: {{backoff_base_ms: 1, backoff_max_ms: 2}}
"#,
        node = node.base_url(),
        golden = golden.display(),
        broken = broken.base_url(),
        hosted = hosted.base_url(),
    );
    let r = router(&yaml, &[]).await;
    let _traffic = traffic(&r.url, &["local", "hosted", "spill", "shed"]);

    let target = r.url.strip_prefix("http://").expect("router URL is http://host:port");
    let mut prom = Prometheus::start(target);
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    prom.wait_ready(&client).await;
    prom.wait_for(&client, r#"up{job="spillway"}"#, 1.0).await;
    // Enough scrapes that rate() over the substituted interval has several samples per series.
    prom.wait_for(&client, r#"count_over_time(up{job="spillway"}[1m])"#, 5.0).await;
    eprintln!("grafana: prometheus {} scraping {target}, ready after {:.1?}", prom.url, started.elapsed());

    // The task variable's query finds the tasks.
    let values: Value = client
        .get(format!("{}/api/v1/label/task/values", prom.url))
        .query(&[("match[]", "spillway_requests_total")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tasks: BTreeSet<&str> = values["data"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        tasks.is_superset(&["hosted", "local", "shed", "spill"].into()),
        "task variable values: {values}"
    );
    eprintln!("grafana: $task values: {tasks:?}");

    // Series appear at the first request of their kind and need two scrapes for rate(): retry
    // each query (not one fixed sleep) up to a deadline.
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut checked = 0;
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap();
        let allowed = NO_DATA_HERE.iter().find(|(t, _)| *t == title).map(|(_, why)| *why);
        for t in p["targets"].as_array().unwrap() {
            let expr = substitute(t["expr"].as_str().unwrap());
            let (prom, client, expr) = (&prom, &client, &expr);
            let polled =
                common::poll_until(deadline.saturating_duration_since(Instant::now()), || async move {
                    let answer = prom.query(client, expr).await;
                    assert_eq!(
                        answer["status"], "success",
                        "panel {title:?}, query {expr}: Prometheus refused it: {answer}"
                    );
                    let empty = answer["data"]["result"].as_array().is_none_or(Vec::is_empty);
                    if !empty || allowed.is_some() {
                        Ok(answer)
                    } else {
                        Err(answer)
                    }
                })
                .await;
            // Still empty at the deadline: the last answer is checked (and fails) below.
            let answer = match polled {
                Ok(answer) => answer,
                Err(_) => prom.query(client, expr).await,
            };
            let result = answer["data"]["result"].as_array().cloned().unwrap_or_default();
            match allowed {
                Some(why) => {
                    assert!(
                        result.is_empty(),
                        "panel {title:?} is allow-listed as empty ({why}) but has data"
                    );
                    eprintln!("grafana: ok [{title}] {expr} -> no data, as expected: {why}");
                }
                None => {
                    assert!(
                        !result.is_empty(),
                        "panel {title:?}, query {expr}: no series\n--- /metrics ---\n{}",
                        reqwest::get(format!("{}/metrics", r.url)).await.unwrap().text().await.unwrap()
                    );
                    let first = &result[0];
                    eprintln!(
                        "grafana: ok [{title}] {expr} -> {} series, e.g. {} = {}",
                        result.len(),
                        first["metric"],
                        first["value"][1]
                    );
                }
            }
            checked += 1;
        }
    }
    eprintln!(
        "grafana: {checked} queries of {} panels checked in {:.1?}",
        panels.iter().filter(|p| p["type"] != "row").count(),
        started.elapsed()
    );
}
