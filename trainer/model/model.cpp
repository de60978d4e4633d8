#include "trainer/model/model.h"

#include "trainer/model/kernel_profile.h"
#include "trainer/model/kernels.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/vocab_parallel.h"

#include <fmt/format.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <utility>

namespace hlat {

ShardShape shard_shape(const ModelConfig& c, int rank, int size) {
    auto check = [&](const char* what, int n) {
        if (n % size != 0)
            throw std::runtime_error(fmt::format("tensor parallelism {} needs {} ({}) divisible by it", size, what, n));
        return n / size;
    };
    ShardShape s;
    s.rank = rank;
    s.size = size;
    s.n_heads = check("model.n_heads", c.n_heads);
    if (c.n_kv_heads % size == 0) {
        s.n_kv_heads = c.n_kv_heads / size;
        s.kv_head_start = rank * s.n_kv_heads;
    } else if (size % c.n_kv_heads == 0) {
        // Fewer kv heads than ranks: size / NKV consecutive ranks share one,
        // the kv head their query heads (a contiguous range) all read.
        s.n_kv_heads = 1;
        s.kv_replicas = size / c.n_kv_heads;
        s.kv_head_start = rank / s.kv_replicas;
    } else {
        throw std::runtime_error(fmt::format(
            "tensor parallelism {} needs model.n_kv_heads ({}) divisible by it or dividing it", size, c.n_kv_heads));
    }
    s.hidden_dim = check("model.hidden_dim", c.hidden_dim);
    s.vocab_size = check("model.vocab_size", c.vocab_size);
    s.vocab_start = rank * s.vocab_size;
    return s;
}

std::vector<TensorKind> tensor_table(const ModelConfig& config, const ShardShape& shard) {
    const long V = shard.vocab_size, C = config.dim, H = shard.hidden_dim, HD = config.head_dim();
    const long QKV = (shard.n_heads + 2L * shard.n_kv_heads) * HD, CA = shard.n_heads * HD;
    const int L = config.n_layers;
    // The parameter table: every loop over parameters (I/O, norms, optimizer,
    // sharding, replica hashes) walks it instead of naming tensors one by one.
    std::vector<TensorKind> kinds;
    long offset = 0;
    auto add = [&](const char* name, int layers, long rows, long cols, bool norm_or_embedding) {
        kinds.push_back({name, layers, rows, cols, offset, norm_or_embedding, /*replicated=*/cols == 1});
        offset += kinds.back().numel();
    };
    add("embed_tokens", 0, V, C, true);
    add("input_layernorm", L, C, 1, true);
    add("qkv_proj", L, QKV, C, false);
    if (shard.shares_kv()) kinds.back().shared_rows = 2L * shard.n_kv_heads * HD;
    // Only in qk-norm models, so that other checkpoints keep their layout.
    if (config.qk_norm) {
        add("q_norm", L, HD, 1, true);
        add("k_norm", L, HD, 1, true);
    }
    add("o_proj", L, C, CA, false);
    add("post_attention_layernorm", L, C, 1, true);
    add("gate_up_proj", L, 2 * H, C, false);
    add("down_proj", L, C, H, false);
    add("norm", 0, C, 1, true);
    add("lm_head", 0, V, C, false);
    return kinds;
}

std::vector<std::pair<long, long>> counted_ranges(const TensorKind& k, const ShardShape& shard) {
    const long begin = k.offset, end = k.offset + k.numel();
    if (k.replicated && shard.rank != 0) return {};
    if (k.replicated || k.shared_rows == 0 || shard.leads_kv_group()) return {{begin, end}};
    std::vector<std::pair<long, long>> out;
    const long slice = k.rows * k.cols, own = (k.rows - k.shared_rows) * k.cols;
    for (int l = 0; l < (k.layers ? k.layers : 1); l++) out.push_back({begin + l * slice, begin + l * slice + own});
    return out;
}

Model::Model(const ModelConfig& config, int B, int T, bool checkpoint_attention, const PrecisionConfig& precision,
             TensorParallelGroup* tp, bool sequence_parallel)
    : config_(config),
      precision_(precision),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      shard_(shard_shape(config, tp_ ? tp_->rank() : 0, tp_ ? tp_->size() : 1)),
      sp_(sequence_parallel && tp_),
      stream_rows_(sp_ ? (long)B * T / tp_->size() : (long)B * T),
      B_(B),
      T_(T),
      checkpoint_attention_(checkpoint_attention) {
    const long N = (long)B * T;
    if (sp_ && N % tp_->size() != 0)
        throw std::runtime_error(fmt::format("sequence parallelism over {} ranks needs batch_size x seq_len ({}) "
                                             "divisible by it",
                                             tp_->size(), N));
    kinds_ = tensor_table(config, shard_);
    long offset = kinds_.back().offset + kinds_.back().numel();
    params_.assign(offset, 0.0f);
    grads_.assign(offset, 0.0f);
    if (precision.bf16_compute()) make_bf16_weights();
    auto point = [&](float* base) {
        // Null for a tensor this model does not have (q_norm, k_norm without qk_norm).
        auto at = [&](const char* name) -> float* {
            for (const TensorKind& k : kinds_)
                if (k.name == name) return base + k.offset;
            return nullptr;
        };
        return ParameterTensors{at("embed_tokens"), at("input_layernorm"), at("qkv_proj"),
                                at("q_norm"),       at("k_norm"),          at("o_proj"),
                                at("post_attention_layernorm"), at("gate_up_proj"), at("down_proj"),
                                at("norm"),         at("lm_head")};
    };
    p_ = point(params_.data());
    g_ = point(grads_.data());

    allocate_activations();
    int half = config.head_dim() / 2;
    rope_cos_.assign((long)T * half, 0.0f);
    rope_sin_.assign((long)T * half, 0.0f);
    rope_tables(rope_cos_.data(), rope_sin_.data(), T, config.head_dim(), (float)config.rope_theta);
    inputs_.assign(N, 0);
    targets_.assign(N, 0);
}

void Model::allocate_activations() {
    const long V = shard_.vocab_size, C = config_.dim, L = config_.n_layers, H = shard_.hidden_dim;
    const long NH = shard_.n_heads, NKV = shard_.n_kv_heads, HD = config_.head_dim();
    const long QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    const long B = B_, T = T_, N = B * T, R = stream_rows_;  // R: the stream's rows on this rank
    const bool bf16_mode = precision_.bf16_compute();
    const long qk_layers = config_.qk_norm ? L : 0;
    // One allocation, carved in the order of the struct. The bf16 modes keep
    // the linear layers' and SwiGLU's inputs in bf16 only (a16_), and the fp32
    // sums of attention's output and (with bf16 attention, whose input is then
    // bf16 only) of qkv for one layer at a time, or none where qkv is stored
    // in bf16 by its product (qkv_in_bf16).
    const long f32_inputs = bf16_mode ? 0 : 1;
    const long qkv_layers = qkv_in_bf16() ? 0 : attention_bf16() ? 1 : L, fp32_sum_layers = bf16_mode ? 1 : L;
    const long sizes[] = {
        (L + 1) * R * C,                                    // residual
        f32_inputs * L * R * C,                             // attn_norm
        L * R,                                              // attn_rstd
        qkv_layers * N * QKV,                               // qkv
        checkpoint_attention_ ? 0 : L * B * NH * T * T,     // att
        fp32_sum_layers * N * CA,                           // att_out
        L * R * C,                                          // residual_mid
        f32_inputs * L * R * C,                             // ffn_norm
        L * R,                                              // ffn_rstd
        f32_inputs * L * N * 2 * H,                         // gate_up (bf16 modes: stored in bf16 only)
        f32_inputs * L * N * H,                             // swiglu
        f32_inputs * R * C,                                 // final_norm
        R,                                                  // final_rstd
        N * V,                                              // logits
        N,                                                  // losses
        N,                                                  // logz
        qk_layers * N * (NH + NKV) * HD,                    // qk_inp
        qk_layers * N * (NH + NKV)};                        // qk_rstd
    constexpr int kTensors = sizeof(sizes) / sizeof(sizes[0]);
    activation_floats_ = 0;
    for (long s : sizes) activation_floats_ += s;
    acts_.assign(activation_floats_, 0.0f);
    float* ptrs[kTensors];
    float* cursor = acts_.data();
    for (int i = 0; i < kTensors; i++) {
        ptrs[i] = sizes[i] ? cursor : nullptr;
        cursor += sizes[i];
    }
    a_ = ActivationTensors{ptrs[0],  ptrs[1],  ptrs[2],  ptrs[3],  ptrs[4],  ptrs[5],
                           ptrs[6],  ptrs[7],  ptrs[8],  ptrs[9],  ptrs[10], ptrs[11],
                           ptrs[12], ptrs[13], ptrs[14], ptrs[15], ptrs[16], ptrs[17]};
    static_assert(kTensors == 18, "one pointer per ActivationTensors field");
    if (tp_ && config_.qk_norm) qk_dweight_.assign(2 * HD, 0.0f);
    if (bf16_mode) {
        const long heads = attention_bf16() ? L * N * QKV : 0;
        acts_bf16_.assign(L * (2 * R * C + N * (CA + 3 * H)) + heads + R * C, 0);
        bf16* cursor16 = acts_bf16_.data();
        auto carve = [&](long n) { return std::exchange(cursor16, cursor16 + n); };
        a16_.attn_norm = carve(L * R * C);
        a16_.qkv_heads = heads ? carve(heads) : nullptr;
        a16_.att_out = carve(L * N * CA);
        a16_.ffn_norm = carve(L * R * C);
        a16_.gate_up = carve(L * N * 2 * H);
        a16_.swiglu = carve(L * N * H);
        a16_.final_norm = carve(R * C);
    }
    allocate_scratch();
}

// The products' outputs that are stored in bf16 (the bf16 modes), and the
// backward's scratch; in the bf16 modes SwiGLU's gradient goes narrowed into
// dout16_.
void Model::allocate_scratch() {
    const long C = config_.dim, V = shard_.vocab_size, H = shard_.hidden_dim;
    const long NH = shard_.n_heads, NKV = shard_.n_kv_heads, HD = config_.head_dim();
    const long QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    const long N = (long)B_ * T_, R = stream_rows_;
    const bool bf16_mode = precision_.bf16_compute();
    if (bf16_mode) dout16_.assign(std::max({N * V, N * 2 * H, N * QKV, N * C}), 0);
    if (bf16_mode && !tp_) stream16_.assign(N * C, 0);
    if (qkv_in_bf16()) qkv16_.assign(N * QKV, 0);
    d_residual_.assign(R * C, 0.0f);
    d_norm_.assign(N * C, 0.0f);
    if (sp_) {
        full_.assign(N * C, 0.0f);
        if (bf16_mode) full16_.assign(N * C, 0);
        d_norm_rows_.assign(R * C, 0.0f);
        norm_dweight_.assign(C, 0.0f);
    }
    if (shard_.shares_kv()) {
        kv_grads_.assign((long)config_.n_kv_heads * 2 * HD * C, 0.0f);
        kv_grads_before_.assign(2 * NKV * HD * C, 0.0f);
    }
    d_qkv_.assign(N * QKV, 0.0f);
    d_att_out_.assign(N * CA, 0.0f);
    if (!bf16_mode) d_gate_up_.assign(N * 2 * H, 0.0f);
    if (bf16_mode) d_swiglu16_.assign(N * H, 0);
    else d_swiglu_.assign(N * H, 0.0f);
}

long Model::stream_activation_bytes() const {
    const long C = config_.dim, L = config_.n_layers, R = stream_rows_;
    // residual, residual_mid; attn_norm, ffn_norm, final_norm; their 1/rms.
    const long stream_floats = (2 * L + 1) * R * C, rstd_floats = (2 * L + 1) * R;
    const long norm_values = (2 * L + 1) * R * C, norm_bytes = precision_.bf16_compute() ? 2 : 4;
    return (stream_floats + rstd_floats) * 4 + norm_values * norm_bytes;
}

long Model::activation_bytes_without_checkpointing() const {
    if (!checkpoint_attention_) return activation_bytes();
    long att = (long)config_.n_layers * B_ * shard_.n_heads * T_ * T_;
    return activation_bytes() + att * 4;
}

void Model::init_weights(unsigned long long seed) {
    std::mt19937_64 rng(seed);
    const int L = config_.n_layers;
    for (const TensorKind& k : kinds_) {
        float* base = params_.data() + k.offset;
        if (k.cols == 1) {  // norm weights start at one
            std::fill(base, base + k.numel(), 1.0f);
            continue;
        }
        bool output_projection = k.name == "o_proj" || k.name == "down_proj";
        long per_layer = k.rows * k.cols;
        for (int l = 0; l < (k.layers ? k.layers : 1); l++) {
            double std = config_.init_std;
            if (output_projection && config_.init_scaling == InitScaling::PerLayer)
                std /= std::sqrt(2.0 * (l + 1));
            if (output_projection && config_.init_scaling == InitScaling::TotalLayers)
                std /= std::sqrt(2.0 * L);
            std::normal_distribution<float> dist(0.0f, (float)std);
            float* w = base + l * per_layer;
            for (long i = 0; i < per_layer; i++) w[i] = dist(rng);
        }
    }
}

float* Model::attention_scratch() {
    // Sized at use, not construction: the thread count may be set after the model exists.
    size_t need = (size_t)omp_get_max_threads() * AttentionScratch::floats(T_);
    if (att_scratch_.size() < need) att_scratch_.assign(need, 0.0f);
    return att_scratch_.data();
}

// The weights the linear layers multiply by: all matrices but the embedding.
static bool is_linear(const TensorKind& k) { return k.cols > 1 && k.name != "embed_tokens"; }

void Model::zero_grad() {
    for (const TensorKind& k : kinds_)
        if (!is_linear(k)) std::fill(grads_.begin() + k.offset, grads_.begin() + k.offset + k.numel(), 0.0f);
    overwrite_linear_grads_ = true;
}

long Model::state_bytes() const {
    long bytes = (long)(params_.size() + grads_.size()) * sizeof(float);
    for (const Bf16Weight& w : weights16_) bytes += w.bytes();
    return bytes;
}

// One Bf16Weight per linear layer's weight (per layer and per kind, and the lm_head).
void Model::make_bf16_weights() {
    for (const TensorKind& k : kinds_) {
        if (!is_linear(k)) continue;
        for (int l = 0; l < (k.layers ? k.layers : 1); l++) {
            weight16_at_[k.offset + l * k.rows * k.cols] = weights16_.size();
            weights16_.emplace_back((int)k.rows, (int)k.cols);
        }
    }
}

const Bf16Weight& Model::weight16(const float* weight) const {
    return weights16_[weight16_at_.at(weight - params_.data())];
}

// Layer l's part of a per-layer activation; null where the precision keeps
// none (the bf16 copies in fp32, the fp32 linear inputs in the bf16 modes).
template <typename T>
static T* layer_slot(T* base, int l, long per_layer) {
    return base ? base + l * per_layer : nullptr;
}

// The tensor kind a pointer into params_ or grads_ falls in, for the profile.
const std::string& Model::kind_name_of(const float* p) const {
    const long at = p - (p >= grads_.data() && p < grads_.data() + grads_.size() ? grads_.data() : params_.data());
    for (const TensorKind& k : kinds_)
        if (at >= k.offset && at < k.offset + k.numel()) return k.name;
    return kinds_.back().name;
}

// A GEMM's bytes as the profile counts them: both operands at e bytes an
// element (4 fp32, 2 bf16), the output at e_out (read too when it
// accumulates).
static double gemm_bytes(long m, long n, long k, int e, bool accumulate = false, int e_out = 4) {
    return (double)e * (m * k + k * n) + (double)e_out * m * n * (accumulate ? 2 : 1);
}

// A linear layer's input as the bf16 products read it: inp narrowed into
// inp16 where it comes in fp32 (inp null: inp16 holds it already).
static void narrow_input(const float* inp, bf16* inp16, long n) {
    if (!inp) return;
    KernelScope narrow("narrow to bf16", 6.0 * n);
    bf16_narrow(inp16, inp, n);
}

void Model::linear_forward(float* out, const float* inp, bf16* inp16, const float* weight, int N, int IC, int OC) {
    const bool bf16 = precision_.bf16_compute();
    const bool profiling = KernelProfile::active();
    KernelScope scope("gemm forward", gemm_bytes(N, OC, IC, bf16 ? 2 : 4), 2.0 * N * IC * OC,
                      profiling ? &kind_name_of(weight) : nullptr);
    if (!bf16) return matmul_forward(out, inp, weight, N, IC, OC);
    narrow_input(inp, inp16, (long)N * IC);
    matmul_forward_bf16(out, inp16, weight16(weight), N);
}

// The same product in the bf16 modes, stored in bf16 (out16): for an output
// read only as bf16 values.
void Model::linear_forward_narrowed(bf16* out16, const float* inp, bf16* inp16, const float* weight, int N, int IC,
                                    int OC) {
    KernelScope scope("gemm forward", gemm_bytes(N, OC, IC, 2, false, 2), 2.0 * N * IC * OC,
                      KernelProfile::active() ? &kind_name_of(weight) : nullptr);
    narrow_input(inp, inp16, (long)N * IC);
    matmul_forward_bf16(out16, inp16, weight16(weight), N);
}

void Model::linear_backward(float* dinp, float* dweight, const float* dout, const bf16* dout16, const float* inp,
                            const bf16* inp16, const float* weight, int N, int IC, int OC, bf16* dinp16) {
    const bool accumulate = !overwrite_linear_grads_;
    const bool bf16 = precision_.bf16_compute();
    const std::string* name = KernelProfile::active() ? &kind_name_of(weight) : nullptr;
    const int e = bf16 ? 2 : 4;
    if (bf16 && dout)
        dout_grad_.assign(dout, dout16_.data(), (long)N * OC);
    else if (bf16)
        dout_grad_.assign(dout16, (long)N * OC);
    {
        KernelScope scope("gemm dinput", gemm_bytes(N, IC, OC, e, false, dinp16 ? 2 : 4), 2.0 * N * IC * OC, name);
        if (bf16 && dinp16)
            matmul_dinput_bf16(dinp16, dout_grad_, weight16(weight), N);
        else if (bf16)
            matmul_dinput_bf16(dinp, dout_grad_, weight16(weight), N);
        else
            matmul_dinput(dinp, dout, weight, N, IC, OC);
    }
    KernelScope scope("gemm dweight", gemm_bytes(OC, IC, N, e, accumulate), 2.0 * N * IC * OC, name);
    if (bf16)
        matmul_dweight_bf16(dweight, dout_grad_, inp16, N, IC, OC, accumulate);
    else
        matmul_dweight(dweight, dout, inp, N, IC, OC, accumulate);
}

void Model::norm_forward(float* out, bf16* out16, float* rstd, const float* inp, const float* weight) {
    const int N = (int)stream_rows_, C = config_.dim;
    const float eps = (float)config_.norm_eps;
    KernelScope scope("rmsnorm forward", (double)N * C * (precision_.bf16_compute() ? 6 : 8));
    if (precision_.bf16_compute()) return rmsnorm_forward_bf16(out16, rstd, inp, weight, N, C, eps);
    rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}

// A row-parallel projection (o_proj, down_proj) added to the stream: out =
// stream + inp @ W^T. With in_bf16, in the bf16 modes on one rank, the
// product is stored in bf16 (stream16_), which is all the sum reads of it:
// half the bytes, and oneDNN's AMX kernels run o_proj faster into bf16 than
// into fp32 (config M, a Xeon with AMX: 6.7 -> 4.1-4.6 ms a step). The same
// values the sum rounded as read, but for denormals (oneDNN flushes them).
// Not down_proj: into bf16 (10.1 ms against 15.3) its K of 1,376 was summed
// in another order there, which would change the bf16 modes' numbers. Under
// tensor parallelism the partial products are summed over the ranks in fp32.
void Model::project_into_stream(float* out, const float* inp, bf16* inp16, const float* weight, int IC,
                                const float* stream, bool in_bf16) {
    const int N = B_ * T_, C = config_.dim;
    if (in_bf16 && precision_.bf16_compute() && !tp_) {
        linear_forward_narrowed(stream16_.data(), inp, inp16, weight, N, IC, C);
        const long n = (long)N * C;
        KernelScope scope("residual add", 10.0 * n);
        return residual_forward_bf16(out, stream16_.data(), stream, n, precision_.bf16_state());
    }
    float* linear_out = row_parallel_output(out);
    linear_forward(linear_out, inp, inp16, weight, N, IC, C);
    add_to_stream(out, linear_out, stream);
}

// In the bf16 modes linear_out is the matmul's unrounded sum. Under tensor
// parallelism each rank's partial output is rounded before the all-reduce
// (the reduce-scatter under sequence parallelism) sums them, as each rank's
// bf16 matmul would deliver it.
void Model::add_to_stream(float* out, float* linear_out, const float* stream) {
    const long n = stream_rows_ * config_.dim, all = (long)B_ * T_ * config_.dim;
    KernelScope scope("residual add", 12.0 * n);
    if (!precision_.bf16_compute() || tp_) {
        if (tp_ && precision_.bf16_compute()) bf16_round_inplace(linear_out, all);
        if (sp_) {
            tp_->reduce_scatter_sum(linear_out, out, n);  // this rank's rows of the sum
            linear_out = out;
        } else if (tp_) {
            tp_->allreduce_sum(linear_out, n);  // row-parallel: sum the partial outputs
        }
        residual_forward(out, linear_out, stream, n);
        return round_if_bf16_state(out, n);
    }
    residual_forward_bf16(out, linear_out, stream, n, precision_.bf16_state());
}

// d_norm is a matmul's input gradient (unrounded in the bf16 modes). The input
// of a column-parallel matmul is replicated: its gradient is the sum of every
// rank's part, each rounded first in the bf16 modes. With round_stream, the
// stream's gradient is left rounded to bf16 values where the stream is a bf16
// tensor. Returns that gradient narrowed to bf16 (in dout16_), the next
// matmul's output gradient, where the kernel wrote it in its own pass (the
// bf16 modes on one rank), else null.
const bf16* Model::norm_backward(float* d_stream, float* dweight, float* d_norm, const float* inp,
                                 const float* weight, const float* rstd, bool round_stream) {
    const int N = B_ * T_, C = config_.dim;
    if (precision_.bf16_compute() && !tp_) {
        KernelScope scope("rmsnorm backward", 18.0 * N * C);
        rmsnorm_backward_accumulate_bf16(d_stream, dweight, d_norm, inp, weight, rstd, N, C,
                                         {round_stream && precision_.bf16_state(), dout16_.data()});
        return dout16_.data();
    }
    {
        KernelScope scope("rmsnorm backward", 16.0 * N * C);
        if (tp_ && precision_.bf16_compute()) bf16_round_inplace(d_norm, (long)N * C);
        if (sp_) {
            tp_->reduce_scatter_sum(d_norm, d_norm_rows_.data(), stream_rows_ * C);
            norm_backward_rows(d_stream, dweight, d_norm_rows_.data(), inp, weight, rstd);
        } else {
            if (tp_) tp_->allreduce_sum(d_norm, (long)N * C);
            rmsnorm_backward_accumulate(d_stream, dweight, d_norm, inp, weight, rstd, N, C);
        }
    }
    if (round_stream) round_if_bf16_state(d_stream, stream_rows_ * C);
    return nullptr;
}

// The copies the bf16 matmuls read, once per optimizer step: each weight read
// in fp32 and written as the engine keeps it (Bf16Weight::bytes).
void Model::pack_bf16_weights() {
    double bytes = 0.0;
    if (KernelProfile::active())
        for (const auto& [offset, i] : weight16_at_)
            bytes += 4.0 * weights16_[i].out_features() * weights16_[i].in_features() + weights16_[i].bytes();
    KernelScope scope("pack bf16 weights", bytes);
    for (const auto& [offset, i] : weight16_at_) weights16_[i].assign(params_.data() + offset);
    weights_changed_ = false;
}

// out (N, H) = silu(gate) * up, from the gate_up matmul's output: in the bf16
// modes from gate_up16 (the product stored in bf16, kept for the backward)
// into out16; else from gate_up into out.
void Model::swiglu_layer_forward(float* out, bf16* out16, const float* gate_up, const bf16* gate_up16) {
    const int N = B_ * T_, H = shard_.hidden_dim;
    const bool bf16 = precision_.bf16_compute();
    KernelScope scope("swiglu forward", (double)N * H * (bf16 ? 6 : 12));
    if (bf16) return swiglu_forward_bf16(out16, gate_up16, N, H);
    swiglu_forward(out, gate_up, N, H);
}

// SwiGLU's output gradient (N, H) through SwiGLU into the gate_up gradient:
// from d_swiglu16_ and gate_up16 into dout16_ in the bf16 modes, from
// d_swiglu_ and gate_up into d_gate_up_ in fp32.
void Model::swiglu_layer_backward(const float* gate_up, const bf16* gate_up16) {
    const int N = B_ * T_, H = shard_.hidden_dim;
    const bool bf16 = precision_.bf16_compute();
    KernelScope scope("swiglu backward", (double)N * H * (bf16 ? 10 : 20));
    if (bf16) return swiglu_backward_bf16(dout16_.data(), d_swiglu16_.data(), gate_up16, N, H);
    swiglu_backward(d_gate_up_.data(), d_swiglu_.data(), gate_up, N, H);
}

void Model::round_if_bf16_state(float* x, long n) {
    if (!precision_.bf16_state()) return;
    KernelScope scope("round to bf16", 8.0 * n);
    bf16_round_inplace(x, n);
}

float Model::forward(const int32_t* inputs, const int32_t* targets) {
    const int B = B_, T = T_, N = B * T;
    const int C = config_.dim, V = shard_.vocab_size, L = config_.n_layers, H = shard_.hidden_dim;
    const int NH = shard_.n_heads, NKV = shard_.n_kv_heads, HD = config_.head_dim();
    const int QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    const ParameterTensors& p = p_;
    const ActivationTensors& a = a_;
    const bool bf16_mode = precision_.bf16_compute();

    if (bf16_mode && weights_changed_) pack_bf16_weights();
    std::copy(inputs, inputs + N, inputs_.begin());
    embedding_forward_rows(inputs);
    const long RC = stream_rows_ * C;  // the stream's values on this rank, per layer
    for (int l = 0; l < L; l++) {
        const long nc = (long)l * RC;
        float* res = a.residual + nc;
        float* an = layer_slot(a.attn_norm, l, RC);
        bf16* an16 = layer_slot(a16_.attn_norm, l, RC);
        float* qkv = attention_bf16() ? a.qkv : a.qkv + (long)l * N * QKV;
        float* att = a.att ? a.att + (long)l * B * NH * T * T : nullptr;
        float* att_out = bf16_mode ? a.att_out : a.att_out + (long)l * N * CA;
        float* mid = a.residual_mid + nc;
        float* fn = layer_slot(a.ffn_norm, l, RC);
        bf16* fn16 = layer_slot(a16_.ffn_norm, l, RC);
        float* gu = bf16_mode ? nullptr : a.gate_up + (long)l * N * 2 * H;
        bf16* gu16 = layer_slot(a16_.gate_up, l, (long)N * 2 * H);
        float* sw = layer_slot(a.swiglu, l, (long)N * H);
        bf16* sw16 = layer_slot(a16_.swiglu, l, (long)N * H);
        float* next = a.residual + nc + RC;

        norm_forward(an, an16, a.attn_rstd + l * stream_rows_, res, p.attn_norm + (long)l * C);
        auto [x, x16] = gathered_input(an, an16);
        if (qkv_in_bf16())
            linear_forward_narrowed(qkv16_.data(), x, x16, p.qkv + (long)l * QKV * C, N, C, QKV);
        else
            linear_forward(qkv, x, x16, p.qkv + (long)l * QKV * C, N, C, QKV);
        attention_layer_forward(l, qkv, att, att_out);
        if (measure_internals_ && targets) add_attention_internals(l);
        project_into_stream(mid, att_out, layer_slot(a16_.att_out, l, (long)N * CA), p.o_proj + (long)l * C * CA, CA,
                            res, true);
        norm_forward(fn, fn16, a.ffn_rstd + l * stream_rows_, mid, p.ffn_norm + (long)l * C);
        auto [y, y16] = gathered_input(fn, fn16);
        if (bf16_mode)
            linear_forward_narrowed(gu16, y, y16, p.gate_up + (long)l * 2 * H * C, N, C, 2 * H);
        else
            linear_forward(gu, y, y16, p.gate_up + (long)l * 2 * H * C, N, C, 2 * H);
        swiglu_layer_forward(sw, sw16, gu, gu16);
        project_into_stream(next, sw, sw16, p.down + (long)l * C * H, H, mid, false);
        if (measure_internals_ && targets) add_residual_internals(l, next);
    }
    norm_forward(a.final_norm, a16_.final_norm, a.final_rstd, a.residual + L * RC, p.final_norm);
    auto [z, z16] = gathered_input(a.final_norm, a16_.final_norm);
    linear_forward(a.logits, z, z16, p.lm_head, N, C, V);
    if (targets) return loss(targets);
    if (bf16_mode) bf16_round_inplace(a.logits, (long)N * V);  // the logits are a bf16 tensor
    return 0.0f;
}

float Model::loss(const int32_t* targets) {
    const int N = B_ * T_, V = shard_.vocab_size;
    float* logits = a_.logits;
    float* row_max = measure_internals_ ? row_max_.data() : nullptr;
    std::copy(targets, targets + N, targets_.begin());
    KernelScope scope("cross-entropy forward", 8.0 * N * V);
    // The loss itself always comes from the fp32 log-sum-exp; the bf16 softmax
    // setting rounds the probabilities that backward turns into gradients.
    if (tp_) {
        if (precision_.bf16_compute()) bf16_round_inplace(logits, (long)N * V);
        vocab_parallel_crossentropy_forward(logits, a_.losses, a_.logz, targets, N, V, shard_.vocab_start, *tp_,
                                            row_max);
    } else if (precision_.bf16_compute()) {
        crossentropy_forward_bf16(logits, a_.losses, a_.logz, targets, N, V, row_max);
    } else {
        crossentropy_forward(logits, a_.losses, a_.logz, targets, N, V, row_max);
    }
    if (measure_internals_) add_logit_internals();
    if (precision_.softmax_bf16) bf16_round_inplace(logits, (long)N * V);
    double sum = 0.0, z_sum = 0.0;
    sequence_losses_.assign(B_, 0.0f);
    for (int n = 0; n < N; n++) {
        sum += a_.losses[n];
        z_sum += (double)a_.logz[n] * a_.logz[n];
        sequence_losses_[n / T_] += a_.losses[n] / T_;
    }
    z_loss_term_ = config_.z_loss > 0.0 ? config_.z_loss * z_sum / N : NAN;
    return (float)(sum / N);
}

// One pass over the logits' gradient, right after the cross-entropy wrote
// it: each sequence's share of it (its norm, unscaled; over the vocabulary
// shards under tensor parallelism), and the rows `hlat replay --without`
// drops set to zero, so nothing of them reaches the weights.
void Model::measure_and_drop_sequences(float* dlogits, bf16* d16, float loss_scale) {
    const int B = B_, T = T_, V = shard_.vocab_size;
    const long row = (long)T * V;
    sequence_grad_norms_.assign(B, 0.0f);
    KernelScope scope("sequence grad norms", (dlogits ? 4.0 : 2.0) * B * row);
    for (int b = 0; b < B; b++) {
        double squares = 0.0;
        if (dlogits) {
            const float* x = dlogits + b * row;
#pragma omp parallel for simd reduction(+ : squares)
            for (long i = 0; i < row; i++) squares += (double)x[i] * x[i];
        } else {
            const bf16* x = d16 + b * row;
#pragma omp parallel for simd reduction(+ : squares)
            for (long i = 0; i < row; i++) {
                const float v = bf16_to_float(x[i]);
                squares += (double)v * v;
            }
        }
        sequence_grad_norms_[b] = (float)squares;
        if (b < (int)dropped_.size() && dropped_[b]) {
            if (dlogits) std::fill(dlogits + b * row, dlogits + (b + 1) * row, 0.0f);
            else std::fill(d16 + b * row, d16 + (b + 1) * row, bf16{0});
        }
    }
    if (tp_) tp_->allreduce_sum(sequence_grad_norms_.data(), B);
    for (float& g : sequence_grad_norms_) g = std::sqrt(g) / loss_scale;
}

void Model::measure_internals(bool on) {
    measure_internals_ = on;
    if (!on) return;
    internals_.reset(config_.n_layers, config_.n_heads);
    const long BNH = (long)B_ * shard_.n_heads;
    if (head_stats_.empty()) {
        head_stats_.assign(2 * BNH, 0.0f);
        attention_stats_ = {head_stats_.data(), head_stats_.data() + BNH};
        row_max_.assign((long)B_ * T_, 0.0f);
    }
}

// Layer l's heads from the kernel's (B, NH) slots into the sums, at their
// place among all the model's heads: a shard holds a contiguous range of them.
void Model::add_attention_internals(int l) {
    const int B = B_, NH = shard_.n_heads;
    const float* logit_max = attention_stats_.logit_max;
    const float* entropy_sum = attention_stats_.entropy_sum;
    for (int h = 0; h < NH; h++) {
        const size_t at = (size_t)l * config_.n_heads + (size_t)shard_.rank * NH + h;
        float& m = internals_.attn_logit_max[at];
        for (int b = 0; b < B; b++) {
            const float x = logit_max[(long)b * NH + h];
            m = x > m || std::isnan(x) ? x : m;  // a NaN logit must show
            internals_.attn_entropy_sum[at] += entropy_sum[(long)b * NH + h];
        }
        internals_.attn_rows[at] += (double)B * T_;
    }
}

// One read of the stream leaving block l, just written (in the bf16 modes its
// values as stored).
void Model::add_residual_internals(int l, const float* stream) {
    const long n = stream_rows_ * config_.dim;  // this rank's rows (all of them without sequence parallelism)
    double squares = 0.0;
    float largest = 0.0f;
#pragma omp parallel for simd reduction(+ : squares) reduction(max : largest)
    for (long i = 0; i < n; i++) {
        squares += (double)stream[i] * stream[i];
        const float a = std::fabs(stream[i]);
        largest = a > largest ? a : largest;
    }
    internals_.residual_sum_squares[l] += squares;
    if (std::isnan(squares)) largest = NAN;  // a NaN in the stream must show in both
    float& m = internals_.residual_max_abs[l];
    m = largest > m || std::isnan(largest) ? largest : m;
    if (l == 0) internals_.residual_values += (double)n;
}

// Per row, from the cross-entropy pass: log Z and the largest logit over the
// whole vocabulary (under tensor parallelism both come after the kernel's
// all-reduces, the same on every rank).
void Model::add_logit_internals() {
    const int N = B_ * T_;
    double sum = 0.0;
    float logz_max = internals_.logz_max, logit_max = internals_.logit_max;
    for (int n = 0; n < N; n++) {
        const float z = a_.logz[n], x = row_max_[n];
        sum += z;
        logz_max = z > logz_max || std::isnan(z) ? z : logz_max;
        logit_max = x > logit_max || std::isnan(x) ? x : logit_max;
    }
    internals_.logz_sum += sum;
    internals_.logz_rows += N;
    internals_.logz_max = logz_max;
    internals_.logit_max = logit_max;
}

// Layer l's RoPE and attention: qkv (the matmul's output) into att_out, the
// probabilities into att when it is not null. Rotated q and k are bf16
// tensors in every bf16 mode, as under autocast.
void Model::attention_layer_forward(int l, float* qkv, float* att, float* att_out) {
    const int B = B_, T = T_;
    const int NH = shard_.n_heads, NKV = shard_.n_kv_heads, HD = config_.head_dim();
    const bool probs_bf16 = precision_.softmax_bf16;
    const long rows = (long)B * T, qkv_width = (long)(NH + 2 * NKV) * HD;
    if (config_.qk_norm) qk_norm_layer_forward(l, qkv);
    if (attention_bf16()) {
        bf16* heads = a16_.qkv_heads + (long)l * B * T * (NH + 2 * NKV) * HD;
        {
            KernelScope scope("rope forward", (qkv_in_bf16() ? 4.0 : 6.0) * rows * qkv_width);
            if (qkv_in_bf16())
                rope_forward_bf16(heads, qkv16_.data(), rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, HD);
            else
                rope_forward_bf16(heads, qkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, HD);
        }
        KernelScope scope("attention forward", attention_bytes(att, 2, false), attention_flops(2));
        attention_forward(att_out, att, attention_scratch(), heads, B, T, NH, NKV, HD, lookahead_, probs_bf16,
                          attention_stats());
        return;
    }
    {
        KernelScope scope("rope forward", 8.0 * rows * (NH + NKV) * HD);
        if (precision_.bf16_compute())
            rope_forward_bf16_values(qkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, HD);
        else
            rope_forward(qkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, HD);
    }
    KernelScope scope(precision_.bf16_compute() ? "attention forward (fp32 products)" : "attention forward",
                      attention_bytes(att, 4, false), attention_flops(2));
    attention_forward(att_out, att, attention_scratch(), qkv, B, T, NH, NKV, HD, lookahead_, probs_bf16,
                      attention_stats());
}

// Attention's products over the causal half of the scores, `products` of
// them (two forward; four backward, five when the probabilities are
// recomputed), 2 flops a multiply-add.
double Model::attention_flops(int products) const {
    return (double)products * B_ * shard_.n_heads * T_ * T_ * config_.head_dim();
}

// What attention moves besides its products' cache-resident blocks: q, k, v
// (e bytes each), its output or output gradient (fp32), the gradient of q, k,
// v in backward (fp32), and the stored probabilities (T x T fp32 per head,
// written forward and read backward) unless activation checkpointing
// recomputes them.
double Model::attention_bytes(const float* stored_probs, int e, bool backward) const {
    const double rows = (double)B_ * T_, HD = config_.head_dim();
    const double qkv = rows * (shard_.n_heads + 2 * shard_.n_kv_heads) * HD, out = rows * shard_.n_heads * HD;
    const double probs = stored_probs ? 4.0 * B_ * shard_.n_heads * T_ * T_ : 0.0;
    return e * qkv + 4.0 * out + (backward ? 4.0 * qkv : 0.0) + probs;
}

// Layer l's attention and RoPE backward: d_att_out_ into d_qkv_, then through
// RoPE, in place in fp32, narrowed into dout16_ in the bf16 modes. att: the
// layer's stored probabilities, or null.
void Model::attention_layer_backward(int l, const float* att) {
    const int B = B_, T = T_;
    const int NH = shard_.n_heads, NKV = shard_.n_kv_heads, HD = config_.head_dim();
    const long layer = (long)l * B * T * (NH + 2 * NKV) * HD;
    const bool probs_bf16 = precision_.softmax_bf16;
    float* dqkv = d_qkv_.data();
    {
        // d_att_out (o_proj's fp32 sums) is a bf16 tensor in the bf16 modes: bf16
        // attention rounds it as it narrows its operands; fp32 attention reads it rounded.
        const bool fp32_products_in_bf16_mode = precision_.bf16_compute() && !attention_bf16();
        KernelScope scope(fp32_products_in_bf16_mode ? "attention backward (fp32 products)" : "attention backward",
                          attention_bytes(att, attention_bf16() ? 2 : 4, true), attention_flops(att ? 4 : 5));
        if (attention_bf16()) {
            attention_backward(dqkv, attention_scratch(), d_att_out_.data(), a16_.qkv_heads + layer, att, B, T, NH,
                               NKV, HD, lookahead_, probs_bf16);
        } else {
            if (precision_.bf16_compute()) bf16_round_inplace(d_att_out_.data(), (long)d_att_out_.size());
            attention_backward(dqkv, attention_scratch(), d_att_out_.data(), a_.qkv + layer, att, B, T, NH, NKV, HD,
                               lookahead_, probs_bf16);
        }
    }
    const long qk = (long)B * T * (NH + NKV) * HD;
    if (config_.qk_norm) {
        // RoPE's input gradient in fp32, through qk-norm, then narrowed whole.
        {
            KernelScope scope("rope backward", 8.0 * qk);
            rope_backward(dqkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, HD);
        }
        qk_norm_layer_backward(l);
        if (!precision_.bf16_compute()) return;
        KernelScope scope("narrow to bf16", 6.0 * (double)d_qkv_.size());
        bf16_narrow(dout16_.data(), dqkv, (long)d_qkv_.size());
    } else if (precision_.bf16_compute()) {
        KernelScope scope("rope backward", 6.0 * (double)d_qkv_.size());
        rope_backward_bf16(dout16_.data(), dqkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, HD);
    } else {
        KernelScope scope("rope backward", 8.0 * qk);
        rope_backward(dqkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, HD);
    }
}

// In the bf16 modes qkv holds the matmul's fp32 sums: the q and k heads are
// rounded as read and normalised into bf16 values (rmsnorm_forward_bf16's
// rule), which RoPE then reads; the v heads stay for RoPE to round.
void Model::qk_norm_layer_forward(int l, float* qkv) {
    const int N = B_ * T_, NH = shard_.n_heads, NKV = shard_.n_kv_heads, HD = config_.head_dim();
    const long heads = (long)N * (NH + NKV);
    float* inp = a_.qk_inp + (long)l * heads * HD;
    float* rstd = a_.qk_rstd + (long)l * heads;
    const float* qw = p_.q_norm + (long)l * HD;
    const float* kw = p_.k_norm + (long)l * HD;
    const float eps = (float)config_.norm_eps;
    KernelScope scope("qk-norm forward", 12.0 * heads * HD);
    if (precision_.bf16_compute())
        qk_norm_forward_bf16(qkv, inp, rstd, qw, kw, N, NH, NKV, HD, eps);
    else
        qk_norm_forward(qkv, inp, rstd, qw, kw, N, NH, NKV, HD, eps);
}

// The gains are replicated under tensor parallelism but each rank sees only
// its own heads: their gradients are this rank's part, summed over the group
// (this micro-batch's alone, so that accumulated ones are not summed again).
void Model::qk_norm_layer_backward(int l) {
    const int N = B_ * T_, NH = shard_.n_heads, NKV = shard_.n_kv_heads, HD = config_.head_dim();
    const long heads = (long)N * (NH + NKV);
    const float* inp = a_.qk_inp + (long)l * heads * HD;
    const float* rstd = a_.qk_rstd + (long)l * heads;
    const float* qw = p_.q_norm + (long)l * HD;
    const float* kw = p_.k_norm + (long)l * HD;
    float* dq = tp_ ? qk_dweight_.data() : g_.q_norm + (long)l * HD;
    float* dk = tp_ ? qk_dweight_.data() + HD : g_.k_norm + (long)l * HD;
    if (tp_) std::fill(qk_dweight_.begin(), qk_dweight_.end(), 0.0f);
    KernelScope scope("qk-norm backward", 16.0 * heads * HD);
    if (precision_.bf16_compute())
        qk_norm_backward_bf16(d_qkv_.data(), dq, dk, inp, qw, kw, rstd, N, NH, NKV, HD);
    else
        qk_norm_backward(d_qkv_.data(), dq, dk, inp, qw, kw, rstd, N, NH, NKV, HD);
    if (!tp_) return;
    tp_->allreduce_sum(qk_dweight_.data(), 2L * HD);
    float* gq = g_.q_norm + (long)l * HD;
    float* gk = g_.k_norm + (long)l * HD;
    for (int i = 0; i < HD; i++) {
        gq[i] += qk_dweight_[i];
        gk[i] += qk_dweight_[HD + i];
    }
}

// The logits' gradient, written over the probabilities; in the bf16 modes on
// one process narrowed from them straight into dout16_ instead (returns null).
float* Model::logits_backward(float loss_scale) {
    const int N = B_ * T_, V = shard_.vocab_size;
    const bool bf16_mode = precision_.bf16_compute();
    const float z_loss = (float)config_.z_loss;
    KernelScope scope("cross-entropy backward", (double)N * V * (bf16_mode && !tp_ ? 6 : 8));
    if (tp_) {
        vocab_parallel_crossentropy_backward(a_.logits, targets_.data(), a_.logz, z_loss, loss_scale, N, V,
                                             shard_.vocab_start);
    } else if (bf16_mode) {
        crossentropy_backward_bf16(dout16_.data(), a_.logits, targets_.data(), a_.logz, z_loss, loss_scale, N, V);
        return nullptr;
    } else {
        crossentropy_backward(a_.logits, targets_.data(), a_.logz, z_loss, loss_scale, N, V);
    }
    return a_.logits;
}

void Model::backward(float loss_scale) {
    const int B = B_, T = T_, N = B * T;
    const int C = config_.dim, V = shard_.vocab_size, L = config_.n_layers, H = shard_.hidden_dim;
    const int NH = shard_.n_heads, NKV = shard_.n_kv_heads, HD = config_.head_dim();
    const int QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    const ParameterTensors& p = p_;
    const ParameterTensors& g = g_;
    const ActivationTensors& a = a_;
    const bool bf16_mode = precision_.bf16_compute();
    float* d_res = d_residual_.data();
    float* d_norm = d_norm_.data();
    bf16* d16 = dout16_.data();  // null in fp32

    float* dlogits = logits_backward(loss_scale);
    measure_and_drop_sequences(dlogits, d16, loss_scale);
    // Under sequence parallelism each matmul's input is gathered again here
    // (Korthikanti et al.'s choice: the gathered copy is not kept for backward).
    const long RC = stream_rows_ * C;
    {
        auto [z, z16] = gathered_input(a.final_norm, a16_.final_norm);
        linear_backward(d_norm, g.lm_head, dlogits, d16, z, z16, p.lm_head, N, C, V);
    }
    std::fill(d_residual_.begin(), d_residual_.end(), 0.0f);
    // d_res16: d_res narrowed for the next matmul, where the norm's backward wrote it.
    const bf16* d_res16 = norm_backward(d_res, g.final_norm, d_norm, a.residual + L * RC, p.final_norm,
                                        a.final_rstd, false);
    if (grads_ready_) grads_ready_(L);

    for (int l = L - 1; l >= 0; l--) {
        const long nc = (long)l * RC;
        // d_res holds the gradient of the stream leaving layer l.
        auto [d_out, d_out16] = gathered_stream_grad(d_res, d_res16);
        linear_backward(bf16_mode ? nullptr : d_swiglu_.data(), g.down + (long)l * C * H, d_out, d_out16,
                        layer_slot(a.swiglu, l, (long)N * H), layer_slot(a16_.swiglu, l, (long)N * H),
                        p.down + (long)l * C * H, N, H, C, bf16_mode ? d_swiglu16_.data() : nullptr);
        swiglu_layer_backward(bf16_mode ? nullptr : a.gate_up + (long)l * N * 2 * H,
                              layer_slot(a16_.gate_up, l, (long)N * 2 * H));
        auto [y, y16] = gathered_input(layer_slot(a.ffn_norm, l, RC), layer_slot(a16_.ffn_norm, l, RC));
        linear_backward(d_norm, g.gate_up + (long)l * 2 * H * C, bf16_mode ? nullptr : d_gate_up_.data(), d16, y, y16,
                        p.gate_up + (long)l * 2 * H * C, N, C, 2 * H);
        d_res16 = norm_backward(d_res, g.ffn_norm + (long)l * C, d_norm, a.residual_mid + nc,
                                p.ffn_norm + (long)l * C, a.ffn_rstd + l * stream_rows_, true);
        // d_res now holds the gradient of the stream after attention.
        const float* att = a.att ? a.att + (long)l * B * NH * T * T : nullptr;
        const float* att_out = bf16_mode ? nullptr : a.att_out + (long)l * N * CA;  // bf16: a16_.att_out's
        auto [d_mid, d_mid16] = gathered_stream_grad(d_res, d_res16);
        linear_backward(d_att_out_.data(), g.o_proj + (long)l * C * CA, d_mid, d_mid16, att_out,
                        layer_slot(a16_.att_out, l, (long)N * CA), p.o_proj + (long)l * C * CA, N, CA, C);
        attention_layer_backward(l, att);
        auto [x, x16] = gathered_input(layer_slot(a.attn_norm, l, RC), layer_slot(a16_.attn_norm, l, RC));
        if (shard_.shares_kv()) set_aside_shared_kv_grads(l);
        linear_backward(d_norm, g.qkv + (long)l * QKV * C, bf16_mode ? nullptr : d_qkv_.data(), d16, x, x16,
                        p.qkv + (long)l * QKV * C, N, C, QKV);
        if (shard_.shares_kv()) sum_shared_kv_grads(l);
        d_res16 = norm_backward(d_res, g.attn_norm + (long)l * C, d_norm, a.residual + nc,
                                p.attn_norm + (long)l * C, a.attn_rstd + l * stream_rows_, true);
        if (grads_ready_) grads_ready_(l);
    }
    embedding_backward_rows(d_res);
    overwrite_linear_grads_ = false;
    if (grads_ready_) grads_ready_(-1);
}

}  // namespace hlat
