// hlat probe: the CPU's arithmetic ceilings (fp32 FMA, bf16 dot product, AMX) and
// the rate of every GEMM a training step of a config runs, on fp32 sgemm and
// on the bf16 matmul engine, each beside its ceiling.
#include "cli/commands.h"
#include "cli/options.h"
#include "trainer/config/config.h"
#include "trainer/model/aligned.h"
#include "trainer/model/flops.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/peak_probe.h"
#include "trainer/model/sgemm.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include <chrono>
#include <optional>
#include <random>
#include <vector>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {

struct GemmRate {
    GemmShape shape;
    double fp32_s = 0.0, bf16_s = 0.0;  // best time of one call
};

// Best of five timed calls after one untimed call (which builds oneDNN's primitive): on a
// shared machine the best is the one least disturbed by neighbours.
template <typename F>
double best_seconds(F&& call) {
    call();
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        call();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

// The forward and input-gradient products read a weight, which the model
// packs once per step (kernels_bf16.h): b as W (OC = n, IC = k) for the
// forward, as W (OC = k, IC = n) for the input gradient.
std::optional<Bf16Weight> packed_weight(const GemmShape& g, const float* b) {
    std::optional<Bf16Weight> w;
    if (g.pass == "forward") w.emplace(g.n, g.k);
    if (g.pass == "dinput") w.emplace(g.k, g.n);
    if (w) w->assign(b);
    return w;
}

GemmRate time_gemm(const GemmShape& g) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    // On a cache line, as the step's buffers are (aligned.h): oneDNN's AMX
    // products ran up to 3x slower on glibc's 16-byte offset.
    AlignedVector<float> a((long)g.m * g.k), b((long)g.k * g.n), c((long)g.m * g.n, 0.0f);
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    AlignedVector<bf16> a16(a.size()), b16(b.size());
    bf16_narrow(a16.data(), a.data(), (long)a.size());
    bf16_narrow(b16.data(), b.data(), (long)b.size());
    GemmRate r{g};
    r.fp32_s = best_seconds([&] {
        sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, a.data(), g.trans_a ? g.m : g.k, b.data(),
              g.trans_b ? g.k : g.n, g.accumulate ? 1.0f : 0.0f, c.data(), g.n);
    });
    std::optional<Bf16Weight> w = packed_weight(g, b.data());
    // The two gradient products read the output gradient (a) as the step
    // makes it, once for both (widened on the emulated engine), and the
    // step's profile times that on its own: made here, outside the timing.
    Bf16OutputGrad dout;
    if (g.pass != "forward") dout.assign(a16.data(), (long)a16.size());
    r.bf16_s = best_seconds([&] {
        if (g.pass == "forward") return matmul_forward_bf16(c.data(), a16.data(), *w, g.m);
        if (g.pass == "dinput") return matmul_dinput_bf16(c.data(), dout, *w, g.m);
        matmul_dweight_bf16(c.data(), dout, b16.data(), g.k, g.n, g.m, g.accumulate);  // (OC, IC) = a^T b
    });
    return r;
}

double gflops(const GemmShape& g, double seconds) { return 2.0 * g.m * g.n * g.k / seconds / 1e9; }

nlohmann::json probe(const TrainConfig& config, int threads) {
    omp_set_num_threads(threads);
    const double fma = fp32_fma_peak_gflops(threads), dot = bf16_dot_peak_gflops(threads),
                 amx = amx_bf16_peak_gflops(threads);
    const int tokens = config.run.batch_size * config.run.seq_len;
    nlohmann::json shapes = nlohmann::json::array();
    double flops = 0.0, fp32_s = 0.0, bf16_s = 0.0;
    for (const GemmShape& g : training_gemms(config.model, tokens)) {
        GemmRate r = time_gemm(g);
        flops += 2.0 * g.m * g.n * g.k * g.count;
        fp32_s += r.fp32_s * g.count;
        bf16_s += r.bf16_s * g.count;
        shapes.push_back({{"matmul", g.matmul}, {"pass", g.pass}, {"m", g.m}, {"n", g.n}, {"k", g.k},
                          {"count", g.count}, {"fp32_gflops", gflops(g, r.fp32_s)},
                          {"bf16_gflops", gflops(g, r.bf16_s)}});
    }
    auto share = [](double rate, double peak) { return peak > 0 ? nlohmann::json(rate / peak) : nlohmann::json(); };
    const std::string engine = bf16_matmul_engine_name();
    const double engine_peak = bf16_engine_peak_gflops(fma, dot, amx);
    return {{"threads", threads},
            {"tokens", tokens},
            {"bf16_engine", engine},
            {"fp32_fma_peak_gflops", fma},
            {"bf16_dot_peak_gflops", dot},
            {"amx_bf16_peak_gflops", amx},
            {"bf16_engine_peak_gflops", engine_peak},
            {"fp32_gemm_gflops", flops / fp32_s / 1e9},
            {"bf16_gemm_gflops", flops / bf16_s / 1e9},
            {"fp32_share_of_peak", share(flops / fp32_s / 1e9, fma)},
            {"bf16_share_of_peak", share(flops / bf16_s / 1e9, engine_peak)},
            {"shapes", shapes}};
}

