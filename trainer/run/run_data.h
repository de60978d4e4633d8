// Everything a training run reads tokens from: a token file, or a corpus
// through the online loader with its tokenizer and a held-out set packed
// like training data.
#pragma once

#include "trainer/config/config.h"
#include "trainer/config/faults.h"
#include "trainer/data/batch_source.h"
#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"
#include "trainer/data/token_file.h"
#include "trainer/data/tokenizer.h"
#include "trainer/model/model.h"

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

namespace hlat {

struct RunData {
    std::unique_ptr<TokenFile> token_file;
    std::optional<Dataset> dataset;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Loader> loader;
    std::vector<std::vector<int32_t>> eval_batches;  // each (B, T+1), held out
    double heldout_unigram_entropy = NAN;             // nats per token
    BatchSource* source = nullptr;

    std::string corpus_fingerprint() const { return dataset ? dataset->fingerprint : ""; }
    std::string tokenizer_fingerprint() const { return tokenizer ? tokenizer->fingerprint() : ""; }
};

// Data-parallel rank `rank` of `world` reads its own stream (the loader splits
// documents by rank; the token file hands out the rank's windows of each
// global batch), from `loader_state` when resuming.
// `bad_batches` (the bad_batch fault) plant documents in rank 0's stream.
RunData open_data(const TrainConfig& config, const std::optional<LoaderState>& loader_state, int rank, int world,
                  const std::vector<BadBatch>& bad_batches = {});
// Where a bad_batch fault plants its document: the first micro-batch of its
// step, in an unskipped stream.
PlantedBatch planted_batch(const TrainConfig& config, const BadBatch& bad);

// Mean loss over the held-out batches (every rank: a TP forward is collective).
double heldout_loss(Model& model, const std::vector<std::vector<int32_t>>& batches, int B, int T);

}  // namespace hlat
