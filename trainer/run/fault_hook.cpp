#include "trainer/run/fault_hook.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

namespace hlat {

int FaultHook::attempt_from_env() {
    const char* a = std::getenv("HLAT_ATTEMPT");
    return a ? std::atoi(a) : 0;
}

FaultHook::FaultHook(const Faults& faults, int world_rank, int attempt)
    : faults_(faults), rank_(world_rank), first_attempt_(attempt == 0) {
    if (faults.crash_mean_seconds > 0 && world_rank == 0) {
        // A fresh draw per launch: failures of real machines do not repeat on a
        // schedule. HLAT_FAULT_SEED makes the draws a function of (seed,
        // attempt), so two settings of a bench can face the same crashes.
        const char* seed = std::getenv("HLAT_FAULT_SEED");
        std::mt19937_64 rng(seed ? std::strtoull(seed, nullptr, 10) * 1000003ull + (uint64_t)attempt
                                 : std::random_device{}());
        std::exponential_distribution<double> interval(1.0 / faults.crash_mean_seconds);
        double seconds = interval(rng);
        crash_deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                  std::chrono::duration<double>(seconds));
        random_crash_ = true;
        spdlog::warn("fault crash_random: this launch will be killed after {:.1f} s", seconds);
    }
}

void FaultHook::before_step(int step, StepRequest&) {
    bool crash = first_attempt_ && faults_.crash_at == step && rank_ == faults_.crash_rank;
    bool random = random_crash_ && std::chrono::steady_clock::now() >= crash_deadline_;
    if (crash || random) {
        spdlog::error("fault {}: killing rank {} (pid {}) before step {}", crash ? "crash" : "crash_random", rank_,
                      getpid(), step);
        spdlog::default_logger()->flush();
        std::raise(SIGKILL);
    }
    if (first_attempt_ && faults_.hang_at == step && rank_ == faults_.hang_rank) {
        spdlog::error("fault hang: rank {} (pid {}) stops responding before step {}", rank_, getpid(), step);
        spdlog::default_logger()->flush();
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
}

}  // namespace hlat
