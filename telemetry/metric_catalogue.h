// The metric catalogue: what the page calls each metric key (title), its
// unit, its heading in the metric picker (group) and the chart it is drawn
// on (panel: keys with one panel share a chart), and whether it is on a
// run's default view. Families of keys (`grad_norm/<tensor>`) match a
// pattern. A key the table does not name gets an entry made from its name,
// so a new metric is drawable with a title, unit and chart of its own
// without anyone touching this table: adding a metric stays one place, where
// it is measured. The server hands these entries to the page (web/), which
// builds its panels from them instead of keeping its own lists.
#pragma once

#include <string>
#include <vector>

namespace hlat::telemetry {

struct MetricEntry {
    // The key, or a pattern in which <name> stands for one or more
    // characters other than '/' (the same <name> in title and panel is
    // replaced by what it matched).
    std::string key;
    bool per_rank = false;  // a rank metric (one value per rank and step)
    std::string title;
    std::string unit;       // "" for a plain number or a ratio
    std::string group;      // the picker's heading
    // The chart: a shared panel's id (catalogue_panels()), or "key:KEY"
    // (a run metric's own chart) or "rank:KEY" (a rank metric's, a line per rank).
    std::string panel;
    bool shown = false;     // drawn on a run's default view (rank metrics: always)
    bool derived = false;   // not in the table: made from the name (see derive_entry)
};

// A statistic over layers, heads or tensors (a vector key), drawn as a
// heatmap of element x step: its title, unit, how a bucket of steps is
// reduced to one cell (max shows growth; min shows a collapse such as
// attention entropy's) and whether its colour scale is logarithmic (a value
// that spans decades). A key not in the table: its name, max, linear.
struct HeatmapEntry {
    std::string key, title, unit;
    std::string reduce;  // "max", "min", "mean" or "last"
    bool log_scale = false;
};
const std::vector<HeatmapEntry>& heatmap_catalogue();
HeatmapEntry heatmap_entry(const std::string& key);

// A chart that several keys share.
struct Panel {
    std::string id;
    std::string title;
    std::string shade;  // a key whose spike episodes the page shades on it ("" for none)
};

// The table, in drawing order: run metrics, then rank metrics.
const std::vector<MetricEntry>& metric_catalogue();
// The shared panels the table names, with their titles.
const std::vector<Panel>& catalogue_panels();

// The table's entry for `key` (the first row or pattern that matches, with
// its placeholders filled in), else derive_entry(key, per_rank).
MetricEntry catalogue_entry(const std::string& key, bool per_rank);

// An entry made from the name alone: group = the text before the first '/'
// ("metrics" when there is none; "per rank" for an unprefixed rank metric),
// title = the key ("per rank: KEY" for a rank metric), unit from the suffix
// (_s, _ms, _us, _pct, _mb, _gb, _gbs, _gflops, _per_s), a chart of its own.
// A rank metric's chart is drawn on the default view (a run has a handful);
// a run metric's waits in the metric picker (another trainer may log hundreds).
MetricEntry derive_entry(const std::string& key, bool per_rank);
// That rule in one sentence, for the API's readers.
const char* derivation_rule();

// A run's charts: each panel its keys use, with its title and keys, ordered
// as the table orders them (shared panels and catalogued keys first, in table
// order; then charts of keys outside the table, by key), run metrics before
// rank metrics. Keys within a panel keep the table's order.
struct PanelLayout {
    std::string id;
    std::string title;
    std::string unit;   // the keys' unit when they share one, else ""
    std::string shade;
    bool per_rank = false;
    std::vector<std::string> keys;
};
std::vector<PanelLayout> catalogue_layout(const std::vector<std::string>& keys,
                                          const std::vector<std::string>& rank_keys);

}  // namespace hlat::telemetry
