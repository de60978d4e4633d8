#include "telemetry/alert_episodes.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace hlat::telemetry {

namespace {

// Worse: non-finite over finite, then the larger magnitude.
bool worse(double a, double b) {
    if (!std::isfinite(b)) return false;
    if (!std::isfinite(a)) return true;
    return std::fabs(a) > std::fabs(b);
}

AlertEpisode opened_by(const Alert& a) {
    AlertEpisode e;
    e.kind = a.kind, e.severity = a.severity;
    e.first_step = e.last_step = e.worst_step = a.step;
    e.count = 1;
    e.message = a.message;
    e.has_value = alert_value(a, e.worst_value);
    if (!e.has_value) e.worst_value = NAN;
    return e;
}

void extend(AlertEpisode& e, const Alert& a) {
    e.last_step = std::max(e.last_step, a.step);
    e.count++;
    double v;
    if (alert_value(a, v) && (!e.has_value || worse(v, e.worst_value))) {
        e.worst_value = v, e.worst_step = a.step, e.message = a.message, e.has_value = true;
    }
}

bool continues(const AlertEpisode& e, const Alert& a) {
    return e.kind == a.kind && e.severity == a.severity && a.step >= e.first_step &&
           a.step <= e.last_step + kEpisodeGap;
}

}  // namespace

bool alert_value(const Alert& a, double& value) {
    nlohmann::json data = nlohmann::json::parse(a.data, nullptr, false);
    if (!data.is_object()) return false;
    for (const char* key : {"ratio", "loss", "norm", "value", "drift", "grad_norm"}) {
        auto it = data.find(key);
        if (it == data.end()) continue;
        if (it->is_number()) value = it->get<double>();
        else if (it->is_null()) value = NAN;
        else if (*it == "nan") value = NAN;  // how the nonfinite detector spells its evidence
        else if (*it == "inf") value = INFINITY;
        else if (*it == "-inf") value = -INFINITY;
        else continue;
        return true;
    }
    return false;
}

void EpisodeBuilder::add(const Alert& a) {
    auto it = newest_.find({a.kind, a.severity});
    if (it != newest_.end() && continues(out_[it->second], a)) return extend(out_[it->second], a);
    total_++;
    newest_[{a.kind, a.severity}] = out_.size();
    out_.push_back(opened_by(a));
    if (out_.size() > 2 * keep_ + newest_.size()) compact();  // amortised: a sort of 2 x keep every keep episodes
}

std::vector<size_t> EpisodeBuilder::kept(bool growing_too) const {
    std::vector<size_t> order(out_.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    const size_t n = std::min(keep_, order.size());
    std::partial_sort(order.begin(), order.begin() + (ptrdiff_t)n, order.end(), [&](size_t a, size_t b) {
        return out_[a].last_step != out_[b].last_step ? out_[a].last_step > out_[b].last_step : a > b;
    });
    order.resize(n);
    if (growing_too)
        for (const auto& [kind, i] : newest_) order.push_back(i);
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    return order;
}

void EpisodeBuilder::compact() {
    std::vector<AlertEpisode> left;
    std::map<size_t, size_t> moved;  // old index -> new
    for (size_t i : kept(true)) {
        moved[i] = left.size();
        left.push_back(std::move(out_[i]));
    }
    out_ = std::move(left);
    for (auto& [kind, i] : newest_) i = moved.at(i);
}

std::vector<AlertEpisode> EpisodeBuilder::episodes() const {
    if (out_.size() <= keep_) return out_;  // none to leave out (always, unbounded)
    std::vector<AlertEpisode> out;
    for (size_t i : kept(false)) out.push_back(out_[i]);
    return out;
}

std::vector<AlertEpisode> alert_episodes(std::vector<Alert> alerts) {
    std::stable_sort(alerts.begin(), alerts.end(), [](const Alert& a, const Alert& b) { return a.step < b.step; });
    EpisodeBuilder episodes;
    for (const Alert& a : alerts) episodes.add(a);
    return episodes.episodes();
}

nlohmann::json episode_json(const AlertEpisode& e) {
    nlohmann::json worst = nullptr;
    if (e.has_value) {
        if (std::isnan(e.worst_value)) worst = "nan";
        else if (std::isinf(e.worst_value)) worst = e.worst_value > 0 ? "inf" : "-inf";
        else worst = e.worst_value;
    }
    return {{"kind", e.kind}, {"severity", e.severity}, {"first_step", e.first_step}, {"last_step", e.last_step},
            {"count", e.count}, {"worst_step", e.worst_step}, {"worst_value", worst}, {"message", e.message}};
}

bool EpisodeTracker::add(const Alert& a, AlertEpisode* closed) {
    for (AlertEpisode& e : open_) {
        if (e.kind != a.kind || e.severity != a.severity) continue;
        if (continues(e, a)) {
            extend(e, a);
            return false;
        }
        if (closed) *closed = e;
        e = opened_by(a);
        return true;
    }
    open_.push_back(opened_by(a));
    return true;
}

}  // namespace hlat::telemetry
