// Whether a run ended diverged: its training loss or gradient norm non-finite
// at its newest step, and since which step. A run that had a NaN step and
// came back (hlat's trainer skips such an update) did not diverge; one whose
// values stayed NaN to the end did, and is listed "diverged", never
// "finished", so no summary ranks it by the finite values before the NaN.
#pragma once

#include "telemetry/reader.h"

#include <cstdint>
#include <optional>
#include <string>

namespace hlat::session {

// The first step of the non-finite stretch that ends the run's loss or grad
// norm series (the earlier of the two), or nothing when both end finite.
std::optional<int64_t> nonfinite_since(telemetry::Reader& reader, int64_t run);

// The status a run ends with: "diverged" in place of "finished", "stopped"
// or "stale" when nonfinite_since says so (halted and crashed runs keep
// theirs: the halt's reason or the crash says more). `detail` gains the step.
std::string ending_status(telemetry::Reader& reader, int64_t run, const std::string& status, std::string& detail);

}  // namespace hlat::session
