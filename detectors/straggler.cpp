#include "detectors/registry.h"

#include "detectors/detector_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <set>
#include <string>
#include <vector>

namespace hlat::detectors {

using telemetry::Alert;
using json = nlohmann::json;

namespace {

// One rank slower than the others, step after step.
class Straggler : public Detector {
  public:
    explicit Straggler(const StragglerConfig& c) : c_(c) {}
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double ratio = s.value("straggler_ratio"), rank = s.value("straggler_rank");
        if (std::isnan(ratio) || s.step < c_.warmup) return;
        const bool slow = ratio > c_.factor;
        run_ = slow && rank == rank_ ? run_ + 1 : slow ? 1 : 0;
        rank_ = slow ? rank : -1;
        if (run_ != c_.steps) return;
        const double compute = s.value("straggler_compute_s");
        out.push_back(make_alert(
            "straggler", "warning", s.step,
            fmt::format("rank {:.0f} is a straggler: its compute took {:.1f}x the median of the other ranks' for {} "
                        "consecutive steps{}; every other rank waits for it at each all-reduce",
                        rank, ratio, c_.steps,
                        std::isnan(compute) ? "" : fmt::format(" ({:.3f} s a step)", compute)),
            {{"rank", rank}, {"ratio", ratio}, {"steps", c_.steps}}));
    }
    json state() const override { return {{"rank", rank_}, {"run", run_}}; }
    void restore(const json& j) override {
        rank_ = j.at("rank").get<double>();
        run_ = j.at("run").get<int>();
    }

  private:
    StragglerConfig c_;
    double rank_ = -1;
    int run_ = 0;  // consecutive slow steps of rank_
};

}  // namespace

Registration registered::straggler(const DetectorsConfig& c) {
    return {"straggler", {"straggler_ratio", "straggler_rank", "straggler_compute_s"}, {},
            std::make_unique<Straggler>(c.straggler), c.straggler.policy};
}

}  // namespace hlat::detectors
