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

// A data-parallel replica whose parameters differ from replica 0's.
class ReplicaMismatch : public Detector {
  public:
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double mismatched = s.value("replica_mismatch");
        if (std::isnan(mismatched)) return;
        bool bad = mismatched > 0;
        if (bad && !alerted_) {
            alerted_ = true;
            std::string detail = s.detail("replica_mismatch");
            if (detail.empty())
                detail = fmt::format("data-parallel replicas disagree: {:.0f} rank(s) differ from their replica 0",
                                     mismatched);
            out.push_back(make_alert("replica_mismatch", "critical", s.step,
                                     detail + " (a gradient all-reduce bug: the replicas now train different models)",
                                     {{"mismatched_ranks", mismatched}}));
        }
        if (!bad) alerted_ = false;
    }
    json state() const override { return {{"alerted", alerted_}}; }
    void restore(const json& j) override { alerted_ = j.at("alerted").get<bool>(); }

  private:
    bool alerted_ = false;
};

}  // namespace

Registration registered::replica_mismatch(const DetectorsConfig& c) {
    return {"replica_mismatch", {"replica_mismatch"}, {"replica_mismatch"}, std::make_unique<ReplicaMismatch>(),
            c.replica_mismatch.policy};
}

}  // namespace hlat::detectors
