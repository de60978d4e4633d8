#include "detectors/postmortem.h"

#include "detectors/detector.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>

namespace hlat::detectors {

namespace {

constexpr int64_t kAll = std::numeric_limits<int64_t>::max() / 2;

std::vector<double> values(telemetry::Reader& r, int64_t run, const char* key) {
    std::vector<double> out;
    for (const auto& p : r.series(run, key, 0, kAll)) out.push_back(p.value);
    return out;
}

// Exponential moving average of (step, value) points, thinned to at most
// `max_points`: a curve that shows the trend under batch-to-batch noise.
std::vector<std::pair<double, double>> smoothed(const std::vector<std::pair<double, double>>& points, double beta,
                                                size_t max_points) {
    std::vector<std::pair<double, double>> out;
    size_t every = std::max<size_t>(1, (points.size() + max_points - 1) / max_points);
    double ema = NAN;
    for (size_t i = 0; i < points.size(); i++) {
        double v = points[i].second;
        if (std::isfinite(v)) ema = std::isfinite(ema) ? beta * ema + (1 - beta) * v : v;
        if (i % every == every - 1 || i + 1 == points.size()) out.push_back({points[i].first, ema});
    }
    return out;
}

double mean(std::vector<double>::const_iterator a, std::vector<double>::const_iterator b) {
    double s = 0.0;
    long n = 0;
    for (auto it = a; it != b; ++it)
        if (std::isfinite(*it)) s += *it, n++;
    return n ? s / n : NAN;
}

void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) flatten(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    } else {
        out[prefix] = j.dump();
    }
}

std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '<') out += "&lt;";
        else if (c == '>') out += "&gt;";
        else if (c == '&') out += "&amp;";
        else if (c == '"') out += "&quot;";
        else out += c;
    }
    return out;
}

std::string num(double v, const char* spec = "{:.4f}") { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-"; }

const char* kColors[] = {"#1f6feb", "#d4770c", "#2da44e", "#8250df", "#cf222e", "#57606a"};

using Curve = std::vector<std::pair<double, double>>;

// One chart: every run's curve as an SVG polyline over shared axes.
std::string svg_chart(const std::string& title, const std::vector<RunPostmortem>& runs,
                      const std::function<Curve(const RunPostmortem&)>& curve_of, bool log_scale,
                      const char* x_label = "step") {
    std::vector<Curve> curves;
    for (const auto& r : runs) curves.push_back(curve_of(r));
    const double W = 640, H = 260, L = 56, R = 12, T = 28, B = 30;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    auto ty = [&](double v) { return log_scale ? std::log10(std::max(v, 1e-12)) : v; };
    for (const auto& c : curves)
        for (auto [x, y] : c)
            if (std::isfinite(y)) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, ty(y)), y1 = std::max(y1, ty(y));
    std::string out = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img"><title>{}</title>)"
                                  R"(<text x="{}" y="18" font-weight="600">{}</text>)",
                                  W, H, escape(title), L, escape(title));
    if (!std::isfinite(x0)) return out + "<text x=\"60\" y=\"120\">no data</text></svg>";
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) y1 = y0 + 1;
    auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
    auto py = [&](double y) { return T + (1 - (ty(y) - y0) / (y1 - y0)) * (H - T - B); };
    out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#ccc"/>)", L, T, W - L - R, H - T - B);
    for (int i = 0; i <= 4; i++) {
        double v = y0 + (y1 - y0) * i / 4, y = T + (1 - i / 4.0) * (H - T - B);
        out += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)", L - 4, y + 4,
                           log_scale ? fmt::format("{:.3g}", std::pow(10, v)) : fmt::format("{:.3g}", v));
    }
    out += fmt::format(R"(<text x="{}" y="{}" font-size="11">{} {:.0f}</text><text x="{}" y="{}" font-size="11" text-anchor="end">{:.0f}</text>)",
                       L, H - 10, x_label, x0, W - R, H - 10, x1);
    for (size_t i = 0; i < runs.size(); i++) {
        std::string points;
        for (auto [x, y] : curves[i])
            if (std::isfinite(y)) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
        out += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)", kColors[i % 6], points);
    }
    return out + "</svg>";
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
    for (const auto& r : runs) h += "<th>" + escape(r.name) + "</th>";
    h += "</tr>";
    for (const std::string& k : keys) {
        h += "<tr><td><code>" + escape(k) + "</code></td>";
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
        h += svg_chart(k + " by tokens seen", runs, [&](const RunPostmortem& r) {
            Curve c;
            if (auto it = r.evals.find(k); it != r.evals.end())
                for (const EvalPoint& p : it->second) c.push_back({(double)p.tokens, p.value});
            return c;
        }, false, "tokens");
    }
    return h;
}

}  // namespace

