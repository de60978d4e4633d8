// The LLaMA decoder: parameters, gradients and activations in flat buffers, and
// the forward and backward passes over one micro-batch.
//
// Letters as in kernels.h: B batch, T sequence, C dim, V vocab, L layers,
// NH/NKV heads, HD head dim, H hidden dim, QKV = (NH + 2*NKV)*HD, N = B*T.
// A tensor-parallel shard holds NH, NKV, H and V divided by the group size;
// the shapes below are then the shard's.
#pragma once

#include "trainer/model/aligned.h"
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
#include <utility>
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
    // Sequence parallelism's pair: chunk (n floats) = this rank's n-float
    // part of the group's sum of full (size() * n floats); and full = every
    // rank's chunk in rank order (chunk may be full's own slot: in place).
    virtual void reduce_scatter_sum(const float* full, float* chunk, long n) = 0;
    virtual void allgather(const float* chunk, float* full, long n) = 0;
    virtual void allgather(const bf16* chunk, bf16* full, long n) = 0;
};

// The part of the model one tensor-parallel rank holds; all of it at size 1.
struct ShardShape {
    int rank = 0, size = 1;
    int n_heads, n_kv_heads;  // NH/size, NKV/size
    int hidden_dim;           // H/size
    int vocab_size;           // V/size
    int vocab_start;          // first token id of this rank's range
    // With fewer kv heads than ranks (grouped-query attention, NKV < size)
    // each rank holds the one kv head its query heads read, shared with the
    // kv_replicas - 1 other ranks of its kv group: n_kv_heads is 1 then.
    int kv_head_start = 0;  // the first kv head of the whole model this rank holds
    int kv_replicas = 1;    // ranks holding the same kv heads
    bool shares_kv() const { return kv_replicas > 1; }
    bool leads_kv_group() const { return rank % kv_replicas == 0; }
};
// Throws when NH, H or V is not divisible by size, or NKV neither divisible by
// size nor a divisor of it.
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
    // The last shared_rows rows of each layer's slice are the same on every
    // rank of this rank's kv group (qkv_proj's k and v heads when NKV < TP).
    long shared_rows = 0;
    long numel() const { return (layers ? layers : 1) * rows * cols; }
};

// The parameter table of a shard (of the whole model at size 1), in buffer order.
std::vector<TensorKind> tensor_table(const ModelConfig& config, const ShardShape& shard);

// The ranges [begin, end) of the flat buffer where tensor k's floats count on
// this shard in a sum over the tensor-parallel group, so that each float of
// the whole model counts once: all of a split tensor; a replicated one on rank
// 0 only; shared kv rows on the first rank of each kv group only.
std::vector<std::pair<long, long>> counted_ranges(const TensorKind& k, const ShardShape& shard);

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
    float* gate_up;       // (L, B, T, 2*H); null in the bf16 modes (Bf16Activations::gate_up)
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
// linear layers, kept for the weight gradients, attention's, and SwiGLU's
// (gate_up, stored in bf16 by its product).
struct Bf16Activations {
    bf16* attn_norm;   // (L, B, T, C) input of qkv_proj
    bf16* qkv_heads;   // (L, B, NH + 2 NKV, T, HD) attention's input, q and k after RoPE; null with
                       // precision.attention = fp32
    bf16* att_out;     // (L, B, T, NH*HD) input of o_proj
    bf16* ffn_norm;    // (L, B, T, C) input of gate_up_proj
    bf16* gate_up;     // (L, B, T, 2*H) input of SwiGLU, kept for its backward
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
    // With sequence_parallel (Korthikanti et al. 2022; needs the group, and B*T
    // divisible by its size) the stream's regions, the RMSNorms and the
    // residual adds, hold only this rank's block of the B*T token rows: each
    // row-parallel matmul's all-reduce becomes a reduce-scatter into the
    // block, and each column-parallel matmul's input is all-gathered from
    // every rank's block (again in backward, for the weight gradient).
    Model(const ModelConfig& config, int B, int T, bool checkpoint_attention,
          const PrecisionConfig& precision = {}, TensorParallelGroup* tp = nullptr, bool sequence_parallel = false);

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
    bool sequence_parallel() const { return sp_; }
    // Token rows of the stream this rank holds: B*T, or B*T/TP under sequence parallelism.
    long stream_rows() const { return stream_rows_; }
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
    const Bf16Activations& bf16_activations() const { return a16_; }
    const std::vector<TensorKind>& tensor_kinds() const { return kinds_; }

