//! The JSON identity endpoints of each simulated engine: what `GET /version`, llama.cpp's
//! `GET /props` and TGI's `GET /info` answer, built once from the node's sizing.
//!
//! Shapes follow the engines: vLLM's and `trtllm-serve`'s `/version` are `{"version": …}`;
//! llama-server's `/props` carries `default_generation_settings` (per-slot context `n_ctx`)
//! and `total_slots` (the slots run at once, read by `slots_from_props`); TGI's router's
//! `/info` is its `Info` struct (model, limits, `max_batch_total_tokens`, router version).
//! Versions end in `+sim`, so that a pin never mistakes a simulator for a real engine. Pure.

use super::tgi;
use super::NodeFacts;
use crate::fleet::engines::Engine;
use serde_json::{json, Value};

/// The `/version` body of `engine`, for the engines whose server has that route.
pub fn version(engine: Engine) -> Option<Value> {
    match engine {
        Engine::Vllm => Some(json!({"version": "0.11.0+sim"})),
        Engine::Trtllm => Some(json!({"version": "1.1.0+sim"})),
        _ => None,
    }
}

/// llama-server's `GET /props`: one slot per `--max-num-seqs`, the KV cache shared among them.
pub fn llamacpp_props(facts: &NodeFacts) -> Value {
    let slots = facts.max_num_seqs.max(1);
    json!({
        "default_generation_settings": {
            "id": 0,
            "id_task": -1,
            "n_ctx": facts.kv_tokens() / slots,
            "speculative": false,
            "is_processing": false,
            "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "stream": true},
            "prompt": "",
            "next_token": {
                "has_next_token": true,
                "has_new_line": false,
                "n_remain": -1,
                "n_decoded": 0,
                "stopping_word": ""
            }
        },
        "total_slots": slots,
        "model_path": format!("/models/{}.gguf", facts.model.rsplit('/').next().unwrap_or(&facts.model)),
        "modalities": {"vision": false, "audio": false},
        "chat_template": "",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "build_info": "b5000-sim"
    })
}

/// TGI's `GET /info` (the 2.0 router's `Info`).
pub fn tgi_info(facts: &NodeFacts) -> Value {
    let (max_input, max_total) = tgi::limits(facts);
    json!({
        "model_id": facts.model,
        "model_sha": null,
        "model_dtype": "torch.float16",
        "model_device_type": "cuda",
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": 128,
        "max_best_of": 2,
        "max_stop_sequences": 4,
        "max_input_length": max_input,
        "max_total_tokens": max_total,
        "waiting_served_ratio": 0.3,
        "max_batch_total_tokens": facts.kv_tokens(),
        "max_waiting_tokens": 20,
        "max_batch_size": facts.max_num_seqs,
        "validation_workers": 2,
        "max_client_batch_size": 4,
        "router": "text-generation-router",
        "version": "2.0.4+sim",
        "sha": null,
        "docker_label": null
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::engines::llamacpp::slots_from_props;

    fn facts() -> NodeFacts {
        NodeFacts {
            model: "org/m".into(),
            max_num_seqs: 4,
            num_gpu_blocks: 100,
            block_size: 16,
            prefix_caching: true,
            legacy_names: false,
        }
    }

    #[test]
    fn props_give_the_slots_and_their_context() {
        let props = llamacpp_props(&facts());
        assert_eq!(slots_from_props(&props.to_string()), Some(4));
        assert_eq!(props["default_generation_settings"]["n_ctx"], 400);
        assert_eq!(props["model_path"], "/models/m.gguf");
    }

    #[test]
    fn tgi_info_names_the_model_and_its_token_budget() {
        let info = tgi_info(&facts());
        assert_eq!(info["model_id"], "org/m");
        assert_eq!(info["max_batch_total_tokens"], 1600);
        assert_eq!(
            (info["max_input_length"].as_u64(), info["max_total_tokens"].as_u64()),
            (Some(1599), Some(1600))
        );
        assert_eq!(info["max_batch_size"], 4);
    }

    #[test]
    fn only_vllm_and_trtllm_serve_version() {
        let with: Vec<Engine> = Engine::ALL.into_iter().filter(|e| version(*e).is_some()).collect();
        assert_eq!(with, vec![Engine::Vllm, Engine::Trtllm]);
    }
}
