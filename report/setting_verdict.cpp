#include "report/setting_verdict.h"

#include "report/report_chart.h"

#include <boost/math/distributions/students_t.hpp>
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

namespace hlat::report {

namespace {

using Setting = std::pair<std::string, std::map<std::string, std::string>>;  // precision, config

double mean_of(const std::vector<double>& v) {
    double s = 0.0;
    for (double x : v) s += x;
    return v.empty() ? NAN : s / v.size();
}

// Sample standard deviation (n - 1); NaN below two values.
double spread_of(const std::vector<double>& v) {
    if (v.size() < 2) return NAN;
    const double m = mean_of(v);
    double sq = 0.0;
    for (double x : v) sq += (x - m) * (x - m);
    return std::sqrt(sq / (v.size() - 1));
}

// Half-width of a two-sided 95% interval: Student's t quantile times the standard error.
double margin95(double degrees_of_freedom, double standard_error) {
    boost::math::students_t t(degrees_of_freedom);
    return boost::math::quantile(t, 0.975) * standard_error;
}

// The setting's name: its precision, and where another setting has the same
// precision, the config fields in which they differ.
std::string setting_name(const std::vector<Setting>& settings, size_t g) {
    std::set<std::string> fields;
    for (size_t h = 0; h < settings.size(); h++) {
        if (h == g || settings[h].first != settings[g].first) continue;
        for (const auto* m : {&settings[g].second, &settings[h].second})
            for (const auto& [k, v] : *m) {
                auto a = settings[g].second.find(k), b = settings[h].second.find(k);
                if (a == settings[g].second.end() || b == settings[h].second.end() || a->second != b->second)
                    fields.insert(k);
            }
    }
    std::string name = settings[g].first, extra;
    for (const std::string& k : fields) {
        auto it = settings[g].second.find(k);
        extra += fmt::format("{}{}={}", extra.empty() ? "" : ", ", k, it == settings[g].second.end() ? "-" : it->second);
    }
    return extra.empty() ? name : name + " (" + extra + ")";
}

// How many of `values` came out above `reference` (worse: a higher loss)
// and how many below it.
void count_worse(const std::vector<double>& values, double reference, SettingSummary& s) {
    s.compared = (int)values.size();
    s.worse = s.better = 0;
    for (double v : values) s.worse += v > reference, s.better += v < reference;
}

// The smallest number of seeds per setting, above the `have` already run,
// whose 95% interval with the spread seen would be narrower than the gap
// seen: paired (one spread, of the per-seed gaps, n - 1 degrees of freedom)
// or two independent settings of n seeds each (Welch's degrees of freedom,
// as the interval itself). NaN for no gap or no spread; past 1000, 1001.
double seeds_to_resolve(double gap, double spread, double other_spread, bool paired, size_t have) {
    const double a = spread * spread, b = other_spread * other_spread;
    if (!(std::abs(gap) > 0) || !(a + b > 0)) return NAN;
    for (int n = std::max<int>(2, (int)have + 1); n <= 1000; n++) {
        const double df = paired ? n - 1 : (n - 1) * (a + b) * (a + b) / (a * a + b * b);
        if (margin95(df, std::sqrt((a + b) / n)) < std::abs(gap)) return n;
    }
    return 1001;
}

// The gap to the baseline with its 95% margin: paired by seed when every
// run of the setting has the baseline's run of its seed (the same initial
// weights and data order, so the seed's own luck cancels), else Welch's
// interval for two independent samples.
void judge_gap(const std::vector<RunPostmortem>& runs, const std::vector<size_t>& of, size_t g, size_t base,
               SettingSummary& s, const SettingSummary& b) {
    std::map<int64_t, double> base_by_seed;
    for (size_t i = 0; i < runs.size(); i++)
        if (of[i] == base && runs[i].seed >= 0 && std::isfinite(runs[i].final_heldout))
            base_by_seed[runs[i].seed] = runs[i].final_heldout;
    std::vector<double> gaps;
    std::set<int64_t> seeds;  // two runs of one seed are repeats, not two seeds: no pairing then
    bool paired = true;
    for (size_t i = 0; i < runs.size() && paired; i++) {
        if (of[i] != g || !std::isfinite(runs[i].final_heldout)) continue;
        auto it = base_by_seed.find(runs[i].seed);
        if (it == base_by_seed.end() || !seeds.insert(runs[i].seed).second) paired = false;
        else gaps.push_back(runs[i].final_heldout - it->second);
    }
    s.paired = paired && gaps.size() >= 2;
    if (s.paired) {
        s.gap = mean_of(gaps);
        s.margin = margin95(gaps.size() - 1, spread_of(gaps) / std::sqrt(gaps.size()));
        count_worse(gaps, 0.0, s);
        s.seeds_to_resolve = seeds_to_resolve(s.gap, spread_of(gaps), 0.0, true, gaps.size());
        return;
    }
    s.gap = s.mean - b.mean;
    count_worse(s.heldout, b.mean, s);
    if (s.heldout.size() < 2 || b.heldout.size() < 2) return;
    const double va = s.spread * s.spread / s.heldout.size(), vb = b.spread * b.spread / b.heldout.size();
    const double df = (va + vb) * (va + vb) /
                      (va * va / (s.heldout.size() - 1) + vb * vb / (b.heldout.size() - 1));  // Welch-Satterthwaite
    s.margin = va + vb > 0 ? margin95(df, std::sqrt(va + vb)) : 0.0;
    s.seeds_to_resolve = seeds_to_resolve(s.gap, s.spread, b.spread, false, std::max(s.heldout.size(), b.heldout.size()));
}

// "about 7 seeds would", "more than 1000 seeds would"
std::string seeds_needed(double n) {
    return n > 1000 ? "more than 1000 seeds would" : fmt::format("about {:.0f} seeds would", n);
}

// What the seeds say, first: "worse in 3 of 3 seeds" reads true even when
// the interval is too wide to call the gap (3 seeds give t = 4.3), and then
// the sentence says so and how many seeds would resolve it.
std::string gap_verdict(const SettingSummary& s, const std::string& baseline) {
    if (s.baseline) return "the baseline";
    if (!std::isfinite(s.gap)) return "no final held-out loss to judge by";
    if (!std::isfinite(s.margin))
        return fmt::format("gap {:+.4f}; one seed, no spread to judge it by", s.gap);
    const char* unit = s.paired ? "seeds" : "runs";
    const bool one_side = s.worse == s.compared || s.better == s.compared;
    const std::string tally = s.better == s.compared ? fmt::format("better in {0} of {0} {1}", s.compared, unit)
                                                     : fmt::format("worse in {} of {} {}", s.worse, s.compared, unit);
    if (std::abs(s.gap) > s.margin)
        return fmt::format("{} by {:.4f} ± {:.4f}, beyond the seed spread ({})", s.gap > 0 ? "worse" : "better",
                           std::abs(s.gap), s.margin, tally);
    const std::string resolve = std::isfinite(s.seeds_to_resolve)
                                    ? fmt::format("the 95% interval ±{:.4f} does not resolve it: {}", s.margin,
                                                  seeds_needed(s.seeds_to_resolve))
                                    : fmt::format("95% interval ±{:.4f}", s.margin);
    if (one_side) return fmt::format("{} ({:+.4f}; {})", tally, s.gap, resolve);
    return fmt::format("indistinguishable from {} ({:+.4f}, {}; {})", baseline, s.gap, tally, resolve);
}

// Why a setting fell behind, when its runs said so while they trained: the
// precision-stall detector (rounding threw away most of some tensors'
// updates) in a setting worse than the baseline (beyond the seed spread, or
// in every seed) names lost updates; a gap the seeds do not resolve has no cause to name.
std::string cause(const SettingSummary& s) {
    const bool worse = s.gap > 0 && std::isfinite(s.margin) && (s.gap > s.margin || s.worse == s.compared);
    if (s.baseline || !s.stalled || !worse) return "";
    const std::string share = std::isfinite(s.lost_updates)
                                  ? fmt::format("; {:.0f}% of all updates rounded away at the end", 100 * s.lost_updates)
                                  : "";
    return fmt::format("; the cause: lost updates (precision_stall in {} of {} runs{}), which bf16_sr, bf16_kahan and "
                       "mixed keep",
                       s.stalled, s.runs.size(), share);
}

// Divergence first: the runs of a setting that survived are not its whole
// story, and a diverged run has no held-out loss to be ranked by.
std::string verdict(const SettingSummary& s, const std::string& baseline) {
    const std::string judged = gap_verdict(s, baseline) + cause(s);
    if (!s.diverged) return judged;
    return fmt::format("diverged in {} of {} runs (first at step {}){}", s.diverged, s.runs.size(), s.first_divergence,
                       s.heldout.empty() ? "" : "; the others: " + judged);
}

std::string cell(double v, const char* spec = "{:.4f}") {
    return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-";
}

}  // namespace

std::vector<size_t> setting_of_runs(const std::vector<RunPostmortem>& runs) {
    std::vector<Setting> settings;
    std::vector<size_t> of;
    for (const RunPostmortem& r : runs) {
        Setting key{r.precision, r.setting};
        size_t g = 0;
        while (g < settings.size() && settings[g] != key) g++;
        if (g == settings.size()) settings.push_back(key);
        of.push_back(g);
    }
    return of;
}

std::vector<SettingSummary> summarize_settings(const std::vector<RunPostmortem>& runs) {
    const std::vector<size_t> of = setting_of_runs(runs);
    std::vector<Setting> keys;
    std::vector<SettingSummary> out;
    for (size_t i = 0; i < runs.size(); i++) {
        if (of[i] == out.size()) {
            keys.push_back({runs[i].precision, runs[i].setting});
            out.push_back({});
            out.back().precision = runs[i].precision;
        }
        SettingSummary& s = out[of[i]];
        s.runs.push_back(runs[i].name);
        s.seeds.push_back(runs[i].seed);
        if (std::isfinite(runs[i].final_heldout)) s.heldout.push_back(runs[i].final_heldout);
        if (runs[i].diverged_at >= 0) {
            s.diverged++;
            if (s.first_divergence < 0 || runs[i].diverged_at < s.first_divergence)
                s.first_divergence = runs[i].diverged_at;
        }
        if (runs[i].alerts.count("precision_stall")) s.stalled++;
    }
    size_t base = 0;
    while (base < out.size() && out[base].precision != "fp32") base++;
    if (base == out.size()) base = 0;
    for (size_t g = 0; g < out.size(); g++) {
        SettingSummary& s = out[g];
        s.name = setting_name(keys, g);
        s.mean = mean_of(s.heldout);
        s.spread = spread_of(s.heldout);
        std::vector<double> lost;
        for (size_t i = 0; i < runs.size(); i++)
            if (of[i] == g && std::isfinite(runs[i].lost_updates)) lost.push_back(runs[i].lost_updates);
        s.lost_updates = mean_of(lost);
    }
    out[base].baseline = true;
    for (size_t g = 0; g < out.size(); g++) {
        if (g != base) judge_gap(runs, of, g, base, out[g], out[base]);
        out[g].verdict = verdict(out[g], out[base].name);
    }
    return out;
}

bool some_setting_has_seeds(const std::vector<SettingSummary>& settings) {
    for (const auto& s : settings)
        if (s.runs.size() > 1) return true;
    return false;
}

std::string no_verdict_reason(const std::vector<SettingSummary>& settings) {
    // Two runs compared side by side are the common case, not a puzzle: said from three.
    if (settings.size() < 3 || some_setting_has_seeds(settings)) return "";
    return "No verdict by setting: no two runs share a setting (the same precision and config but for the seed). "
           "Seeds of one setting give the verdict: tell each run its seed (hlat ingest --meta seed=N, or run.seed or "
           "seed in its config) and keep what differs between seeds out of the config.";
}

std::string settings_html(const std::vector<SettingSummary>& settings) {
    if (std::string why = no_verdict_reason(settings); !why.empty()) return "<p>" + html_escape(why) + "</p>";
    if (!some_setting_has_seeds(settings)) return "";
    std::string h = "<h2>Verdict by setting</h2><table><tr><th>setting</th><th>runs</th><th>final held-out loss by seed</th>"
                    "<th>mean</th><th>seed spread</th><th>gap</th><th>verdict</th><th>lost updates</th></tr>";
    for (const auto& s : settings) {
        std::string per_seed;
        for (size_t i = 0; i < s.heldout.size(); i++) per_seed += (i ? ", " : "") + cell(s.heldout[i]);
        h += fmt::format(R"(<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td>)"
                         R"(<td class="n">{}</td><td><b>{}</b></td><td class="n">{}</td></tr>)",
                         html_escape(s.name), s.runs.size(), per_seed, cell(s.mean), cell(s.spread),
                         s.baseline ? "" : cell(s.gap, "{:+.4f}") + (std::isfinite(s.margin) ? " ± " + cell(s.margin) : ""),
                         html_escape(s.verdict), cell(100 * s.lost_updates, "{:.1f}%"));
    }
    return h + "</table><p>Runs with the same config but for the seed are one setting. Final held-out loss: the "
               "run's last held-out evaluation. Seed spread: the standard deviation of those losses across seeds, the "
               "noise floor. Gap: the setting's loss minus the baseline's, ± the half-width of its 95% confidence "
               "interval (Student's t; paired by seed when every seed has a baseline run, which cancels each seed's "
               "luck of initial weights and data order; Welch's interval otherwise). The verdict says first in how many "
               "seeds the setting came out worse; a gap inside its margin is not resolved, and the verdict says about "
               "how many seeds would resolve a gap of that size with the spread seen. Lost updates: the share of weight elements whose non-zero "
               "update rounded away, mean over the last 50 steps (pure bf16 modes only).</p>";
}

}  // namespace hlat::report
