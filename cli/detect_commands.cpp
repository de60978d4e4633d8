// hlat detect (replay a stored run through the detectors) and hlat spikes (the
// paper's spike-episode statistics of a stored run).
#include "cli/commands.h"
#include "cli/options.h"
#include "session/step_views.h"
#include "session/run_session.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "trainer/config/config.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <limits>
#include <map>
#include <set>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {

struct StoredRun {
    std::unique_ptr<telemetry::Reader> reader;
    telemetry::RunRecord run;
};

StoredRun open_run(const std::string& store, const std::string& name) {
    if (name.empty()) throw std::runtime_error("--run is required");
    StoredRun s{std::make_unique<telemetry::Reader>(store), {}};
    auto run = s.reader->find_run(name);
    if (!run) throw std::runtime_error(fmt::format("store {} has no run \"{}\" (`hlat runs --store {}` lists them)", store, name, store));
    s.run = *run;
    return s;
}

// Exit codes of hlat detect, for scripts that gate on it.
constexpr int kExitNoDetectorKeys = 2;
constexpr int kExitHaltAlert = 3;  // as a halted hlat train

// The replayed alerts the store does not have yet (same kind at the same step).
std::vector<detectors::Fired> new_alerts(telemetry::Reader& reader, int64_t run,
                                         const std::vector<detectors::Fired>& fired) {
    std::set<std::pair<std::string, int64_t>> stored;
    for (const telemetry::Alert& a : reader.alerts(run)) stored.insert({a.kind, a.step});
    std::vector<detectors::Fired> out;
    for (const detectors::Fired& f : fired)
        if (!stored.count({f.alert.kind, f.alert.step})) out.push_back(f);
    return out;
}

// --save: the new alerts through the run's session, as online alerts are
// routed (their windows and attribution from the store), halting nothing and
// posting nothing: the run is judged after the fact.
void save_new_alerts(const std::string& store, StoredRun& s, const detectors::DetectorsConfig& config,
                     const std::vector<detectors::Fired>& fired) {
    std::vector<detectors::Fired> fresh = new_alerts(*s.reader, s.run.id, fired);
    telemetry::Writer writer(store);
    session::SessionOptions options;
    options.catch_up = false;
    options.halts = false;
    options.notify = false;
    options.detectors = config;
    std::unique_ptr<session::RunSession> run = session::RunSession::attach(writer, *s.reader, s.run, options);
    const size_t saved = run->route_judged(*s.reader, std::move(fresh)).size();
    run->flush();
    fmt::print("saved {} new alerts ({} were stored already)\n", saved, fired.size() - saved);
}

}  // namespace

int detect_command(int argc, char** argv) {
    po::options_description opts("hlat detect options");
    opts.add_options()("help,h", "print this help")(
        "store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store")(
        "run", po::value<std::string>()->default_value(""), "run name")(
        "config", po::value<std::string>()->default_value(""),
        "training config whose detectors section to use instead of the run's own")(
        "save", "store the alerts the store does not have yet (same kind at the same step)");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat detect --store FILE --run NAME [--save]\n\nReplays a stored run (trained here or ingested) "
                     "through the detectors with the run's own\nsettings and prints every alert: the same alerts the run "
                     "raised online, from the same stored points.\n"
                     "Exit codes: 0 no halt-policy alert, 3 a halt-policy alert fired, 2 the run has none of\nthe keys "
                     "the detectors read (loss, grad_norm, ...), 1 error.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    StoredRun s = open_run(vm["store"].as<std::string>(), vm["run"].as<std::string>());
    detectors::DetectorsConfig config = vm["config"].as<std::string>().empty()
                                            ? session::detectors_of(s.run)
                                            : load_config(vm["config"].as<std::string>()).detectors;
    long steps = 0;
    std::vector<detectors::Fired> fired = session::replay_stored(*s.reader, s.run.id, config, &steps);
    if (steps == 0) {
        std::string keys;
        for (const std::string& k : s.reader->keys(s.run.id)) keys += (keys.empty() ? "" : ", ") + k;
        fmt::print(stderr, "run \"{}\" has none of the keys the detectors read (loss, grad_norm, heldout_loss, "
                           "...); its keys: {}. Re-import it with --map, e.g. --map train_loss=loss\n",
                   s.run.name, keys.empty() ? "none" : keys);
        return kExitNoDetectorKeys;
    }
    fmt::print("run \"{}\": {} steps replayed, {} alerts\n", s.run.name, steps, fired.size());
    bool halt = false;
    for (const detectors::Fired& f : fired) {
        const bool halts = f.policy == detectors::Policy::Halt || f.policy == detectors::Policy::RewindSkip;
        halt = halt || halts;
        fmt::print("step {:>7}  {:<8}  {:<22} {}{}\n", f.alert.step, f.alert.severity, f.alert.kind, f.alert.message,
                   halts ? fmt::format("  [{}]", detectors::policy_name(f.policy)) : "");
    }
    if (vm.count("save")) save_new_alerts(vm["store"].as<std::string>(), s, config, fired);
    return halt ? kExitHaltAlert : 0;
}

