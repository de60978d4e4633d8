#include "trainer/step_stats.h"

namespace hlat {

std::vector<StepMetric> step_metrics(const StepStats& s) {
    using K = StepMetric::Kind;
    using W = StepMetric::When;
    std::vector<StepMetric> out = {
        {"loss", s.loss},
        {"z_loss", s.z_loss, K::Real, W::Measured},  // model.z_loss > 0
        {"grad_norm", s.grad_norm},
        {"clipped", s.clipped ? 1.0 : 0.0, K::Flag},
        {"param_norm", s.param_norm},
        {"lr", s.lr},
        {"tokens_seen", (double)s.tokens_seen, K::Count},
        {"tokens_per_s", s.tokens_per_second},
        {"mfu", s.mfu},
        {"step_s", s.step_seconds},
        {"data_s", s.data_seconds},
        {"forward_s", s.forward_seconds},
        {"backward_s", s.backward_seconds},
        {"optimizer_s", s.optimizer_seconds},
        {"comm_s", s.comm_seconds, K::Real, W::NonZero},  // distributed runs
        {"comm_exposed_s", s.comm_exposed_seconds, K::Real, W::NonZero},
        {"tp_comm_s", s.tp_comm_seconds, K::Real, W::NonZero},
        {"compute_s", s.compute_seconds},
        {"lost_updates", s.lost_updates, K::Real, W::Measured},  // bf16 modes
        {"logz_mean", s.logz_mean, K::Real, W::Measured},  // the model's internals (run.internals_every)
        {"logz_max", s.logz_max, K::Real, W::Measured},
        {"logit_max", s.logit_max, K::Real, W::Measured},
    };
    out.insert(out.end(), s.recorded.begin(), s.recorded.end());
    return out;
}

}  // namespace hlat
