#include "trainer/run/distributed_run.h"

#include "telemetry/clock.h"
#include "trainer/parallel/sharding.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <vector>

namespace hlat {

void init_shard_weights(Model& model, unsigned long long seed) {
    if (!model.is_shard()) return model.init_weights(seed);
    Model whole(model.config(), 1, 1, false);
    whole.init_weights(seed);
    extract_shard(shard_segments(model.config(), model.shard()), whole.params(), model.params());
}

int agree_on_stop(Parallel& parallel, int signal, std::string& halt_reason, bool& rewinding) {
    if (!parallel.distributed()) return signal;
    int flags[2] = {signal, rewinding ? 2 : halt_reason.empty() ? 0 : 1};
    parallel.allreduce(flags, 2, MPI_INT, MPI_MAX, Group::World);
    if (flags[1] && halt_reason.empty()) halt_reason = "halted by rank 0's detectors";
    rewinding = flags[1] == 2;
    return flags[0];
}

void log_layout(Parallel& parallel) {
    std::vector<std::string> lines = parallel.gather(fmt::format("{} on {} (pid {})", parallel.describe(),
                                                                 telemetry::host_name(),
                                                                 getpid()),
                                                     Group::World);
    if (!parallel.is_root()) return;
    spdlog::info("parallel layout: {} processes = {} data-parallel x {} tensor-parallel; tensor-parallel groups are "
                 "consecutive ranks",
                 parallel.world_size(), parallel.dp_size(), parallel.tp_size());
    for (const std::string& l : lines) spdlog::info("  {}", l);
}

}  // namespace hlat
