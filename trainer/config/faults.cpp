#include "trainer/config/faults.h"

#include "trainer/config/config.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace hlat {

namespace {

// slow_rank:R:F and sdc:R, as the fleet faults are usually written, start at step 0.
std::string with_step(const std::string& spec) {
    for (const char* name : {"slow_rank:", "sdc:"})
        if (spec.rfind(name, 0) == 0)
            return spec.substr(0, std::strlen(name) - 1) + "@0:" + spec.substr(std::strlen(name));
    return spec;
}

// The number p spells in full, or NaN.
double number(const std::string& p) {
    try {
        size_t used;
        double x = std::stod(p, &used);
        return used == p.size() ? x : NAN;
    } catch (const std::exception&) {
        return NAN;
    }
}

// allreduce_bug@S:FLAVOUR[:TENSOR]'s flavour (sum, skip[:TENSOR] or stale).
template <class Bad>
void read_allreduce_bug(const std::vector<std::string>& parts, const Bad& bad, Faults& f) {
    if (parts.size() < 2) throw bad("allreduce_bug needs a flavour: sum, skip or stale");
    const std::string& flavour = parts[1];
    if (flavour == "sum" && parts.size() == 2) {
        f.allreduce_bug = AllreduceBug::Sum;
    } else if (flavour == "skip" && parts.size() <= 3) {
        f.allreduce_bug = AllreduceBug::Skip;
        if (parts.size() == 3) f.allreduce_bug_tensor = parts[2];
    } else if (flavour == "stale" && parts.size() == 2) {
        f.allreduce_bug = AllreduceBug::Stale;
    } else {
        throw bad("the allreduce_bug flavour is sum, skip[:TENSOR] or stale");
    }
}

// bad_batch@S[:KIND[:ROWS]]'s kind (a word) and rows (a number); the step is read with the others'.
template <class Bad>
BadBatch bad_batch_of(const std::vector<std::string>& parts, const Bad& bad) {
    BadBatch b;
    if (parts.size() >= 2) b.kind = parts[1];
    if (b.kind != "repeat" && b.kind != "random") throw bad("the bad_batch kind is repeat or random");
    if (parts.size() == 3) {
        double rows = number(parts[2]);
        if (!(rows >= 1) || rows != (int)rows) throw bad("the rows must be an integer >= 1");
        b.rows = (int)rows;
    }
    if (parts.size() > 3) throw bad("bad_batch takes @STEP[:KIND[:ROWS]]");
    return b;
}

}  // namespace

Faults parse_faults(const std::vector<std::string>& specs) {
    Faults f;
    for (const std::string& given : specs) {
        auto bad = [&](const std::string& why) {
            return ConfigError(fmt::format("fault \"{}\": {}; expected NAME@STEP[:ARGS] with NAME one of mask_leak, "
                                           "grad_spike, nan, lr_spike, allreduce_bug, crash, crash_random, hang, "
                                           "slow_rank, sdc, bad_batch, replica_drift",
                                           given, why));
        };
        const std::string spec = with_step(given);
        size_t at = spec.find('@');
        if (at == std::string::npos) throw bad("no @STEP");
        std::string name = spec.substr(0, at);
        std::vector<std::string> parts;
        std::stringstream rest(spec.substr(at + 1));
        for (std::string p; std::getline(rest, p, ':');) parts.push_back(p);
        // Words, not numbers, after the step: taken out before the numbers are read.
        if (name == "allreduce_bug") {
            read_allreduce_bug(parts, bad, f);
            parts.resize(1);
        }
        if (name == "bad_batch") {
            f.bad_batches.push_back(bad_batch_of(parts, bad));
            parts.resize(1);
        }
        if (name == "replica_drift") {
            if (parts.size() > 2) throw bad("replica_drift takes @STEP[:TENSOR]");
            if (parts.size() == 2) f.replica_drift_tensor = parts[1];
            parts.resize(1);
        }
        std::vector<double> nums;
        for (const std::string& p : parts) {
            nums.push_back(number(p));
            if (std::isnan(nums.back())) throw bad("\"" + p + "\" is not a number");
        }
        if (nums.empty() || nums[0] < 0 || nums[0] != (int)nums[0]) throw bad("the step must be an integer >= 0");
        int step = (int)nums[0];
        if (name == "bad_batch") {
            f.bad_batches.back().step = step;
        } else if (name == "mask_leak" && nums.size() == 1) {
            f.mask_leak_from = step;
        } else if (name == "grad_spike" && nums.size() <= 2) {
            f.grad_spike_at = step;
            if (nums.size() == 2) f.grad_spike_factor = nums[1];
            if (!(f.grad_spike_factor > 0)) throw bad("the factor must be > 0");
        } else if (name == "nan" && nums.size() == 1) {
            f.nan_at = step;
        } else if (name == "replica_drift") {
            f.replica_drift_at = step;
        } else if (name == "allreduce_bug") {
            f.allreduce_bug_from = step;
        } else if ((name == "crash" || name == "hang") && nums.size() <= 2) {
            int rank = nums.size() == 2 ? (int)nums[1] : 0;
            if (rank < 0 || (nums.size() == 2 && nums[1] != rank)) throw bad("the rank must be an integer >= 0");
            (name == "crash" ? f.crash_at : f.hang_at) = step;
            (name == "crash" ? f.crash_rank : f.hang_rank) = rank;
        } else if (name == "slow_rank" && nums.size() == 3) {
            if (nums[1] < 0 || nums[1] != (int)nums[1]) throw bad("the rank must be an integer >= 0");
            if (!(nums[2] >= 1)) throw bad("the slowdown factor must be >= 1");
            f.slow_from = step, f.slow_rank = (int)nums[1], f.slow_factor = nums[2];
        } else if (name == "sdc" && nums.size() == 2) {
            if (nums[1] < 0 || nums[1] != (int)nums[1]) throw bad("the rank must be an integer >= 0");
            f.sdc_from = step, f.sdc_rank = (int)nums[1];
        } else if (name == "crash_random" && nums.size() == 1) {
            if (step < 1) throw bad("the mean interval must be >= 1 second");
            f.crash_mean_seconds = step;
        } else if (name == "lr_spike" && nums.size() <= 3) {
            f.lr_spike_from = step;
            if (nums.size() >= 2) f.lr_spike_factor = nums[1];
            if (nums.size() == 3) f.lr_spike_steps = (int)nums[2];
            if (!(f.lr_spike_factor > 0) || f.lr_spike_steps < 1) throw bad("factor and steps must be > 0");
        } else {
            throw bad("unknown fault or wrong number of arguments");
        }
    }
    return f;
}

}  // namespace hlat

namespace hlat {

void Faults::corrupt_gradients(int step, float* g, long n) const {
    if (step == grad_spike_at)
        for (long i = 0; i < n; i++) g[i] *= (float)grad_spike_factor;
    if (step == nan_at) g[n / 2] = NAN;
}

void check_faults_fit(const Faults& faults, const ParallelConfig& par) {
    if (faults.allreduce_bug != AllreduceBug::None && (par.dp < 2 || par.zero1))
        throw ConfigError("the allreduce_bug fault needs plain data parallelism: parallel.dp >= 2 without zero1");
    if (faults.replica_drift_at >= 0 && par.tp < 2)
        throw ConfigError("the replica_drift fault needs tensor parallelism: parallel.tp >= 2");
}

}  // namespace hlat
