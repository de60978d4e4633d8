// The registry of detectors: one line each in HLAT_DETECTORS, naming the
// function in the detector's own file (detectors/NAME.cpp) that builds it from
// the run's settings with the keys and event kinds it reads and its policy.
// A new detector is its file (its class and that function; its settings, if
// it has any beyond a policy, a section in config.h) and its line here.
// Internal to detectors/.
#pragma once

#include "detectors/config.h"
#include "detectors/detector.h"

#include <memory>
#include <string>
#include <vector>

namespace hlat::detectors {

struct Registration {
    std::string name;                 // its state's name in checkpoints
    std::vector<std::string> keys;    // the points it reads
    std::vector<std::string> events;  // the event kinds it reads
    std::unique_ptr<Detector> detector;
    Policy policy;                    // Off: not run
};

// In the order the suite runs them (a step's alerts come in this order).
#define HLAT_DETECTORS(X) \
    X(nonfinite)          \
    X(grad_spike)         \
    X(loss_floor)         \
    X(loss_jump)          \
    X(divergence)         \
    X(tp_drift)           \
    X(replica_mismatch)   \
    X(straggler)          \
    X(health_check)       \
    X(information_leak)   \
    X(trainer_alert)      \
    X(attention_logit)    \
    X(attention_entropy)  \
    X(update_ratio)       \
    X(eps_regime)         \
    X(logz_drift)         \
    X(precision_stall)

namespace registered {
#define HLAT_DECLARE_DETECTOR(name) Registration name(const DetectorsConfig& c);
HLAT_DETECTORS(HLAT_DECLARE_DETECTOR)
#undef HLAT_DECLARE_DETECTOR
}  // namespace registered

#define HLAT_DETECTOR_ENTRY(name) &registered::name,
inline constexpr Registration (*kDetectors[])(const DetectorsConfig&) = {HLAT_DETECTORS(HLAT_DETECTOR_ENTRY)};
#undef HLAT_DETECTOR_ENTRY

}  // namespace hlat::detectors
