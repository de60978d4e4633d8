#include "trainer/checkpoint/hf_export.h"

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config.h"
#include "trainer/files/file_io.h"
#include "trainer/files/safetensors.h"
#include "trainer/model/weights.h"

#include <fmt/format.h>

#include <filesystem>

namespace hlat {

namespace fs = std::filesystem;

void export_hugging_face(const std::string& checkpoint_dir, const std::string& out_dir) {
    verify_checkpoint(checkpoint_dir);
    CheckpointState state = read_checkpoint_state(checkpoint_dir);
    TrainConfig config = config_from_json(state.config);
    const ModelConfig& m = config.model;
    Model model(m, 1, 1, false);
    load_weights(model, (fs::path(checkpoint_dir) / "model.safetensors").string());

    const long C = m.dim, H = m.hidden_dim, HD = m.head_dim();
    const long QD = (long)m.n_heads * HD, KVD = (long)m.n_kv_heads * HD;
    const ParameterTensors& p = model.param_tensors();
    std::vector<TensorOut> out = {{"model.embed_tokens.weight", {m.vocab_size, C}, p.embed}};
    for (long l = 0; l < m.n_layers; l++) {
        std::string prefix = fmt::format("model.layers.{}.", l);
        const float* qkv = p.qkv + l * m.qkv_dim() * C;
        const float* gate_up = p.gate_up + l * 2 * H * C;
        out.push_back({prefix + "input_layernorm.weight", {C}, p.attn_norm + l * C});
        out.push_back({prefix + "self_attn.q_proj.weight", {QD, C}, qkv});
        out.push_back({prefix + "self_attn.k_proj.weight", {KVD, C}, qkv + QD * C});
        out.push_back({prefix + "self_attn.v_proj.weight", {KVD, C}, qkv + (QD + KVD) * C});
        if (m.qk_norm) {
            out.push_back({prefix + "self_attn.q_norm.weight", {HD}, p.q_norm + l * HD});
            out.push_back({prefix + "self_attn.k_norm.weight", {HD}, p.k_norm + l * HD});
        }
        out.push_back({prefix + "self_attn.o_proj.weight", {C, QD}, p.o_proj + l * C * QD});
        out.push_back({prefix + "post_attention_layernorm.weight", {C}, p.ffn_norm + l * C});
        out.push_back({prefix + "mlp.gate_proj.weight", {H, C}, gate_up});
        out.push_back({prefix + "mlp.up_proj.weight", {H, C}, gate_up + H * C});
        out.push_back({prefix + "mlp.down_proj.weight", {C, H}, p.down + l * C * H});
    }
    out.push_back({"model.norm.weight", {C}, p.final_norm});
    out.push_back({"lm_head.weight", {m.vocab_size, C}, p.lm_head});

    fs::create_directories(out_dir);
    save_safetensors((fs::path(out_dir) / "model.safetensors").string(), out, {{"format", "pt"}});
    // A qk-norm model is Qwen3's architecture: LLaMA's with an RMSNorm over
    // each query and key head (q_norm, k_norm) before RoPE.
    nlohmann::json hf = {
        {"architectures", {m.qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
        {"model_type", m.qk_norm ? "qwen3" : "llama"},
        {"hidden_size", m.dim},
        {"intermediate_size", m.hidden_dim},
        {"num_hidden_layers", m.n_layers},
        {"num_attention_heads", m.n_heads},
        {"num_key_value_heads", m.n_kv_heads},
        {"head_dim", m.head_dim()},
        {"vocab_size", m.vocab_size},
        {"max_position_embeddings", m.max_seq_len},
        {"rms_norm_eps", m.norm_eps},
        {"rope_theta", m.rope_theta},
        {"hidden_act", "silu"},
        {"tie_word_embeddings", false},
        {"attention_bias", false},
        {"mlp_bias", false},
        {"bos_token_id", 1},
        {"eos_token_id", 2},
        {"torch_dtype", "float32"},
        {"hlat_step", state.step},
    };
    write_file_atomic((fs::path(out_dir) / "config.json").string(), {hf.dump(2)});
    fs::path tokenizer = fs::path(checkpoint_dir) / "tokenizer.model";
    if (fs::exists(tokenizer))
        fs::copy_file(tokenizer, fs::path(out_dir) / "tokenizer.model", fs::copy_options::overwrite_existing);
}

}  // namespace hlat
