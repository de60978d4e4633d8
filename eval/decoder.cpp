#include "eval/decoder.h"

#include "trainer/model/kernels.h"
#include "trainer/model/sgemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace hlat::eval {

Decoder::Decoder(const Model& model) : model_(model) {
    const ModelConfig& c = model.config();
    C_ = c.dim;
    T_ = c.max_seq_len;
    const long kv = (long)c.n_kv_heads * c.head_dim();
    k_cache_.assign((long)c.n_layers * T_ * kv, 0.0f);
    v_cache_.assign(k_cache_.size(), 0.0f);
    const long half = c.head_dim() / 2;
    rope_cos_.assign(T_ * half, 0.0f);
    rope_sin_.assign(T_ * half, 0.0f);
    rope_tables(rope_cos_.data(), rope_sin_.data(), T_, c.head_dim(), (float)c.rope_theta);
    x_.assign((long)T_ * C_, 0.0f);
    norm_.assign(x_.size(), 0.0f);
    mid_.assign(x_.size(), 0.0f);
    hidden_.assign(x_.size(), 0.0f);
    qkv_.assign((long)T_ * c.qkv_dim(), 0.0f);
    att_.assign((long)T_ * c.n_heads * c.head_dim(), 0.0f);
    gate_up_.assign((long)T_ * 2 * c.hidden_dim, 0.0f);
    swiglu_.assign((long)T_ * c.hidden_dim, 0.0f);
    scores_.assign((long)T_ * T_, 0.0f);
}

// Causal attention of n new queries (positions P..P+n-1) over the cached keys
// and values of positions 0..P+n-1, one head at a time: scores = q K^T and
// out = softmax(scores) V as two GEMMs over the strided cache rows.
// scores holds n * (P+n) floats.
static void cached_attention(float* out, float* scores, const float* qkv, const float* k_cache,
                             const float* v_cache, int n, int P, int NH, int NKV, int HD) {
    const int QKV = (NH + 2 * NKV) * HD, KV = NKV * HD, group = NH / NKV, keys = P + n;
    const float scale = 1.0f / std::sqrt((float)HD);
    for (int h = 0; h < NH; h++) {
        const int g = h / group;
        sgemm(false, true, n, keys, HD, scale, qkv + h * HD, QKV, k_cache + g * HD, KV, 0.0f, scores, keys);
        for (int i = 0; i < n; i++) {
            float* row = scores + (long)i * keys;
            const int visible = P + i + 1;
            const float max = *std::max_element(row, row + visible);
            float sum = 0.0f;
            for (int j = 0; j < visible; j++) {
                row[j] = std::exp(row[j] - max);
                sum += row[j];
            }
            const float inv = 1.0f / sum;
            for (int j = 0; j < visible; j++) row[j] *= inv;
            std::fill(row + visible, row + keys, 0.0f);
        }
        sgemm(false, false, n, HD, keys, 1.0f, scores, keys, v_cache + g * HD, KV, 0.0f, out + h * HD, NH * HD);
    }
}

void Decoder::append(const int32_t* tokens, int n) {
    if (n <= 0) return;
    if (length_ + n > T_)
        throw std::runtime_error(fmt::format("{} + {} tokens do not fit the model's {} positions", length_, n, T_));
    const ModelConfig& c = model_.config();
    const ParameterTensors& p = model_.param_tensors();
    const int C = C_, L = c.n_layers, H = c.hidden_dim, NH = c.n_heads, NKV = c.n_kv_heads, HD = c.head_dim();
    const int QKV = c.qkv_dim(), CA = NH * HD, KV = NKV * HD, P = length_;
    const float eps = (float)c.norm_eps;
    std::vector<float> rstd(n), qk_rstd(c.qk_norm ? (long)n * (NH + NKV) : 0);

    embedding_forward(x_.data(), tokens, p.embed, n, C);
    for (int l = 0; l < L; l++) {
        rmsnorm_forward(norm_.data(), rstd.data(), x_.data(), p.attn_norm + (long)l * C, n, C, eps);
        matmul_forward(qkv_.data(), norm_.data(), p.qkv + (long)l * QKV * C, n, C, QKV);
        if (c.qk_norm)
            qk_norm_forward(qkv_.data(), nullptr, qk_rstd.data(), p.q_norm + (long)l * HD, p.k_norm + (long)l * HD, n,
                            NH, NKV, HD, eps);
        rope_forward(qkv_.data(), rope_cos_.data() + (long)P * (HD / 2), rope_sin_.data() + (long)P * (HD / 2), 1,
                     n, NH, NKV, HD);
        float* kc = k_cache_.data() + (long)l * T_ * KV;
        float* vc = v_cache_.data() + (long)l * T_ * KV;
        for (int i = 0; i < n; i++) {
            const float* row = qkv_.data() + (long)i * QKV;
            std::copy(row + NH * HD, row + NH * HD + KV, kc + (long)(P + i) * KV);
            std::copy(row + NH * HD + KV, row + NH * HD + 2 * KV, vc + (long)(P + i) * KV);
        }
        cached_attention(att_.data(), scores_.data(), qkv_.data(), kc, vc, n, P, NH, NKV, HD);
        matmul_forward(mid_.data(), att_.data(), p.o_proj + (long)l * C * CA, n, CA, C);
        residual_forward(mid_.data(), mid_.data(), x_.data(), (long)n * C);
        rmsnorm_forward(norm_.data(), rstd.data(), mid_.data(), p.ffn_norm + (long)l * C, n, C, eps);
        matmul_forward(gate_up_.data(), norm_.data(), p.gate_up + (long)l * 2 * H * C, n, C, 2 * H);
        swiglu_forward(swiglu_.data(), gate_up_.data(), n, H);
        matmul_forward(x_.data(), swiglu_.data(), p.down + (long)l * C * H, n, H, C);
        residual_forward(x_.data(), x_.data(), mid_.data(), (long)n * C);
    }
    rmsnorm_forward(hidden_.data(), rstd.data(), x_.data(), p.final_norm, n, C, eps);
    length_ += n;
}

void Decoder::log_probs(float* logprobs, const float* hidden, int rows) const {
    const int V = model_.config().vocab_size;
    matmul_forward(logprobs, hidden, model_.param_tensors().lm_head, rows, C_, V);
    for (int r = 0; r < rows; r++) {
        float* row = logprobs + (long)r * V;
        float max = *std::max_element(row, row + V);
        double sum = 0.0;
        for (int v = 0; v < V; v++) sum += std::exp(row[v] - max);
        const float log_z = max + (float)std::log(sum);
        for (int v = 0; v < V; v++) row[v] -= log_z;
    }
}

}  // namespace hlat::eval
