// Fault injection, to prove the detectors: each fault starts at a step.
//   mask_leak@S            from step S the attention mask lets each position see the next token
//   grad_spike@S[:F]       at step S the gradients are scaled by F (default 100) before clipping
//   nan@S                  at step S one gradient value becomes NaN
//   lr_spike@S[:F[:N]]     from step S, for N steps (default 5), the learning rate is multiplied by F (default 10)
//   bad_batch@S[:KIND[:ROWS]]  bad data: the first micro-batch of step S on data-parallel rank 0 gets a planted
//                          document in its first ROWS sequences (default half the batch, at least 1): KIND "random"
//                          (random bytes, the default) or "repeat" (one phrase over and over). It lives in the data
//                          stream (by batch index), so a replay meets it again and rewind_skip can skip it.
// Distributed runs (the last data-parallel rank is the faulty one):
//   allreduce_bug@S:sum              from step S it sums the gradients instead of averaging them
//   allreduce_bug@S:skip[:TENSOR]    from step S one tensor (default layers.0.down_proj) is left out of
//                                    the all-reduce on every rank: each keeps its own gradient
//   allreduce_bug@S:stale            from step S it applies the previous step's reduced buffer
//   crash@S[:RANK]                   at step S the rank (default 0) is killed (SIGKILL), first launch only
//   crash_random@SECONDS             each launch is killed after an exponentially distributed time of
//                                    mean SECONDS (the uptime bench; HLAT_FAULT_SEED fixes the draws)
//   hang@S[:RANK]                    at step S the rank stops responding, first launch only
//   slow_rank@S:RANK:F (slow_rank:RANK:F from step 0)
//                                    from step S the rank's compute takes F times as long (a straggler)
//   sdc@S:RANK (sdc:RANK from step 0) from step S every GEMM of the rank flips one bit of its output
//                                    (silent data corruption: a core computing wrong numbers)
//   replica_drift@S[:TENSOR]         after step S the last tensor-parallel rank adds 0.05 to its copy of a
//                                    weight that must equal its group's (default layers.0.k_proj where kv
//                                    heads are shared, else layers.0.input_layernorm), which the TP drift
//                                    check must name at its next check
// "First launch only": not when the supervisor relaunched the job (HLAT_ATTEMPT > 0),
// as a transient hardware fault would not recur.
// The paper's configurations that go bad on their own are config settings,
// not faults: model.init_scaling "none", optimizer.beta2 0.99.
#pragma once

#include <string>
#include <vector>

namespace hlat {

struct ParallelConfig;

enum class AllreduceBug { None, Sum, Skip, Stale };

struct BadBatch {
    int step = -1;
    std::string kind = "random";
    int rows = 0;  // 0: half the batch (at least 1)
};

struct Faults {
    int mask_leak_from = -1;
    int grad_spike_at = -1;
    double grad_spike_factor = 100.0;
    int nan_at = -1;
    int lr_spike_from = -1;
    double lr_spike_factor = 10.0;
    int lr_spike_steps = 5;
    AllreduceBug allreduce_bug = AllreduceBug::None;
    int allreduce_bug_from = -1;
    std::string allreduce_bug_tensor = "layers.0.down_proj";
    int crash_at = -1, crash_rank = 0;
    double crash_mean_seconds = 0.0;  // crash_random
    int hang_at = -1, hang_rank = 0;
    int slow_from = -1, slow_rank = -1;
    double slow_factor = 1.0;
    int sdc_from = -1, sdc_rank = -1;
    int replica_drift_at = -1;
    std::string replica_drift_tensor;  // "": the default for the layout
    std::vector<BadBatch> bad_batches;

    // What the numeric faults do to step `step` (0-based), where the step
    // asks. The all-reduce bug is the gradient reducer's (grad_reducer.h);
    // crashes and hangs are the process's (run/fault_hook.h).
    int mask_lookahead(int step) const { return mask_leak_from >= 0 && step >= mask_leak_from ? 1 : 0; }
    void corrupt_gradients(int step, float* grads, long n) const;  // grad_spike, nan: before clipping
    // How many times as long world rank `rank`'s compute takes at `step`.
    double slowdown(int rank, int step) const {
        return rank == slow_rank && slow_from >= 0 && step >= slow_from ? slow_factor : 1.0;
    }
    bool corrupts_arithmetic(int rank, int step) const {
        return rank == sdc_rank && sdc_from >= 0 && step >= sdc_from;
    }
    double lr_factor(int step) const {
        bool spiking = lr_spike_from >= 0 && step >= lr_spike_from && step < lr_spike_from + lr_spike_steps;
        return spiking ? lr_spike_factor : 1.0;
    }
};

// Parsed once per run, where the run's options are decided (`hlat train`);
// throws ConfigError naming the bad entry.
Faults parse_faults(const std::vector<std::string>& specs);
// Faults the layout cannot carry (an all-reduce bug without plain data
// parallelism); throws ConfigError.
void check_faults_fit(const Faults& faults, const ParallelConfig& parallel);

}  // namespace hlat
