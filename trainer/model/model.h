// The LLaMA decoder: parameters, gradients and activations in flat buffers, and
// the forward and backward passes over one micro-batch.
//
// Letters as in kernels.h: B batch, T sequence, C dim, V vocab, L layers,
// NH/NKV heads, HD head dim, H hidden dim, QKV = (NH + 2*NKV)*HD, N = B*T.
// A tensor-parallel shard holds NH, NKV, H and V divided by the group size;
// the shapes below are then the shard's.
#pragma once

#include "trainer/model/bf16.h"
#include "trainer/model/internals.h"
#include "trainer/model/kernels.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/config/model_config.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hlat {


// The tensor-parallel group a model shard belongs to, Megatron's layout:
// qkv_proj (by heads) and gate_up_proj (by hidden units) are split along their
// outputs (column-parallel); o_proj and down_proj along their inputs
// (row-parallel: their partial outputs are summed over the group); embed_tokens
// and lm_head by contiguous vocabulary ranges; the norm weights are replicated.
class TensorParallelGroup {
  public:
    virtual ~TensorParallelGroup() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual void allreduce_sum(float* x, long n) = 0;
    virtual void allreduce_max(float* x, long n) = 0;
};

// The part of the model one tensor-parallel rank holds; all of it at size 1.
struct ShardShape {
    int rank = 0, size = 1;
    int n_heads, n_kv_heads;  // NH/size, NKV/size
    int hidden_dim;           // H/size
    int vocab_size;           // V/size
    int vocab_start;          // first token id of this rank's range
};
// Throws when NH, NKV, H or V is not divisible by size.
ShardShape shard_shape(const ModelConfig& config, int rank, int size);

// Pointers into one flat buffer; gradients use the same layout in a second one.
// A per-layer tensor holds its L layers back to back.
struct ParameterTensors {
    float* embed;       // (V, C)
    float* attn_norm;   // (L, C)
    float* qkv;         // (L, QKV, C)
    float* q_norm;      // (L, HD) qk-norm gains of the query heads; null without model.qk_norm
    float* k_norm;      // (L, HD) and of the key heads
    float* o_proj;      // (L, C, NH*HD)
    float* ffn_norm;    // (L, C)
    float* gate_up;     // (L, 2*H, C), gate rows first
    float* down;        // (L, C, H)
    float* final_norm;  // (C)
    float* lm_head;     // (V, C)
};

// One parameter tensor kind of the table: its place in the flat buffer.
struct TensorKind {
    std::string name;     // e.g. "qkv_proj"
    int layers;           // L for per-layer tensors, 0 for global ones
    long rows, cols;      // shape of one layer's slice; cols = 1 for vectors
    long offset;          // first float in the flat buffer
    bool norm_or_embedding;
    bool replicated;      // the same on every tensor-parallel rank (the norm weights)
    long numel() const { return (layers ? layers : 1) * rows * cols; }
};

// The parameter table of a shard (of the whole model at size 1), in buffer order.
std::vector<TensorKind> tensor_table(const ModelConfig& config, const ShardShape& shard);

// In the bf16 modes the inputs of the linear layers (attn_norm, ffn_norm,
// swiglu, final_norm) exist only in bf16 (Bf16Activations): those four are
// null here.
struct ActivationTensors {
    float* residual;      // (L+1, B, T, C) stream entering layer l; [L] enters the final norm
    float* attn_norm;     // (L, B, T, C)
    float* attn_rstd;     // (L, B, T)
    float* qkv;           // (L, B, T, QKV), q and k after qk-norm (with model.qk_norm) and RoPE (bf16 values in the bf16 modes); with bf16
                          // attention products (B, T, QKV), one layer's matmul sums on their way into
                          // Bf16Activations::qkv_heads
    float* att;           // (L, B, NH, T, T) probabilities; null with activation checkpointing
    float* att_out;       // (L, B, T, NH*HD); in the bf16 modes (B, T, NH*HD), one layer's, narrowed into
                          // Bf16Activations::att_out
    float* residual_mid;  // (L, B, T, C) stream after attention
    float* ffn_norm;      // (L, B, T, C)
    float* ffn_rstd;      // (L, B, T)
    float* gate_up;       // (L, B, T, 2*H); bf16 values in the bf16 modes
    float* swiglu;        // (L, B, T, H)
    float* final_norm;    // (B, T, C)
    float* final_rstd;    // (B, T)
    float* logits;        // (B, T, V): logits, then probabilities, then their gradient (in fp32 and
                          // under tensor parallelism; the bf16 modes narrow it into a scratch buffer)
    float* losses;        // (B, T)
    float* logz;          // (B, T) log Z = logsumexp of each position's logits
    float* qk_inp;        // (L, B, T, NH + NKV, HD) q and k heads entering qk-norm; null without model.qk_norm
    float* qk_rstd;       // (L, B, T, NH + NKV) their 1/rms; null without model.qk_norm
};

