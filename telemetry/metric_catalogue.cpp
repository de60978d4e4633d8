#include "telemetry/metric_catalogue.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>

namespace hlat::telemetry {

namespace {

// A run metric's row; `panel` empty: a chart of its own ("key:KEY").
MetricEntry run_metric(std::string key, std::string title, std::string unit, std::string group, std::string panel,
                       bool shown) {
    if (panel.empty()) panel = "key:" + key;
    return {std::move(key), false, std::move(title), std::move(unit), std::move(group), std::move(panel), shown};
}

// A rank metric's row: its own chart, a line per rank, always drawn.
MetricEntry rank_metric(std::string key, std::string title, std::string unit, std::string group) {
    std::string panel = "rank:" + key;
    return {std::move(key), true, std::move(title), std::move(unit), std::move(group), std::move(panel), true};
}

// Run metrics, in drawing order. The rows marked shown, with their shared
// panels, are the page's default layout; hlat's trainer writes the keys in
// step_metrics() (trainer/step_stats.cpp), its run hooks and the recorder,
// the Python client in python/hlat.
std::vector<MetricEntry> run_rows() {
    const bool on = true, off = false;
    return {
        run_metric("loss", "loss", "nats", "training", "loss", on),
        run_metric("heldout_loss", "held-out loss", "nats", "training", "loss", on),
        run_metric("grad_norm", "grad norm (before clipping)", "", "training", "grad_norm", on),
        run_metric("param_norm", "param norm", "", "training", "param_norm", on),
        run_metric("lr", "learning rate", "", "training", "lr", on),
        run_metric("lr_max_ahead", "largest learning rate ahead in the schedule", "", "training", "lr", off),
        run_metric("clip_scale", "gradient clipping scale (1: not clipped)", "", "training", "clip_scale", off),
        run_metric("tokens_per_s", "tokens/s", "tokens/s", "speed", "tokens_per_s", on),
        run_metric("mfu", "MFU", "", "speed", "mfu", on),
        run_metric("data_s", "data wait", "s", "speed", "step_time", on),
        run_metric("forward_s", "forward", "s", "speed", "step_time", on),
        run_metric("backward_s", "backward", "s", "speed", "step_time", on),
        run_metric("optimizer_s", "optimizer", "s", "speed", "step_time", on),
        run_metric("step_s", "step time", "s", "speed", "step_time", off),
        run_metric("compute_s", "compute (forward, backward, optimizer less communication)", "s", "speed",
                   "step_time", off),
        run_metric("cpu_pct", "process CPU % (100 = one core)", "%", "system", "cpu", on),
        run_metric("gpu_util_pct", "GPU utilisation %", "%", "system", "cpu", on),
        run_metric("rss_mb", "resident memory", "MB", "system", "memory", on),
        run_metric("gpu_mem_mb", "GPU memory", "MB", "system", "memory", on),
        // bf16 precision modes only: the mechanism behind pure bf16's failure.
        run_metric("lost_updates", "bf16 lost updates", "", "precision", "lost_updates", on),
        run_metric("logz_mean", "output log Z: mean", "nats", "internals", "logz", on),
        run_metric("logz_max", "output log Z: max", "nats", "internals", "logz", on),
        run_metric("logit_max", "largest output logit", "", "internals", "logit_max", off),
        run_metric("z_loss", "z-loss term", "", "internals", "logz", off),
        run_metric("lost_updates/kind/<kind>", "bf16 lost updates: <kind>", "", "precision", "lost_updates/kind", off),
        // Distributed runs only. Checks come every parallel.check_every steps.
        run_metric("comm_s", "DP gradient all-reduce", "s", "distributed", "comm", on),
        run_metric("comm_exposed_s", "DP gradient all-reduce, exposed", "s", "distributed", "comm", on),
        run_metric("tp_comm_s", "TP collectives", "s", "distributed", "comm", on),
        run_metric("tp_comm_busbw_gbs", "TP collectives: achieved bus bandwidth", "GB/s", "distributed", "tp_busbw",
                   off),
        // Tensor-parallel runs: how far the replicated weights (norms; kv heads shared by a kv group) drifted
        // from their group leader's (TP rank 0 for the norms).
        run_metric("tp_drift", "TP drift: max |w − w(group leader)|", "", "distributed", "tp_drift", on),
        run_metric("tp_drift_rel", "TP drift, relative", "", "distributed", "tp_drift", on),
        run_metric("tp_drift/<tensor>", "TP drift: <tensor>", "", "distributed", "tp_drift/tensor", off),
        // Data-parallel runs: the replica hash checks (an all-reduce bug shows here first).
        run_metric("replica_mismatch", "DP ranks whose parameter hash differs", "ranks", "distributed", "replicas", on),
        run_metric("replica_grad_mismatch", "DP ranks whose gradient hash differs", "ranks", "distributed", "replicas",
                   on),
        run_metric("straggler_ratio", "straggler: slowest rank's compute over the others' median", "", "distributed",
                   "", off),
        run_metric("straggler_rank", "straggler: the slowest rank", "", "distributed", "", off),
        // The straggler detector's evidence: the slowest rank's compute time.
        run_metric("straggler_compute_s", "straggler: the slowest rank's compute", "s", "distributed", "", off),
        run_metric("health_check_failures", "health check: ranks that computed wrong numbers", "ranks", "health", "",
                   off),
        run_metric("clipped", "gradient clipped (1 = yes)", "", "training", "", off),
        // Stored only when 1: the trainer left the weights as they were (nonfinite says so).
        run_metric("update_skipped", "update skipped: loss or gradient not finite (1 = yes)", "", "training", "", off),
        run_metric("tokens_seen", "tokens seen", "tokens", "training", "", off),
        run_metric("causality_leak", "causality probe: largest logit change", "", "probes", "", off),
        run_metric("causality_leak_position", "causality probe: first position that changed", "", "probes", "", off),
        run_metric("hellaswag_acc", "HellaSwag accuracy (llm.c's log)", "", "eval", "", off),
        // Measured every run.tensor_norms_every steps: per tensor kind over all
        // layers (one chart per family), and per tensor (a chart each).
        run_metric("grad_norm/kind/<kind>", "grad norm: <kind> (all layers)", "", "tensor norms", "grad_norm/kind", off),
        run_metric("grad_norm/<tensor>", "grad norm: <tensor>", "", "tensor norms", "", off),
        run_metric("param_norm/kind/<kind>", "param norm: <kind> (all layers)", "", "tensor norms", "param_norm/kind",
                   off),
        run_metric("param_norm/<tensor>", "param norm: <tensor>", "", "tensor norms", "", off),
    };
}

// Rank metrics, in the order the page has always drawn them (by key).
std::vector<MetricEntry> rank_rows() {
    return {
        rank_metric("health/allreduce_us", "per rank: health-check 1 MB all-reduce, µs", "µs", "health"),
        rank_metric("health/wrong_gemm_elements", "per rank: wrong elements in the health check's exact GEMMs",
                    "elements", "health"),
        rank_metric("preflight/bf16_gemm_gflops", "per rank: pre-flight bf16 GEMM, GFLOP/s", "GFLOP/s", "preflight"),
        rank_metric("preflight/fp32_gemm_gflops", "per rank: pre-flight fp32 GEMM, GFLOP/s", "GFLOP/s", "preflight"),
        rank_metric("preflight/triad_gbs", "per rank: pre-flight memory bandwidth (triad), GB/s", "GB/s", "preflight"),
        rank_metric("preflight/wrong_gemm_elements", "per rank: wrong elements in the pre-flight's exact GEMMs",
                    "elements", "preflight"),
        rank_metric("rank/comm_wait_s", "per rank: waiting for the gradient reduction, s", "s", "distributed"),
        rank_metric("rank/compute_s", "per rank: compute s (forward, backward, optimizer less communication)", "s",
                    "distributed"),
        rank_metric("rank/data_wait_s", "per rank: waiting for data, s", "s", "distributed"),
        rank_metric("tp_drift", "per rank: TP drift of the replicated weights", "", "distributed"),
    };
}

std::vector<MetricEntry> all_rows() {
    std::vector<MetricEntry> rows = run_rows();
    for (MetricEntry& e : rank_rows()) rows.push_back(std::move(e));
    return rows;
}

// What a pattern's placeholder matched in `key` (one or more characters
// other than '/'), "" for an exact match, nullopt when it does not match.
std::optional<std::string> match(const std::string& pattern, const std::string& key) {
    size_t open = pattern.find('<'), close = pattern.find('>');
    if (open == std::string::npos || close == std::string::npos) {
        if (pattern == key) return std::string();
        return std::nullopt;
    }
    std::string_view head(pattern.data(), open), tail(pattern.data() + close + 1, pattern.size() - close - 1);
    if (key.size() <= head.size() + tail.size() || key.compare(0, head.size(), head) != 0 ||
        key.compare(key.size() - tail.size(), tail.size(), tail) != 0)
        return std::nullopt;
    std::string middle = key.substr(head.size(), key.size() - head.size() - tail.size());
    if (middle.find('/') != std::string::npos) return std::nullopt;
    return middle;
}

void fill(std::string& text, const std::string& placeholder, const std::string& value) {
    for (size_t at; (at = text.find(placeholder)) != std::string::npos;) text.replace(at, placeholder.size(), value);
}

// The table row that names `key` and its entry, or (table size, derived entry).
std::pair<size_t, MetricEntry> lookup(const std::string& key, bool per_rank) {
    const std::vector<MetricEntry>& rows = metric_catalogue();
    for (size_t i = 0; i < rows.size(); i++) {
        if (rows[i].per_rank != per_rank) continue;
        std::optional<std::string> m = match(rows[i].key, key);
        if (!m) continue;
        MetricEntry e = rows[i];
        if (!m->empty()) {
            const std::string& p = rows[i].key;
            const std::string placeholder = p.substr(p.find('<'), p.find('>') - p.find('<') + 1);
            fill(e.title, placeholder, *m);
            fill(e.panel, placeholder, *m);
        }
        e.key = key;
        return {i, e};
    }
    return {rows.size(), derive_entry(key, per_rank)};
}

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The unit a key's suffix names ("step_s": s), or "".
std::string unit_of(const std::string& key) {
    static const std::array<std::pair<std::string_view, const char*>, 9> suffixes = {{
        {"_per_s", "/s"}, {"_ms", "ms"}, {"_us", "µs"}, {"_pct", "%"}, {"_mb", "MB"}, {"_gbs", "GB/s"},
        {"_gb", "GB"}, {"_gflops", "GFLOP/s"}, {"_s", "s"},
    }};
    for (const auto& [suffix, unit] : suffixes)
        if (ends_with(key, suffix)) return unit;
    return "";
}

}  // namespace

const std::vector<MetricEntry>& metric_catalogue() {
    static const std::vector<MetricEntry> rows = all_rows();
    return rows;
}

const std::vector<Panel>& catalogue_panels() {
    static const std::vector<Panel> panels = {
        {"loss", "loss", ""},
        {"grad_norm", "grad norm (before clipping)", "grad_norm"},
        {"param_norm", "param norm", ""},
        {"lr", "learning rate", ""},
        {"tokens_per_s", "tokens/s", ""},
        {"mfu", "MFU", ""},
        {"step_time", "step time split (s)", ""},
        {"cpu", "system: process CPU % (100 = one core), GPU utilisation %", ""},
        {"memory", "system: resident memory, GPU memory (MB)", ""},
        {"lost_updates", "bf16 lost updates: share of weights whose non-zero update rounded away", ""},
        {"logz", "output logits: log Z (mean, max over the step's tokens)", ""},
        {"lost_updates/kind", "bf16 lost updates by tensor kind", ""},
        {"comm", "communication (s): DP gradients (total, exposed), TP collectives", ""},
        {"tp_busbw", "TP collectives: achieved bus bandwidth (GB/s)", ""},
        {"tp_drift", "TP drift of replicated weights: max |w − w(group leader)|", ""},
        {"tp_drift/tensor", "TP drift by replicated tensor", ""},
        {"replicas", "replica consistency: DP ranks whose hash differs (0 = all agree)", ""},
        {"grad_norm/kind", "grad norm by tensor kind (all layers)", ""},
        {"param_norm/kind", "param norm by tensor kind (all layers)", ""},
    };
    return panels;
}

MetricEntry catalogue_entry(const std::string& key, bool per_rank) { return lookup(key, per_rank).second; }

const std::vector<HeatmapEntry>& heatmap_catalogue() {
    static const std::vector<HeatmapEntry> table = {
        {"attn_logit_max", "largest attention logit per head", "", "max", true},
        {"attn_entropy", "attention entropy per head", "nats", "min", false},
        {"update_ratio", "update-to-weight ratio per tensor", "", "max", true},
        {"eps_share", "share of Adam coordinates in the epsilon regime per tensor", "", "max", false},
        {"lost_update_share", "bf16 lost updates: share of updates rounded away per tensor", "", "max", false},
        {"tensor_grad_norm", "gradient norm per tensor (before clipping)", "", "max", true},
        {"tensor_update_norm", "update norm per tensor", "", "max", true},
        {"tensor_param_norm", "weight norm per tensor", "", "max", true},
        {"residual_rms", "residual stream RMS per block", "", "max", true},
        {"residual_max", "residual stream largest |value| per block", "", "max", true},
    };
    return table;
}

HeatmapEntry heatmap_entry(const std::string& key) {
    for (const HeatmapEntry& e : heatmap_catalogue())
        if (e.key == key) return e;
    return {key, key, "", "max", false};
}

MetricEntry derive_entry(const std::string& key, bool per_rank) {
    MetricEntry e;
    e.key = key;
    e.per_rank = per_rank;
    size_t slash = key.find('/');
    e.group = slash != std::string::npos && slash > 0 ? key.substr(0, slash) : per_rank ? "per rank" : "metrics";
    e.title = per_rank ? "per rank: " + key : key;
    e.unit = unit_of(key);
    e.panel = (per_rank ? "rank:" : "key:") + key;
    e.shown = per_rank;
    e.derived = true;
    return e;
}

const char* derivation_rule() {
    return "a key the table does not name: group = the text before its first '/' (\"metrics\" without one, "
           "\"per rank\" for an unprefixed rank metric), title = the key (\"per rank: KEY\" for a rank metric), "
           "unit from its suffix (_s, _ms, _us, _pct, _mb, _gb, _gbs, _gflops, _per_s), a chart of its own; "
           "a rank metric's chart is on the default view, a run metric's is drawn when picked";
}

namespace {

// One chart being laid out: where it sorts, and its keys with their rows.
struct PanelDraft {
    std::tuple<bool, size_t, std::string> order;  // (rank metric, first row, first key)
    PanelLayout layout;
    std::vector<std::pair<size_t, MetricEntry>> entries;
};

void add_keys(std::map<std::string, PanelDraft>& drafts, const std::vector<std::string>& keys, bool per_rank) {
    for (const std::string& key : keys) {
        auto [row, entry] = lookup(key, per_rank);
        // A rank metric and a run metric may share a name (tp_drift): their ids never do.
        PanelDraft& d = drafts[entry.panel];
        auto order = std::make_tuple(per_rank, row, key);
        if (d.entries.empty() || order < d.order) d.order = order;
        d.entries.push_back({row, std::move(entry)});
    }
}

PanelLayout finish(PanelDraft& d) {
    std::sort(d.entries.begin(), d.entries.end(), [](const auto& a, const auto& b) {
        return std::tie(a.first, a.second.key) < std::tie(b.first, b.second.key);
    });
    PanelLayout out;
    const MetricEntry& first = d.entries.front().second;
    out.id = first.panel;
    out.per_rank = first.per_rank;
    out.title = first.title;
    for (const Panel& p : catalogue_panels())
        if (p.id == out.id) out.title = p.title, out.shade = p.shade;
    out.unit = first.unit;
    for (const auto& [row, e] : d.entries) {
        out.keys.push_back(e.key);
        if (e.unit != out.unit) out.unit.clear();
    }
    return out;
}

}  // namespace

std::vector<PanelLayout> catalogue_layout(const std::vector<std::string>& keys,
                                          const std::vector<std::string>& rank_keys) {
    std::map<std::string, PanelDraft> drafts;
    add_keys(drafts, keys, false);
    add_keys(drafts, rank_keys, true);
    std::vector<PanelDraft*> sorted;
    for (auto& [id, d] : drafts) sorted.push_back(&d);
    std::sort(sorted.begin(), sorted.end(), [](const PanelDraft* a, const PanelDraft* b) { return a->order < b->order; });
    std::vector<PanelLayout> out;
    for (PanelDraft* d : sorted) out.push_back(finish(*d));
    return out;
}

}  // namespace hlat::telemetry
