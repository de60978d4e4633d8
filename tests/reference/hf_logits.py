"""Logits of a Hugging Face LLaMA folder (as `hlat export` writes it), computed
by the PyTorch reference model in float64 after loading it by HF names.

usage: scripts/python hf_logits.py HF_DIR TOKENS.i32 B T OUT.safetensors

The reference keeps q/k/v and gate/up coalesced, so this is also a check of
the export's split: the HF tensors are concatenated back in HF order.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import Llama, read_safetensors, write_safetensors  # noqa: E402


def main(hf_dir, tokens_path, B, T, out):
    hf = json.load(open(os.path.join(hf_dir, "config.json")))
    # hlat exports a qk-norm model as Qwen3 (LLaMA with q_norm and k_norm per head).
    assert hf["architectures"] in (["LlamaForCausalLM"], ["Qwen3ForCausalLM"]), hf["architectures"]
    cfg = {"vocab_size": hf["vocab_size"], "dim": hf["hidden_size"], "n_layers": hf["num_hidden_layers"],
           "n_heads": hf["num_attention_heads"], "n_kv_heads": hf["num_key_value_heads"],
           "hidden_dim": hf["intermediate_size"], "norm_eps": hf["rms_norm_eps"], "rope_theta": hf["rope_theta"],
           "init_std": 0.02, "init_scaling": "none", "qk_norm": hf["architectures"] == ["Qwen3ForCausalLM"]}
    weights, _ = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    fused = {}
    for name, w in weights.items():
        if ".q_proj." in name:
            base = name.replace(".q_proj.", ".qkv_proj.")
            fused[base] = np.concatenate([w, weights[name.replace("q_proj", "k_proj")],
                                          weights[name.replace("q_proj", "v_proj")]])
        elif ".gate_proj." in name:
            fused[name.replace(".gate_proj.", ".gate_up_proj.")] = np.concatenate(
                [w, weights[name.replace("gate_proj", "up_proj")]])
        elif not any(k in name for k in (".k_proj.", ".v_proj.", ".up_proj.")):
            fused[name] = w
    model = Llama(cfg).double()
    model.load_numpy(fused)
    tokens = torch.from_numpy(np.fromfile(tokens_path, dtype=np.int32).astype(np.int64).reshape(B, T))
    with torch.no_grad():
        logits, _ = model(tokens)
    write_safetensors(out, {"logits": logits.numpy()})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
