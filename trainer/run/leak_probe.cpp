#include "trainer/run/leak_probe.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace hlat {

double probe_causality(Model& model) {
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
    for (int b = 0; b < B; b++)
        for (int i = 0; i <= t; i++)
            for (int v = 0; v < VS; v++) {
                long k = b * row + (long)i * VS + v;
                double d = std::fabs((double)before[k] - after[k]);
                if (d > max_diff || std::isnan(d)) max_diff = std::isnan(d) ? INFINITY : d;
            }
    return max_diff;
}

}  // namespace hlat
