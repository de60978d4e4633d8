#include "trainer/run/leak_probe.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <vector>

namespace hlat {

std::optional<telemetry::Alert> probe_causality(Model& model, int64_t step) {
    const int B = model.batch_size(), T = model.seq_len(), V = model.config().vocab_size;
    const int VS = model.shard().vocab_size;  // logits per position this rank holds
    const int t = T / 2;
    std::vector<int32_t> tokens((long)B * T), changed;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int32_t& tok : tokens) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift: fixed, cheap, independent of the data
        tok = (int32_t)(x % (uint64_t)V);
    }
    changed = tokens;
    for (int b = 0; b < B; b++)
        for (int i = t + 1; i < T; i++) changed[(long)b * T + i] = (tokens[(long)b * T + i] + 1) % V;

    const long row = (long)T * VS;
    std::vector<float> before((long)B * row);
    model.forward(tokens.data(), nullptr);
    std::memcpy(before.data(), model.activations().logits, before.size() * sizeof(float));
    model.forward(changed.data(), nullptr);
    const float* after = model.activations().logits;

    double max_diff = 0.0;
    int first_position = -1;
    for (int b = 0; b < B; b++)
        for (int i = 0; i <= t; i++)
            for (int v = 0; v < VS; v++) {
                long k = b * row + (long)i * VS + v;
                double d = std::fabs((double)before[k] - after[k]);
                if (d > max_diff || std::isnan(d)) {
                    max_diff = std::isnan(d) ? INFINITY : d;
                    if (first_position < 0 || i < first_position) first_position = i;
                }
            }
    if (max_diff == 0.0) return std::nullopt;
    nlohmann::json data = {{"probe_position", t}, {"first_leaking_position", first_position},
                           {"max_logit_difference", max_diff}};
    return telemetry::Alert{
        "information_leak", "critical", step,
        fmt::format("causality probe: logits at positions <= {} changed (by up to {:.3g}) when only tokens after {} "
                    "changed: the model sees the future (check the attention mask)",
                    t, max_diff, t),
        data.dump(), 0.0};
}

}  // namespace hlat