// The activations the bf16 modes keep in bf16 only, written narrowed by the
// kernels that produce them (att_out: narrowed from fp32): the inputs of the
// linear layers, kept for the weight gradients, and attention's.
struct Bf16Activations {
    bf16* attn_norm;   // (L, B, T, C) input of qkv_proj
    bf16* qkv_heads;   // (L, B, NH + 2 NKV, T, HD) attention's input, q and k after RoPE; null with
                       // precision.attention = fp32
    bf16* att_out;     // (L, B, T, NH*HD) input of o_proj
    bf16* ffn_norm;    // (L, B, T, C) input of gate_up_proj
    bf16* swiglu;      // (L, B, T, H) input of down_proj
    bf16* final_norm;  // (B, T, C) input of lm_head
};

class Model {
  public:
    // Allocates parameters, gradients and activations for micro-batches of
    // B sequences of T tokens. With checkpoint_attention the attention
    // probabilities are recomputed in backward instead of stored.
    // In a bf16 precision mode the matmuls take bf16 inputs (a bf16 copy of the
    // weights, refreshed whenever params() was handed out for writing) and
    // their outputs are rounded to bf16; pure bf16 modes also round the
    // residual stream and its gradient. Parameters and gradients stay in fp32
    // containers: the trainer keeps them bf16-valued where the mode says so.
    // With a tensor-parallel group of size > 1 the model is this rank's shard
    // and forward and backward call the group's all-reduces.
    Model(const ModelConfig& config, int B, int T, bool checkpoint_attention,
          const PrecisionConfig& precision = {}, TensorParallelGroup* tp = nullptr);

    // Normal(0, init_std) matrices, unit norms, output projections scaled as the
    // config says. Deterministic for a seed.
    void init_weights(unsigned long long seed);

    // Runs the model on inputs (B, T). With targets, returns the mean
    // cross-entropy and keeps what backward needs; without, leaves the logits
    // in activations().logits and returns 0.
    float forward(const int32_t* inputs, const int32_t* targets);
    // The mean over the last forward's tokens of the z-loss term,
    // model.z_loss * (log Z)^2; NaN when model.z_loss is 0 (off).
    double z_loss_term() const { return z_loss_term_; }
    // Per sequence of the last forward with targets (B values): its mean
    // token loss; and, after backward, the norm of its logits' gradient of
    // the summed token losses (what that sequence pushes into the model: the
    // largest for a sequence the model gets confidently wrong). Batch
    // provenance and attribution read them (docs/provenance.md).
    const std::vector<float>& sequence_losses() const { return sequence_losses_; }
    const std::vector<float>& sequence_grad_norms() const { return sequence_grad_norms_; }
    // Rows (sequences) whose loss the next backward leaves out, as if they
    // were not in the batch (`hlat replay --without`); empty: none.
    void drop_sequences(std::vector<char> dropped) { dropped_ = std::move(dropped); }
    // Adds d(loss_scale * sum of token losses)/d(params) to the gradients,
    // for the batch of the last forward with targets. A token's loss is its
    // cross-entropy plus, with model.z_loss, the z-loss term.
    void backward(float loss_scale);
    // Zeroes the gradients (the linear layers' lazily: their next backward
    // writes them over; nothing may read them in between).
    void zero_grad();
    // The model's internals (internals.h): on resets the sums, and each
    // forward with targets adds its micro-batch to them (the attention
    // statistics from the forward softmax only: activation checkpointing's
    // recomputation in backward measures nothing); off, the default, forward
    // measures nothing.
    void measure_internals(bool on);
    const ForwardInternals& internals() const { return internals_; }
    // The mask_leak fault: each position also attends to the next `lookahead`
    // tokens. 0 (the default) is the correct causal model.
    void set_mask_lookahead(int lookahead) { lookahead_ = lookahead; }
    // Called during backward as gradients become final: with layer l once
    // layer l's are (L-1 down to 0), with n_layers for the final norm and
    // lm_head (first), with -1 for the embedding (last). The data-parallel
    // reducer starts each bucket's all-reduce from here.
    void set_grads_ready_hook(std::function<void(int)> hook) { grads_ready_ = std::move(hook); }

    const ModelConfig& config() const { return config_; }  // of the whole model
    const ShardShape& shard() const { return shard_; }
    bool is_shard() const { return shard_.size > 1; }
    int batch_size() const { return B_; }
    int seq_len() const { return T_; }
    long num_parameters() const { return (long)params_.size(); }
    // Bytes allocated for the weights, their gradients and the bf16 compute
    // copies of the linear layers' weights.
    long state_bytes() const;
    float* params() {
        weights_changed_ = true;
        return params_.data();
    }
    float* grads() { return grads_.data(); }
    const float* params() const { return params_.data(); }
    const float* grads() const { return grads_.data(); }
    const ParameterTensors& param_tensors() const { return p_; }
    const ParameterTensors& grad_tensors() const { return g_; }
    const ActivationTensors& activations() const { return a_; }
    const std::vector<TensorKind>& tensor_kinds() const { return kinds_; }

    // Bytes of the activations kept for backward, and what they would be
    // without activation checkpointing.
    long activation_bytes() const { return activation_floats_ * 4 + (long)acts_bf16_.size() * 2; }
    long activation_bytes_without_checkpointing() const;

