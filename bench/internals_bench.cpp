// The model's internals' cost on a real step: one Trainer on a config (M by
// default), steps with internals measured (run.internals_every = 1) and
// without (0), interleaved in blocks on the same weights and random tokens,
// the order of the two flipped every repeat so neither always runs first.
// Prints one JSON object per step ({"internals": true, "step_s": ...,
// "cpu_s": ...}) and nothing else on stdout; bench/internals_overhead reads
// them. cpu_s is the process's CPU time over the step (user + system): on a
// machine shared with other work it moves less than the wall time, which
// also counts the time this process waited for a core.
//
// With PARTS, the two places the internals add work are timed apart instead,
// interleaved the same way: a forward pass (attention, residual and logit
// statistics) and an AdamW update (per-tensor sums), with and without
// measuring; one JSON object per timing ({"part": "forward", ...}).
//
// usage: hlat_internals_bench CONFIG REPEATS STEPS_PER_BLOCK WARMUP [PARTS]
#include "trainer/trainer.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

class RandomTokens : public hlat::BatchSource {
  public:
    explicit RandomTokens(int vocab) : vocab_(vocab) {}
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
        for (long i = 0; i < (long)B * T; i++) inputs[i] = rng_() % vocab_, targets[i] = rng_() % vocab_;
    }

  private:
    int vocab_;
    std::mt19937 rng_{1};
};

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int time_parts(hlat::Trainer& trainer, RandomTokens& data, const hlat::TrainConfig& c, int repeats) {
    const int B = c.run.batch_size, T = c.run.seq_len;
    std::vector<int32_t> x((long)B * T), y((long)B * T);
    data.next_batch(x.data(), y.data(), B, T);
    hlat::Model& model = trainer.model();
    std::vector<hlat::UpdateSums> sums;
    for (int r = 0; r < repeats; r++) {
        for (int half = 0; half < 2; half++) {
            const bool on = (r + half) % 2 == 0;
            model.measure_internals(on);
            auto t0 = Clock::now();
            model.forward(x.data(), y.data());
            const double forward = seconds_since(t0);
            model.measure_internals(false);
            t0 = Clock::now();
            trainer.optimizer().step(model, 1e-5, on ? &sums : nullptr);
            const double adamw = seconds_since(t0);
            std::printf("%s\n", fmt::format(R"({{"repeat": {}, "internals": {}, "forward_s": {:.6f}, "adamw_s": {:.6f}}})",
                                            r, on, forward, adamw).c_str());
            std::fflush(stdout);
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5 && !(argc == 6 && std::string(argv[5]) == "PARTS")) {
        std::fprintf(stderr, "usage: %s CONFIG REPEATS STEPS_PER_BLOCK WARMUP [PARTS]\n", argv[0]);
        return 2;
    }
    hlat::TrainConfig c = hlat::load_config(argv[1]);
    const int repeats = std::atoi(argv[2]), steps = std::atoi(argv[3]), warmup = std::atoi(argv[4]);
    c.schedule.warmup_steps = 1;
    hlat::set_thread_count(c.run.threads);
    RandomTokens data(c.model.vocab_size);
    hlat::Trainer trainer(c, data, 0.0);
    trainer.model().init_weights(c.run.seed);
    for (int i = 0; i < warmup; i++) trainer.step();
    if (argc == 6) return time_parts(trainer, data, c, repeats);
    for (int r = 0; r < repeats; r++) {
        for (int half = 0; half < 2; half++) {
            const bool on = (r + half) % 2 == 0;
            trainer.set_internals_every(on ? 1 : 0);
            for (int i = 0; i < steps; i++) {
                const double cpu0 = cpu_seconds();
                const hlat::StepStats s = trainer.step();
                const double cpu = cpu_seconds() - cpu0;
                std::printf("%s\n", fmt::format(R"({{"repeat": {}, "internals": {}, "step_s": {:.6f}, "cpu_s": {:.6f}, )"
                                                R"("vectors": {}}})",
                                                r, on, s.step_seconds, cpu, s.internals.size())
                                        .c_str());
                std::fflush(stdout);
            }
        }
    }
    return 0;
}
