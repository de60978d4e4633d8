#include "report/postmortem.h"

#include "detectors/detector.h"
#include "report/palette.h"
#include "report/report_chart.h"
#include "report/setting_verdict.h"
#include "telemetry/alert_episodes.h"
#include "telemetry/log_text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>

namespace hlat::report {

namespace {

constexpr int64_t kAll = std::numeric_limits<int64_t>::max() / 2;

constexpr size_t kChartBuckets = 300;

std::vector<std::pair<double, double>> points(telemetry::Reader& r, int64_t run, const char* key) {
    std::vector<std::pair<double, double>> out;
    for (const auto& p : r.series(run, key, 0, kAll)) out.push_back({(double)p.step, p.value});
    return out;
}

std::vector<double> values(telemetry::Reader& r, int64_t run, const char* key) {
    std::vector<double> out;
    for (const auto& p : r.series(run, key, 0, kAll)) out.push_back(p.value);
    return out;
}

double mean(std::vector<double>::const_iterator a, std::vector<double>::const_iterator b) {
    double s = 0.0;
    long n = 0;
    for (auto it = a; it != b; ++it)
        if (std::isfinite(*it)) s += *it, n++;
    return n ? s / n : NAN;
}

// Where alerts go is no part of an experiment's setting, and a webhook's URL
// is a secret: left out of a flattened config.
void drop_alert_routing(std::map<std::string, std::string>& flat) {
    for (const char* where : {"detectors.webhook", "detectors.webhook_format", "detectors.webhook_ca",
                              "detectors.webhook_page"})
        flat.erase(where);
}

void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) flatten(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    } else {
        out[prefix] = j.dump();
    }
}

// An integer seed from JSON text ("7", 7.0), or -1: an imported config may hold anything.
int64_t seed_of(const std::string& text) {
    const nlohmann::json seed = nlohmann::json::parse(text, nullptr, false);
    if (seed.is_number_integer()) return seed.get<int64_t>();
    const double v = seed.is_number_float() ? seed.get<double>() : NAN;
    return v == std::floor(v) && v >= 0 && v < 9e15 ? (int64_t)v : -1;  // 7.0 from a float-typed config
}

// The run's seed and precision, and its config without what differs from run
// to run of one setting (seed, name, folder, store): runs with equal settings
// are seeds of one experiment. The seed is the config's run.seed (hlat's
// trainer) or seed (a script's config), else the run's meta seed (`hlat
// ingest --meta seed=N`, the client's meta); a precision the run's column
// lacks is read from the config's precision, precision.mode or run.precision.
void read_setting(const telemetry::RunRecord& run, RunPostmortem& p) {
    nlohmann::json j = nlohmann::json::parse(run.config, nullptr, false);
    if (!j.is_discarded()) flatten(j, "", p.setting);
    drop_alert_routing(p.setting);
    for (const char* key : {"run.seed", "seed"}) {
        auto it = p.setting.find(key);
        if (it == p.setting.end()) continue;
        if (p.seed < 0) p.seed = seed_of(it->second);
        p.setting.erase(it);
    }
    nlohmann::json meta = nlohmann::json::parse(run.meta, nullptr, false);
    if (p.seed < 0 && meta.is_object() && meta.contains("seed")) p.seed = seed_of(meta["seed"].dump());
    for (const char* key : {"precision", "precision.mode", "run.precision"}) {
        auto it = p.setting.find(key);
        if (it == p.setting.end()) continue;
        nlohmann::json named = nlohmann::json::parse(it->second, nullptr, false);
        if (run.precision.empty() && named.is_string()) p.precision = named.get<std::string>();
        p.setting.erase(it);  // the precision is the setting's name, not one of its fields
    }
    p.precision = telemetry::precision_name(p.precision);
    p.setting.erase("run.price_per_rank_hour");  // what a run cost is not part of its setting
    for (const char* key : {"run.name", "run.out_dir", "run.store"}) p.setting.erase(key);
}

// Final loss (mean of the last `window`), best `window`-step mean, and the
// variance over the last `window`.
void summarize_loss(const std::vector<double>& loss, int window, RunPostmortem& p) {
    p.steps = (int64_t)loss.size();
    if (loss.empty()) return;
    size_t w = std::min<size_t>(window, loss.size());
    p.final_loss = mean(loss.end() - w, loss.end());
    for (size_t i = 0; i + w <= loss.size(); i++) {
        double m = mean(loss.begin() + i, loss.begin() + i + w);
        if (std::isfinite(m) && !(m >= p.best_loss)) p.best_loss = m;
    }
    double var = 0.0;
    for (auto it = loss.end() - w; it != loss.end(); ++it) var += (*it - p.final_loss) * (*it - p.final_loss);
    p.loss_variance = var / w;
}

