// Early-warning detectors on the model's internals (docs/internals.md):
// - attention_logit: a head's largest pre-softmax attention logit above
//   `bound` (1,000), or, once past `floor` (100), projected above it at the
//   largest learning rate the schedule has ahead (lr_max_ahead, as
//   lr^lr_exponent): the run is heading where logits blow up. Names the
//   head, how many heads are past it, and which head passed half the floor
//   first, and when. Once per episode (re-armed once every head is below 0.8 x
//   the bound in force).
// - attention_entropy: after warmup_steps, a head's mean attention entropy
//   below `floor` (0.001 nats): the head attends to one position. Names the
//   head and the first head below 4 x floor. Once per episode.
// - update_ratio: after warmup_steps, the median over tensors of each
//   tensor's update-to-weight ratio over its median of the previous `window`
//   steps above `jump` (2): every tensor's step grew at once, as a learning
//   rate fault does in the step it starts. Names the tensor that jumped most.
// - eps_regime: after warmup_steps, a tensor whose share of Adam coordinates
//   with sqrt(v) < eps exceeds `share` (0.75). Names the tensors; once per
//   tensor until it falls below half the share.
// - logz_drift: the output logits' mean log Z more than `drift` nats (10)
//   from its mean over the 10 steps after warm-up.
#pragma once

#include "detectors/config.h"
#include "detectors/detector.h"

#include <memory>

namespace hlat::detectors {

std::unique_ptr<Detector> make_attention_logit(const AttentionLogitConfig& c);
std::unique_ptr<Detector> make_attention_entropy(const AttentionEntropyConfig& c);
std::unique_ptr<Detector> make_update_ratio(const UpdateRatioConfig& c);
std::unique_ptr<Detector> make_eps_regime(const EpsRegimeConfig& c);
std::unique_ptr<Detector> make_logz_drift(const LogzDriftConfig& c);

}  // namespace hlat::detectors
