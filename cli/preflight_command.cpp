// hlat preflight: the burn-in before a long job, on every rank under mpirun
// (trainer/parallel/preflight.h). Rank 0 prints the per-rank table and the
// collectives, and stores the result as a run of its own (meta kind
// "preflight": rank metrics at step 0, a critical alert per failure). Every
// rank exits 0 when the fleet passed and 3 when it did not.
#include "cli/commands.h"
#include "cli/options.h"
#include "telemetry/reader.h"
#include "session/run_session.h"
#include "telemetry/writer.h"
#include "trainer/config/config.h"
#include "trainer/parallel/preflight.h"

#include <boost/program_options.hpp>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <thread>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {

constexpr int kPreflightFailed = 3;

// Threads per rank by default: this host's cores shared by its ranks.
int default_threads() {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
    return std::max(1, (int)std::thread::hardware_concurrency() / ranks_here);
}

void store_report(const std::string& path, const std::string& name, const PreflightReport& report,
                  const TrainConfig& config) {
    namespace fs = std::filesystem;
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent);
    telemetry::Writer writer(path);
    telemetry::RunRecord r;
    // A pre-flight is never resumed: a name taken by an earlier one gets a suffix.
    r.name = name;
    telemetry::Reader reader(path);
    for (int n = 2; reader.find_run(r.name); n++) r.name = fmt::format("{}-{}", name, n);
    r.config = config_to_json(config).dump();
    r.status = "finished";
    r.host = report.ranks.empty() ? "" : report.ranks[0].host;
    r.meta = nlohmann::json{{"kind", "preflight"}, {"world_size", (int)report.ranks.size()},
                            {"preflight", report.to_json()}}
                 .dump();
    r.status = "running";
    r.started_at = telemetry::now_seconds();
    // Through a run's session like any run: its failures are alerts routed
    // once (the log, the store and its live stream, the config's webhook).
    session::SessionOptions options;
    options.catch_up = false;
    options.whole_steps = true;
    options.halts = false;
    session::Opening opening;
    opening.kind = "start";
    opening.wall_time = r.started_at;
    std::unique_ptr<session::RunSession> run = session::RunSession::open(&writer, r, opening, options);
    auto by_rank = [&](auto measure) {
        std::vector<double> values;
        for (const RankMeasurement& m : report.ranks) {
            if ((size_t)m.rank >= values.size()) values.resize(m.rank + 1, std::nan(""));
            values[m.rank] = measure(m);
        }
        return values;
    };
    run->rank_values(0, "preflight/fp32_gemm_gflops", by_rank([](const RankMeasurement& m) { return m.fp32_gflops; }));
    run->rank_values(0, "preflight/bf16_gemm_gflops", by_rank([](const RankMeasurement& m) { return m.bf16_gflops; }));
    run->rank_values(0, "preflight/triad_gbs", by_rank([](const RankMeasurement& m) { return m.triad_gbs; }));
    run->rank_values(0, "preflight/wrong_gemm_elements",
                     by_rank([](const RankMeasurement& m) { return (double)m.wrong_elements; }));
    for (const std::string& f : report.failures)
        run->raise({"preflight", "critical", 0, f, "{}", telemetry::now_seconds()}, detectors::Policy::Warn, "");
    run->finish("finished", 0, report.failures.empty() ? "pre-flight passed" : "pre-flight failed");
}

}  // namespace

int preflight_command(int argc, char** argv) {
    po::options_description opts("hlat preflight options");
    opts.add_options()("help,h", "print this help")(
        "config", po::value<std::string>()->default_value(""), "training config of the model to checksum (default: "
                                                               "the built-in defaults)")(
        "threads", po::value<int>()->default_value(0), "threads per rank (0: this host's cores over its ranks)")(
        "min-fraction", po::value<double>()->default_value(0.8), "a rank below this fraction of the fleet median "
                                                                 "GEMM rate fails")(
        "min-memory-fraction", po::value<double>()->default_value(0.6),
        "a rank below this fraction of the fleet median memory bandwidth fails")(
        "max-bytes", po::value<long>()->default_value(64L << 20), "largest collective message, bytes")(
        "store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store (\"none\": do not store)")(
        "name", po::value<std::string>()->default_value(""), "run name in the store (default: preflight-DATE-TIME)")(
        "inject", po::value<std::vector<std::string>>()->multitoken()->composing(),
        "faults: slow_rank:R:F (rank R's compute F times slower), sdc:R (rank R's GEMMs flip a bit)")(
        "json", "print one JSON object instead of the table");
    auto parsed = parse_options(argc, argv, opts,
                                "usage: mpirun -np N hlat preflight [--config FILE] [--min-fraction F] [--store FILE]\n\n"
                                "Burn-in before a long job: per-rank GEMM rates, memory bandwidth and arithmetic "
                                "checks,\nand all-reduce / all-gather bandwidth over message sizes. Exit 3 when a rank "
                                "fails.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    const std::string config_path = vm["config"].as<std::string>();
    PreflightOptions options;
    const TrainConfig config = config_path.empty() ? config_from_json(nlohmann::json::object()) : load_config(config_path);
    options.model = config.model;
    options.threads = vm["threads"].as<int>() > 0 ? vm["threads"].as<int>() : default_threads();
    options.min_fraction = vm["min-fraction"].as<double>();
    options.min_memory_fraction = vm["min-memory-fraction"].as<double>();
    options.max_bytes = vm["max-bytes"].as<long>();
    for (double f : {options.min_fraction, options.min_memory_fraction})
        if (!(f > 0 && f <= 1)) throw ConfigError("--min-fraction and --min-memory-fraction must be in (0, 1]");
    if (options.max_bytes < 8) throw ConfigError("--max-bytes must be at least 8");
    Faults faults = parse_faults(vm.count("inject") ? vm["inject"].as<std::vector<std::string>>()
                                                    : std::vector<std::string>{});
    Parallel parallel(Parallel::launched_by_mpirun() ? std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")) : 1, 1);
    PreflightReport report = run_preflight(parallel, options, faults);
    if (parallel.is_root()) {
        fmt::print("{}", vm.count("json") ? report.to_json().dump() + "\n" : format_preflight(report));
        const std::string store = vm["store"].as<std::string>();
        std::string name = vm["name"].as<std::string>();
        if (name.empty()) name = fmt::format("preflight-{:%Y%m%d-%H%M%S}", fmt::localtime(std::time(nullptr)));
        if (store != "none") store_report(store, name, report, config);
    }
    return report.passed() ? 0 : kPreflightFailed;
}

}  // namespace hlat::cli
