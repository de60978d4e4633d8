// The model's internals that forward measures inside the passes that already
// read the data (docs/internals.md): per head the largest attention logit and
// the attention entropy (in the attention softmax), per block the residual
// stream leaving it, and the output logits' log Z and largest logit (in the
// cross-entropy). Sums and maxima over every micro-batch since reset(), so a
// step with gradient accumulation reduces over all its tokens.
//
// Letters as in model.h; NH is the whole model's head count. A tensor-parallel
// shard fills its own heads only (the others stay at -inf and 0), so the
// trainer's element-wise max and sum over the job assemble all L x NH heads
// in the global order.
#pragma once

#include <cmath>
#include <vector>

namespace hlat {

struct ForwardInternals {
    std::vector<float> attn_logit_max;     // (L, NH) largest pre-softmax logit q.k / sqrt(HD)
    std::vector<double> attn_entropy_sum;  // (L, NH) entropy (nats) summed over query rows
    std::vector<double> attn_rows;         // (L, NH) query rows summed into attn_entropy_sum
    std::vector<double> residual_sum_squares;  // (L) of the stream leaving block l
    std::vector<float> residual_max_abs;       // (L)
    double residual_values = 0.0;              // elements summed per block
    double logz_sum = 0.0, logz_rows = 0.0;    // log Z = logsumexp of a position's output logits
    float logz_max = -INFINITY, logit_max = -INFINITY;

    void reset(int L, int NH) {
        attn_logit_max.assign((size_t)L * NH, -INFINITY);
        attn_entropy_sum.assign((size_t)L * NH, 0.0);
        attn_rows.assign((size_t)L * NH, 0.0);
        residual_sum_squares.assign(L, 0.0);
        residual_max_abs.assign(L, 0.0f);
        residual_values = logz_sum = logz_rows = 0.0;
        logz_max = logit_max = -INFINITY;
    }
};

}  // namespace hlat
