#include "trainer/run/fleet_hook.h"

#include "telemetry/clock.h"
#include "trainer/parallel/preflight.h"
#include "trainer/run/every.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace hlat {

FleetHook::FleetHook(RunContext& run) : run_(run) {
    if (run_.parallel.distributed()) hosts_ = run_.parallel.gather(telemetry::host_name(), Group::World);
}

void FleetHook::after_step(StepResult& result) {
    if (!run_.parallel.distributed()) return;
    record_rank_times(result);
    if (every(run_.config.parallel.health_every, result.stats.step + 1)) health_check(result);
}

void FleetHook::record_rank_times(StepResult& result) {
    const StepStats& s = result.stats;
    const std::vector<double> mine = {s.compute_seconds, s.comm_exposed_seconds, s.data_seconds};
    std::vector<double> all = run_.parallel.gather(mine, Group::World);
    if (!run_.parallel.is_root()) return;
    const size_t n = all.size() / 3;
    std::vector<double> compute(n), comm(n), data(n);
    for (size_t r = 0; r < n; r++) compute[r] = all[3 * r], comm[r] = all[3 * r + 1], data[r] = all[3 * r + 2];
    run_.recorder.rank_metrics(s.step, "rank/compute_s", compute);
    run_.recorder.rank_metrics(s.step, "rank/comm_wait_s", comm);
    run_.recorder.rank_metrics(s.step, "rank/data_wait_s", data);
    const StragglerSummary worst = summarize_stragglers(compute);
    result.points.add("straggler_ratio", worst.ratio);
    result.points.add("straggler_rank", (double)worst.rank);
    if (worst.rank >= 0) result.points.add("straggler_compute_s", compute[worst.rank]);
}

void FleetHook::health_check(StepResult& result) {
    Parallel& parallel = run_.parallel;
    const double wrong = (double)wrong_gemm_elements();
    std::vector<float> buffer(1 << 18, 1.0f);  // 1 MB
    auto t0 = std::chrono::steady_clock::now();
    parallel.allreduce(buffer.data(), (long)buffer.size(), MPI_FLOAT, MPI_SUM, Group::World);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> all = parallel.gather(std::vector<double>{wrong, seconds}, Group::World);
    if (!parallel.is_root()) return;
    const int64_t step = result.stats.step;
    std::vector<double> wrong_by_rank, allreduce_us;
    std::string failing;
    for (size_t r = 0; r < all.size() / 2; r++) {
        wrong_by_rank.push_back(all[2 * r]);
        allreduce_us.push_back(1e6 * all[2 * r + 1]);
        if (all[2 * r] > 0)
            failing += fmt::format("{}rank {} ({}) got {:.0f} elements of its exact-integer GEMMs wrong",
                                   failing.empty() ? "" : "; ", r, hosts_[r], all[2 * r]);
    }
    run_.recorder.rank_metrics(step, "health/wrong_gemm_elements", wrong_by_rank);
    run_.recorder.rank_metrics(step, "health/allreduce_us", allreduce_us);
    const double failures =
        (double)std::count_if(wrong_by_rank.begin(), wrong_by_rank.end(), [](double w) { return w > 0; });
    result.points.add("health_check_failures", failures);
    if (!failing.empty()) result.points.note("health_check", failing);
}

}  // namespace hlat
