//! Issued client keys end to end: created through the admin API and through the `spillway keys`
//! binary, used on real requests beside a static key, limited to their tasks, rotated and
//! revoked (refused in every dialect's envelope, with one message for unknown, revoked and
//! expired keys), and a revocation through one router refused by a second router that shares
//! its PostgreSQL store within the refresh window.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{router, sim};
use serde_json::{json, Value};
use spillway::sim::SimKind;

const ADMIN: &str = "admin-token-for-keys";
const STATIC: &str = "static-client-key-1";
const BIN: &str = env!("CARGO_BIN_EXE_spillway");

/// A router config with two hosted tasks, a static key and the admin API; `ledger` names the
/// store (`None`: the harness gives it a fresh SQLite file).
fn yaml(hosted: &str, ledger: Option<&str>) -> String {
    let ledger = ledger.map(|url| format!("ledger: {{url: \"{url}\"}}\n")).unwrap_or_default();
    format!(
        r#"
client_keys_env: [KEYS_STATIC]
admin_token_env: KEYS_ADMIN
issued_keys: {{refresh_ms: 200}}
backends:
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt}}
tasks:
  - {{name: summarise, backends: [hosted], slo: {{ttft_ms: 3000}}}}
  - {{name: translate, backends: [hosted], slo: {{ttft_ms: 3000}}}}
{ledger}"#
    )
}

const ENV: [(&str, &str); 2] = [("KEYS_STATIC", STATIC), ("KEYS_ADMIN", ADMIN)];