  private:
    // Activations and backward scratch for the shapes and precision given.
    void allocate_activations();
    float* attention_scratch();
    void attention_layer_forward(int l, float* qkv, float* att, float* att_out);
    void attention_layer_backward(int l, const float* att);
    // Layer l's qk-norm (model.qk_norm) on qkv, the matmul's output, in
    // place; and its backward on d_qkv_ (RoPE's input gradient) in place.
    void qk_norm_layer_forward(int l, float* qkv);
    void qk_norm_layer_backward(int l);
    // Attention's products take bf16 operands (the bf16 modes, unless precision.attention = fp32).
    bool attention_bf16() const { return precision_.bf16_compute() && !precision_.attention_fp32; }
    // The linear layers' bf16 weights (weights16_), and the one for a weight
    // pointing into params_.
    void make_bf16_weights();
    const Bf16Weight& weight16(const float* weight) const;
    // The matmuls of the layers, in fp32 or bf16 as the precision says; weight
    // points into params_. In the bf16 modes the input is inp16, a slot of
    // acts_bf16_ (narrowed from inp first when inp is given), the output
    // gradient dout16 (narrowed from dout into dout16_ when dout is given),
    // and out and dinp are left unrounded for their reader to round.
    void linear_forward(float* out, const float* inp, bf16* inp16, const float* weight, int N, int IC, int OC);
    void linear_backward(float* dinp, float* dweight, const float* dout, const bf16* dout16, const float* inp,
                         const bf16* inp16, const float* weight, int N, int IC, int OC);
    // The steps around the matmuls that differ by precision: RMSNorm into the
    // next matmul's input; a row-parallel matmul's output added to the
    // residual stream; a matmul's input gradient through an RMSNorm into the
    // stream's gradient (each with the tensor-parallel all-reduce between).
    void norm_forward(float* out, bf16* out16, float* rstd, const float* inp, const float* weight);
    void add_to_stream(float* out, float* linear_out, const float* stream);
    void norm_backward(float* d_stream, float* dweight, float* d_norm, const float* inp, const float* weight,
                       const float* rstd);
    // The mean cross-entropy of the logits against targets, the probabilities
    // left in a_.logits for backward.
    float loss(const int32_t* targets);
    void measure_and_drop_sequences(float* dlogits, bf16* d16, float loss_scale);
    // Pure bf16 modes keep activations in bf16: rounds x in place there.
    void round_if_bf16_state(float* x, long n);
    // The internals' parts, each from a buffer forward has just written: the
    // attention kernel's per-(b, h) slots of layer l, the stream leaving block
    // l, the cross-entropy's per-row log Z and largest logit.
    const AttentionStats* attention_stats() const { return measure_internals_ ? &attention_stats_ : nullptr; }
    void add_attention_internals(int l);
    void add_residual_internals(int l, const float* stream);
    void add_logit_internals();

    ModelConfig config_;
    PrecisionConfig precision_;
    TensorParallelGroup* tp_;
    ShardShape shard_;
    std::function<void(int)> grads_ready_;
    // The linear layers' weights as the bf16 matmuls read them (bf16 modes),
    // by offset into params_; made again whenever params() was handed out for
    // writing.
    std::vector<Bf16Weight> weights16_;
    std::map<long, size_t> weight16_at_;
    bool weights_changed_ = true;
    // Set by zero_grad: the next backward writes the linear layers' weight
    // gradients over what they hold instead of adding to it, which spares
    // zeroing them and lets the matmul skip reading them.
    bool overwrite_linear_grads_ = true;
    int B_, T_;
    bool checkpoint_attention_;
    int lookahead_ = 0;
    std::vector<TensorKind> kinds_;
    std::vector<float> params_, grads_;
    ParameterTensors p_, g_;
    std::vector<float> acts_;
    long activation_floats_ = 0;
    ActivationTensors a_;
    std::vector<bf16> acts_bf16_;
    Bf16Activations a16_{};  // all null in fp32
    // Backward scratch, one micro-batch and one layer at a time.
    std::vector<float> d_residual_, d_norm_, d_qkv_, d_att_out_, d_gate_up_, d_swiglu_;
    std::vector<bf16> dout16_;  // a matmul's output gradient narrowed, in the bf16 modes
    std::vector<float> att_scratch_;  // per OpenMP thread
    std::vector<float> qk_dweight_;   // (2 HD) under tensor parallelism: one layer's qk-norm gain gradients
    double z_loss_term_ = NAN;
    std::vector<float> sequence_losses_, sequence_grad_norms_;  // (B)
    std::vector<char> dropped_;                                 // (B) or empty
    std::vector<float> rope_cos_, rope_sin_;  // (T, HD/2)
    std::vector<int32_t> inputs_, targets_;
    bool measure_internals_ = false;
    ForwardInternals internals_;
    std::vector<float> head_stats_;         // (2, B, NH): the attention kernel's largest logits, then entropy sums
    AttentionStats attention_stats_{};      // into head_stats_
    std::vector<float> row_max_;            // (N) the cross-entropy's largest logit per row (log Z: a_.logz)
};

}  // namespace hlat
