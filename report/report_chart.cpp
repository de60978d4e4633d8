#include "report/report_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hlat::report {

Curve envelopes(const std::vector<std::pair<double, double>>& points, size_t max_buckets) {
    Curve out;
    const size_t every = std::max<size_t>(1, (points.size() + max_buckets - 1) / std::max<size_t>(1, max_buckets));
    for (size_t begin = 0; begin < points.size(); begin += every) {
        const size_t end = std::min(points.size(), begin + every);
        Envelope e{points[end - 1].first, INFINITY, -INFINITY, 0.0};
        size_t finite = 0;
        for (size_t i = begin; i < end; i++) {
            const double v = points[i].second;
            if (!std::isfinite(v)) continue;
            e.lo = std::min(e.lo, v), e.hi = std::max(e.hi, v), e.mean += v, finite++;
        }
        if (!finite) continue;
        e.mean /= finite;
        out.push_back(e);
    }
    return out;
}

std::string html_escape(const std::string& s) {
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

namespace {

// Where values land on the chart: shared by the frame, the bands, the lines and the markers.
struct Frame {
    static constexpr double W = 640, H = 260, L = 56, R = 12, T = 28, B = 30;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    bool log_scale = false;

    double ty(double v) const { return log_scale ? std::log10(std::max(v, 1e-12)) : v; }
    double px(double x) const { return L + (x - x0) / (x1 - x0) * (W - L - R); }
    double py(double y) const { return T + (1 - (ty(y) - y0) / (y1 - y0)) * (H - T - B); }
    bool empty() const { return !std::isfinite(x0); }
};

Frame frame_of(const std::vector<ChartLine>& lines, bool log_scale) {
    Frame f;
    f.log_scale = log_scale;
    for (const auto& line : lines)
        for (const Envelope& e : line.curve) {
            f.x0 = std::min(f.x0, e.x), f.x1 = std::max(f.x1, e.x);
            f.y0 = std::min(f.y0, f.ty(e.lo)), f.y1 = std::max(f.y1, f.ty(e.hi));
        }
    if (f.x1 == f.x0) f.x1 = f.x0 + 1;
    if (f.y1 == f.y0) f.y1 = f.y0 + 1;
    return f;
}

std::string axes(const Frame& f, const char* x_label) {
    std::string out = fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#ccc"/>)", f.L, f.T,
                                  f.W - f.L - f.R, f.H - f.T - f.B);
    for (int i = 0; i <= 4; i++) {
        double v = f.y0 + (f.y1 - f.y0) * i / 4, y = f.T + (1 - i / 4.0) * (f.H - f.T - f.B);
        out += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{:.3g}</text>)", f.L - 4, y + 4,
                           f.log_scale ? std::pow(10, v) : v);
    }
    return out + fmt::format(R"(<text x="{}" y="{}" font-size="11">{} {:.0f}</text>)"
                             R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{:.0f}</text>)",
                             f.L, f.H - 10, x_label, f.x0, f.W - f.R, f.H - 10, f.x1);
}

// The band (when any bucket spans more than one value) and the mean line.
std::string envelope_svg(const Frame& f, const ChartLine& line) {
    std::string out, band, mean;
    bool spread = false;
    for (const Envelope& e : line.curve) {
        band += fmt::format("{:.1f},{:.1f} ", f.px(e.x), f.py(e.hi));
        mean += fmt::format("{:.1f},{:.1f} ", f.px(e.x), f.py(e.mean));
        spread = spread || e.hi > e.lo;
    }
    for (auto e = line.curve.rbegin(); e != line.curve.rend(); ++e) band += fmt::format("{:.1f},{:.1f} ", f.px(e->x), f.py(e->lo));
    if (spread)
        out += fmt::format(R"(<polygon class="band" fill="{}" fill-opacity="0.25" stroke="none" points="{}"/>)", line.color, band);
    return out + fmt::format(R"(<polyline class="line" fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)", line.color, mean);
}

// A triangle on the top edge and a faint line down the chart at each alert step.
std::string alert_markers(const Frame& f, const ChartLine& line) {
    std::string out;
    for (int64_t step : line.alert_steps) {
        if (step < f.x0 || step > f.x1) continue;
        const double x = f.px((double)step);
        out += fmt::format(R"(<g class="alert" data-step="{}"><title>alert at step {}</title>)"
                           R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="{}" stroke-opacity="0.4"/>)"
                           R"(<path d="M{:.1f},{} l10,0 l-5,8 z" fill="{}"/></g>)",
                           step, step, x, f.T, x, f.H - f.B, line.color, x - 5, f.T, line.color);
    }
    return out;
}

}  // namespace

std::string svg_chart(const std::string& title, const std::vector<ChartLine>& lines, bool log_scale, const char* x_label) {
    std::string out = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img"><title>{}</title>)"
                                  R"(<text x="{}" y="18" font-weight="600">{}</text>)",
                                  Frame::W, Frame::H, html_escape(title), Frame::L, html_escape(title));
    const Frame f = frame_of(lines, log_scale);
    if (f.empty()) return out + "<text x=\"60\" y=\"120\">no data</text></svg>";
    out += axes(f, x_label);
    for (const ChartLine& line : lines) out += envelope_svg(f, line);
    for (const ChartLine& line : lines) out += alert_markers(f, line);
    return out + "</svg>";
}

}  // namespace hlat::report
