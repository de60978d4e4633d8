// Where a tensor-parallel shard's parameters sit in the whole model's flat
// buffer (model.h's layout at size 1), so that checkpoints hold the whole
// model and load at any parallel layout.
#pragma once

#include "trainer/model/model.h"

#include <vector>

namespace hlat {

// A run of floats: full[full_offset ...] is shard[shard_offset ...], count long.
struct ShardSegment {
    long full_offset, shard_offset, count;
};

// Every float of the shard, in segments; at size 1 one segment per tensor.
std::vector<ShardSegment> shard_segments(const ModelConfig& config, const ShardShape& shard);

// shard = the shard's part of full.
void extract_shard(const std::vector<ShardSegment>& segments, const float* full, float* shard);
// Writes the shard's part of full.
void insert_shard(const std::vector<ShardSegment>& segments, const float* shard, float* full);

// Number of floats of the whole model.
long full_parameter_count(const ModelConfig& config);

}  // namespace hlat
