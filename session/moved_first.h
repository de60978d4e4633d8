// Attribution of an alert to the part of the model that moved first (issue
// 36): from the flight recorder's per-tensor gradient norms, which tensor
// left its own recent range first, and by how much.
#pragma once

#include "session/flight_recorder.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace hlat::session {

struct MovedFirstRule {
    int baseline_steps = 10;  // a tensor's range: the median of its previous steps held
    int lookback = 5;         // the move may start this many steps before the alert
    double ratio = 3.0;       // a tensor moved when its value passes this multiple of its median
};

// For the alert at `step`: {"key", "step" (when the first tensor moved),
// "label" (which), "ratio", "top": [{"label", "ratio"} x 3 at that step]}, or
// null when the recorder holds no per-tensor statistic for the step. The key
// read is the first of tensor_grad_norm, tensor_update_norm, residual_rms that
// is held; labels name the elements (null: "#i").
nlohmann::json moved_first(const FlightRecorder& recorder, int64_t step,
                           const std::function<std::shared_ptr<const std::vector<std::string>>(const std::string&)>& labels,
                           const MovedFirstRule& rule = {});

}  // namespace hlat::session
