// hlat profile: where a training step's time goes, kernel by kernel. Trains a
// config's model for a few steps on random tokens (one process), times every
// kernel of forward, backward and the optimizer, and puts each beside what
// it would take at this CPU's measured ceilings: GEMMs and attention against
// the fp32 FMA or bf16 dot-product rate (hlat probe's), every memory-bound
// kernel's bytes against the measured copy bandwidth.
#include "cli/commands.h"
#include "cli/options.h"
#include "trainer/config/config.h"
#include "trainer/model/aligned.h"
#include "trainer/model/kernel_profile.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/peak_probe.h"
#include "trainer/trainer.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>
#include <vector>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {

// Uniform random tokens: the kernels' time does not depend on the text.
class RandomTokens : public BatchSource {
  public:
    explicit RandomTokens(int vocab) : vocab_(vocab) {}
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
        for (long i = 0; i < (long)B * T; i++) inputs[i] = (int32_t)(rng_() % vocab_);
        for (long i = 0; i < (long)B * T; i++) targets[i] = (int32_t)(rng_() % vocab_);
    }

  private:
    int vocab_;
    std::mt19937 rng_{11};
};

struct Ceilings {
    double fp32_gflops = 0.0, bf16_gflops = 0.0;  // bf16: the engine's (the fp32 FMA rate when emulated)
    MemoryCeilings memory;
    std::string bf16_engine;
};

Ceilings measure_ceilings(int threads) {
    Ceilings c;
    c.fp32_gflops = fp32_fma_peak_gflops(threads);
    c.bf16_engine = bf16_matmul_engine_name();
    c.bf16_gflops = bf16_engine_peak_gflops(c.fp32_gflops, bf16_dot_peak_gflops(threads), amx_bf16_peak_gflops(threads));
    c.memory = memory_ceilings(threads);
    return c;
}

TrainConfig profile_config(const po::variables_map& vm) {
    const std::string path = vm["config"].as<std::string>();
    TrainConfig config = path.empty() ? config_from_json(nlohmann::json::object()) : load_config(path);
    if (vm["threads"].as<int>() > 0) config.run.threads = vm["threads"].as<int>();
    if (!vm["precision"].as<std::string>().empty()) override_precision_mode(config, vm["precision"].as<std::string>());
    config.parallel.dp = config.parallel.tp = 1;  // one process: the kernels, not the links
    config.parallel.sp = config.parallel.zero1 = false;
    config.run.internals_every = 0;
    config.run.inject.clear();
    return config;
}

// Each kernel per step, slowest first, with its rate and its time at the ceiling.
nlohmann::json kernel_rows(const KernelProfile& profile, int steps, const Ceilings& c, bool bf16) {
    std::vector<std::pair<std::string, KernelTotals>> rows(profile.totals().begin(), profile.totals().end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [name, t] : rows) {
        const bool compute = t.flops > 0.0;
        // precision.attention = fp32 keeps attention's products on sgemm in the bf16 modes.
        const bool bf16_products = bf16 && name.find("(fp32 products)") == std::string::npos;
        const double ceiling_s = compute ? t.flops / ((bf16_products ? c.bf16_gflops : c.fp32_gflops) * 1e9)
                                         : t.bytes / (c.memory.memory_gbs * 1e9);
        out.push_back({{"kernel", name},
                       {"bound", compute ? "compute" : "memory"},
                       {"ms_per_step", 1e3 * t.seconds / steps},
                       {"calls_per_step", (double)t.calls / steps},
                       {"mb_per_step", t.bytes / steps / 1e6},
                       {"gflop_per_step", t.flops / steps / 1e9},
                       {"gbs", t.bytes / t.seconds / 1e9},
                       {"gflops", t.flops / t.seconds / 1e9},
                       {"ms_at_ceiling", 1e3 * ceiling_s / steps}});
    }
    return out;
}

// What the process holds on huge pages, in MiB; null where it cannot be read.
nlohmann::json huge_pages_mib() {
    const long bytes = huge_page_bytes();
    return bytes < 0 ? nlohmann::json(nullptr) : nlohmann::json(bytes / 1048576.0);
}

nlohmann::json profile(const TrainConfig& config, int warmup, int steps) {
    set_thread_count(config.run.threads);
    const Ceilings c = measure_ceilings(config.run.threads);
    RandomTokens tokens(config.model.vocab_size);
    Trainer trainer(config, tokens, 0.0);
    trainer.model().init_weights(config.run.seed);
    for (int i = 0; i < warmup; i++) trainer.step();
    KernelProfile profile;
    profile.start();
    std::vector<double> step_s;
    for (int i = 0; i < steps; i++) step_s.push_back(trainer.step().step_seconds);
    profile.stop();
    const bool bf16 = config.precision.bf16_compute();
    nlohmann::json rows = kernel_rows(profile, steps, c, bf16);
    double step_ms = 0.0, compute_ms = 0.0, memory_ms = 0.0, floor_ms = 0.0, memory_floor_ms = 0.0;
    for (double s : step_s) step_ms += 1e3 * s / steps;
    for (const auto& r : rows) {
        const bool compute = r["bound"] == "compute";
        (compute ? compute_ms : memory_ms) += r["ms_per_step"].get<double>();
        (compute ? floor_ms : memory_floor_ms) += r["ms_at_ceiling"].get<double>();
    }
    return {{"precision", precision_mode_name(config.precision.mode)},
            {"threads", config.run.threads},
            {"tokens_per_step", (long)config.run.batch_size * config.run.seq_len * config.run.grad_accum},
            {"steps", steps},
            {"bf16_engine", c.bf16_engine},
            {"thp_enabled", transparent_huge_pages()},
            {"huge_page_mib", huge_pages_mib()},
            {"fp32_fma_peak_gflops", c.fp32_gflops},
            {"matmul_peak_gflops", bf16 ? c.bf16_gflops : c.fp32_gflops},
            {"memory_gbs", c.memory.memory_gbs},
            {"cache_gbs", c.memory.cache_gbs},
            {"step_ms", step_ms},
            {"compute_bound_ms", compute_ms},
            {"memory_bound_ms", memory_ms},
            {"outside_kernels_ms", step_ms - compute_ms - memory_ms},
            {"floor_ms", floor_ms},
            {"share_of_floor", floor_ms / step_ms},
            {"memory_bound_at_bandwidth_ms", memory_floor_ms},
            {"kernels", rows}};
}

