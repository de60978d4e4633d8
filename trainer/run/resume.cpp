#include "trainer/run/resume.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace hlat {

std::optional<Resume> find_resume(const TrainConfig& config) {
    std::vector<std::string> skipped;
    std::optional<std::string> dir = latest_good_checkpoint(config.run.out_dir, &skipped);
    for (const std::string& s : skipped) spdlog::warn("skipping checkpoint: {}", s);
    if (!dir) {
        spdlog::warn("--resume: no good checkpoint in {}; starting from step 0", config.run.out_dir);
        return std::nullopt;
    }
    return Resume{*dir, read_checkpoint_state(*dir)};
}

void check_resumable(const TrainConfig& config, const CheckpointState& ck, const RunData& data, bool allow_data_change,
                     const std::string& dir) {
    if (config.parallel.dp != ck.world_size || config.parallel.tp != ck.tp_size)
        spdlog::info("resuming a checkpoint of dp {} x tp {} at dp {} x tp {}", ck.world_size, ck.tp_size,
                     config.parallel.dp, config.parallel.tp);
    if (ck.config.at("model") != config_to_json(config).at("model"))
        throw std::runtime_error(fmt::format("cannot resume from {}: its model config differs from this run's", dir));
    if (allow_data_change) return;
    auto refuse = [&](const char* what) {
        throw std::runtime_error(fmt::format(
            "cannot resume from {}: the {} differs from the checkpoint's (pass --allow-data-change to resume anyway)",
            dir, what));
    };
    if (ck.corpus_fingerprint != data.corpus_fingerprint()) refuse("corpus");
    if (ck.tokenizer_fingerprint != data.tokenizer_fingerprint()) refuse("tokenizer");
    // The token file is one global stream at any world size; the loader's
    // per-rank streams are not.
    if (data.loader && ck.world_size != config.parallel.dp) refuse("data-parallel world size");
}

std::optional<LoaderState> resume_loader_state(const CheckpointState& ck, int dp_rank, int dp_size) {
    if ((int)ck.loaders.size() == dp_size) return ck.loaders[dp_rank];
    if (ck.loaders.empty() && dp_size == 1) return ck.loader;
    LoaderState fresh;
    for (const LoaderState& l : ck.loaders) fresh.epoch = std::max(fresh.epoch, l.epoch + 1);
    if (ck.loaders.empty() && ck.loader) fresh.epoch = ck.loader->epoch + 1;
    return fresh;
}

}  // namespace hlat
