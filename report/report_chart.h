// The post-mortem report's charts: inline SVG that needs no network to open.
// Long series are drawn as envelopes (each bucket's min..max as a band, its
// mean as the line), so a one-step event shows however long the run; alert
// steps are marked on the charts whose x axis is the step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hlat::report {

// One bucket of consecutive points: its last x, the min, max and mean of its
// finite values. A band of lo == hi is a plain point.
struct Envelope {
    double x, lo, hi, mean;
};
using Curve = std::vector<Envelope>;

// (x, value) points in x order as at most `max_buckets` envelopes of equal
// point counts; buckets without a finite value are left out.
Curve envelopes(const std::vector<std::pair<double, double>>& points, size_t max_buckets);

// What one run contributes to a chart: its curve, its colour and the steps of
// its alerts (drawn as markers at the top edge).
struct ChartLine {
    Curve curve;
    std::string color;
    std::vector<int64_t> alert_steps;
};

// A 640 x 260 chart of every line over shared axes; `log_scale` for the y axis.
std::string svg_chart(const std::string& title, const std::vector<ChartLine>& lines, bool log_scale,
                      const char* x_label = "step");

// The text with <, >, & and " escaped for HTML.
std::string html_escape(const std::string& s);

}  // namespace hlat::report
