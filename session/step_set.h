// A set of steps kept as disjoint ranges: the steps a session has judged,
// which arrive mostly in runs, cost one entry per run of consecutive steps.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>

namespace hlat::session {

class StepSet {
  public:
    bool contains(int64_t step) const {
        auto it = ranges_.upper_bound(step);
        return it != ranges_.begin() && std::prev(it)->second >= step;
    }
    void insert(int64_t step) {
        if (contains(step)) return;
        auto next = ranges_.upper_bound(step);
        int64_t first = step, last = step;
        if (next != ranges_.begin() && std::prev(next)->second == step - 1) first = std::prev(next)->first;
        if (next != ranges_.end() && next->first == step + 1) last = next->second, ranges_.erase(next);
        ranges_[first] = last;
    }
    // Forgets every step below `step`.
    void erase_below(int64_t step) {
        while (!ranges_.empty() && ranges_.begin()->second < step) ranges_.erase(ranges_.begin());
        if (!ranges_.empty() && ranges_.begin()->first < step) {
            const int64_t last = ranges_.begin()->second;
            ranges_.erase(ranges_.begin());
            ranges_[step] = last;
        }
    }
    size_t ranges() const { return ranges_.size(); }

  private:
    std::map<int64_t, int64_t> ranges_;  // first step -> last step, inclusive
};

}  // namespace hlat::session
