// hlat alerts: a run's alerts as episodes (telemetry/alert_episodes.h), or
// every alert with --all.
#include "cli/commands.h"
#include "cli/options.h"
#include "telemetry/alert_episodes.h"
#include "telemetry/reader.h"
#include "telemetry/untrusted_text.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace hlat::cli {
namespace po = boost::program_options;
using namespace hlat::telemetry;

namespace {

std::string steps_of(const AlertEpisode& e) {
    return e.first_step == e.last_step ? std::to_string(e.first_step)
                                       : fmt::format("{}-{}", e.first_step, e.last_step);
}

std::string worst_of(const AlertEpisode& e) {
    if (!e.has_value) return "-";
    return fmt::format("{:.4g} @{}", e.worst_value, e.worst_step);  // fmt spells nan and inf
}

void print_episodes(const std::vector<AlertEpisode>& episodes) {
    fmt::print("{:<22}  {:<8}  {:>15}  {:>6}  {:>20}  {}\n", "KIND", "SEVERITY", "STEPS", "COUNT", "WORST", "MESSAGE");
    for (const AlertEpisode& e : episodes)
        fmt::print("{:<22}  {:<8}  {:>15}  {:>6}  {:>20}  {}\n", e.kind, e.severity, steps_of(e), e.count, worst_of(e),
                   excerpt(e.message, 160, false));
}

}  // namespace

int alerts_command(int argc, char** argv) {
    po::options_description opts("hlat alerts options");
    opts.add_options()("help,h", "print this help")(
        "store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store")(
        "run", po::value<std::string>()->required(), "the run")(
        "all", "every alert, one line each, rather than episodes")(
        "json", "one JSON object per episode (or per alert with --all)");
    auto parsed = parse_options(argc, argv, opts,
                                "usage: hlat alerts --run NAME [--store FILE] [--all] [--json]\n\nA run's alerts grouped "
                                "into episodes: alerts of one kind and severity, each within 10 steps of\nthe one "
                                "before, as one line (first and last step, count, the worst value and its message).");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    const std::string store = vm["store"].as<std::string>(), name = vm["run"].as<std::string>();
    Reader reader(store);
    std::optional<RunRecord> run = reader.find_run(name);
    if (!run) throw std::runtime_error(fmt::format("store {} has no run \"{}\"", store, name));
    std::vector<Alert> alerts = reader.alerts(run->id);
    if (vm.count("all")) {
        for (const Alert& a : alerts) {
            if (vm.count("json"))
                fmt::print("{}\n", nlohmann::json{{"kind", a.kind}, {"severity", a.severity}, {"step", a.step},
                                                  {"message", a.message}, {"time", a.wall_time}}
                                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
            else
                fmt::print("{:>8}  {:<22}  {:<8}  {}\n", a.step, a.kind, a.severity, excerpt(a.message, 200, false));
        }
        return 0;
    }
    const size_t total = alerts.size();
    std::vector<AlertEpisode> episodes = alert_episodes(std::move(alerts));
    if (vm.count("json")) {
        for (const AlertEpisode& e : episodes)
            fmt::print("{}\n", episode_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        return 0;
    }
    if (episodes.empty()) {
        fmt::print("run \"{}\" has no alerts\n", name);
        return 0;
    }
    fmt::print("run \"{}\" ({}): {} alerts in {} episodes\n", name, run->status, total,
               episodes.size());
    print_episodes(episodes);
    return 0;
}

}  // namespace hlat::cli
