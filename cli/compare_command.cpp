// hlat compare: runs side by side, and the precision post-mortem's verdict
// per setting over seeds (report/postmortem.h, report/setting_verdict.h).
#include "cli/commands.h"
#include "cli/options.h"
#include "report/postmortem.h"
#include "report/setting_verdict.h"
#include "trainer/files/file_io.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>
#include <sstream>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {

// NaN (a number that does not exist, like the held-out loss of a run
// without evaluations) is null in JSON.
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

// A table cell: the number in `spec`, or "-" where there is none.
std::string num(double v, const char* spec) { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-"; }

// The settings of `hlat compare --json`: a key per setting.
nlohmann::json settings_json(const std::vector<report::SettingSummary>& settings) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& s : settings) {
        nlohmann::json heldout = nlohmann::json::array();
        for (double v : s.heldout) heldout.push_back(number(v));
        out[s.name] = {{"precision", s.precision}, {"runs", s.runs},           {"seeds", s.seeds},
                       {"final_heldout", heldout}, {"mean", number(s.mean)},   {"spread", number(s.spread)},
                       {"gap", number(s.gap)},     {"margin95", number(s.margin)}, {"paired", s.paired},
                       {"baseline", s.baseline},   {"verdict", s.verdict}, {"lost_updates", number(s.lost_updates)},
                       {"stalled_runs", s.stalled},
                       {"worse", s.worse},         {"better", s.better}, {"compared", s.compared},
                       {"seeds_to_resolve", number(s.seeds_to_resolve)}};
    }
    return out;
}

// `hlat compare --json`: {"runs": a key per run, "settings": a key per setting}.
nlohmann::json compare_json(const std::vector<report::RunPostmortem>& runs) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& r : runs) {
        nlohmann::json alerts = r.alerts;
        nlohmann::json evals = nlohmann::json::object();  // the last checkpoint's value of each
        for (const auto& [key, points] : r.evals)
            evals[key] = {{"step", points.back().step}, {"tokens", points.back().tokens},
                          {"value", number(points.back().value)}, {"stderr", number(points.back().stderr_)}};
        out[r.name] = {{"precision", r.precision},
                       {"status", r.status},
                       {"diverged_at", r.diverged_at >= 0 ? nlohmann::json(r.diverged_at) : nlohmann::json(nullptr)},
                       {"steps", r.steps},
                       {"final_loss", number(r.final_loss)},
                       {"best_loss", number(r.best_loss)},
                       {"final_heldout", number(r.final_heldout)},
                       {"loss_variance", number(r.loss_variance)},
                       {"loss_gap_vs_first", number(r.loss_gap)},
                       {"loss_gap_std", number(r.loss_gap_std)},
                       {"grad_trend", number(r.grad_trend)},
                       {"spike_episodes", r.spike_episodes},
                       {"one_step_spike_share", number(r.one_step_spike_share)},
                       {"alerts", alerts},
                       {"tokens_per_s", number(r.tokens_per_s)},
                       {"state_bytes_per_param", number(r.state_bytes_per_param)},
                       {"format_bytes_per_param", number(r.format_bytes_per_param)},
                       {"world_size", r.world_size},
                       {"price_per_rank_hour", number(r.price_per_rank_hour)},
                       {"cost_per_4m_tokens", number(r.cost_per_4m_tokens)},
                       {"tokens_per_unit_price", number(r.tokens_per_unit_price)},
                       {"seed", r.seed},
                       {"lost_updates", number(r.lost_updates)},
                       {"evals", evals}};
    }
    return {{"runs", out}, {"settings", settings_json(report::summarize_settings(runs))}};
}

// The verdict table, when some setting has more than one run (seeds).
void print_settings(const std::vector<report::SettingSummary>& settings) {
    if (std::string why = report::no_verdict_reason(settings); !why.empty()) fmt::print("\n{}\n", why);
    if (!report::some_setting_has_seeds(settings)) return;
    size_t w = 7;
    for (const auto& s : settings) w = std::max(w, s.name.size());
    fmt::print("\nby setting (final held-out loss over seeds; gap ± its 95% margin):\n");
    fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>18}  {:>6}  {}\n", "SETTING", w, "RUNS", "MEAN", "SPREAD", "GAP", "LOST", "VERDICT");
    for (const auto& s : settings)
        fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>18}  {:>6}  {}\n", s.name, w, s.runs.size(), num(s.mean, "{:.4f}"),
                   num(s.spread, "{:.4f}"),
                   s.baseline ? "" : num(s.gap, "{:+.4f}") + (std::isfinite(s.margin) ? " ± " + num(s.margin, "{:.4f}") : ""),
                   num(100 * s.lost_updates, "{:.1f}%"), s.verdict);
}

