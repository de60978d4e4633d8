// hlat runs: list the runs of a store, or delete one.
#include "cli/commands.h"
#include "cli/options.h"
#include "report/postmortem.h"
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <fstream>
#include <iostream>
#include <thread>

namespace hlat::cli {
namespace po = boost::program_options;
using namespace hlat::telemetry;

namespace {

std::string format_number(double v, const char* fmt_spec) {
    if (std::isnan(v)) return "-";
    return fmt::format(fmt::runtime(fmt_spec), v);
}

std::string format_time(double t) {
    if (t <= 0) return "-";
    std::time_t s = (std::time_t)t;
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&s));
    return buf;
}

}  // namespace

int runs_command(int argc, char** argv) {
    po::options_description opts("hlat runs options");
    opts.add_options()("help,h", "print this help")(
        "store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store")(
        "json", "one JSON object per run instead of the table (uptime with its training and wall seconds)")(
        "delete", po::value<std::string>(), "delete this run and everything recorded of it (a failed import, say)");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat runs [--store FILE] [--json] [--delete NAME]\n\nLists the runs of a store: status, steps, last loss, tokens, "
                     "uptime, alerts.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    if (vm.count("delete")) {
        std::string name = vm["delete"].as<std::string>(), store = vm["store"].as<std::string>();
        std::optional<RunRecord> run = Reader(store).find_run(name);
        if (!run) throw std::runtime_error(fmt::format("store {} has no run \"{}\"", store, name));
        if (run->status == "running")
            spdlog::warn("run \"{}\" is marked running: whatever still writes it (hlat ingest --follow, a client "
                         "through hlat serve, hlat train) is told at its next write that it was deleted, and stops",
                         name);
        Writer(store).delete_run(run->id);
        fmt::print("deleted run \"{}\" ({}) from {}\n", name, run->status, store);
        return 0;
    }
    Reader reader(vm["store"].as<std::string>());
    std::vector<RunSummary> runs = reader.runs();
    if (vm.count("json")) {
        auto number = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
        for (const RunSummary& r : runs)
            fmt::print("{}\n", nlohmann::json{{"name", r.run.name},
                                              {"status", r.run.status},
                                              {"steps", r.steps()},
                                              {"last_loss", number(r.last_loss)},
                                              {"tokens", number(r.tokens_seen)},
                                              {"alerts", r.alerts},
                                              {"cost_per_4m_tokens", number(report::run_cost_per_4m_tokens(reader, r.run))},
                                              {"uptime", {{"ratio", r.uptime.ratio},
                                                          {"training_seconds", r.uptime.training_seconds},
                                                          {"wall_seconds", r.uptime.wall_seconds},
                                                          {"restarts", r.uptime.restarts}}}}
                                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        return 0;
    }
    if (runs.empty()) {
        fmt::print("no runs in {}\n", vm["store"].as<std::string>());
        return 0;
    }
    // A name stored before names were checked may hold bytes that are not UTF-8: shown escaped.
    auto shown = [](const std::string& name) { return telemetry::excerpt(name, 200, false); };
    size_t name_width = 4;
    for (const RunSummary& r : runs) name_width = std::max(name_width, shown(r.run.name).size());
    fmt::print("{:<{}}  {:<9}  {:<9}  {:>8}  {:>9}  {:>10}  {:>7}  {:>6}  {:>8}  {}\n", "RUN", name_width, "STATUS",
               "PRECISION", "STEPS", "LAST LOSS", "TOKENS", "UPTIME", "ALERTS", "CPT", "STARTED");
    for (const RunSummary& r : runs) {
        fmt::print("{:<{}}  {:<9}  {:<9}  {:>8}  {:>9}  {:>10}  {:>7}  {:>6}  {:>8}  {}\n", shown(r.run.name), name_width,
                   r.run.status, r.run.precision.empty() ? "-" : r.run.precision,
                   r.last_step >= 0 ? std::to_string(r.steps()) : "-", format_number(r.last_loss, "{:.4f}"),
                   format_number(r.tokens_seen, "{:.4g}"),
                   r.uptime.wall_seconds > 0 ? fmt::format("{:.1f}%", 100.0 * r.uptime.ratio) : "-", r.alerts,
                   format_number(report::run_cost_per_4m_tokens(reader, r.run), "{:.4g}"), format_time(r.run.started_at));
    }
    return 0;
}

}  // namespace hlat::cli
