// The causality probe: the model's logits for a batch and for the same batch
// with every token after position t replaced must be identical at positions
// up to t. Any difference means a position saw the future: an information
// leak caught at the first probe instead of when the loss has slid to zero.
#pragma once

#include "telemetry/records.h"
#include "trainer/model/model.h"

#include <optional>

namespace hlat {

// Runs two forwards on probe tokens (a fixed pseudo-random batch), with t in
// the middle of the sequence. Returns a leak alert, or nothing. Overwrites
// the model's activations, so call it between steps.
std::optional<telemetry::Alert> probe_causality(Model& model, int64_t step);

}  // namespace hlat