void print_probe(const nlohmann::json& p) {
    auto pct = [](double rate, double peak) { return peak > 0 ? fmt::format("{:.0f}%", 100 * rate / peak) : "-"; };
    const double fma = p["fp32_fma_peak_gflops"], engine_peak = p["bf16_engine_peak_gflops"];
    fmt::print("ceilings on {} threads: fp32 FMA {:.1f} GFLOP/s, bf16 dot product {:.1f} GFLOP/s", p["threads"].get<int>(),
               fma, p["bf16_dot_peak_gflops"].get<double>());
    if (p["amx_bf16_peak_gflops"].get<double>() > 0)
        fmt::print(", AMX bf16 {:.1f} GFLOP/s", p["amx_bf16_peak_gflops"].get<double>());
    fmt::print("\n");
    fmt::print("bf16 engine: {} (its ceiling {:.1f} GFLOP/s)\n\n", p["bf16_engine"].get<std::string>(), engine_peak);
    fmt::print("{:<8} {:<8} {:>6} {:>6} {:>6} {:>5}  {:>10} {:>5}  {:>10} {:>5}\n", "MATMUL", "PASS", "M", "N", "K", "x",
               "FP32 GF/s", "PEAK", "BF16 GF/s", "PEAK");
    for (const auto& s : p["shapes"])
        fmt::print("{:<8} {:<8} {:>6} {:>6} {:>6} {:>5}  {:>10.1f} {:>5}  {:>10.1f} {:>5}\n",
                   s["matmul"].get<std::string>(), s["pass"].get<std::string>(), s["m"].get<int>(), s["n"].get<int>(),
                   s["k"].get<int>(), s["count"].get<int>(), s["fp32_gflops"].get<double>(),
                   pct(s["fp32_gflops"], fma), s["bf16_gflops"].get<double>(), pct(s["bf16_gflops"], engine_peak));
    fmt::print("\na step's GEMMs, all together: fp32 {:.1f} GFLOP/s ({} of its ceiling), bf16 {:.1f} GFLOP/s ({} of "
               "its ceiling)\n",
               p["fp32_gemm_gflops"].get<double>(), pct(p["fp32_gemm_gflops"], fma), p["bf16_gemm_gflops"].get<double>(),
               pct(p["bf16_gemm_gflops"], engine_peak));
}

}  // namespace

int probe_command(int argc, char** argv) {
    po::options_description opts("hlat probe options");
    opts.add_options()("help,h", "print this help")(
        "config", po::value<std::string>()->default_value(""), "training config whose step's GEMMs to time (default: the "
                                                               "built-in defaults)")(
        "threads", po::value<int>()->default_value(0), "threads (0: the config's run.threads)")(
        "json", "print one JSON object instead of the table");
    auto parsed = parse_options(argc, argv, opts,
                                "usage: hlat probe [--config FILE] [--threads N] [--json]\n\nThe CPU's fp32 FMA and bf16 "
                                "dot-product ceilings, measured from registers, and the rate\nof each GEMM of a training "
                                "step on fp32 sgemm and on the bf16 matmul engine.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    const std::string path = vm["config"].as<std::string>();
    const TrainConfig config = path.empty() ? config_from_json(nlohmann::json::object()) : load_config(path);
    const int threads = vm["threads"].as<int>() > 0 ? vm["threads"].as<int>() : config.run.threads;
    const nlohmann::json p = probe(config, threads);
    if (vm.count("json"))
        fmt::print("{}\n", p.dump());
    else
        print_probe(p);
    return 0;
}

}  // namespace hlat::cli
