// The model and precision sections of the training config: all that the
// model (trainer/model/) sees of it.
#pragma once

namespace hlat {

enum class InitScaling { PerLayer, TotalLayers, None };

struct ModelConfig {
    int vocab_size = 8192;
    int dim = 256;          // C
    int n_layers = 4;       // L
    int n_heads = 4;        // NH
    int n_kv_heads = 4;     // NKV, divides NH
    int hidden_dim = 704;   // H, SwiGLU width
    int max_seq_len = 256;  // T
    double norm_eps = 1e-5;
    double rope_theta = 10000.0;
    double init_std = 0.02;
    // Output projections of layer l (1-based) scaled by 1/sqrt(2l) (per_layer),
    // by 1/sqrt(2L) (total_layers), or not at all (none).
    InitScaling init_scaling = InitScaling::PerLayer;
    // RMSNorm over each query and key head before RoPE, with learnable gains
    // (HD) per layer for q and for k (Qwen3's q_norm and k_norm): the cure of
    // attention-logit growth in Wortsman et al. 2023.
    bool qk_norm = false;
    // PaLM's auxiliary loss z_loss * (log Z)^2 per token, log Z the
    // logsumexp of the output logits, added to the gradient; the reported
    // loss stays the cross-entropy alone. 0: off.
    double z_loss = 0.0;

    int head_dim() const { return dim / n_heads; }
    int qkv_dim() const { return (n_heads + 2 * n_kv_heads) * head_dim(); }
};

// Training precision (issue 7). The mode says where values live and how they
// are rounded; the knobs choose fp32 or bf16 for the parts the paper's slides
// compare. Matmuls in every bf16 mode take bf16 inputs and accumulate in fp32.
enum class PrecisionMode {
    Fp32,    // everything fp32
    Bf16,    // weights, gradients, Adam moments and activations bf16, written back round-to-nearest-even
    Bf16Sr,  // as Bf16, but the parameter update (and with sr_moments the moments) rounds stochastically
    Mixed,   // fp32 master weights, gradients and optimizer state; bf16 copies for compute
    // As Bf16, with a bf16 Kahan compensation buffer that carries what each
    // update's rounding lost into the next (Zamirai et al. 2020, "Revisiting
    // BFloat16 Training").
    Bf16Kahan,
};

struct PrecisionConfig {
    PrecisionMode mode = PrecisionMode::Fp32;
    bool softmax_bf16 = false;     // attention softmax and cross-entropy probabilities rounded to bf16
    bool attention_fp32 = false;   // bf16 modes: attention's four products stay fp32 (default: bf16, as autocast)
    bool grad_accum_bf16 = false;  // the gradient sum over micro-batches kept in bf16
    bool reduce_bf16 = false;      // gradient reductions across ranks in bf16 (distributed trainer)
    bool sr_moments = false;       // bf16_sr: the Adam moments round stochastically too
    bool sr_key_rank = false;      // key the rounding bits by rank too: replicas then round differently

    bool bf16_compute() const { return mode != PrecisionMode::Fp32; }
    bool bf16_state() const {
        return mode == PrecisionMode::Bf16 || mode == PrecisionMode::Bf16Sr || mode == PrecisionMode::Bf16Kahan;
    }
};

const char* precision_mode_name(PrecisionMode m);

}  // namespace hlat