// "diverged at 900" in red for a run whose loss ended non-finite, else its status.
std::string status_text(const RunPostmortem& r) {
    if (r.diverged_at < 0) return html_escape(r.status);
    return fmt::format(R"(<b style="color:#cf222e">diverged at {}</b>)", r.diverged_at);
}

// The first step of the non-finite stretch a series ends with, or -1.
int64_t trailing_nonfinite_step(const std::vector<std::pair<double, double>>& points) {
    int64_t since = -1;
    for (auto it = points.rbegin(); it != points.rend() && !std::isfinite(it->second); ++it) since = (int64_t)it->first;
    return since;
}

// The loss minus the reference run's at the same steps: its mean and standard
// deviation over the last `window` common steps, and its curve.
void gap_to_first(const std::vector<std::pair<double, double>>& loss_points, const std::map<int64_t, double>& first_loss,
                  int window, RunPostmortem& p) {
    std::vector<std::pair<double, double>> gap;
    for (auto [step, v] : loss_points) {
        auto it = first_loss.find((int64_t)step);
        if (it != first_loss.end() && std::isfinite(v) && std::isfinite(it->second)) gap.push_back({step, v - it->second});
    }
    if (gap.empty()) return;
    size_t w = std::min<size_t>(window, gap.size());
    double sum = 0.0, sq = 0.0;
    for (size_t i = gap.size() - w; i < gap.size(); i++) sum += gap[i].second;
    p.loss_gap = sum / w;
    for (size_t i = gap.size() - w; i < gap.size(); i++) sq += (gap[i].second - p.loss_gap) * (gap[i].second - p.loss_gap);
    p.loss_gap_std = std::sqrt(sq / w);
    p.gap_curve = envelopes(gap, kChartBuckets);
}

// What each format needs per parameter: fp32 keeps 4 bytes each of weight,
// gradient and the two Adam moments; pure bf16 2 of each, and bf16_kahan 2
// more for its compensation; mixed an fp32 master weight, its bf16 copy, an
// fp32 gradient and fp32 moments. NaN for a precision the run did not state.
double format_bytes_per_param(const std::string& precision) {
    static const std::map<std::string, double> bytes = {
        {"fp32", 16}, {"bf16", 8}, {"bf16_sr", 8}, {"bf16_kahan", 10}, {"mixed", 18}};
    auto it = bytes.find(precision);
    return it == bytes.end() ? NAN : it->second;
}

std::string num(double v, const char* spec = "{:.4f}") { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-"; }


// Whose loss the gaps are against: the first run, or with several seeds the
// first run named with each seed.
std::string gap_reference(const std::vector<RunPostmortem>& runs) {
    std::set<int64_t> seeds;
    for (const auto& r : runs) seeds.insert(r.seed);
    if (runs.empty()) return "the first run";
    return seeds.size() > 1 ? "its seed's first run" : runs[0].name;
}

// Each run's colour: its own, or its setting's when seeds of one setting are
// compared (fifteen runs in six colours would say nothing).
std::vector<const char*> run_colours(const std::vector<RunPostmortem>& runs) {
    const std::vector<size_t> of = setting_of_runs(runs);
    const bool grouped = std::set<size_t>(of.begin(), of.end()).size() < runs.size();
    std::vector<const char*> colours;
    for (size_t i = 0; i < runs.size(); i++) colours.push_back(kRunPalette[(grouped ? of[i] : i) % kRunPalette.size()]);
    return colours;
}

// Each run's curve in the run's colour; on charts by step, with its alerts marked.
std::vector<ChartLine> chart_lines(const std::vector<RunPostmortem>& runs,
                                   const std::function<Curve(const RunPostmortem&)>& curve_of, bool by_step) {
    const std::vector<const char*> colours = run_colours(runs);
    std::vector<ChartLine> lines;
    for (size_t i = 0; i < runs.size(); i++)
        lines.push_back({curve_of(runs[i]), colours[i], by_step ? runs[i].alert_steps : std::vector<int64_t>{}});
    return lines;
}

// Checkpoint evaluations by "task/metric", each metric's "_stderr" row folded
// into its point; the chance level and the trainer's held-out loss left out.
void collect_evals(const std::vector<telemetry::EvalRecord>& records, std::map<std::string, std::vector<EvalPoint>>& out) {
    std::map<std::string, std::map<int64_t, EvalPoint>> by_step;
    const std::string suffix = "_stderr";
    for (const auto& e : records) {
        if (e.task == "heldout" || e.metric == "chance") continue;
        const bool is_stderr = e.metric.size() > suffix.size() && e.metric.ends_with(suffix);
        const std::string metric = is_stderr ? e.metric.substr(0, e.metric.size() - suffix.size()) : e.metric;
        EvalPoint& p = by_step[e.task + "/" + metric][e.step];
        p.step = e.step;
        p.tokens = e.tokens;
        (is_stderr ? p.stderr_ : p.value) = e.value;
    }
    for (auto& [key, points] : by_step)
        for (auto& [step, p] : points) out[key].push_back(p);
}

// The checkpoint evaluations: each metric's last value per run, then its
// curve against tokens seen.
std::string evals_html(const std::vector<RunPostmortem>& runs) {
    std::set<std::string> keys;
    for (const auto& r : runs)
        for (const auto& [k, _] : r.evals) keys.insert(k);
    if (keys.empty()) return "";
    std::string h = "<h2>Checkpoint evaluations</h2><table><tr><th>task/metric</th>";
    for (const auto& r : runs) h += "<th>" + html_escape(r.name) + "</th>";
    h += "</tr>";
    for (const std::string& k : keys) {
        h += "<tr><td><code>" + html_escape(k) + "</code></td>";
        for (const auto& r : runs) {
            auto it = r.evals.find(k);
            if (it == r.evals.end() || it->second.empty()) {
                h += "<td>-</td>";
                continue;
            }
            const EvalPoint& p = it->second.back();
            h += fmt::format(R"(<td class="n">{}{} <small>at {} tokens</small></td>)", num(p.value),
                             std::isfinite(p.stderr_) ? " ± " + num(p.stderr_) : "", p.tokens);
        }
        h += "</tr>";
    }
    h += "</table><p>The last scored checkpoint of each run, ± one standard error.</p>";
    for (const std::string& k : keys) {
        h += svg_chart(k + " by tokens seen (band: ± one standard error)", chart_lines(runs, [&](const RunPostmortem& r) {
            Curve c;
            if (auto it = r.evals.find(k); it != r.evals.end())
                for (const EvalPoint& p : it->second) {
                    const double se = std::isfinite(p.stderr_) ? p.stderr_ : 0.0;
                    c.push_back({(double)p.tokens, p.value - se, p.value + se, p.value});
                }
            return c;
        }, false), false, "tokens");
    }
    return h;
}

}  // namespace

// The world size (meta) and price per rank-hour (config, else meta) of a run.
static void read_pricing(const telemetry::RunRecord& run, RunPostmortem& p) {
    const nlohmann::json meta = nlohmann::json::parse(run.meta, nullptr, false);
    const nlohmann::json config = nlohmann::json::parse(run.config, nullptr, false);
    if (meta.is_object() && meta.contains("world_size") && meta["world_size"].is_number_integer())
        p.world_size = std::max(1, meta["world_size"].get<int>());
    if (meta.is_object() && meta.contains("price_per_rank_hour") && meta["price_per_rank_hour"].is_number())
        p.price_per_rank_hour = meta["price_per_rank_hour"].get<double>();
    if (config.is_object() && config.contains("run") && config["run"].is_object() &&
        config["run"].contains("price_per_rank_hour") && config["run"]["price_per_rank_hour"].is_number())
        p.price_per_rank_hour = config["run"]["price_per_rank_hour"].get<double>();
}

double run_cost_per_4m_tokens(telemetry::Reader& reader, const telemetry::RunRecord& run) {
    RunPostmortem p;
    read_pricing(run, p);
    if (!(p.price_per_rank_hour > 0)) return NAN;
    std::vector<double> tps = values(reader, run.id, "tokens_per_s");
    if (tps.empty()) return NAN;
    std::nth_element(tps.begin(), tps.begin() + tps.size() / 2, tps.end());
    p.tokens_per_s = tps[tps.size() / 2];
    price_run(p, p.price_per_rank_hour);
    return p.cost_per_4m_tokens;
}

void price_run(RunPostmortem& p, double price) {
    p.price_per_rank_hour = price > 0 ? price : NAN;
    p.cost_per_4m_tokens = p.tokens_per_unit_price = NAN;
    if (!(price > 0) || !(p.tokens_per_s > 0)) return;
    const double per_second = price * p.world_size / 3600.0;
    p.cost_per_4m_tokens = per_second * 4e6 / p.tokens_per_s;
    p.tokens_per_unit_price = p.tokens_per_s / per_second;
}

std::vector<RunPostmortem> postmortem(telemetry::Reader& reader, const std::vector<std::string>& names, int window) {
    std::vector<RunPostmortem> out;
    // seed -> step -> loss of the first run named with that seed: a run's gap
    // is to the run that shared its initial weights and data order.
    std::map<int64_t, std::map<int64_t, double>> first_loss;
    for (const std::string& name : names) {
        auto run = reader.find_run(name);
        if (!run) throw std::runtime_error(fmt::format("the store has no run \"{}\"", name));
        RunPostmortem p;
        p.name = name;
        p.status = run->status;
        p.precision = run->precision.empty() ? "-" : run->precision;  // an imported log may not say
        read_setting(*run, p);
        std::vector<std::pair<double, double>> loss_points;
        std::vector<double> loss;
        for (const auto& pt : reader.series(run->id, "loss", 0, kAll)) {
            loss_points.push_back({(double)pt.step, pt.value});
            loss.push_back(pt.value);
        }
        summarize_loss(loss, window, p);
        p.diverged_at = trailing_nonfinite_step(loss_points);
        std::vector<double> grad = values(reader, run->id, "grad_norm");
        std::vector<double> heldout = values(reader, run->id, "heldout_loss"), tps = values(reader, run->id, "tokens_per_s");
        if (!heldout.empty()) {
            p.final_heldout = heldout.back();
            p.best_heldout = *std::min_element(heldout.begin(), heldout.end());
        }
        if (grad.size() >= 8) {
            size_t q = grad.size() / 4;
            p.grad_trend = mean(grad.end() - q, grad.end()) / mean(grad.begin() + q, grad.begin() + 2 * q);
        }
        p.spike_lengths = detectors::spike_episode_lengths(grad, 20, detectors::SpikeRule::Additive, 0.1);
        for (auto& [len, n] : p.spike_lengths) p.spike_episodes += n;
        if (p.spike_episodes) p.one_step_spike_share = (double)p.spike_lengths[1] / p.spike_episodes;
        const std::vector<telemetry::Alert> alerts = reader.alerts(run->id);
        for (const auto& a : alerts) p.alerts[a.kind]++;
        for (const auto& e : telemetry::alert_episodes(alerts)) p.alert_steps.push_back(e.first_step);  // one mark each
        if (!tps.empty()) {
            std::nth_element(tps.begin(), tps.begin() + tps.size() / 2, tps.end());
            p.tokens_per_s = tps[tps.size() / 2];
        }
        std::vector<double> lost = values(reader, run->id, "lost_updates");
        if (!lost.empty()) p.lost_updates = mean(lost.end() - std::min<size_t>(window, lost.size()), lost.end());
        p.format_bytes_per_param = format_bytes_per_param(p.precision);
        const nlohmann::json meta = nlohmann::json::parse(run->meta, nullptr, false);
        if (meta.is_object() && meta.contains("bytes_per_param") && meta["bytes_per_param"].is_number())
            p.state_bytes_per_param = meta["bytes_per_param"].get<double>();
        read_pricing(*run, p);
        price_run(p, p.price_per_rank_hour);
        p.loss_curve = envelopes(loss_points, kChartBuckets);
        auto [reference, first_of_its_seed] = first_loss.try_emplace(p.seed);
        if (first_of_its_seed) {
            for (auto [step, v] : loss_points) reference->second[(int64_t)step] = v;
        } else {
            gap_to_first(loss_points, reference->second, window, p);
        }
        p.grad_curve = envelopes(points(reader, run->id, "grad_norm"), kChartBuckets);
        collect_evals(reader.evals(run->id), p.evals);
        if (p.diverged_at >= 0) p.final_loss = p.final_heldout = p.loss_gap = p.loss_gap_std = NAN;
        out.push_back(std::move(p));
    }
    return out;
}

std::map<std::string, std::vector<std::string>> config_differences(telemetry::Reader& reader,
                                                                   const std::vector<std::string>& names) {
    std::vector<std::map<std::string, std::string>> flat;
    for (const std::string& name : names) {
        auto run = reader.find_run(name);
        if (!run) throw std::runtime_error(fmt::format("the store has no run \"{}\"", name));
        std::map<std::string, std::string> f;
        nlohmann::json j = nlohmann::json::parse(run->config, nullptr, false);
        if (!j.is_discarded()) flatten(j, "", f);
        drop_alert_routing(f);
        flat.push_back(f);
    }
    std::map<std::string, std::vector<std::string>> out;
    std::map<std::string, bool> all;
    for (const auto& f : flat)
        for (const auto& [k, v] : f) all[k] = true;
    for (const auto& [k, _] : all) {
        if (k == "run.name" || k == "run.out_dir") continue;  // where a run lives is not a difference
        std::vector<std::string> vals;
        for (const auto& f : flat) vals.push_back(f.count(k) ? f.at(k) : "-");
        if (std::adjacent_find(vals.begin(), vals.end(), std::not_equal_to<>()) != vals.end()) out[k] = vals;
    }
    return out;
}

// Cost and scaling, when runs have a price: ranks, throughput, cost per 4M
// tokens and that cost against the first priced run's (the paper's Figure 4
// normalizes to its baseline the same way), as a table and a bar chart.
static std::string cost_html(const std::vector<RunPostmortem>& runs, const std::vector<const char*>& colours) {
    const RunPostmortem* base = nullptr;
    for (const RunPostmortem& r : runs)
        if (std::isfinite(r.cost_per_4m_tokens) && !base) base = &r;
    if (!base) return "";
    std::string table = "<h2>Cost and scaling</h2><table><tr><th>run</th><th>ranks</th><th>tokens/s</th>"
                        "<th>price per rank-hour</th><th>cost per 4M tokens</th><th>vs " + html_escape(base->name) +
                        "</th><th>tokens per unit price</th></tr>";
    double top = 0.0;
    for (const RunPostmortem& r : runs) top = std::max(top, r.cost_per_4m_tokens / base->cost_per_4m_tokens);
    const int bar_h = 22, width = 640, label_w = 180;
    std::string bars;
    int row = 0;
    for (size_t i = 0; i < runs.size(); i++) {
        const RunPostmortem& r = runs[i];
        const double rel = r.cost_per_4m_tokens / base->cost_per_4m_tokens;
        table += fmt::format(R"(<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td>)"
                             R"(<td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>)",
                             html_escape(r.name), r.world_size, num(r.tokens_per_s, "{:.0f}"),
                             num(r.price_per_rank_hour, "{:.4g}"), num(r.cost_per_4m_tokens, "{:.4g}"),
                             num(rel, "{:.2f}x"), num(r.tokens_per_unit_price, "{:.4g}"));
        if (!std::isfinite(rel)) continue;
        const int y = 30 + row++ * (bar_h + 6), w = (int)((width - label_w - 60) * rel / top);
        bars += fmt::format(R"(<text x="4" y="{}">{}</text><rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>)"
                            R"(<text x="{}" y="{}">{:.2f}x</text>)",
                            y + 15, html_escape(r.name), label_w, y, w, bar_h, colours[i], label_w + w + 6, y + 15, rel);
    }
    return table + "</table>" +
           fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img">)"
                       R"(<text x="4" y="18" font-weight="600">cost per 4M tokens against {}</text>{}</svg>)",
                       width, 40 + row * (bar_h + 6), html_escape(base->name), bars);
}

