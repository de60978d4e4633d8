#include "trainer/run/run_data.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>

namespace hlat {

static uint64_t data_seed(const RunConfig& run) { return run.data_seed >= 0 ? (uint64_t)run.data_seed : run.seed; }

// Shannon entropy of the token frequencies: the loss of the best model that
// ignores context. A language model must go well below it.
static double unigram_entropy(const std::vector<int32_t>& tokens) {
    std::map<int32_t, long> counts;
    for (int32_t t : tokens) counts[t]++;
    double h = 0.0;
    for (auto& [t, c] : counts) {
        double p = (double)c / tokens.size();
        h -= p * std::log(p);
    }
    return h;
}

PlantedBatch planted_batch(const TrainConfig& config, const BadBatch& bad) {
    const int rows = bad.rows > 0 ? bad.rows : std::max(1, config.run.batch_size / 2);
    return {(long)bad.step * config.run.grad_accum, 0, rows, bad.kind};
}

RunData open_data(const TrainConfig& config, const std::optional<LoaderState>& loader_state, int rank, int world,
                  const std::vector<BadBatch>& bad_batches) {
    RunData d;
    const int B = config.run.batch_size, T = config.run.seq_len;
    if (config.data.corpus.empty() && !bad_batches.empty())
        throw std::runtime_error("the bad_batch fault plants documents in the online loader's stream: it needs "
                                 "data.corpus, not a token file");
    if (config.data.corpus.empty()) {
        if (config.run.data.empty())
            throw std::runtime_error("no training data: set data.corpus (with data.tokenizer) or run.data, or pass --data");
        d.token_file = std::make_unique<TokenFile>(config.run.data, config.run.data_dtype, config.model.vocab_size,
                                                   (long)B * T + 1, rank, world);
        d.source = d.token_file.get();
        spdlog::info("data: token file {} ({} tokens)", config.run.data, d.token_file->size());
        return d;
    }
    d.dataset = load_dataset(config.data);
    const Dataset& ds = *d.dataset;
    spdlog::info("data: {} documents ({} training, {} held out); skipped {} invalid UTF-8, {} empty; removed {} "
                 "duplicate paragraphs",
                 ds.stats.documents, ds.train->size(), ds.heldout->size(), ds.stats.skipped_invalid_utf8,
                 ds.stats.skipped_empty, ds.stats.duplicate_paragraphs);
    d.tokenizer = std::make_unique<Tokenizer>(config.data.tokenizer);
    if (d.tokenizer->vocab_size() > config.model.vocab_size)
        throw std::runtime_error(fmt::format("tokenizer {} has {} pieces but model.vocab_size is {}",
                                             config.data.tokenizer, d.tokenizer->vocab_size(), config.model.vocab_size));
    std::vector<PlantedBatch> planted;
    for (const BadBatch& bad : bad_batches) planted.push_back(planted_batch(config, bad));
    d.loader = std::make_unique<Loader>(ds.train, *d.tokenizer, B, T, data_seed(config.run), rank, world,
                                        config.data.prefetch_batches, loader_state.value_or(LoaderState{}), planted);
    d.source = d.loader.get();

    // The held-out set: its documents in corpus order, packed like training.
    Packer heldout(ds.heldout, *d.tokenizer, 0, 0, 1, false, {});
    std::vector<int32_t> all;
    for (int i = 0; i < config.run.eval_batches; i++) {
        std::vector<int32_t> batch;
        for (int b = 0; b < B; b++)
            if (!heldout.next_sequence(batch, T + 1)) break;
        if ((int)batch.size() < B * (T + 1)) break;
        all.insert(all.end(), batch.begin(), batch.end());
        d.eval_batches.push_back(std::move(batch));
    }
    std::vector<int32_t> heldout_tokens;
    for (const Document& doc : *ds.heldout) d.tokenizer->encode(doc.text, heldout_tokens);
    if (!heldout_tokens.empty()) d.heldout_unigram_entropy = unigram_entropy(heldout_tokens);
    spdlog::info("held out: {} tokens, {} eval batches; unigram entropy {:.3f} nats/token (the loss of a model that "
                 "ignores context)",
                 heldout_tokens.size(), d.eval_batches.size(), d.heldout_unigram_entropy);
    if (config.run.eval_every > 0 && d.eval_batches.empty())
        spdlog::warn("the held-out split is smaller than one batch: no held-out evaluation");
    return d;
}

double heldout_loss(Model& model, const std::vector<std::vector<int32_t>>& batches, int B, int T) {
    std::vector<int32_t> inputs((long)B * T), targets((long)B * T);
    double sum = 0.0;
    for (const auto& batch : batches) {
        for (int b = 0; b < B; b++) {
            const int32_t* seq = batch.data() + (long)b * (T + 1);
            std::copy(seq, seq + T, inputs.begin() + (long)b * T);
            std::copy(seq + 1, seq + T + 1, targets.begin() + (long)b * T);
        }
        sum += model.forward(inputs.data(), targets.data());
    }
    return sum / batches.size();
}

}  // namespace hlat
