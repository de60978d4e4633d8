// The model's internals of one step as points (docs/internals.md): what
// forward measured (model/internals.h) and what AdamW summed in its pass
// (UpdateSums), reduced over the job and turned into StepStats::internals
// (per head, per block, per tensor) and the output logits' scalars.
#pragma once

#include "trainer/model/internals.h"
#include "trainer/model/model.h"
#include "trainer/model/optimizer.h"
#include "trainer/parallel/parallel.h"
#include "trainer/step_stats.h"

#include <memory>
#include <string>
#include <vector>

namespace hlat {

// The vectors' labels, made once per trainer and shared by every step's points.
struct InternalsLabels {
    std::shared_ptr<const std::vector<std::string>> heads;    // "layers.{l}.head.{h}", L x NH, layer-major
    std::shared_ptr<const std::vector<std::string>> blocks;   // "layers.{l}"
    std::shared_ptr<const std::vector<std::string>> tensors;  // as the per-tensor norms name them, buffer order
    std::shared_ptr<const std::vector<std::string>> kinds;    // the tensor kinds ("attention_norm", "qkv_proj", ...)
};
// kinds: the model's tensor table (a shard's names are the whole model's).
InternalsLabels internals_labels(const ModelConfig& config, const std::vector<TensorKind>& kinds);

// attn_logit_max, attn_entropy, residual_rms, residual_max and the logit
// scalars into s. Every rank of a distributed job calls it (two all-reduces
// over the world of a few hundred numbers): maxima by max, sums by sum, so
// tensor-parallel ranks contribute their own heads (ForwardInternals keeps
// them at their global index) and data-parallel ranks their own tokens.
void add_forward_internals(StepStats& s, const ForwardInternals& f, Parallel* parallel,
                           const InternalsLabels& labels);

// tensor_grad_norm, tensor_param_norm, tensor_update_norm, update_ratio and
// eps_share into s, from this rank's AdamW sums (empty: the update was
// skipped, every value NaN). Shards are summed as the whole job sees them:
// over the tensor-parallel group (replicated tensors counted on TP rank 0
// only) and, with ZeRO-1, over the data-parallel ranks' optimizer ranges.
// clip_factor is what clipping multiplied the gradients by (1: not clipped):
// the pre-clip gradient norm is the optimizer's divided by it.
void add_tensor_internals(StepStats& s, const std::vector<UpdateSums>& sums, const std::vector<TensorKind>& kinds,
                          double clip_factor, Parallel* parallel, bool zero1, const InternalsLabels& labels);

}  // namespace hlat
