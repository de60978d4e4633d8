// The causality probe: the model's logits for a batch and for the same batch
// with every token after position t replaced must be identical at positions
// up to t. Any difference means a position saw the future: an information
// leak caught at the first probe instead of when the loss has slid to zero.
#pragma once

#include "trainer/model/model.h"


namespace hlat {

// Runs two forwards on probe tokens (a fixed pseudo-random batch), with t in
// the middle of the sequence. Returns the largest change of a logit at a
// position up to t (0: no leak; Inf for a NaN), the `causality_leak` point
// the information_leak detector reads. Overwrites the model's activations,
// so call it between steps.
double probe_causality(Model& model);

}  // namespace hlat
