// The paper's spike episodes (detector.h): grad_spike's rule, `hlat spikes`
// and the post-mortem's histogram of episode lengths.
#include "detectors/detector.h"

#include "detectors/detector_util.h"

#include <numeric>

namespace hlat::detectors {

using json = nlohmann::json;

SpikeTracker::SpikeTracker(int window, SpikeRule rule, double threshold)
    : window_(window), rule_(rule), threshold_(threshold) {}

SpikeTracker::Observation SpikeTracker::observe(double g) {
    Observation o{};
    o.window_full = (int)recent_.size() == window_;
    double n = (double)recent_.size();
    o.mean = n ? std::accumulate(recent_.begin(), recent_.end(), 0.0) / n : NAN;
    bool spike = false;
    if (n > 0 && std::isfinite(g)) {
        switch (rule_) {
            case SpikeRule::Additive: spike = g > o.mean + threshold_; break;
            case SpikeRule::Ratio: spike = g > o.mean * threshold_; break;
            case SpikeRule::ZScore: {
                double var = 0.0;
                for (double x : recent_) var += (x - o.mean) * (x - o.mean);
                spike = g > o.mean + threshold_ * std::sqrt(var / n);
                break;
            }
        }
    }
    if (spike) {
        o.episode_start = length_ == 0;
        o.episode_length = ++length_;
        o.in_episode = true;
    } else {
        o.ended_length = length_;
        length_ = 0;
    }
    if (std::isfinite(g)) {
        recent_.push_back(g);
        if ((int)recent_.size() > window_) recent_.pop_front();
    }
    return o;
}

json SpikeTracker::state() const { return {{"recent", numbers(recent_)}, {"length", length_}}; }

void SpikeTracker::restore(const json& j) {
    recent_ = numbers(j.at("recent"), window_);
    length_ = j.at("length").get<int>();
}

std::map<int, long> spike_episode_lengths(const std::vector<double>& grad_norms, int window, SpikeRule rule,
                                          double threshold) {
    SpikeTracker tracker(window, rule, threshold);
    std::map<int, long> lengths;
    int open = 0;
    for (double g : grad_norms) {
        auto o = tracker.observe(g);
        if (o.ended_length) lengths[o.ended_length]++;
        open = o.episode_length;
    }
    if (open) lengths[open]++;
    return lengths;
}

}  // namespace hlat::detectors