std::string postmortem_html(const std::vector<RunPostmortem>& runs,
                            const std::map<std::string, std::vector<std::string>>& differences) {
    std::string h = R"(<!doctype html><html lang="en"><head><meta charset="utf-8"><title>hlat post-mortem</title><style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1b1f24}table{border-collapse:collapse;margin:12px 0}
th,td{padding:4px 10px;border-bottom:1px solid #e3e5e8;text-align:left}td:first-child{white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px}svg{background:#fff;border:1px solid #e3e5e8;margin:6px}
code{font-size:12px}</style></head><body><h1>hlat post-mortem</h1>)";
    h += settings_html(summarize_settings(runs));
    h += "<h2>Runs</h2><table><tr><th>run</th><th>precision</th><th>status</th><th>steps</th><th>final loss</th><th>best loss</th>"
         "<th>final held-out</th><th>best held-out</th><th>loss variance</th><th>loss gap vs first</th><th>gap std</th>"
         "<th>grad-norm trend</th><th>spike episodes</th>"
         "<th>one-step spikes</th><th>alerts</th><th>tokens/s</th><th>state bytes/param allocated (format)</th>"
         "<th>cost per 4M tokens</th></tr>";
    const std::vector<const char*> colours = run_colours(runs);
    for (size_t i = 0; i < runs.size(); i++) {
        const RunPostmortem& r = runs[i];
        long alerts = 0;
        for (auto& [k, n] : r.alerts) alerts += n;
        h += fmt::format(R"(<tr><td><span class="swatch" style="background:{}"></span>{}</td><td>{}</td><td>{}</td><td class="n">{}</td>)"
                         R"(<td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td>)"
                         R"(<td class="n">{}</td><td class="n">{}</td>)"
                         R"(<td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>)",
                         colours[i], html_escape(r.name), html_escape(r.precision), status_text(r), r.steps, num(r.final_loss),
                         num(r.best_loss), num(r.final_heldout), num(r.best_heldout), num(r.loss_variance, "{:.5f}"),
                         num(r.loss_gap, "{:+.4f}"), num(r.loss_gap_std, "{:.4f}"),
                         num(r.grad_trend, "{:.2f}x"), r.spike_episodes, num(100 * r.one_step_spike_share, "{:.0f}%"), alerts,
                         num(r.tokens_per_s, "{:.0f}"),
                         num(r.state_bytes_per_param, "{:.0f}") + " (" + num(r.format_bytes_per_param, "{:.0f}") + ")",
                         num(r.cost_per_4m_tokens, "{:.4g}"));
    }
    h += fmt::format("</table><p>Final loss: mean of the last 50 steps; best: lowest 50-step mean; loss variance over the "
                     "last 50 steps; loss gap: the run's loss minus {}'s at the same steps, mean and standard deviation "
                     "over the last 50 (with one seed and data order the batch-to-batch swings cancel, leaving what the "
                     "setting did); grad-norm trend: mean of the last quarter over the second quarter; spike episodes by "
                     "the paper's rule (running mean of 20 + 0.1).</p>",
                     html_escape(gap_reference(runs)));
    h += cost_html(runs, colours);
    h += "<p>Charts by step: each band spans the lowest to the highest value of a bucket of steps (at most "
         + std::to_string(kChartBuckets) + " buckets), the line is the bucket's mean, so a one-step spike shows "
         "at any length; triangles mark where alert episodes begin (alerts of one kind, each within 10 steps "
         "of the one before).</p>";
    h += svg_chart("training loss", chart_lines(runs, [](const RunPostmortem& r) { return r.loss_curve; }, true), false);
    if (runs.size() > 1)
        h += svg_chart(fmt::format("loss minus {}'s at the same step", gap_reference(runs)),
                       chart_lines(runs, [](const RunPostmortem& r) { return r.gap_curve; }, true), false);
    h += svg_chart("grad norm (log scale)", chart_lines(runs, [](const RunPostmortem& r) { return r.grad_curve; }, true), true);
    h += evals_html(runs);
    h += "<h2>Config differences</h2>";
    if (differences.empty()) {
        h += "<p>The configs are identical.</p>";
    } else {
        h += "<table><tr><th>field</th>";
        for (const auto& r : runs) h += "<th>" + html_escape(r.name) + "</th>";
        h += "</tr>";
        for (const auto& [k, vals] : differences) {
            h += "<tr><td><code>" + html_escape(k) + "</code></td>";
            for (const auto& v : vals) h += "<td><code>" + html_escape(v) + "</code></td>";
            h += "</tr>";
        }
        h += "</table>";
    }
    h += "<h2>Spike episode lengths</h2><table><tr><th>run</th><th>lengths (steps: episodes)</th></tr>";
    for (const auto& r : runs) {
        std::string lengths;
        for (auto& [len, n] : r.spike_lengths) lengths += fmt::format("{}: {}  ", len, n);
        h += "<tr><td>" + html_escape(r.name) + "</td><td>" + (lengths.empty() ? "-" : lengths) + "</td></tr>";
    }
    h += "</table><h2>Alerts</h2><table><tr><th>run</th><th>by kind</th></tr>";
    for (const auto& r : runs) {
        std::string kinds;
        for (auto& [k, n] : r.alerts) kinds += fmt::format("{} × {}  ", html_escape(k), n);
        h += "<tr><td>" + html_escape(r.name) + "</td><td>" + (kinds.empty() ? "none" : kinds) + "</td></tr>";
    }
    return h + "</table></body></html>\n";
}

}  // namespace hlat::report
