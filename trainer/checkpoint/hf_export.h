// Export of a checkpoint as a Hugging Face LLaMA folder: model.safetensors
// under transformers' LlamaForCausalLM names (qkv_proj split into q_proj,
// k_proj, v_proj; gate_up_proj into gate_proj, up_proj), config.json, and the
// tokenizer model when the checkpoint has one. hlat's RoPE already uses the
// rotate-half convention of transformers, so no weight permutation is needed.
#pragma once

#include <string>

namespace hlat {

// Throws naming the problem: an unverifiable checkpoint, an unwritable folder.
void export_hugging_face(const std::string& checkpoint_dir, const std::string& out_dir);

}  // namespace hlat