/// A chat request for `task` with `key`: the status and the body.
async fn chat(base: &str, key: &str, task: &str) -> (u16, Value) {
    let body = json!({"model": task, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8});
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// An Anthropic Messages request with `x-api-key: key`.
async fn messages(base: &str, key: &str) -> (u16, Value) {
    let body =
        json!({"model": "summarise", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// `method path` on the admin API with `body`: the status and the JSON answer.
async fn admin(base: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let req = match body {
        Some(b) => client.post(format!("{base}{path}")).json(&b),
        None => client.get(format!("{base}{path}")),
    };
    let resp = req.bearer_auth(ADMIN).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn wait_status(base: &str, key: &str, task: &str, want: u16, within: Duration) {
    common::wait_until(within, format!("{task} answering {want}"), || async {
        let (status, body) = chat(base, key, task).await;
        if status == want {
            Ok(())
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_issued_through_the_admin_api_serve_until_rotated_or_revoked() {
    let hosted = sim(SimKind::OpenAi, "gpt", |_| {}).await;
    let ledger = common::temp_ledger_url();
    let r = router(&yaml(&hosted.base_url(), Some(&ledger)), &ENV).await;

    // Bad input names what is wrong.
    let (status, refused) =
        admin(&r.url, "/admin/keys", Some(json!({"name": "ci", "team": "search", "tasks": ["nope"]}))).await;
    assert_eq!((status, refused["error"]["param"].as_str()), (400, Some("tasks")), "{refused}");
    assert_eq!(refused["error"]["message"], "task `nope` does not exist");
    let (status, _) =
        admin(&r.url, "/admin/keys", Some(json!({"name": "ci", "team": "search", "expires_in": "soon"})))
            .await;
    assert_eq!(status, 400);
    // A client key does not open the admin API.
    let listed =
        reqwest::Client::new().get(format!("{}/admin/keys", r.url)).bearer_auth(STATIC).send().await.unwrap();
    assert_eq!(listed.status().as_u16(), 401);

    let (status, created) =
        admin(&r.url, "/admin/keys", Some(json!({"name": "ci", "team": "search", "tasks": ["summarise"]})))
            .await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"].as_str().unwrap().to_string();
    let id = created["key"]["id"].as_str().unwrap().to_string();
    assert!(secret.starts_with(&format!("sk-spw-{id}-")), "{created}");
    assert_eq!(
        (created["key"]["team"].as_str(), created["key"]["status"].as_str()),
        (Some("search"), Some("active"))
    );

    // The router tells how old its view of the issued keys is: read at start and every
    // refresh_ms since (2 s by default), so within a few seconds.
    let metrics = common::metrics_text(&r.url).await;
    let age: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("spillway_issued_keys_age_seconds{store=\"ledger\"} "))
        .unwrap_or_else(|| panic!("no key age in\n{metrics}"))
        .parse()
        .unwrap();
    assert!((0.0..5.0).contains(&age), "{age}");

    // Both kinds of key serve; the issued one only its task.
    assert_eq!(chat(&r.url, &secret, "summarise").await.0, 200);
    assert_eq!(chat(&r.url, STATIC, "summarise").await.0, 200);
    let (status, denied) = chat(&r.url, &secret, "translate").await;
    assert_eq!((status, denied["error"]["type"].as_str()), (403, Some("permission_error")), "{denied}");
    assert_eq!(denied["error"]["message"], "this key may not use task `translate`");
    let models: Value = reqwest::Client::new()
        .get(format!("{}/v1/models", r.url))
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> =
        models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["summarise"]);

    // The ledger names who asked: the issued key by its id, the static key by its variable.
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    common::wait_until(Duration::from_secs(10), "both requests in the ledger", || async {
        let rows = store.query(0, i64::MAX).await.unwrap();
        let mut keys: Vec<String> = rows.into_iter().filter_map(|r| r.client_key).collect();
        keys.sort();
        let mut want = vec![id.clone(), "KEYS_STATIC".to_string()];
        want.sort();
        if keys == want {
            Ok(())
        } else {
            Err(format!("{keys:?}"))
        }
    })
    .await;

    // The listing shows who, never the secret or its hash.
    let (status, listing) = admin(&r.url, "/admin/keys", None).await;
    assert_eq!(status, 200);
    assert_eq!(listing["keys"][0]["id"], id.as_str());
    assert_eq!(listing["keys"][0]["tasks"], json!(["summarise"]));
    let text = listing.to_string();
    assert!(
        !text.contains(&secret[secret.len() - 64..]) && !text.contains("hash") && !text.contains("salt"),
        "{text}"
    );

    // Rotation: the new secret serves at once, the old one is refused at once.
    let (status, rotated) = admin(&r.url, &format!("/admin/keys/{id}/rotate"), Some(json!({}))).await;
    assert_eq!(status, 200, "{rotated}");
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(new_secret, secret);
    assert_eq!(chat(&r.url, &new_secret, "summarise").await.0, 200);
    let (status, old) = chat(&r.url, &secret, "summarise").await;
    assert_eq!(status, 401, "{old}");

    // An unknown key, a revoked key and an expired key get the same answer, per dialect.
    let (status, unknown) = chat(&r.url, "sk-spw-000000000000-nothing", "summarise").await;
    assert_eq!((status, unknown["error"]["code"].as_str()), (401, Some("invalid_api_key")), "{unknown}");
    let (status, revoked) = admin(&r.url, &format!("/admin/keys/{id}/revoke"), Some(json!({}))).await;
    assert_eq!((status, revoked["key"]["status"].as_str()), (200, Some("revoked")), "{revoked}");
    let (status, after) = chat(&r.url, &new_secret, "summarise").await;
    assert_eq!((status, &after), (401, &unknown), "revoked reads as unknown, through this router at once");
    let (status, rotate_revoked) = admin(&r.url, &format!("/admin/keys/{id}/rotate"), Some(json!({}))).await;
    assert_eq!((status, rotate_revoked["error"]["code"].as_str()), (409, Some("key_not_active")));

    let (_, short) =
        admin(&r.url, "/admin/keys", Some(json!({"name": "brief", "team": "ops", "expires_in": "2s"}))).await;
    let short = short["secret"].as_str().unwrap().to_string();
    // It serves until its time, then is refused like the others (a fact the test waits for).
    assert_eq!(chat(&r.url, &short, "translate").await.0, 200, "no tasks named: every open task");
    wait_status(&r.url, &short, "translate", 401, Duration::from_secs(5)).await;
    assert_eq!(chat(&r.url, &short, "translate").await.1, unknown);

    let (status, anthropic_revoked) = messages(&r.url, &new_secret).await;
    let (_, anthropic_unknown) = messages(&r.url, "sk-spw-000000000000-nothing").await;
    assert_eq!(status, 401);
    assert_eq!(anthropic_revoked, anthropic_unknown);
    assert_eq!(anthropic_revoked["type"], "error");
    assert_eq!(anthropic_revoked["error"]["type"], "authentication_error", "{anthropic_revoked}");
    assert_eq!(messages(&r.url, STATIC).await.0, 200, "the static key still serves");

    // Ids that are not stored, or cannot be ids, are no key.
    assert_eq!(admin(&r.url, "/admin/keys/000000000000/revoke", Some(json!({}))).await.0, 404);
    assert_eq!(admin(&r.url, "/admin/keys/not-an-id/rotate", Some(json!({}))).await.0, 404);
}

/// Run `spillway keys ARGS --config CONFIG`: exit status, stdout, stderr.
fn keys_cli(config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).arg("keys").args(args).arg("--config").arg(config).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_made_with_the_cli_reach_a_running_router() {
    let hosted = sim(SimKind::OpenAi, "gpt", |_| {}).await;
    // No static key: the router is open until the first key is issued.
    let ledger = common::temp_ledger_url();
    let text = yaml(&hosted.base_url(), Some(&ledger)).replace("client_keys_env: [KEYS_STATIC]\n", "");
    let config = std::env::temp_dir().join(format!("spillway-keys-{:016x}.yaml", rand::random::<u64>()));
    std::fs::write(&config, &text).unwrap();
    let r = router(&text, &ENV).await;
    assert_eq!(chat(&r.url, "anything", "summarise").await.0, 200, "no keys of either kind: no auth");

    let (ok, _, err) =
        keys_cli(&config, &["create", "--name", "ci", "--team", "search", "--task", "missing"]);
    assert!(!ok);
    assert!(err.contains("task `missing` does not exist"), "{err}");

    let (ok, out, err) = keys_cli(
        &config,
        &["create", "--name", "ci", "--team", "search", "--task", "summarise", "--expires-in", "30d"],
    );
    assert!(ok, "{err}");
    let secret = out.lines().next().unwrap().to_string();
    let (id, _) = secret.strip_prefix("sk-spw-").unwrap().split_once('-').unwrap();
    let id = id.to_string();
    // Within the refresh period, auth is on and the key serves.
    wait_status(&r.url, "anything", "summarise", 401, Duration::from_secs(3)).await;
    assert_eq!(chat(&r.url, &secret, "summarise").await.0, 200);

    let (ok, listed, _) = keys_cli(&config, &["list"]);
    assert!(ok);
    assert!(listed.contains(&id) && listed.contains("search") && listed.contains("active"), "{listed}");
    assert!(!listed.contains(&secret[secret.len() - 64..]), "{listed}");

    let (ok, out, err) = keys_cli(&config, &["rotate", &id]);
    assert!(ok, "{err}");
    let rotated = out.lines().next().unwrap().to_string();
    wait_status(&r.url, &secret, "summarise", 401, Duration::from_secs(3)).await;
    assert_eq!(chat(&r.url, &rotated, "summarise").await.0, 200);

    let (ok, out, err) = keys_cli(&config, &["revoke", &id]);
    assert!(ok && out.contains(&format!("revoked {id}")), "{out}{err}");
    wait_status(&r.url, &rotated, "summarise", 401, Duration::from_secs(3)).await;
    // Revoking the only key does not turn auth off.
    assert_eq!(chat(&r.url, "anything", "summarise").await.0, 401);
    let (ok, _, err) = keys_cli(&config, &["revoke", "000000000000"]);
    assert!(!ok && err.contains("no key `000000000000`"), "{err}");
    let _ = std::fs::remove_file(&config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_through_one_router_is_refused_by_another_within_five_seconds() {
    let Some(pg) = common::pg_store_url("keys_test").await else { return };
    let hosted = sim(SimKind::OpenAi, "gpt", |_| {}).await;
    // The default refresh period (2 s), which the 5 s promise rests on.
    let config = yaml(&hosted.base_url(), Some(&pg)).replace("issued_keys: {refresh_ms: 200}\n", "");
    let a = router(&config, &ENV).await;
    let b = router(&config, &ENV).await;

    let (status, created) =
        admin(&a.url, "/admin/keys", Some(json!({"name": "shared", "team": "platform"}))).await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"].as_str().unwrap().to_string();
    let id = created["key"]["id"].as_str().unwrap().to_string();
    assert_eq!(chat(&a.url, &secret, "summarise").await.0, 200);
    wait_status(&b.url, &secret, "summarise", 200, Duration::from_secs(5)).await;

    let revoked_at = Instant::now();
    assert_eq!(admin(&a.url, &format!("/admin/keys/{id}/revoke"), Some(json!({}))).await.0, 200);
    assert_eq!(chat(&a.url, &secret, "summarise").await.0, 401, "the router that revoked refuses at once");
    wait_status(&b.url, &secret, "summarise", 401, Duration::from_secs(5)).await;
    let took = revoked_at.elapsed();
    assert!(took < Duration::from_secs(5), "the other replica took {took:?}");
    // The other replica lists it revoked, from the same store.
    let (_, listing) = admin(&b.url, "/admin/keys", None).await;
    assert_eq!(listing["keys"][0]["status"], "revoked", "{listing}");
}