// `hlat compare`'s table, the last checkpoint evaluations and the config differences.
void print_comparison(const std::vector<report::RunPostmortem>& runs,
                      const std::map<std::string, std::vector<std::string>>& diffs) {
    size_t w = 4;
    for (const auto& r : runs) w = std::max(w, r.name.size());
    fmt::print("{:<{}}  {:>9}  {:>7}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}  {:>9}  {:>6}  {:>7}  {:>6}  {:>9}  {:>7}  {:>8}\n",
               "RUN", w, "PRECISION", "STEPS", "FINAL", "BEST", "HELDOUT", "LOSS VAR", "GAP", "GAP STD", "GRAD TREND",
               "SPIKES", "1-STEP", "ALERTS", "TOK/S", "B/PARAM", "CPT");
    for (const auto& r : runs) {
        long alerts = 0;
        for (auto& [k, n] : r.alerts) alerts += n;
        fmt::print("{:<{}}  {:>9}  {:>7}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}  {:>9}  {:>6}  {:>7}  {:>6}  {:>9}  {:>7}  {:>8}\n",
                   r.name, w, r.precision, r.steps,
                   r.diverged_at >= 0 ? "diverged" : num(r.final_loss, "{:.4f}"), num(r.best_loss, "{:.4f}"),
                   num(r.final_heldout, "{:.4f}"),
                   num(r.loss_variance, "{:.5f}"), num(r.loss_gap, "{:+.4f}"), num(r.loss_gap_std, "{:.4f}"),
                   num(r.grad_trend, "{:.2f}x"), r.spike_episodes,
                   num(100 * r.one_step_spike_share, "{:.0f}%"), alerts, num(r.tokens_per_s, "{:.0f}"),
                   num(r.state_bytes_per_param, "{:.0f}") + "/" + num(r.format_bytes_per_param, "{:.0f}"),
                   num(r.cost_per_4m_tokens, "{:.4g}"));
    }
    for (const auto& r : runs)
        if (r.diverged_at >= 0)
            fmt::print("{}: diverged at step {} (its loss non-finite from there to the end): no final loss, held-out "
                       "loss or gap\n", r.name, r.diverged_at);
    fmt::print("(B/PARAM: bytes of weights, gradients and optimizer state per parameter, as allocated / as the "
               "precision's number formats need; CPT: cost per 4M tokens at the median throughput, every rank billed at "
               "its price per hour)\n");
    std::set<std::string> eval_keys;
    for (const auto& r : runs)
        for (const auto& [key, _] : r.evals) eval_keys.insert(key);
    if (!eval_keys.empty()) {
        fmt::print("\ncheckpoint evaluations (last scored checkpoint, ± standard error):\n");
        for (const std::string& key : eval_keys) {
            fmt::print("  {:<32}", key);
            for (const auto& r : runs) {
                auto it = r.evals.find(key);
                const report::EvalPoint* p = it == r.evals.end() ? nullptr : &it->second.back();
                fmt::print(" {:>22}", !p ? std::string("-")
                                         : num(p->value, "{:.4f}") +
                                               (std::isfinite(p->stderr_) ? " ± " + num(p->stderr_, "{:.4f}") : ""));
            }
            fmt::print("\n");
        }
    }
    if (!diffs.empty()) {
        fmt::print("\nconfig differences:\n");
        for (const auto& [k, vals] : diffs) {
            fmt::print("  {:<32}", k);
            for (const auto& v : vals) fmt::print(" {:>14}", v);
            fmt::print("\n");
        }
    }
}

}  // namespace

int compare_command(int argc, char** argv) {
    po::options_description opts("hlat compare options");
    opts.add_options()("help,h", "print this help")(
        "store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store")(
        "runs", po::value<std::string>()->default_value(""), "runs to compare, comma-separated")(
        "out", po::value<std::string>()->default_value(""), "also write a self-contained HTML report here")(
        "price", po::value<double>(), "price of one rank for an hour, for every run's cost per 4M tokens (default: "
                                      "each run's own run.price_per_rank_hour, if any)")(
        "json", "print the numbers as one JSON object (last line) instead of the table");
    auto parsed = parse_options(argc, argv, opts,
                                "usage: hlat compare --store FILE --runs A,B[,...] [--out report.html] [--json]\n\nThe post-mortem "
                                "of runs side by side: losses, loss variance, grad-norm trend, spike\nepisodes, alerts, "
                                "throughput, state bytes per parameter, and the config differences.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    std::vector<std::string> names;
    std::stringstream list(vm["runs"].as<std::string>());
    for (std::string n; std::getline(list, n, ',');)
        if (!n.empty()) names.push_back(n);
    if (names.empty()) throw std::runtime_error("--runs names no run");
    telemetry::Reader reader(vm["store"].as<std::string>());
    auto runs = report::postmortem(reader, names);
    if (vm.count("price"))
        for (auto& r : runs) report::price_run(r, vm["price"].as<double>());
    auto diffs = report::config_differences(reader, names);
    if (!vm["out"].as<std::string>().empty())
        write_file_atomic(vm["out"].as<std::string>(), {report::postmortem_html(runs, diffs)});
    if (vm.count("json")) {
        fmt::print("{}\n", compare_json(runs).dump());
        return 0;
    }
    print_comparison(runs, diffs);
    print_settings(report::summarize_settings(runs));
    if (!vm["out"].as<std::string>().empty()) fmt::print("\nreport: {}\n", vm["out"].as<std::string>());
    return 0;
}

}  // namespace hlat::cli
