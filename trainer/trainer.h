// One optimizer step at a time: micro-batches through forward and backward,
// gradient clipping, AdamW at the scheduled learning rate, and the numbers a
// person watching the run needs.
#pragma once

#include "trainer/data/batch_source.h"
#include "trainer/config/config.h"
#include "trainer/config/faults.h"
#include "trainer/parallel/grad_reducer.h"
#include "trainer/model/model.h"
#include "trainer/model/optimizer.h"
#include "trainer/parallel/parallel.h"
#include "trainer/parallel/replica_check.h"
#include "trainer/step_internals.h"
#include "trainer/step_stats.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hlat {


class Trainer {
  public:
    // peak_gflops > 0 enables MFU (per process). The model is built but not
    // initialised: call model().init_weights() or load_weights() first. With a
    // distributed job, the model is this rank's tensor-parallel shard, the
    // gradients are averaged over the data-parallel replicas, loss and norms
    // are those of the whole job, and tokens count every replica's.
    // `faults` are the numeric ones to inject (config/faults.h); none by default.
    Trainer(const TrainConfig& config, BatchSource& data, double peak_gflops, Parallel* parallel = nullptr,
            const Faults& faults = {});
    ~Trainer();

    // One optimizer step, in stages: accumulate (forward and backward of every
    // micro-batch), reduce (across data-parallel replicas), clip, update,
    // measure, count tokens. With tensor_norms, also the per-layer and per-kind norms; with
    // hash_grads (distributed, every rank), the replica check of the reduced
    // gradients.
    StepStats step(bool tensor_norms = false, bool hash_grads = false);
    Model& model() { return *model_; }
    AdamW& optimizer() { return *optimizer_; }
    int next_step() const { return step_; }
    long tokens_seen() const { return tokens_seen_; }
    void set_next_step(int step, long tokens_seen) { step_ = step; tokens_seen_ = tokens_seen; }
    // Steps between measurements of the model's internals (run.internals_every;
    // 0: never), for a bench that compares a step with and without them.
    void set_internals_every(int every) { config_.run.internals_every = every; }
    // The next step leaves these sequences out (per micro-batch, a flag per
    // row): `hlat replay --without` asks whether they alone made a spike.
    void drop_sequences_next_step(std::vector<std::vector<char>> by_micro) { dropped_ = std::move(by_micro); }

  private:
    // The stages of step(), in order.
    void accumulate(StepStats& s);                  // forward and backward of every micro-batch
    void reduce(StepStats& s, bool hash_grads);     // the all-reduce's rest, the job's loss, the replica check
    void clip(StepStats& s, bool tensor_norms);     // injected gradient faults, norms, the clip factor
    double optimizer_bytes();                       // what AdamW moves a step (the profile's count)
    void update(StepStats& s);                      // AdamW (clipping as it reads), ZeRO-1 parameter gather
    void measure(StepStats& s, bool tensor_norms);  // lost updates; parameter norms (global, per tensor when asked)
    void count_lost_updates(StepStats& s);
    void count_tokens(StepStats& s);                // tokens seen, throughput, MFU, TP comm share
    void collect_internals(StepStats& s);           // the model's internals, when measured this step
    double inject_fleet_faults(StepStats& s);       // slow_rank stretches this rank's compute; sdc corrupts its GEMMs

    TrainConfig config_;
    BatchSource& data_;
    double peak_gflops_;
    Parallel* parallel_;
    Faults faults_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<GradReducer> reducer_;
    std::unique_ptr<AdamW> optimizer_;
    std::vector<int32_t> inputs_, targets_;
    int step_ = 0;
    // The model's internals (docs/internals.md): whether this step measures
    // them, the optimizer's sums, what the update scales the gradients by.
    bool measuring_ = false;
    std::vector<UpdateSums> update_sums_;
    double clip_factor_ = 1.0;
    InternalsLabels internals_labels_;
    long tokens_seen_ = 0;
    std::vector<std::vector<char>> dropped_;  // for the next step only
    bool weights_rounded_ = false;
    double last_compute_seconds_ = 0.0;  // of the previous step: what slow_rank stretches
};

// Sets the thread count (OpenMP's, which oneDNN shares) for the whole process.
void set_thread_count(int threads);

}  // namespace hlat