int spikes_command(int argc, char** argv) {
    po::options_description opts("hlat spikes options");
    opts.add_options()("help,h", "print this help")(
        "store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store")(
        "run", po::value<std::string>()->default_value(""), "run name")(
        "window", po::value<int>()->default_value(20), "running-mean window in steps")(
        "rule", po::value<std::string>()->default_value("additive"), "additive, ratio or zscore")(
        "threshold", po::value<double>()->default_value(0.1), "the rule's threshold");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat spikes --store FILE --run NAME\n\nGradient-norm spike episodes as the paper measured "
                     "them (a spike while the norm exceeds\nits mean over the previous 20 steps + 0.1): the histogram "
                     "of episode lengths and the\nshare of one-step spikes (the paper's Figure 2: over 86%).");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    nlohmann::json rule = {{"grad_spike",
                            {{"window", vm["window"].as<int>()},
                             {"rule", vm["rule"].as<std::string>()},
                             {"threshold", vm["threshold"].as<double>()}}}};
    detectors::GradSpikeConfig c = detectors::detectors_from_json(rule).grad_spike;
    StoredRun s = open_run(vm["store"].as<std::string>(), vm["run"].as<std::string>());
    std::vector<double> norms;
    for (const auto& p : s.reader->series(s.run.id, "grad_norm", 0, std::numeric_limits<int64_t>::max()))
        norms.push_back(p.value);
    if (norms.empty()) throw std::runtime_error(fmt::format("run \"{}\" has no grad_norm series", s.run.name));
    std::map<int, long> lengths = detectors::spike_episode_lengths(norms, c.window, c.rule, c.threshold);
    long episodes = 0;
    for (auto& [len, n] : lengths) episodes += n;
    fmt::print("run \"{}\": {} steps, {} spike episodes (rule {}, threshold {}, running mean of the previous {} "
               "steps)\n",
               s.run.name, norms.size(), episodes, vm["rule"].as<std::string>(), c.threshold, c.window);
    if (!episodes) return 0;
    long max_count = 0;
    for (auto& [len, n] : lengths) max_count = std::max(max_count, n);
    fmt::print("{:>8}  {:>8}  {:>7}\n", "LENGTH", "EPISODES", "SHARE");
    for (auto& [len, n] : lengths)
        fmt::print("{:>8}  {:>8}  {:>6.1f}%  {}\n", len, n, 100.0 * n / episodes,
                   std::string((size_t)(40.0 * n / max_count + 0.5), '#'));
    fmt::print("one-step spikes: {:.1f}% of episodes (the paper: over 86%)\n", 100.0 * lengths[1] / episodes);
    return 0;
}

}  // namespace hlat::cli
