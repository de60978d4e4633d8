#include "trainer/step_internals.h"

#include <fmt/format.h>

#include <cmath>

namespace hlat {

using Labels = std::shared_ptr<const std::vector<std::string>>;

InternalsLabels internals_labels(const ModelConfig& config, const std::vector<TensorKind>& kinds) {
    auto heads = std::make_shared<std::vector<std::string>>();
    auto blocks = std::make_shared<std::vector<std::string>>();
    auto tensors = std::make_shared<std::vector<std::string>>();
    auto kind_names = std::make_shared<std::vector<std::string>>();
    for (int l = 0; l < config.n_layers; l++) {
        blocks->push_back(fmt::format("layers.{}", l));
        for (int h = 0; h < config.n_heads; h++) heads->push_back(fmt::format("layers.{}.head.{}", l, h));
    }
    for (const TensorKind& k : kinds) {
        if (!k.layers) tensors->push_back(k.name);
        for (int l = 0; l < k.layers; l++) tensors->push_back(fmt::format("layers.{}.{}", l, k.name));
        kind_names->push_back(k.name);
    }
    return {heads, blocks, tensors, kind_names};
}

static void add_vector(StepStats& s, const char* key, std::vector<float> values, const Labels& labels) {
    s.internals.push_back({key, 0, std::move(values), 0.0, labels});
}

void add_forward_internals(StepStats& s, const ForwardInternals& f, Parallel* parallel,
                           const InternalsLabels& labels) {
    const size_t heads = f.attn_logit_max.size(), L = f.residual_max_abs.size();
    // maxima: heads' largest logits, blocks' largest values, log Z's and the logits' maxima
    std::vector<float> maxima(f.attn_logit_max);
    maxima.insert(maxima.end(), f.residual_max_abs.begin(), f.residual_max_abs.end());
    maxima.push_back(f.logz_max);
    maxima.push_back(f.logit_max);
    // sums: entropies and their rows per head, squares per block and the
    // values per block, log Z and its rows. A stream or log Z that every TP
    // rank holds alike is summed tp times over, its count too: the means hold.
    std::vector<double> sums(f.attn_entropy_sum);
    sums.insert(sums.end(), f.attn_rows.begin(), f.attn_rows.end());
    sums.insert(sums.end(), f.residual_sum_squares.begin(), f.residual_sum_squares.end());
    sums.push_back(f.residual_values);
    sums.push_back(f.logz_sum);
    sums.push_back(f.logz_rows);
    if (parallel) {
        parallel->allreduce(maxima.data(), (long)maxima.size(), MPI_FLOAT, MPI_MAX, Group::World);
        parallel->allreduce(sums.data(), (long)sums.size(), MPI_DOUBLE, MPI_SUM, Group::World);
    }
    std::vector<float> entropy(heads), rms(L);
    for (size_t i = 0; i < heads; i++) entropy[i] = (float)(sums[i] / sums[heads + i]);
    const double values = sums[2 * heads + L];
    for (size_t l = 0; l < L; l++) rms[l] = (float)std::sqrt(sums[2 * heads + l] / values);
    add_vector(s, "attn_logit_max", std::vector<float>(maxima.begin(), maxima.begin() + heads), labels.heads);
    add_vector(s, "attn_entropy", std::move(entropy), labels.heads);
    add_vector(s, "residual_rms", std::move(rms), labels.blocks);
    add_vector(s, "residual_max", std::vector<float>(maxima.begin() + heads, maxima.begin() + heads + L),
               labels.blocks);
    s.logz_mean = sums[2 * heads + L + 1] / sums[2 * heads + L + 2];
    s.logz_max = maxima[heads + L];
    s.logit_max = maxima[heads + L + 1];
}

// Each slice's six sums, flat, summed over the ranks that hold parts of it.
static std::vector<double> job_sums(const std::vector<UpdateSums>& sums, const std::vector<TensorKind>& kinds,
                                    Parallel* parallel, bool zero1) {
    std::vector<double> flat;
    flat.reserve(6 * sums.size());
    size_t slice = 0;
    for (const TensorKind& k : kinds) {
        // A replicated tensor is the same on every TP rank: counted once.
        const bool counts = !k.replicated || !parallel || parallel->tp_rank() == 0;
        for (int l = 0; l < (k.layers ? k.layers : 1); l++, slice++) {
            const UpdateSums& u = sums[slice];
            for (double x : {u.grad_squares, u.weight_squares, u.new_weight_squares, u.update_squares,
                             u.eps_dominated, u.moments})
                flat.push_back(counts ? x : 0.0);
        }
    }
    if (parallel) {
        parallel->allreduce(flat.data(), (long)flat.size(), MPI_DOUBLE, MPI_SUM, Group::Tensor);
        if (zero1) parallel->allreduce(flat.data(), (long)flat.size(), MPI_DOUBLE, MPI_SUM, Group::Data);
    }
    return flat;
}

void add_tensor_internals(StepStats& s, const std::vector<UpdateSums>& sums, const std::vector<TensorKind>& kinds,
                          double clip_factor, Parallel* parallel, bool zero1, const InternalsLabels& labels) {
    const size_t n = labels.tensors->size();
    std::vector<float> grad(n, NAN), param(n, NAN), update(n, NAN), ratio(n, NAN), eps(n, NAN);
    // A skipped update (a non-finite loss or gradient) summed nothing: NaN
    // keeps each vector's length. Every rank skips alike, so no rank waits.
    if (!sums.empty()) {
        const std::vector<double> flat = job_sums(sums, kinds, parallel, zero1);
        for (size_t i = 0; i < n; i++) {
            const double* u = &flat[6 * i];
            grad[i] = (float)(std::sqrt(u[0]) / clip_factor);
            param[i] = (float)std::sqrt(u[2]);
            update[i] = (float)std::sqrt(u[3]);
            ratio[i] = (float)(std::sqrt(u[3]) / std::sqrt(u[1]));
            eps[i] = (float)(u[4] / u[5]);
        }
    }
    add_vector(s, "tensor_grad_norm", std::move(grad), labels.tensors);
    add_vector(s, "tensor_param_norm", std::move(param), labels.tensors);
    add_vector(s, "tensor_update_norm", std::move(update), labels.tensors);
    add_vector(s, "update_ratio", std::move(ratio), labels.tensors);
    add_vector(s, "eps_share", std::move(eps), labels.tensors);
}

}  // namespace hlat
