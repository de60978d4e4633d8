// The flight recorder: the last `steps` steps of every statistic over layers,
// heads or tensors, kept in memory at full resolution while the store keeps
// every `store_every`-th step (a 64-layer model's internals are tens of KB a
// step). When an alert fires, the steps the store left out are written, so
// every alert comes with its per-layer window at full resolution.
#pragma once

#include "telemetry/records.h"

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace hlat::session {

class FlightRecorder {
  public:
    FlightRecorder(int steps, int store_every);
    // Keeps the points; returns those the store takes now (every
    // store_every-th step's, or all when store_every <= 1).
    std::vector<telemetry::VectorPoint> record(std::vector<telemetry::VectorPoint> points);
    // The window held now: its step range, and the points the store has not
    // taken (taken by this call). nullopt when nothing is held.
    struct Window {
        int64_t first_step, last_step;
        std::vector<telemetry::VectorPoint> unstored;
    };
    std::optional<Window> take_window();
    // The held values of one key, oldest step first (not taken).
    std::vector<const telemetry::VectorPoint*> series(const std::string& key) const;

  private:
    struct Held {
        telemetry::VectorPoint point;
        bool stored;
    };
    int steps_, store_every_;
    std::deque<Held> held_;  // in arrival order, steps within the last `steps_` of the newest
};

}  // namespace hlat::session
