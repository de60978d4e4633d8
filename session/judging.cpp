// The session's detection: steps through the detectors once each, in step
// order, whatever order they arrive in (run_session.h says the rules).
#include "session/step_views.h"
#include "session/run_session.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

namespace hlat::session {

void RunSession::catch_up() {
    if (!writer_) return;
    writer_->flush();
    telemetry::Reader reader(writer_->path());
    catch_up(reader);
}

// The stored steps through the detectors, raising nothing. The last one is
// held open like a batch's last (a feeder may have stopped mid-step); its
// alerts are in the store already.
void RunSession::catch_up(telemetry::Reader& reader) {
    for (const std::string& key : reader.vector_keys(run_.id))
        labels_[key] = std::make_shared<const std::vector<std::string>>(reader.vector_labels(run_.id, key));
    std::set<std::string> raised;
    judge_stored(reader, 0, raised, nullptr);
    if (newest_judged_ >= 0) last_step_ = std::max(last_step_, newest_judged_);
}

// What tells an alert of the open step from another when it is detected
// again: its kind and step (a detector raises a kind once a step, its message
// may change as more of the step comes), and for a trainer's own alerts,
// many at a step, what it says.
std::string RunSession::raised_key(const telemetry::Alert& a) {
    return fmt::format("{}@{}{}", a.kind, a.step, a.kind == "alert" ? ":" + a.message : "");
}

void RunSession::before_judging(int64_t step) {
    if (options_.whole_steps) return;  // the trainer's steps come in order
    if (snapshots_.empty() || judged_since_snapshot_ >= kSnapshotEvery) {
        // The first is the state before any step: it serves a step below the first that came.
        const int64_t at = snapshots_.empty() && newest_judged_ < 0 ? std::numeric_limits<int64_t>::min() : step;
        snapshots_.push_back({at, nlohmann::json::to_msgpack(suite_.state())});
        judged_since_snapshot_ = 0;
        if (snapshots_.size() > kSnapshots) snapshots_.pop_front();
        judged_.erase_below(snapshots_.front().step);
    }
    judged_.insert(step);
    judged_since_snapshot_++;
}

std::optional<int64_t> RunSession::late_step(const std::vector<detectors::StepView>& steps) const {
    if (options_.whole_steps || !writer_ || snapshots_.empty()) return std::nullopt;
    std::optional<int64_t> late;
    for (const detectors::StepView& v : steps)
        if (v.step < newest_judged_ && v.step >= snapshots_.front().step && !judged_.contains(v.step))
            late = std::min(late.value_or(v.step), v.step);
    return late;
}

// Steps judged before are not judged again (the open step excepted: a batch
// may bring more of it); a step too late for the window is not judged at all,
// said once when the store shows it new (below the window, a step sent again
// and a step never seen are told apart by the store alone).
void RunSession::drop_unjudgeable(std::vector<detectors::StepView>& steps) {
    const int64_t open_step = open_ ? open_->view.step : std::numeric_limits<int64_t>::min();
    const int64_t window = snapshots_.empty() ? std::numeric_limits<int64_t>::min() : snapshots_.front().step;
    std::optional<int64_t> too_late;
    std::erase_if(steps, [&](const detectors::StepView& v) {
        if (v.step > newest_judged_ || v.step == open_step) return false;
        if (v.step < window && !too_late) too_late = v.step;
        return true;
    });
    if (!too_late || said_too_late_ || options_.whole_steps || !writer_) return;
    telemetry::Reader reader(writer_->path());
    for (const std::string& key : suite_.keys())
        if (!reader.series(run_.id, key, *too_late, *too_late, 1).empty()) return;  // sent again
    said_too_late_ = true;
    spdlog::warn("run \"{}\": step {} came after step {}, more than the ~{} steps behind the newest that late steps "
                 "are judged in; it is stored and not judged (hlat detect --run judges the stored run whole). Said "
                 "once per session.",
                 run_.name, *too_late, newest_judged_, kSnapshotEvery * (int64_t)(kSnapshots - 1));
}

// The views through the detectors, the open step continued if the first
// view is more of it.
std::vector<Fired> RunSession::detect(std::vector<detectors::StepView> steps) {
    std::vector<Fired> fired;
    drop_unjudgeable(steps);
    if (steps.empty()) return fired;
    if (options_.whole_steps) {
        for (const detectors::StepView& v : steps)
            for (Fired& f : suite_.observe(v)) fired.push_back(std::move(f));
        newest_judged_ = std::max(newest_judged_, steps.back().step);
        return fired;
    }
    std::set<std::string> raised;
    const bool continued = open_ && steps.front().step == open_->view.step;
    if (continued) {
        suite_.restore(open_->before);
        open_->view.merge(steps.front());
        steps.front() = std::move(open_->view);
        raised = std::move(open_->raised);
    }
    for (size_t i = 0; i < steps.size(); i++) {
        const bool last = i + 1 == steps.size();
        if (i > 0 || !continued) before_judging(steps[i].step);
        nlohmann::json before = last ? suite_.state() : nlohmann::json();
        if (i > 0) raised.clear();
        for (Fired& f : suite_.observe(steps[i]))
            if (raised.insert(raised_key(f.alert)).second) fired.push_back(std::move(f));
        if (last) open_ = OpenStep{std::move(steps[i]), std::move(before), std::move(raised)};
    }
    newest_judged_ = std::max(newest_judged_, open_->view.step);
    return fired;
}

// The detectors back to their state before the late step (the newest
// snapshot at or before it), then the stored steps from there in order: the
// late ones in their places, the rest again. What they raised before is not
// raised again; what in-order arrival would have raised is.
std::vector<Fired> RunSession::rejudge(int64_t late_step) {
    writer_->flush();
    telemetry::Reader reader(writer_->path());
    auto from = std::find_if(snapshots_.rbegin(), snapshots_.rend(),
                             [&](const Snapshot& s) { return s.step <= late_step; });
    const int64_t first = from->step;
    suite_.restore(nlohmann::json::from_msgpack(from->state));
    snapshots_.erase(from.base(), snapshots_.end());  // taken again as the steps go by
    judged_since_snapshot_ = 0;
    open_.reset();
    std::set<std::string> raised;
    const int64_t since = first == std::numeric_limits<int64_t>::min() ? first : first - 1;  // a note a step back
    reader.for_each_alert(run_.id, since, [&](const telemetry::Alert& a) { raised.insert(raised_key(a)); });
    spdlog::info("run \"{}\": step {} came after step {}; judged in its place (steps {} on again)", run_.name,
                 late_step, newest_judged_, first);
    std::vector<Fired> fired;
    judge_stored(reader, first, raised, &fired);
    return fired;
}

void RunSession::judge_stored(telemetry::Reader& reader, int64_t first, std::set<std::string>& raised,
                              std::vector<Fired>* fired) {
    auto observe = [&](const detectors::StepView& v) {
        for (Fired& f : suite_.observe(v))
            if (fired && raised.insert(raised_key(f.alert)).second) fired->push_back(std::move(f));
    };
    std::optional<detectors::StepView> last;
    for_each_stored_step(
        reader, run_.id, suite_,
        [&](const detectors::StepView& v) {
            watched_ = true;
            if (!fired) steps_seen_++;
            if (last) observe(*last);
            before_judging(v.step);
            last = v;
        },
        first);
    if (!last) return;
    newest_judged_ = std::max(newest_judged_, last->step);
    if (options_.whole_steps) return observe(*last);
    if (!fired)  // caught up: the open step's alerts are in the store (a loss-jump note may be dated a step back)
        reader.for_each_alert(run_.id, last->step - 1, [&](const telemetry::Alert& a) { raised.insert(raised_key(a)); });
    nlohmann::json before = suite_.state();
    observe(*last);
    open_ = OpenStep{std::move(*last), std::move(before), std::move(raised)};
}

}  // namespace hlat::session
