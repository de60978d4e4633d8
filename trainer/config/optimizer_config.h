// The optimizer and schedule sections of the training config: all that
// AdamW and the learning-rate schedule see of it.
#pragma once

namespace hlat {

struct OptimizerConfig {
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
    bool decay_norms_and_embeddings = true;  // false: no decay on norm weights and the embedding
    double grad_clip = 1.0;                  // global L2 norm; 0 disables clipping
};

struct ScheduleConfig {
    double max_lr = 3e-4;
    double min_lr = 3e-5;
    int warmup_steps = 100;
    int total_steps = 2000;
    // "Train safely, then ramp" (bench/early_warning, after Wortsman et al.
    // 2023): from ramp_start the rate rises geometrically from max_lr to
    // peak_lr over ramp_steps and stays there for ramp_hold steps, then comes
    // down to min_lr at total_steps on a cosine (ramp_hold -1: the peak is
    // held to the end); before it, max_lr after the warm-up (no cosine).
    // ramp_start -1: off, the cosine schedule above.
    int ramp_start = -1;
    int ramp_steps = 100;
    double peak_lr = 0.0;
    int ramp_hold = -1;
};

}  // namespace hlat
