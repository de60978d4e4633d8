// Post-mortem of stored runs, side by side: the numbers a precision study
// reads off (final and best losses, loss variance, grad-norm trend, spike
// episodes, alerts, throughput, bytes of state per parameter, checkpoint
// evaluations against tokens seen), the config
// fields in which the runs differ, and a self-contained HTML report with the
// curves as inline SVG. Used by `hlat compare`.
#pragma once

#include "report/report_chart.h"
#include "telemetry/reader.h"

#include <map>
#include <string>
#include <vector>

namespace hlat::report {

// One checkpoint evaluation of a metric (`hlat eval --watch`).
struct EvalPoint {
    int64_t step = 0, tokens = 0;
    double value = NAN, stderr_ = NAN;
};

struct RunPostmortem {
    std::string name, status, precision;  // precision "-" when the run did not say
    int64_t seed = -1;                    // run.seed or seed of its config, else its meta seed; -1 when none
    // Its config, flattened ("section.field" -> JSON value), without what
    // tells seeds of one setting apart (seed, name, out_dir, store).
    std::map<std::string, std::string> setting;
    int64_t steps = 0;
    // The first step of the non-finite stretch its loss ended with, -1 when it
    // ended finite. A diverged run has no final or held-out loss and no gap:
    // the finite values before the NaN would rank it as if it had trained on.
    int64_t diverged_at = -1;
    double final_loss = NAN;          // mean of the last `window` training losses
    double best_loss = NAN;           // lowest `window`-step mean
    double final_heldout = NAN, best_heldout = NAN;
    double loss_variance = NAN;       // of the last `window` training losses
    double grad_trend = NAN;          // mean grad norm of the last quarter over the second quarter
    long spike_episodes = 0;
    double one_step_spike_share = NAN;
    std::map<int, long> spike_lengths;
    std::map<std::string, long> alerts;  // by kind
    double tokens_per_s = NAN;        // median, of the whole job
    // Cost, when a price per rank-hour is known (run.price_per_rank_hour, the
    // run's meta, or `hlat compare --price`): what 4M tokens cost at the median
    // throughput with every rank billed (the paper's CPT), and its inverse.
    double price_per_rank_hour = NAN;
    int world_size = 1;
    double cost_per_4m_tokens = NAN, tokens_per_unit_price = NAN;
    double lost_updates = NAN;        // pure bf16 modes: mean lost-update fraction over the last `window` steps
    double state_bytes_per_param = NAN;   // weights, gradients, optimizer state as the run allocated them (its meta)
    double format_bytes_per_param = NAN;  // what the precision's number formats need
    // Against the first run named with the same seed, at the same steps: with the same seed and
    // data order the batch-to-batch swings cancel, and what is left is what
    // the setting itself did. NaN for the first run.
    double loss_gap = NAN;            // mean of (loss - first run's loss) over the last `window` common steps
    double loss_gap_std = NAN;        // standard deviation of that difference: the noise the setting adds
    std::vector<int64_t> alert_steps;  // the first step of each alert episode (telemetry/alert_episodes.h)
    // By step, at most 300 envelopes each (min, max and mean of a bucket of
    // steps): the training loss, the grad norm, the loss gap.
    Curve loss_curve, grad_curve, gap_curve;
    // "task/metric" -> its evaluations in checkpoint order (standard errors
    // folded in; the trainer's own held-out loss is final_heldout above).
    std::map<std::string, std::vector<EvalPoint>> evals;
};

// Sets the cost figures of p from a price per rank-hour (<= 0: unknown).
void price_run(RunPostmortem& p, double price_per_rank_hour);

// A run's cost per 4M tokens at its median tokens/s, every rank billed at the
// price per rank-hour its config or meta gives; NaN without one.
double run_cost_per_4m_tokens(telemetry::Reader& reader, const telemetry::RunRecord& run);

// Summaries of the named runs; throws naming a run the store does not have.
std::vector<RunPostmortem> postmortem(telemetry::Reader& reader, const std::vector<std::string>& runs, int window = 50);

// "section.field" -> [value per run] for the config fields that differ.
std::map<std::string, std::vector<std::string>> config_differences(telemetry::Reader& reader,
                                                                   const std::vector<std::string>& runs);

// The report: one HTML file that needs no network to open.
std::string postmortem_html(const std::vector<RunPostmortem>& runs,
                            const std::map<std::string, std::vector<std::string>>& differences);

}  // namespace hlat::report
