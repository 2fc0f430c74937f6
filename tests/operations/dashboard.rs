//! `/dashboard` in a real browser: a router over a small vLLM pool and a hosted backend, with
//! traffic from issued keys of two teams flowing to two of its three tasks, checked by headless
//! Chromium driven from Node (`tests/browser/dashboard_check.mjs`, with `playwright-core`): no
//! console errors or warnings, a card for every configured task (the idle one too), the request
//! count rising, charts and tables drawn, and the top spenders (behind the admin token) showing
//! both teams and their keys with no budget yet, and the batch panel listing a job with its
//! plan beside each pool's occupancy by priority. The script leaves a full-page screenshot in `target/dashboard-screenshot.png`.
//!
//! Needs Node 20 + npm and Chromium (Debian package `chromium`, or `$CHROMIUM`); the npm
//! dependencies are installed into `tests/browser/node_modules` with `npm ci` when missing.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{admin_json, body, get_json, router, sim, wait_until};
use spillway::sim::SimKind;

/// `tests/browser`, with its npm dependencies installed.
fn browser_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if !dir.join("node_modules/playwright-core").is_dir() {
        let out = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .expect("npm (Node 20) is needed to install tests/browser's dependencies");
        assert!(
            out.status.success(),
            "npm ci in tests/browser failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

fn chromium() -> String {
    let path = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string());
    assert!(
        Path::new(&path).exists(),
        "no Chromium at {path}: install the Debian package chromium (.ci/run does) or set CHROMIUM"
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_renders_live_traffic_in_chromium() {
    let dir = browser_dir();
    let chromium = chromium();
    let a = sim(SimKind::Vllm, "llama", |a| a.max_num_seqs = 4).await;
    let b = sim(SimKind::Vllm, "llama", |a| a.max_num_seqs = 4).await;
    let hosted = sim(SimKind::Anthropic, "claude", |a| a.ttft_ms = 120).await;
    let golden = std::env::temp_dir().join(format!("spillway-dash-golden-{}.jsonl", std::process::id()));
    std::fs::write(
        &golden,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Summarise: VPN drops.\"}], \"grader\": {\"type\": \"regex\", \"pattern\": \"[a-z]\"}}\n",
    )
    .unwrap();
    let yaml = format!(
        r#"
admin_token_env: DASH_ADMIN
backends:
  - {{name: pool, kind: vllm, endpoints: ["{a}", "{b}"], model: llama, max_running: 2}}
  - {{name: claude, kind: anthropic, base_url: "{hosted}", model: claude, price: {{input_per_mtok: 3, output_per_mtok: 15}}}}
tasks:
  - {{name: chat, backends: [pool, claude], slo: {{ttft_ms: 500}}}}
  - {{name: summarize, backends: [claude], strategy: priority, slo: {{ttft_ms: 300, objective: 0.95}}, gate: {{golden: "{golden}", required: false}}}}
  - {{name: idle, backends: [pool], slo: {{ttft_ms: 1000}}}}
"#,
        a = a.base_url(),
        b = b.base_url(),
        hosted = hosted.base_url(),
        golden = golden.display(),
    );
    let r = router(&yaml, &[("DASH_ADMIN", "dash-admin")]).await;
    // The gate's standing shows per provider: run summarize's golden set on claude.
    let run: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/admin/gate/run", r.url))
        .bearer_auth("dash-admin")
        .json(&serde_json::json!({"task": "summarize", "backend": "claude"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["result"]["passed"], true, "{run}");

    // Two teams' keys, issued through the admin API (search has two, ads one).
    let mut secrets = Vec::new();
    for (name, team) in [("indexer", "search"), ("ranker", "search"), ("bidder", "ads")] {
        let created: serde_json::Value = reqwest::Client::new()
            .post(format!("{}/admin/keys", r.url))
            .bearer_auth("dash-admin")
            .json(&serde_json::json!({"name": name, "team": team}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        secrets.push(created["secret"].as_str().expect("a key is issued").to_string());
    }

    // Background traffic: a few clients in a loop, enough for the pool to spill now and then;
    // every key sends to both tasks (summarize is hosted, so every key spends).
    let traffic: Vec<_> = (0..6)
        .map(|i| {
            let url = r.url.clone();
            let key = secrets[i / 2].clone();
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                loop {
                    let task = if i % 2 == 0 { "chat" } else { "summarize" };
                    let send = client.post(format!("{url}/v1/chat/completions")).bearer_auth(&key);
                    let _ = send.json(&body(task, false)).send().await;
                    // A real sleep: it paces the background traffic, it waits for nothing.
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
            })
        })
        .collect();

    // The data the page draws, end to end from the real metric names, once the traffic has
    // reached the pool and the hosted backend and chat has a TTFT.
    let data = wait_until(Duration::from_secs(20), "local and hosted traffic on the dashboard", || async {
        let data = get_json(&r, "/dashboard/data").await;
        let counters = &data["counters"];
        let seen = counters["local_requests"].as_f64().is_some_and(|n| n > 0.0)
            && counters["hosted_requests"].as_f64().is_some_and(|n| n > 0.0)
            && data["tasks"][0]["p50_s"].as_f64().is_some_and(|p| p > 0.0);
        if seen {
            Ok(data)
        } else {
            Err(data)
        }
    })
    .await;
    let names: Vec<&str> =
        data["tasks"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["chat", "summarize", "idle"]);
    assert_eq!(data["nodes"].as_array().unwrap().len(), 2, "{}", data["nodes"]);
    let counters = &data["counters"];
    assert!(counters["local_requests"].as_f64().unwrap() > 0.0, "{counters}");
    assert!(counters["hosted_requests"].as_f64().unwrap() > 0.0, "{counters}");
    assert!(data["tasks"][0]["p50_s"].as_f64().is_some_and(|p| p > 0.0), "{}", data["tasks"][0]);
    assert!(data["tasks"][2]["p50_s"].is_null(), "the idle task has no TTFT yet");
    assert_eq!(data["backends"][1]["gate"], serde_json::json!({"summarize": "pass"}), "{}", data["backends"]);

    // Top spenders: once the ledger has both teams' spend, today's lists hold every issued key.
    let spenders = wait_until(Duration::from_secs(20), "both teams' spend in /admin/spenders", || async {
        let s = admin_json(&r.url, "/admin/spenders", "dash-admin").await;
        let today = &s["periods"][0];
        let spent = |t: &serde_json::Value| t["spend_usd"].as_str().is_some_and(|u| u != "0");
        let teams = today["teams"].as_array().map_or(0, |t| t.iter().filter(|t| spent(t)).count());
        let issued =
            today["keys"].as_array().map_or(0, |k| k.iter().filter(|k| k["name"].is_string()).count());
        if teams == 2 && issued == 3 {
            Ok(s)
        } else {
            Err(s)
        }
    })
    .await;
    let today = &spenders["periods"][0];
    assert_eq!((&today["period"], &spenders["periods"][1]["period"]), (&"today".into(), &"month".into()));
    let teams: Vec<&str> =
        today["teams"].as_array().unwrap().iter().map(|t| t["team"].as_str().unwrap()).collect();
    assert!(teams.contains(&"search") && teams.contains(&"ads"), "{today}");
    let search = today["teams"].as_array().unwrap().iter().find(|t| t["team"] == "search").unwrap();
    assert_eq!((&search["keys"], &search["limit_usd"]), (&2.into(), &serde_json::Value::Null), "{search}");
    let names: Vec<&str> =
        today["keys"].as_array().unwrap().iter().filter_map(|k| k["name"].as_str()).collect();
    assert_eq!(names.len(), 3, "issued keys are shown by name: {today}");
    let open = reqwest::get(format!("{}/admin/spenders", r.url)).await.unwrap();
    assert_eq!(open.status(), 401, "spend by key needs the admin token");

    // A batch job beside the traffic: the panel lists it with the runner's plan, and each pool's
    // occupancy by priority.
    let lines: Vec<String> = (0..20)
        .map(|i| {
            serde_json::json!({"custom_id": format!("r{i}"), "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "chat", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}})
            .to_string()
        })
        .collect();
    let (content_type, form) =
        spillway::batch::provider_api::file_form("batch", "in.jsonl", &lines.join("\n"));
    let client = reqwest::Client::new();
    let file: serde_json::Value = client
        .post(format!("{}/v1/files", r.url))
        .bearer_auth(&secrets[0])
        .header("content-type", content_type)
        .body(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let create = serde_json::json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let send = client.post(format!("{}/v1/batches", r.url)).bearer_auth(&secrets[0]).json(&create);
    let job: serde_json::Value = send.send().await.unwrap().json().await.unwrap();
    let id = job["id"].as_str().unwrap_or_else(|| panic!("a batch job: {job}")).to_string();
    let batch =
        wait_until(Duration::from_secs(20), "the batch job and its plan on the dashboard", || async {
            let data = get_json(&r, "/dashboard/data").await;
            let planned = data["batch"]["jobs"].as_array().is_some_and(|jobs| {
                jobs.iter().any(|j| j["id"] == id.as_str() && j["plan"]["route"].is_string())
            });
            if planned {
                Ok(data["batch"].clone())
            } else {
                Err(data["batch"].clone())
            }
        })
        .await;
    let shown = batch["jobs"].as_array().unwrap().iter().find(|j| j["id"] == id.as_str()).unwrap();
    assert_eq!(
        (&shown["total"], &shown["endpoint"]),
        (&20.into(), &"/v1/chat/completions".into()),
        "{shown}"
    );
    assert!(shown.get("owner").is_none(), "the page never shows a job's owner: {shown}");
    for priority in ["interactive", "standard", "batch"] {
        assert!(batch["occupancy"]["pool"][priority].is_number(), "{priority} occupancy of pool: {batch}");
    }
    assert!(batch["occupancy"].get("claude").is_none(), "only pools have occupancy: {batch}");

    let screenshot = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dashboard-screenshot.png");
    let _ = std::fs::remove_file(&screenshot);
    let run = tokio::process::Command::new("node")
        .arg(dir.join("dashboard_check.mjs"))
        .arg(&r.url)
        .arg(&screenshot)
        .arg("dash-admin")
        .env("CHROMIUM", &chromium)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the browser check took over two minutes")
        .expect("node (20) runs tests/browser/dashboard_check.mjs");
    for t in traffic {
        t.abort();
    }
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("dashboard_check.mjs:\n{stdout}{stderr}");
    assert!(out.status.success(), "the browser check failed ({}):\n{stdout}{stderr}", out.status);
    let png = std::fs::read(&screenshot).expect("the screenshot was saved");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a real screenshot: {} bytes", png.len());
}