void print_profile(const nlohmann::json& p) {
    fmt::print("{} step, {} tokens, {} threads: {:.1f} ms; bf16 engine: {}\n", p["precision"].get<std::string>(),
               p["tokens_per_step"].get<long>(), p["threads"].get<int>(), p["step_ms"].get<double>(),
               p["bf16_engine"].get<std::string>());
    fmt::print("ceilings: matmul {:.1f} GFLOP/s, copy bandwidth {:.1f} GB/s from memory, {:.1f} GB/s from cache\n",
               p["matmul_peak_gflops"].get<double>(), p["memory_gbs"].get<double>(), p["cache_gbs"].get<double>());
    // Buffers of 2 MiB or more ask for huge pages (aligned.h): what the
    // kernel granted, and where it grants none, what that costs.
    const std::string thp = p["thp_enabled"];
    const nlohmann::json& mib = p["huge_page_mib"];
    const std::string held = mib.is_null() ? "unknown" : fmt::format("{:.0f} MiB", mib.get<double>());
    if (thp == "never" || thp == "unknown")
        fmt::print("transparent huge pages: {}, {} of this process on them (on a KVM Xeon they made config M's step "
                   "5% faster; as root: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled)\n\n",
                   thp, held);
    else
        fmt::print("transparent huge pages: {}, {} of this process on them (hlat's buffers of 2 MiB or more ask)\n\n",
                   thp, held);
    fmt::print("{:<34} {:>9} {:>6} {:>6} {:>9} {:>10} {:>12}\n", "KERNEL", "MS/STEP", "SHARE", "CALLS", "MB/STEP",
               "RATE", "AT CEILING");
    const double step = p["step_ms"];
    for (const auto& r : p["kernels"]) {
        const bool compute = r["bound"] == "compute";
        fmt::print("{:<34} {:>9.2f} {:>5.1f}% {:>6.0f} {:>9.1f} {:>10} {:>9.2f} ms\n", r["kernel"].get<std::string>(),
                   r["ms_per_step"].get<double>(), 100 * r["ms_per_step"].get<double>() / step,
                   r["calls_per_step"].get<double>(), r["mb_per_step"].get<double>(),
                   compute ? fmt::format("{:.0f} GF/s", r["gflops"].get<double>())
                           : fmt::format("{:.1f} GB/s", r["gbs"].get<double>()),
                   r["ms_at_ceiling"].get<double>());
    }
    fmt::print("\ncompute-bound kernels {:.1f} ms (floor: their FLOPs at the ceiling, {:.1f} ms; {:.0f}% of the floor's "
               "speed for the whole step)\nmemory-bound kernels {:.1f} ms (their bytes at memory bandwidth: {:.1f} ms)\n"
               "outside any kernel {:.1f} ms (data, OpenMP forks and joins, bookkeeping)\n",
               p["compute_bound_ms"].get<double>(), p["floor_ms"].get<double>(), 100 * p["share_of_floor"].get<double>(),
               p["memory_bound_ms"].get<double>(), p["memory_bound_at_bandwidth_ms"].get<double>(),
               p["outside_kernels_ms"].get<double>());
}

}  // namespace

int profile_command(int argc, char** argv) {
    po::options_description opts("hlat profile options");
    opts.add_options()("help,h", "print this help")(
        "config", po::value<std::string>()->default_value(""), "training config (default: the built-in defaults)")(
        "precision", po::value<std::string>()->default_value(""),
        "fp32, bf16, bf16_sr, bf16_kahan or mixed; overrides precision.mode")(
        "steps", po::value<int>()->default_value(4), "steps profiled")(
        "warmup", po::value<int>()->default_value(1), "steps run first, not profiled")(
        "threads", po::value<int>()->default_value(0), "threads (0: the config's run.threads)")(
        "json", "print one JSON object instead of the table");
    auto parsed = parse_options(argc, argv, opts,
                                "usage: hlat profile [--config FILE] [--precision MODE] [--steps K] [--json]\n\n"
                                "Where a training step's time goes, kernel by kernel, each beside its time at this "
                                "CPU's\nmeasured ceilings (arithmetic for GEMMs and attention, copy bandwidth for the "
                                "rest).");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    if (vm["steps"].as<int>() < 1) throw std::runtime_error("--steps must be >= 1");
    if (vm["warmup"].as<int>() < 0) throw std::runtime_error("--warmup must be >= 0");
    if (vm["threads"].as<int>() < 0) throw std::runtime_error("--threads must be >= 0");
    const nlohmann::json p = profile(profile_config(vm), vm["warmup"].as<int>(), vm["steps"].as<int>());
    if (vm.count("json"))
        fmt::print("{}\n", p.dump());
    else
        print_profile(p);
    return 0;
}

}  // namespace hlat::cli
