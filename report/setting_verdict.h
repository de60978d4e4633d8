// Runs grouped by setting (the same config but for the seed), and for each
// setting a verdict against the baseline (fp32 when there is one): is its gap
// in final held-out loss beyond the seed-to-seed spread? Used by `hlat
// compare` and its report; bench/precision_verdict is built on it.
#pragma once

#include "report/postmortem.h"

#include <string>
#include <vector>

namespace hlat::report {

struct SettingSummary {
    std::string name;       // the precision, plus the config fields that set it apart from a same-precision setting
    std::string precision;
    std::vector<std::string> runs;
    std::vector<int64_t> seeds;
    std::vector<double> heldout;   // final held-out loss of each run, in run order
    double mean = NAN;             // of the final held-out losses
    double spread = NAN;           // their sample standard deviation across seeds: the noise floor
    double gap = NAN;              // mean minus the baseline's mean (paired: mean of the per-seed gaps)
    double margin = NAN;           // half-width of the gap's 95% confidence interval (Student's t)
    bool paired = false;           // every run has the baseline's run of the same seed beside it
    int worse = 0, better = 0, compared = 0;  // seeds (paired) or runs (against the baseline's mean) that came
                                              // out worse, better, of how many
    double seeds_to_resolve = NAN; // seeds per setting at which a gap this size, with this spread, would clear its margin
    double lost_updates = NAN;     // mean over the runs of their final lost-update fraction
    int stalled = 0;               // runs the precision-stall detector flagged (bf16 rounding threw their updates away)
    bool baseline = false;
    int diverged = 0;              // runs whose loss ended non-finite (judged worse than any that finished)
    int64_t first_divergence = -1; // the earliest step one of them went non-finite at
    std::string verdict;           // in words: "worse in 3 of 3 seeds (+0.0113; ...: about 7 seeds would)", ...
};

// The settings of the runs, in order of first appearance, each judged
// against the baseline. Runs without a final held-out loss count as runs but
// not in the numbers.
std::vector<SettingSummary> summarize_settings(const std::vector<RunPostmortem>& runs);

// Whether some setting has more than one run: only then is there a verdict to show.
bool some_setting_has_seeds(const std::vector<SettingSummary>& settings);

// Why there is no verdict, when several runs give none (no setting has two
// runs: seeds were not told apart, or each run differs in its config); ""
// otherwise.
std::string no_verdict_reason(const std::vector<SettingSummary>& settings);

// For each run, the index of its setting in summarize_settings' answer.
std::vector<size_t> setting_of_runs(const std::vector<RunPostmortem>& runs);

// The verdicts as an HTML section (empty when no setting has two runs).
std::string settings_html(const std::vector<SettingSummary>& settings);

}  // namespace hlat::report