std::vector<RunPostmortem> postmortem(telemetry::Reader& reader, const std::vector<std::string>& names, int window) {
    std::vector<RunPostmortem> out;
    std::map<int64_t, double> first_loss;  // step -> loss of the first run
    for (const std::string& name : names) {
        auto run = reader.find_run(name);
        if (!run) throw std::runtime_error(fmt::format("the store has no run \"{}\"", name));
        RunPostmortem p;
        p.name = name;
        p.status = run->status;
        p.precision = run->precision.empty() ? "fp32" : run->precision;
        std::vector<std::pair<double, double>> loss_points;
        std::vector<double> loss;
        for (const auto& pt : reader.series(run->id, "loss", 0, kAll)) {
            loss_points.push_back({(double)pt.step, pt.value});
            loss.push_back(pt.value);
        }
        std::vector<double> grad = values(reader, run->id, "grad_norm");
        std::vector<double> heldout = values(reader, run->id, "heldout_loss"), tps = values(reader, run->id, "tokens_per_s");
        p.steps = (int64_t)loss.size();
        if (!loss.empty()) {
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
        if (!heldout.empty()) {
            p.final_heldout = heldout.back();
            p.best_heldout = *std::min_element(heldout.begin(), heldout.end());
        }
        if (grad.size() >= 8) {
            size_t q = grad.size() / 4;
            p.grad_trend = mean(grad.end() - q, grad.end()) / mean(grad.begin() + q, grad.begin() + 2 * q);
        }
        p.spike_lengths = spike_episode_lengths(grad, 20, SpikeRule::Additive, 0.1);
        for (auto& [len, n] : p.spike_lengths) p.spike_episodes += n;
        if (p.spike_episodes) p.one_step_spike_share = (double)p.spike_lengths[1] / p.spike_episodes;
        for (const auto& a : reader.alerts(run->id)) p.alerts[a.kind]++;
        if (!tps.empty()) {
            std::nth_element(tps.begin(), tps.begin() + tps.size() / 2, tps.end());
            p.tokens_per_s = tps[tps.size() / 2];
        }
        // What each format needs per parameter: fp32 keeps 4 bytes each of
        // weight, gradient and the two Adam moments; pure bf16 2 of each;
        // mixed an fp32 master weight, its bf16 copy, an fp32 gradient and fp32 moments.
        static const std::map<std::string, double> bytes = {{"fp32", 16}, {"bf16", 8}, {"bf16_sr", 8}, {"mixed", 18}};
        if (bytes.count(p.precision)) p.state_bytes_per_param = bytes.at(p.precision);
        p.loss_curve = smoothed(loss_points, 0.9, 300);
        if (out.empty()) {
            for (auto [step, v] : loss_points) first_loss[(int64_t)step] = v;
        } else {
            std::vector<std::pair<double, double>> gap;
            for (auto [step, v] : loss_points) {
                auto it = first_loss.find((int64_t)step);
                if (it != first_loss.end() && std::isfinite(v) && std::isfinite(it->second))
                    gap.push_back({step, v - it->second});
            }
            if (!gap.empty()) {
                size_t w = std::min<size_t>(window, gap.size());
                double sum = 0.0, sq = 0.0;
                for (size_t i = gap.size() - w; i < gap.size(); i++) sum += gap[i].second;
                p.loss_gap = sum / w;
                for (size_t i = gap.size() - w; i < gap.size(); i++) sq += (gap[i].second - p.loss_gap) * (gap[i].second - p.loss_gap);
                p.loss_gap_std = std::sqrt(sq / w);
                p.gap_curve = smoothed(gap, 0.9, 300);
            }
        }
        for (const auto& b : reader.downsample(run->id, "grad_norm", 0, kAll, 300)) p.grad_curve.push_back({(double)b.last_step, b.max});
        collect_evals(reader.evals(run->id), p.evals);
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

std::string postmortem_html(const std::vector<RunPostmortem>& runs,
                            const std::map<std::string, std::vector<std::string>>& differences) {
    std::string h = R"(<!doctype html><html lang="en"><head><meta charset="utf-8"><title>hlat post-mortem</title><style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1b1f24}table{border-collapse:collapse;margin:12px 0}
th,td{padding:4px 10px;border-bottom:1px solid #e3e5e8;text-align:left}td:first-child{white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px}svg{background:#fff;border:1px solid #e3e5e8;margin:6px}
code{font-size:12px}</style></head><body><h1>hlat post-mortem</h1>)";
    h += "<h2>Runs</h2><table><tr><th>run</th><th>precision</th><th>status</th><th>steps</th><th>final loss</th><th>best loss</th>"
         "<th>final held-out</th><th>best held-out</th><th>loss variance</th><th>loss gap vs first</th><th>gap std</th>"
         "<th>grad-norm trend</th><th>spike episodes</th>"
         "<th>one-step spikes</th><th>alerts</th><th>tokens/s</th><th>state bytes/param</th></tr>";
    for (size_t i = 0; i < runs.size(); i++) {
        const RunPostmortem& r = runs[i];
        long alerts = 0;
        for (auto& [k, n] : r.alerts) alerts += n;
        h += fmt::format(R"(<tr><td><span class="swatch" style="background:{}"></span>{}</td><td>{}</td><td>{}</td><td class="n">{}</td>)"
                         R"(<td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td>)"
                         R"(<td class="n">{}</td><td class="n">{}</td>)"
                         R"(<td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>)",
                         kColors[i % 6], escape(r.name), escape(r.precision), escape(r.status), r.steps, num(r.final_loss),
                         num(r.best_loss), num(r.final_heldout), num(r.best_heldout), num(r.loss_variance, "{:.5f}"),
                         num(r.loss_gap, "{:+.4f}"), num(r.loss_gap_std, "{:.4f}"),
                         num(r.grad_trend, "{:.2f}x"), r.spike_episodes, num(100 * r.one_step_spike_share, "{:.0f}%"), alerts,
                         num(r.tokens_per_s, "{:.0f}"), num(r.state_bytes_per_param, "{:.0f}"));
    }
    h += fmt::format("</table><p>Final loss: mean of the last 50 steps; best: lowest 50-step mean; loss variance over the "
                     "last 50 steps; loss gap: the run's loss minus {}'s at the same steps, mean and standard deviation "
                     "over the last 50 (with one seed and data order the batch-to-batch swings cancel, leaving what the "
                     "setting did); grad-norm trend: mean of the last quarter over the second quarter; spike episodes by "
                     "the paper's rule (running mean of 20 + 0.1).</p>",
                     runs.empty() ? "the first run" : escape(runs[0].name));
    h += svg_chart("training loss (EMA 0.9)", runs, [](const RunPostmortem& r) { return r.loss_curve; }, false);
    if (runs.size() > 1)
        h += svg_chart(fmt::format("loss minus {}'s at the same step (EMA 0.9)", runs[0].name), runs,
                       [](const RunPostmortem& r) { return r.gap_curve; }, false);
    h += svg_chart("grad norm (bucket maxima, log scale)", runs, [](const RunPostmortem& r) { return r.grad_curve; }, true);
    h += evals_html(runs);
    h += "<h2>Config differences</h2>";
    if (differences.empty()) {
        h += "<p>The configs are identical.</p>";
    } else {
        h += "<table><tr><th>field</th>";
        for (const auto& r : runs) h += "<th>" + escape(r.name) + "</th>";
        h += "</tr>";
        for (const auto& [k, vals] : differences) {
            h += "<tr><td><code>" + escape(k) + "</code></td>";
            for (const auto& v : vals) h += "<td><code>" + escape(v) + "</code></td>";
            h += "</tr>";
        }
        h += "</table>";
    }
    h += "<h2>Spike episode lengths</h2><table><tr><th>run</th><th>lengths (steps: episodes)</th></tr>";
    for (const auto& r : runs) {
        std::string lengths;
        for (auto& [len, n] : r.spike_lengths) lengths += fmt::format("{}: {}  ", len, n);
        h += "<tr><td>" + escape(r.name) + "</td><td>" + (lengths.empty() ? "-" : lengths) + "</td></tr>";
    }
    h += "</table><h2>Alerts</h2><table><tr><th>run</th><th>by kind</th></tr>";
    for (const auto& r : runs) {
        std::string kinds;
        for (auto& [k, n] : r.alerts) kinds += fmt::format("{} × {}  ", escape(k), n);
        h += "<tr><td>" + escape(r.name) + "</td><td>" + (kinds.empty() ? "none" : kinds) + "</td></tr>";
    }
    return h + "</table></body></html>\n";
}

}  // namespace hlat::detectors
