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

// A trainer's own alerts (the client's run.alert, JSONL "alert" lines:
// telemetry/ingest.h), one for each "alert" event of the step, its detail's
// title, text and level read only where each is a string, cut to size, the
// level info, warning or critical (else warning); the same line twice at a
// step is one alert. A detector like the others,
// so a stored run replayed raises them as the live one did.
class TrainerAlert : public Detector {
  public:
    void observe(const StepView& s, std::vector<Alert>& out) override {
        std::set<std::string> said;  // a line sent again (and stored again) is one alert
        for (const telemetry::Event& e : s.events)
            if (e.kind == "alert" && said.insert(e.detail).second) out.push_back(alert_of(e));
    }

  private:
    static Alert alert_of(const telemetry::Event& e) {
        json d = json::parse(e.detail, nullptr, false);
        auto text = [&](const char* key, const char* otherwise, size_t limit) {
            return d.is_object() && d.contains(key) && d[key].is_string() ? d[key].get<std::string>().substr(0, limit)
                                                                            : std::string(otherwise);
        };
        const std::string title = text("title", "alert", 200), body = text("text", "", 10000);
        std::string level = text("level", "warning", 20);
        if (level != "info" && level != "critical") level = "warning";
        return make_alert("alert", level.c_str(), e.step, body.empty() ? title : title + ": " + body,
                          {{"title", title}, {"text", body}, {"level", level}});
    }
};

}  // namespace

Registration registered::trainer_alert(const DetectorsConfig&) {  // the trainer's own say: always heard
    return {"trainer_alert", {}, {"alert"}, std::make_unique<TrainerAlert>(), Policy::Warn};
}

}  // namespace hlat::detectors
