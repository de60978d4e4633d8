#include "trainer/checkpoint/distributed_checkpoint.h"

#include "trainer/parallel/grad_reducer.h"
#include "trainer/parallel/sharding.h"

#include <algorithm>

namespace hlat {

namespace {

// This shard's moments over all of its parameters; under ZeRO-1 each replica
// holds a range of them and they are all-gathered over the replicas.
void shard_moments(Parallel& parallel, AdamW& opt, long n, std::vector<float>& m, std::vector<float>& v) {
    m.assign(n, 0.0f);
    v.assign(n, 0.0f);
    std::copy(opt.first_moment().begin(), opt.first_moment().end(), m.begin() + opt.shard_begin());
    std::copy(opt.second_moment().begin(), opt.second_moment().end(), v.begin() + opt.shard_begin());
    if (opt.shard_begin() == 0 && opt.shard_end() == n) return;
    const int dp = parallel.dp_size();
    std::vector<long> bounds = zero1_bounds(n, dp);
    std::vector<int> counts(dp), displs(dp);
    for (int r = 0; r < dp; r++) {
        displs[r] = (int)bounds[r];
        counts[r] = (int)(bounds[r + 1] - bounds[r]);
    }
    for (float* x : {m.data(), v.data()})
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts.data(), displs.data(), MPI_FLOAT,
                       parallel.comm(Group::Data));
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
    for (int r = 0; r < tp; r++)
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
    std::vector<float> m, v;
    shard_moments(parallel, opt, n, m, v);
    // One replica of the model is enough: data-parallel rank 0's TP group.
    if (parallel.dp_rank() != 0) return "";
    std::vector<float> params = gather_whole(parallel, model, model.params(), n);
    std::vector<float> whole_m = gather_whole(parallel, model, m.data(), n);
    std::vector<float> whole_v = gather_whole(parallel, model, v.data(), n);
    if (!parallel.is_root()) return "";
    // The single-process writer, over a whole-model copy (activations for one token only).
    Model whole(model.config(), 1, 1, false);
    AdamW whole_opt(OptimizerConfig{}, whole.num_parameters());
    std::copy(params.begin(), params.end(), whole.params());
    whole_opt.first_moment() = std::move(whole_m);
    whole_opt.second_moment() = std::move(whole_v);
    whole_opt.set_steps_taken(opt.steps_taken());
    return save_checkpoint(run_dir, whole, whole_opt, state, tokenizer_path, keep);
}

void load_distributed_checkpoint(const std::string& dir, Trainer& trainer) {
    Model& model = trainer.model();
    AdamW& opt = trainer.optimizer();
    if (!model.is_shard() && opt.shard_begin() == 0 && opt.shard_end() == model.num_parameters())
        return load_checkpoint(dir, model, opt);
    Model whole(model.config(), 1, 1, false);
    AdamW whole_opt(OptimizerConfig{}, whole.num_parameters());
    load_checkpoint(dir, whole, whole_opt);
    const long n = model.num_parameters();
    std::vector<ShardSegment> segments = shard_segments(model.config(), model.shard());
    std::vector<float> m(n), v(n);
    extract_shard(segments, whole.params(), model.params());
    extract_shard(segments, whole_opt.first_moment().data(), m.data());
    extract_shard(segments, whole_opt.second_moment().data(), v.data());
    std::copy(m.begin() + opt.shard_begin(), m.begin() + opt.shard_end(), opt.first_moment().begin());
    std::copy(v.begin() + opt.shard_begin(), v.begin() + opt.shard_end(), opt.second_moment().begin());
    opt.set_steps_taken(whole_opt.steps_taken());
}

}  // namespace hlat
