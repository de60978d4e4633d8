#include "trainer/distributed_run.h"

#include "trainer/replica_check.h"
#include "trainer/sharding.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace hlat {

void init_shard_weights(Model& model, unsigned long long seed) {
    if (!model.is_shard()) return model.init_weights(seed);
    Model whole(model.config(), 1, 1, false);
    whole.init_weights(seed);
    extract_shard(shard_segments(model.config(), model.shard()), whole.params(), model.params());
}

bool is_check_step(const ParallelConfig& pc, int done) { return pc.check_every > 0 && done % pc.check_every == 0; }

void check_consistency(Parallel& parallel, const ParallelConfig& pc, Model& model, const StepStats& s,
                       RunTelemetry& store, detectors::StepRecord& record) {
    const int done = s.step + 1;
    const int64_t step = s.step;
    bool check = is_check_step(pc, done);
    bool resync = pc.resync_every > 0 && done % pc.resync_every == 0;
    if (parallel.dp_size() > 1 && check) {
        std::vector<std::pair<std::string, double>> values;
        ReplicaReport params = check_replicas(parallel, model, model.params());
        const std::optional<ReplicaReport>& grads = s.grad_replicas;
        if (parallel.is_root()) {
            record.replica_mismatch = (double)params.mismatched_ranks.size();
            if (!params.ok()) record.replica_detail = params.describe("parameters");
            if (grads) {
                values.push_back({"replica_grad_mismatch", (double)grads->mismatched_ranks.size()});
                if (!grads->ok()) {
                    record.replica_mismatch = std::max(record.replica_mismatch, (double)grads->mismatched_ranks.size());
                    record.replica_detail += (record.replica_detail.empty() ? "" : "; ") +
                                             grads->describe("reduced gradients");
                }
            }
            values.push_back({"replica_mismatch", record.replica_mismatch});
            if (!record.replica_detail.empty()) store.note("replica_mismatch", step, record.replica_detail);
            store.metrics(step, values);
        }
    }
    if (parallel.tp_size() > 1 && (check || resync)) {
        DriftReport drift = measure_tp_drift(parallel, model, resync);
        if (parallel.is_root() && check) {
            std::vector<std::pair<std::string, double>> values = {{"tp_drift", drift.max_abs},
                                                                  {"tp_drift_rel", drift.max_rel}};
            for (const auto& [name, value] : drift.per_tensor) values.push_back({"tp_drift/" + name, value});
            store.metrics(step, values);
            store.rank_metrics(step, "tp_drift", drift.per_rank);
            record.tp_drift = drift.max_abs;
        }
        if (resync) spdlog::info("step {}: replicated weights re-synced from tensor-parallel rank 0", done);
    }
}

int agree_on_stop(Parallel& parallel, int signal, std::string& halt_reason) {
    if (!parallel.distributed()) return signal;
    int flags[2] = {signal, halt_reason.empty() ? 0 : 1};
    parallel.allreduce(flags, 2, MPI_INT, MPI_MAX, Group::World);
    if (flags[1] && halt_reason.empty()) halt_reason = "halted by rank 0's detectors";
    return flags[0];
}

void log_layout(Parallel& parallel) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::vector<std::string> lines = parallel.gather(fmt::format("{} on {} (pid {})", parallel.describe(), host,
                                                                 getpid()),
                                                     Group::World);
    if (!parallel.is_root()) return;
    spdlog::info("parallel layout: {} processes = {} data-parallel x {} tensor-parallel; tensor-parallel groups are "
                 "consecutive ranks",
                 parallel.world_size(), parallel.dp_size(), parallel.tp_size());
    for (const std::string& l : lines) spdlog::info("  {}", l);
}

}  // namespace hlat
