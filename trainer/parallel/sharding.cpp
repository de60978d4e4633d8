#include "trainer/parallel/sharding.h"

#include <algorithm>

namespace hlat {

long full_parameter_count(const ModelConfig& config) {
    std::vector<TensorKind> kinds = tensor_table(config, shard_shape(config, 0, 1));
    return kinds.back().offset + kinds.back().numel();
}

std::vector<ShardSegment> shard_segments(const ModelConfig& config, const ShardShape& shard) {
    const std::vector<TensorKind> full = tensor_table(config, shard_shape(config, 0, 1));
    const std::vector<TensorKind> local = tensor_table(config, shard);
    const long C = config.dim, HD = config.head_dim(), r = shard.rank;
    std::vector<ShardSegment> out;
    // rows [full_row, full_row + n) of a (rows, cols) slice go to rows [shard_row, ...).
    auto rows = [&](long full_base, long shard_base, long cols, long full_row, long shard_row, long n) {
        out.push_back({full_base + full_row * cols, shard_base + shard_row * cols, n * cols});
    };
    for (size_t i = 0; i < full.size(); i++) {
        const TensorKind &f = full[i], &s = local[i];
        const std::string& name = f.name;
        for (int l = 0; l < (f.layers ? f.layers : 1); l++) {
            long fb = f.offset + l * f.rows * f.cols, sb = s.offset + l * s.rows * s.cols;
            if (f.replicated) {
                rows(fb, sb, 1, 0, 0, f.rows);
            } else if (name == "embed_tokens" || name == "lm_head") {
                rows(fb, sb, C, shard.vocab_start, 0, s.rows);
            } else if (name == "qkv_proj") {
                // rows: q heads, then k heads, then v heads; each rank its heads of each
                // (its kv group's kv head when fewer kv heads than ranks).
                long q = (long)shard.n_heads * HD, kv = (long)shard.n_kv_heads * HD;
                long q_all = (long)config.n_heads * HD, kv_all = (long)config.n_kv_heads * HD;
                long kv_first = (long)shard.kv_head_start * HD;
                rows(fb, sb, C, r * q, 0, q);
                rows(fb, sb, C, q_all + kv_first, q, kv);
                rows(fb, sb, C, q_all + kv_all + kv_first, q + kv, kv);
            } else if (name == "gate_up_proj") {
                long h = shard.hidden_dim, h_all = config.hidden_dim;
                rows(fb, sb, C, r * h, 0, h);
                rows(fb, sb, C, h_all + r * h, h, h);
            } else {  // o_proj, down_proj: a range of columns of every row
                for (long row = 0; row < f.rows; row++)
                    out.push_back({fb + row * f.cols + r * s.cols, sb + row * s.cols, s.cols});
            }
        }
    }
    return out;
}

void extract_shard(const std::vector<ShardSegment>& segments, const float* full, float* shard) {
    for (const ShardSegment& s : segments)
        std::copy(full + s.full_offset, full + s.full_offset + s.count, shard + s.shard_offset);
}

void insert_shard(const std::vector<ShardSegment>& segments, const float* shard, float* full) {
    for (const ShardSegment& s : segments)
        std::copy(shard + s.shard_offset, shard + s.shard_offset + s.count, full + s.full_offset);
}

}  // namespace hlat
