#include "trainer/run/step_hook.h"

namespace hlat {

const char* run_end_name(RunEnd end) {
    switch (end) {
        case RunEnd::Finished: return "finished";
        case RunEnd::Stopped: return "stopped";
        case RunEnd::Halted: return "halted";
        case RunEnd::Crashed: return "crashed";
    }
    return "?";
}

void StepHooks::on_start() {
    for (auto& h : hooks_) h->on_start();
}

void StepHooks::before_step(int step, StepRequest& request) {
    for (auto& h : hooks_) h->before_step(step, request);
}

void StepHooks::after_step(StepResult& result) {
    for (auto& h : hooks_) h->after_step(result);
}

void StepHooks::on_end(RunEnd how) {
    for (auto& h : hooks_) h->on_end(how);
}

nlohmann::json StepHooks::state() const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& h : hooks_) {
        nlohmann::json s = h->state();
        if (!s.is_null()) out[h->name()] = std::move(s);
    }
    return out;
}

void StepHooks::restore(const nlohmann::json& state) {
    for (auto& h : hooks_) {
        if (state.contains(h->name())) h->restore(state.at(h->name()));
        else if (*h->former_name() && state.contains(h->former_name())) h->restore(state.at(h->former_name()));
    }
}

}  // namespace hlat
