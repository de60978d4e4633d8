// The model's parts that only tensor-parallel layouts have: sequence
// parallelism's gathers and reduce-scatters around the stream (Korthikanti et
// al. 2022, "Reducing Activation Recomputation in Large Transformer Models"),
// and the gradient of kv heads shared by several ranks (grouped-query
// attention with fewer kv heads than ranks).
//
// Under sequence parallelism rank r holds rows [r R, (r + 1) R) of the B*T
// token rows of the stream, R = B*T / TP: the residual stream, the RMSNorms'
// outputs and their 1/rms. With one sequence per micro-batch that is
// Megatron's split along the sequence; with several it is the same split of
// the flattened (B, T) rows, which keeps an all-gather's output in the (B, T,
// C) layout the matmuls read. The norms and residual adds act on each row
// alone, so the split changes no arithmetic but the norm weights' gradient
// sums, which each rank makes over its rows and the group adds up.
#include "trainer/model/model.h"
#include "trainer/model/kernel_profile.h"
#include "trainer/model/kernels.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/vocab_parallel.h"

#include <algorithm>

namespace hlat {

std::pair<const float*, bf16*> Model::gathered_input(const float* rows, bf16* rows16) {
    if (!sp_) return {rows, rows16};
    const long n = stream_rows_ * config_.dim;
    if (precision_.bf16_compute()) {  // the bf16 modes keep the norm's output in bf16 only: gather that
        tp_->allgather(rows16, full16_.data(), n);
        return {nullptr, full16_.data()};
    }
    tp_->allgather(rows, full_.data(), n);
    return {full_.data(), nullptr};
}

// In the bf16 modes the matmul reads its output gradient narrowed to bf16:
// narrowing each rank's rows before the gather gives the same bits at half the
// bytes on the wire.
std::pair<const float*, const bf16*> Model::gathered_stream_grad(const float* d_rows, const bf16* d_rows16) {
    if (!sp_ && d_rows16) return {nullptr, d_rows16};
    if (!sp_) return {d_rows, nullptr};
    const long n = stream_rows_ * config_.dim;
    if (precision_.bf16_compute()) {
        bf16* own = dout16_.data() + shard_.rank * n;
        bf16_narrow(own, d_rows, n);
        tp_->allgather(own, dout16_.data(), n);
        return {nullptr, dout16_.data()};
    }
    tp_->allgather(d_rows, full_.data(), n);
    return {full_.data(), nullptr};
}

void Model::embedding_forward_rows(const int32_t* inputs) {
    const int N = B_ * T_, C = config_.dim;
    KernelScope scope("embedding forward", 8.0 * N * C);
    if (!tp_) return embedding_forward(a_.residual, inputs, p_.embed, N, C);
    // Each rank looks up the tokens of its vocabulary range; the group's sum
    // is the embedding (this rank's rows of it under sequence parallelism).
    float* partial = sp_ ? full_.data() : a_.residual;
    vocab_parallel_embedding_forward(partial, inputs, p_.embed, N, C, shard_.vocab_start, shard_.vocab_size);
    if (sp_) tp_->reduce_scatter_sum(partial, a_.residual, stream_rows_ * C);
    else tp_->allreduce_sum(partial, (long)N * C);
}

void Model::embedding_backward_rows(const float* d_rows) {
    const int N = B_ * T_, C = config_.dim;
    KernelScope scope("embedding backward", 12.0 * N * C);
    if (!tp_) return embedding_backward(g_.embed, d_rows, inputs_.data(), N, C);
    const float* d = d_rows;
    if (sp_) {  // every token's gradient, for the rows of this rank's vocabulary range
        tp_->allgather(d_rows, full_.data(), stream_rows_ * C);
        d = full_.data();
    }
    vocab_parallel_embedding_backward(g_.embed, d, inputs_.data(), N, C, shard_.vocab_start, shard_.vocab_size);
}

// The weight is replicated on every rank but each saw only its rows: its
// gradient is the group's sum, of this micro-batch's rows alone so that
// accumulated micro-batches are not summed again.
void Model::norm_backward_rows(float* d_stream, float* dweight, const float* d_norm_rows, const float* inp,
                               const float* weight, const float* rstd) {
    const int C = config_.dim;
    std::fill(norm_dweight_.begin(), norm_dweight_.end(), 0.0f);
    rmsnorm_backward_accumulate(d_stream, norm_dweight_.data(), d_norm_rows, inp, weight, rstd, (int)stream_rows_, C);
    tp_->allreduce_sum(norm_dweight_.data(), C);
    for (int i = 0; i < C; i++) dweight[i] += norm_dweight_[i];
}

// Layer l's k and v rows of the qkv_proj gradient: the last rows of its slice.
static float* shared_kv_rows(const ParameterTensors& g, const ShardShape& s, const ModelConfig& c, int l, long* n) {
    const long HD = c.head_dim(), C = c.dim, QKV = (s.n_heads + 2L * s.n_kv_heads) * HD;
    *n = 2L * s.n_kv_heads * HD * C;
    return g.qkv + (long)l * QKV * C + (long)s.n_heads * HD * C;
}

void Model::set_aside_shared_kv_grads(int l) {
    long n = 0;
    float* kv = shared_kv_rows(g_, shard_, config_, l, &n);
    if (overwrite_linear_grads_) return;  // the matmul writes them over: nothing accumulated yet
    std::copy(kv, kv + n, kv_grads_before_.begin());
    std::fill(kv, kv + n, 0.0f);
}

// Every rank writes its part at its kv head's place in one buffer of all the
// model's kv heads, zeros elsewhere: one all-reduce over the tensor-parallel
// group sums each kv group's parts (adding zeros changes no bits), without a
// communicator per kv group.
void Model::sum_shared_kv_grads(int l) {
    long n = 0;
    float* kv = shared_kv_rows(g_, shard_, config_, l, &n);
    float* own = kv_grads_.data() + shard_.kv_head_start * n;
    std::fill(kv_grads_.begin(), kv_grads_.end(), 0.0f);
    std::copy(kv, kv + n, own);
    tp_->allreduce_sum(kv_grads_.data(), (long)kv_grads_.size());
    if (overwrite_linear_grads_) {
        std::copy(own, own + n, kv);
    } else {
        for (long i = 0; i < n; i++) kv[i] = kv_grads_before_[i] + own[i];
    }
}

}  // namespace hlat
