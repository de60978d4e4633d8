// Consistency checks of a distributed run, every parallel.check_every steps:
// - replica hashes: every data-parallel replica of a shard must hold the same
//   bits (Megatron's check, run continuously). Each rank hashes its tensors
//   slice by slice; world rank 0 compares every replica with data-parallel
//   rank 0 of its shard and names the first slice that differs.
// - TP drift: the norm weights are replicated on every tensor-parallel rank and
//   should stay equal, as should kv heads shared by a kv group (fewer kv heads
//   than ranks); under stochastic rounding keyed by rank they drift. Each rank
//   compares its copy with its group leader's, slice by slice.
// Every rank must call both (they are collectives); results are complete on
// world rank 0.
#pragma once

#include "trainer/model/model.h"
#include "trainer/parallel/parallel.h"

#include <string>
#include <utility>
#include <vector>

namespace hlat {

struct ReplicaReport {
    std::vector<int> mismatched_ranks;  // world ranks that differ from their shard's replica 0
    std::string first_tensor;           // the first slice that differs, e.g. "layers.0.down_proj"
    int first_rank = -1;                // the rank that slice was found on
    bool ok() const { return mismatched_ranks.empty(); }
    std::string describe(const char* what) const;  // one sentence for the alert
};

// Compares buffer (the model's params() or grads()) across data-parallel replicas.
ReplicaReport check_replicas(Parallel& parallel, const Model& model, const float* buffer);

struct DriftReport {
    double max_abs = 0.0;  // over every replicated piece and rank: max |w - w_ref| (w_ref: the group leader's)
    double max_rel = 0.0;  // max |w - w_ref| / max |w_ref| of the piece
    std::vector<std::pair<std::string, double>> per_tensor;  // max_abs per slice
    std::vector<double> per_rank;                             // max_abs of each world rank
};

// Measures the drift of the replicated pieces against their group leaders';
// with resync, every rank then takes its leader's values.
DriftReport measure_tp_drift(Parallel& parallel, Model& model, bool resync);

// Names and places of every tensor slice (per layer for per-layer tensors).
struct TensorSlice {
    std::string name;
    long offset, count;
    bool replicated;
};
std::vector<TensorSlice> tensor_slices(const Model& model);

// What should be equal across tensor-parallel ranks: each replicated slice
// (the norm weights, on every rank alike) and, with fewer kv heads than
// ranks, each layer's shared k and v rows ("layers.0.k_proj", equal within
// each kv group). Group leaders (TP rank 0; a kv group's first rank) hold
// the reference copy.
struct ReplicatedPiece {
    std::string name;
    long offset, count;
    int group, groups;  // this rank's group among the piece's groups
    bool leader;
};
std::vector<ReplicatedPiece> replicated_pieces(const Model& model);

}  // namespace hlat
