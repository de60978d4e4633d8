#include "trainer/parallel/replica_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hlat {

std::vector<TensorSlice> tensor_slices(const Model& model) {
    std::vector<TensorSlice> out;
    for (const TensorKind& k : model.tensor_kinds()) {
        long slice = k.rows * k.cols;
        for (int l = 0; l < (k.layers ? k.layers : 1); l++)
            out.push_back({k.layers ? fmt::format("layers.{}.{}", l, k.name) : k.name, k.offset + l * slice, slice,
                           k.replicated});
    }
    return out;
}

std::string ReplicaReport::describe(const char* what) const {
    std::string ranks;
    for (int r : mismatched_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return fmt::format("data-parallel replicas disagree: the {} of rank{} {} differ from their replica 0, first at "
                       "{} (rank {})",
                       what, mismatched_ranks.size() > 1 ? "s" : "", ranks, first_tensor, first_rank);
}

// FNV-1a over 64-bit words: any flipped bit changes the hash; collisions
// between two training states are not a practical concern.
static uint64_t hash_floats(const float* x, long n) {
    uint64_t h = 0xcbf29ce484222325ull;
    long i = 0;
    for (; i + 2 <= n; i += 2) {
        uint64_t w;
        std::memcpy(&w, x + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    if (i < n) {
        uint32_t w;
        std::memcpy(&w, x + i, 4);
        h = (h ^ w) * 0x100000001b3ull;
    }
    return h;
}

ReplicaReport check_replicas(Parallel& parallel, const Model& model, const float* buffer) {
    std::vector<TensorSlice> slices = tensor_slices(model);
    std::vector<uint64_t> mine(slices.size());
#pragma omp parallel for
    for (size_t i = 0; i < slices.size(); i++) mine[i] = hash_floats(buffer + slices[i].offset, slices[i].count);
    std::vector<uint64_t> all = parallel.allgather(mine, Group::World);
    ReplicaReport report;
    if (!parallel.is_root()) return report;
    const size_t n = slices.size();
    for (int r = 0; r < parallel.world_size(); r++) {
        int replica0 = r % parallel.tp_size();  // data-parallel rank 0 of the same shard
        if (r == replica0) continue;
        for (size_t i = 0; i < n; i++) {
            if (all[r * n + i] == all[replica0 * n + i]) continue;
            report.mismatched_ranks.push_back(r);
            if (report.first_rank < 0) {
                report.first_rank = r;
                report.first_tensor = slices[i].name;
            }
            break;
        }
    }
    return report;
}

std::vector<ReplicatedPiece> replicated_pieces(const Model& model) {
    const ShardShape& shard = model.shard();
    std::vector<ReplicatedPiece> out;
    for (const TensorSlice& s : tensor_slices(model))
        if (s.replicated) out.push_back({s.name, s.offset, s.count, 0, 1, shard.rank == 0});
    for (const TensorKind& k : model.tensor_kinds()) {
        if (k.shared_rows == 0) continue;
        // qkv_proj's shared rows: the k heads', then the v heads'.
        const long slice = k.rows * k.cols, half = k.shared_rows / 2 * k.cols;
        const int groups = model.config().n_kv_heads;
        for (int l = 0; l < k.layers; l++) {
            const long kv = k.offset + l * slice + slice - 2 * half;
            for (int part = 0; part < 2; part++)
                out.push_back({fmt::format("layers.{}.{}", l, part == 0 ? "k_proj" : "v_proj"), kv + part * half, half,
                               shard.kv_head_start, groups, shard.leads_kv_group()});
        }
    }
    return out;
}

// Every piece's reference copy, on every rank: each group's leader writes its
// copy at its group's place among the groups, zeros elsewhere, and one
// all-reduce over the tensor-parallel group sums them (adding zeros changes no
// value; only a -0.0 comes back +0.0, equal as a number, so a re-sync may
// differ from the leader in that bit alone). Returned at each rank's own
// group's place, piece after piece.
static std::vector<float> reference_copies(Parallel& parallel, const std::vector<ReplicatedPiece>& pieces,
                                           const float* params) {
    long total = 0;
    for (const ReplicatedPiece& p : pieces) total += p.count * p.groups;
    std::vector<float> all(total, 0.0f);
    long at = 0;
    for (const ReplicatedPiece& p : pieces) {
        if (p.leader) std::copy(params + p.offset, params + p.offset + p.count, all.begin() + at + p.group * p.count);
        at += p.count * p.groups;
    }
    parallel.allreduce(all.data(), total, MPI_FLOAT, MPI_SUM, Group::Tensor);
    std::vector<float> reference;
    at = 0;
    for (const ReplicatedPiece& p : pieces) {
        auto first = all.begin() + at + p.group * p.count;
        reference.insert(reference.end(), first, first + p.count);
        at += p.count * p.groups;
    }
    return reference;
}

DriftReport measure_tp_drift(Parallel& parallel, Model& model, bool resync) {
    const std::vector<ReplicatedPiece> replicated = replicated_pieces(model);
    const std::vector<float> reference = reference_copies(parallel, replicated, model.params());
    const float* params = model.params();

    // Per piece: max |difference|, then max |reference| (for the relative figure).
    std::vector<double> stats(2 * replicated.size());
    long at = 0;
    for (size_t i = 0; i < replicated.size(); i++) {
        const float* mine = params + replicated[i].offset;
        double diff = 0.0, scale = 0.0;
        for (long j = 0; j < replicated[i].count; j++) {
            diff = std::max(diff, std::fabs((double)mine[j] - reference[at + j]));
            scale = std::max(scale, std::fabs((double)reference[at + j]));
        }
        stats[2 * i] = diff;
        stats[2 * i + 1] = scale > 0 ? diff / scale : diff;
        at += replicated[i].count;
    }
    if (resync) {
        float* p = model.params();
        at = 0;
        for (const ReplicatedPiece& s : replicated) {
            if (!s.leader) std::copy(reference.begin() + at, reference.begin() + at + s.count, p + s.offset);
            at += s.count;
        }
    }

    std::vector<double> all = parallel.gather(stats, Group::World);
    DriftReport report;
    if (!parallel.is_root()) return report;
    const size_t n = stats.size();
    report.per_tensor.resize(replicated.size());
    for (size_t i = 0; i < replicated.size(); i++) report.per_tensor[i] = {replicated[i].name, 0.0};
    for (int r = 0; r < parallel.world_size(); r++) {
        double rank_max = 0.0;
        for (size_t i = 0; i < replicated.size(); i++) {
            double abs = all[r * n + 2 * i], rel = all[r * n + 2 * i + 1];
            report.per_tensor[i].second = std::max(report.per_tensor[i].second, abs);
            report.max_abs = std::max(report.max_abs, abs);
            report.max_rel = std::max(report.max_rel, rel);
            rank_max = std::max(rank_max, abs);
        }
        report.per_rank.push_back(rank_max);
    }
    return report;
}

}  // namespace hlat
