// Model weights as safetensors, under Hugging Face LLaMA-style names with the
// coalesced projections kept whole (the table is in README):
//   model.embed_tokens.weight                       (V, C)
//   model.layers.{l}.input_layernorm.weight         (C)
//   model.layers.{l}.self_attn.qkv_proj.weight      (QKV, C)   rows: q heads, k heads, v heads
//   model.layers.{l}.self_attn.q_norm.weight        (HD)       with model.qk_norm only
//   model.layers.{l}.self_attn.k_norm.weight        (HD)       with model.qk_norm only
//   model.layers.{l}.self_attn.o_proj.weight        (C, NH*HD)
//   model.layers.{l}.post_attention_layernorm.weight (C)
//   model.layers.{l}.mlp.gate_up_proj.weight        (2H, C)    rows: gate, then up
//   model.layers.{l}.mlp.down_proj.weight           (C, H)
//   model.norm.weight                               (C)
//   lm_head.weight                                  (V, C)
#pragma once

#include "trainer/model/model.h"

#include <map>
#include <string>

namespace hlat {

// Saves the parameters (or, with grads = true, the gradients) of the model.
void save_weights(const Model& model, const std::string& path, bool grads = false,
                  const std::map<std::string, std::string>& metadata = {});
// Loads every parameter; a missing, extra or mis-shaped tensor is an error
// naming it, and the model is left untouched on error.
void load_weights(Model& model, const std::string& path);

}  // namespace hlat
