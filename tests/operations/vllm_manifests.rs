//! The example vLLM fleet manifests in `vllm/deploy/`: they pass strict Kubernetes schema
//! validation (`kubernetes-validate --strict`, from `.venv`), the matching Spillway config is
//! accepted by `spillway check-config`, and what the pods announce in their `spillway.dev/*`
//! annotations is exactly the pool's pin and price, so discovery would not quarantine them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_yaml_ng::Value;
use spillway::control::discovery::NodeMetadata;
use spillway::control::pins::{differences, Reported};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

const MANIFESTS: [&str; 2] = ["vllm/deploy/llama-8b.yaml", "vllm/deploy/llama-8b-with-agent.yaml"];

#[test]
fn manifests_pass_strict_kubernetes_validation() {
    let validator = repo(".venv/bin/kubernetes-validate");
    assert!(
        validator.exists(),
        "{} is missing: run .ci/run (pip install kubernetes-validate)",
        validator.display()
    );
    for manifest in MANIFESTS {
        let out =
            Command::new(&validator).args(["--strict", "-k", "1.33"]).arg(repo(manifest)).output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && !text.contains("ERROR"), "{manifest}:\n{text}");
        eprintln!("{text}");
    }
}

/// Every document of a multi-document YAML file.
fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).collect()
}

#[test]
fn the_pods_announce_what_the_pool_pins_and_the_config_is_valid() {
    let config_path = repo("vllm/deploy/spillway-pool.yaml");
    let out =
        Command::new(env!("CARGO_BIN_EXE_spillway")).arg("check-config").arg(&config_path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let config = spillway::config::load_file(&config_path).unwrap();
    let pool = config.backend("llama-8b").and_then(|b| b.pool()).unwrap();
    let selector = &pool.discovery.as_ref().unwrap().kubernetes.selector;

    for manifest in MANIFESTS {
        let deployment = documents(manifest).into_iter().find(|d| d["kind"] == "Deployment").unwrap();
        let template = &deployment["spec"]["template"]["metadata"];
        // The discovery selector matches the pod labels.
        for pair in selector.split(',') {
            let (k, v) = pair.split_once('=').unwrap();
            assert_eq!(template["labels"][k].as_str(), Some(v), "{manifest}: label {k}");
        }
        let annotations: BTreeMap<String, String> =
            serde_yaml_ng::from_value(template["annotations"].clone()).unwrap();
        let meta = NodeMetadata::from_annotations(Some(&annotations), manifest);
        let reported = Reported {
            weights: meta.weights_digest.clone(),
            quantization: meta.quantization.clone(),
            engine: meta.engine_version.clone(),
        };
        assert_eq!(differences(pool.pin.as_ref().unwrap(), &reported), Vec::<String>::new(), "{manifest}");
        assert_eq!(meta.gpu_hourly_usd, pool.gpu_hourly_usd, "{manifest}: GPU price");
        let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].as_sequence().unwrap();
        let seqs = format!("--max-num-seqs={}", pool.max_running);
        assert!(
            args.iter().any(|a| a.as_str() == Some(&seqs)),
            "{manifest}: vLLM runs max_running sequences"
        );
    }
    // The agent variant serves NVML readings on the pool's agent_port.
    let with_agent = documents(MANIFESTS[1]).into_iter().find(|d| d["kind"] == "Deployment").unwrap();
    let agent = &with_agent["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(agent["ports"][0]["containerPort"].as_u64(), pool.agent_port.map(u64::from));
}
