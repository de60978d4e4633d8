// Fault injection, to prove the detectors: each fault starts at a step.
//   mask_leak@S            from step S the attention mask lets each position see the next token
//   grad_spike@S[:F]       at step S the gradients are scaled by F (default 100) before clipping
//   nan@S                  at step S one gradient value becomes NaN
//   lr_spike@S[:F[:N]]     from step S, for N steps (default 5), the learning rate is multiplied by F (default 10)
// The paper's configurations that go bad on their own are config settings,
// not faults: model.init_scaling "none", optimizer.beta2 0.99.
#pragma once

#include <string>
#include <vector>

namespace hlat {

struct Faults {
    int mask_leak_from = -1;
    int grad_spike_at = -1;
    double grad_spike_factor = 100.0;
    int nan_at = -1;
    int lr_spike_from = -1;
    double lr_spike_factor = 10.0;
    int lr_spike_steps = 5;
    bool any() const { return mask_leak_from >= 0 || grad_spike_at >= 0 || nan_at >= 0 || lr_spike_from >= 0; }
};

// Throws ConfigError naming the bad entry.
Faults parse_faults(const std::vector<std::string>& specs);

}  // namespace hlat