    // Bytes of the activations kept for backward, and what they would be
    // without activation checkpointing.
    // Under sequence parallelism these include the one-layer buffers the
    // gathers fill (sequence_parallel_buffer_bytes).
    long activation_bytes() const {
        // qkv16_ and stream16_: products stored in bf16 for their one reader,
        // as the one layer's fp32 sums they replace were counted in acts_.
        return activation_floats_ * 4 + (long)(acts_bf16_.size() + qkv16_.size() + stream16_.size()) * 2 +
               sequence_parallel_buffer_bytes();
    }
    long activation_bytes_without_checkpointing() const;
    // The part of activation_bytes that sequence parallelism splits: the
    // residual stream, the RMSNorms' outputs (fp32 or bf16) and their 1/rms.
    long stream_activation_bytes() const;
    // What sequence parallelism adds instead, whatever the model's depth: one
    // (B*T, C) fp32 buffer for a gathered input, a matmul's full output or a
    // gathered gradient, and in the bf16 modes one (B*T, C) bf16 buffer for a
    // gathered bf16 input. 0 without sequence parallelism.
    long sequence_parallel_buffer_bytes() const { return (long)full_.size() * 4 + (long)full16_.size() * 2; }

  private:
    // Activations and backward scratch for the shapes and precision given.
    void allocate_activations();
    void allocate_scratch();
    float* attention_scratch();
    void attention_layer_forward(int l, float* qkv, float* att, float* att_out);
    void attention_layer_backward(int l, const float* att);
    // What attention computes and moves, for the profile (model.cpp).
    double attention_flops(int products) const;
    double attention_bytes(const float* stored_probs, int e, bool backward) const;
    // Layer l's qk-norm (model.qk_norm) on qkv, the matmul's output, in
    // place; and its backward on d_qkv_ (RoPE's input gradient) in place.
    void qk_norm_layer_forward(int l, float* qkv);
    void qk_norm_layer_backward(int l);
    // Attention's products take bf16 operands (the bf16 modes, unless precision.attention = fp32).
    bool attention_bf16() const { return precision_.bf16_compute() && !precision_.attention_fp32; }
    // Whether the qkv product is stored in bf16 by the product itself: where
    // its only reader is RoPE into attention's bf16 operands (no qk-norm,
    // which reads the fp32 sums). The fp32 sums rounded, as RoPE rounded them
    // as read, but for denormals (oneDNN flushes them to zero). Config M, a
    // Xeon with AMX: 22 -> 14.1-15.2 ms a step, and RoPE reads half the bytes.
    bool qkv_in_bf16() const { return attention_bf16() && !config_.qk_norm; }
    // The linear layers' bf16 weights (weights16_), and the one for a weight
    // pointing into params_.
    void make_bf16_weights();
    const Bf16Weight& weight16(const float* weight) const;
    void pack_bf16_weights();
    // SwiGLU between the gate_up and down matmuls, forward and backward.
    void swiglu_layer_forward(float* out, bf16* out16, const float* gate_up, const bf16* gate_up16);
    void swiglu_layer_backward(const float* gate_up, const bf16* gate_up16);
    // The tensor kind a pointer into params_ or grads_ falls in (the profile's label).
    const std::string& kind_name_of(const float* p) const;
    // The matmuls of the layers, in fp32 or bf16 as the precision says; weight
    // points into params_. In the bf16 modes the input is inp16, a slot of
    // acts_bf16_ (narrowed from inp first when inp is given), the output
    // gradient dout16, or dout rounded to bf16 when dout is given, made once
    // into dout_grad_ for both backward products; out and dinp are left
    // unrounded for their reader to round.
    void linear_forward(float* out, const float* inp, bf16* inp16, const float* weight, int N, int IC, int OC);
    // The bf16 modes' linear_forward for an output read only as bf16 values:
    // stored in bf16 by the product itself.
    void linear_forward_narrowed(bf16* out16, const float* inp, bf16* inp16, const float* weight, int N, int IC,
                                 int OC);
    // With dinp16 (the bf16 modes), the input gradient is stored in bf16 by
    // the product itself, there and not in dinp: for a gradient read only
    // as bf16 values (SwiGLU's backward).
    void linear_backward(float* dinp, float* dweight, const float* dout, const bf16* dout16, const float* inp,
                         const bf16* inp16, const float* weight, int N, int IC, int OC, bf16* dinp16 = nullptr);
    // The steps around the matmuls that differ by precision: RMSNorm into the
    // next matmul's input; a row-parallel matmul's output added to the
    // residual stream; a matmul's input gradient through an RMSNorm into the
    // stream's gradient (each with the tensor-parallel all-reduce between).
    void norm_forward(float* out, bf16* out16, float* rstd, const float* inp, const float* weight);
    void project_into_stream(float* out, const float* inp, bf16* inp16, const float* weight, int IC,
                             const float* stream, bool in_bf16);
    void add_to_stream(float* out, float* linear_out, const float* stream);
    const bf16* norm_backward(float* d_stream, float* dweight, float* d_norm, const float* inp,
                              const float* weight, const float* rstd, bool round_stream);
    // Sequence parallelism's all-gathers (model_sequence_parallel.cpp): a
    // norm's output rows (fp32, or bf16 in the bf16 modes) into the full
    // input of a column-parallel matmul, as linear_forward/backward take it
    // (inp, inp16); the stream gradient's rows into a matmul's full output
    // gradient (dout, dout16). Without it, the rows themselves (their bf16
    // copy where norm_backward made one).
    std::pair<const float*, bf16*> gathered_input(const float* rows, bf16* rows16);
    std::pair<const float*, const bf16*> gathered_stream_grad(const float* d_rows, const bf16* d_rows16);
    // Where a row-parallel matmul writes its output: full_ under sequence
    // parallelism (add_to_stream reduce-scatters it into the stream's rows),
    // else the stream slot itself.
    float* row_parallel_output(float* stream_slot) { return sp_ ? full_.data() : stream_slot; }
    // The embedding's forward into the stream's rows, and its backward from them.
    void embedding_forward_rows(const int32_t* inputs);
    void embedding_backward_rows(const float* d_rows);
    // An RMSNorm's backward over this rank's rows under sequence
    // parallelism: into d_stream's rows, and its weight's gradient from those
    // rows summed over the group, added to dweight.
    void norm_backward_rows(float* d_stream, float* dweight, const float* d_norm_rows, const float* inp,
                            const float* weight, const float* rstd);
    // Shared kv heads (NKV < TP): each rank's k and v weight gradient holds
    // only what its own query heads contribute. Before layer l's qkv_proj
    // backward, its k and v rows' accumulated gradient is set aside (and
    // zeroed); after it, this micro-batch's part is summed over the kv group
    // and added back, so accumulated micro-batches are not summed twice.
    void set_aside_shared_kv_grads(int l);
    void sum_shared_kv_grads(int l);
    // The mean cross-entropy of the logits against targets, the probabilities
    // left in a_.logits for backward.
    float loss(const int32_t* targets);
    float* logits_backward(float loss_scale);
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
    bool sp_ = false;
    long stream_rows_ = 0;
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
    AlignedVector<float> params_, grads_;
    ParameterTensors p_, g_;
    AlignedVector<float> acts_;
    long activation_floats_ = 0;
    ActivationTensors a_;
    AlignedVector<bf16> acts_bf16_;
    Bf16Activations a16_{};  // all null in fp32
    // Backward scratch, one micro-batch and one layer at a time.
    AlignedVector<float> d_residual_, d_norm_, d_qkv_, d_att_out_, d_gate_up_, d_swiglu_;
    AlignedVector<bf16> dout16_;  // a matmul's output gradient narrowed, in the bf16 modes
    AlignedVector<bf16> d_swiglu16_;  // the bf16 modes' d_swiglu_, stored in bf16 by its product
    AlignedVector<bf16> stream16_;  // a projection into the stream, stored in bf16 (bf16 modes, one rank)
    AlignedVector<bf16> qkv16_;  // the qkv product, stored in bf16 (qkv_in_bf16)
    Bf16OutputGrad dout_grad_;  // the same as both backward products read it
    AlignedVector<float> att_scratch_;  // per OpenMP thread
    std::vector<float> qk_dweight_;   // (2 HD) under tensor parallelism: one layer's qk-norm gain gradients
    // Sequence parallelism's buffers: full_ (B*T, C) and, in the bf16 modes,
    // full16_ (B*T, C) (sequence_parallel_buffer_bytes); a reduce-scattered
    // norm input gradient (stream_rows, C); a norm weight's gradient (C).
    AlignedVector<float> full_;
    AlignedVector<bf16> full16_;
    AlignedVector<float> d_norm_rows_, norm_dweight_;
    // The k and v rows of one layer's qkv_proj gradient, this micro-batch's,
    // at their kv group's place among all kv heads (NKV, 2, HD, C), summed
    // over the group when kv heads are shared (model_sequence_parallel.cpp).
    AlignedVector<float> kv_grads_, kv_grads_before_;
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
