#include "trainer/checkpoint/distributed_checkpoint.h"

#include "trainer/parallel/grad_reducer.h"
#include "trainer/parallel/sharding.h"

#include <algorithm>

namespace hlat {

namespace {

// This shard's optimizer state (moments, Kahan compensation) over all of its
// parameters; under ZeRO-1 each replica holds a range of it and it is
// all-gathered over the replicas.
std::vector<std::vector<float>> shard_state(Parallel& parallel, AdamW& opt, long n) {
    std::vector<std::vector<float>> out;
    for (auto& [name, buffer] : opt.state()) {
        std::vector<float> x(n, 0.0f), own = buffer->to_float();
        std::copy(own.begin(), own.end(), x.begin() + opt.shard_begin());
        out.push_back(std::move(x));
    }
    if (opt.shard_begin() == 0 && opt.shard_end() == n) return out;
    const int dp = parallel.dp_size();
    std::vector<long> bounds = zero1_bounds(n, dp);
    std::vector<int> counts(dp), displs(dp);
    for (int r = 0; r < dp; r++) {
        displs[r] = (int)bounds[r];
        counts[r] = (int)(bounds[r + 1] - bounds[r]);
    }
    for (std::vector<float>& x : out)
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x.data(), counts.data(), displs.data(), MPI_FLOAT,
                       parallel.comm(Group::Data));
    return out;
}

// Gathers the tensor-parallel shards of x (n floats each) into the whole
// model's layout, on TP rank 0.
std::vector<float> gather_whole(Parallel& parallel, const Model& model, const float* x, long n) {
    const int tp = parallel.tp_size();
    std::vector<float> shards(parallel.tp_rank() == 0 ? n * tp : 0);
    if (tp == 1) {
        shards.assign(x, x + n);
    } else {
        MPI_Gather(x, (int)n, MPI_FLOAT, shards.data(), (int)n, MPI_FLOAT, 0, parallel.comm(Group::Tensor));
    }
    if (parallel.tp_rank() != 0) return {};
    std::vector<float> whole(full_parameter_count(model.config()));
    // Last rank first: what several ranks hold (the norms, shared kv heads)
    // is written last by its group leader, whose copy the drift check and
    // re-sync take as the reference.
    for (int r = tp - 1; r >= 0; r--)
        insert_shard(shard_segments(model.config(), shard_shape(model.config(), r, tp)), shards.data() + r * n,
                     whole.data());
    return whole;
}

}  // namespace

std::string save_distributed_checkpoint(Parallel& parallel, Trainer& trainer, const CheckpointState& state,
                                        const std::string& run_dir, const std::string& tokenizer_path, int keep) {
    Model& model = trainer.model();
    AdamW& opt = trainer.optimizer();
    const long n = model.num_parameters();
    // Every rank holds the whole model and its optimizer state (one process,
    // or plain data parallelism): rank 0 writes its own.
    if (!model.is_shard() && opt.shard_begin() == 0 && opt.shard_end() == n)
        return parallel.is_root() ? save_checkpoint(run_dir, model, opt, state, tokenizer_path, keep) : "";
    std::vector<std::vector<float>> opt_state = shard_state(parallel, opt, n);
    // One replica of the model is enough: data-parallel rank 0's TP group.
    if (parallel.dp_rank() != 0) return "";
    std::vector<float> params = gather_whole(parallel, model, model.params(), n);
    std::vector<std::vector<float>> whole_state;
    for (const std::vector<float>& x : opt_state) whole_state.push_back(gather_whole(parallel, model, x.data(), n));
    if (!parallel.is_root()) return "";
    // The single-process writer, over a whole-model copy (activations for one token only).
    Model whole(model.config(), 1, 1, false);
    AdamW whole_opt(OptimizerConfig{}, whole.num_parameters(), opt.precision());
    std::copy(params.begin(), params.end(), whole.params());
    auto buffers = whole_opt.state();
    for (size_t i = 0; i < buffers.size(); i++) buffers[i].second->assign(whole_state[i].data());
    whole_opt.set_steps_taken(opt.steps_taken());
    return save_checkpoint(run_dir, whole, whole_opt, state, tokenizer_path, keep);
}

void load_distributed_checkpoint(const std::string& dir, Trainer& trainer) {
    Model& model = trainer.model();
    AdamW& opt = trainer.optimizer();
    if (!model.is_shard() && opt.shard_begin() == 0 && opt.shard_end() == model.num_parameters())
        return load_checkpoint(dir, model, opt);
    Model whole(model.config(), 1, 1, false);
    AdamW whole_opt(OptimizerConfig{}, whole.num_parameters(), opt.precision());
    load_checkpoint(dir, whole, whole_opt);
    const long n = model.num_parameters();
    std::vector<ShardSegment> segments = shard_segments(model.config(), model.shard());
    extract_shard(segments, whole.params(), model.params());
    auto whole_buffers = whole_opt.state(), buffers = opt.state();
    std::vector<float> x(n);
    for (size_t i = 0; i < buffers.size(); i++) {
        extract_shard(segments, whole_buffers[i].second->to_float().data(), x.data());
        buffers[i].second->assign(x.data() + opt.shard_begin());
    }
    opt.set_steps_taken(whole_opt.steps_taken());
}

}  // namespace hlat
