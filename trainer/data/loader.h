// The online loader: tokenizes documents during training and packs them into
// sequences of T+1 tokens (EOS after every document; what does not fit starts
// the next sequence; a long document spans many), on a background thread with
// a bounded queue of ready batches. Its state is small and exact, so a
// checkpoint can restore the stream to the token.
#pragma once

#include "trainer/data/batch_source.h"
#include "trainer/data/corpus.h"
#include "trainer/data/tokenizer.h"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hlat {

// Where a rank's stream stands: the epoch, the next document of the rank's
// order for that epoch, and the tokens already read but not yet packed. The
// order of an epoch is a pure function of (seed, epoch), so no RNG state needs
// saving beyond these.
struct LoaderState {
    int epoch = 0;
    long cursor = 0;
    std::vector<int32_t> carry;
    nlohmann::json to_json() const;
    static LoaderState from_json(const nlohmann::json& j);
    bool operator==(const LoaderState&) const = default;
};

// Packs a document list into sequences. Used by the loader thread for
// training (shuffled per epoch, split by rank) and directly for the fixed
// held-out set (shuffle = false, one rank).
class Packer {
  public:
    Packer(std::shared_ptr<const std::vector<Document>> docs, const Tokenizer& tokenizer, uint64_t seed,
           int rank, int world, bool shuffle, LoaderState state);
    // Appends one sequence of `length` tokens to out. Returns false when an
    // unshuffled packer runs out of documents.
    bool next_sequence(std::vector<int32_t>& out, int length);
    LoaderState state() const;
    int epoch() const { return epoch_; }
    // Indices into the document list that this rank reads in the current epoch.
    const std::vector<long>& epoch_order() const { return order_; }

  private:
    void start_epoch(int epoch);

    std::shared_ptr<const std::vector<Document>> docs_;
    const Tokenizer& tokenizer_;
    uint64_t seed_;
    int rank_, world_;
    bool shuffle_;
    int epoch_ = 0;
    long cursor_ = 0;
    std::vector<long> order_;    // this rank's documents for the epoch
    std::vector<int32_t> carry_;
    size_t head_ = 0;            // carry_[head_:] is still to be packed
};

class Loader : public BatchSource {
  public:
    // Starts the background thread at `state`. Throws if the rank's share of
    // an epoch holds fewer tokens than one batch of B * (T+1).
    Loader(std::shared_ptr<const std::vector<Document>> train_docs, const Tokenizer& tokenizer, int B, int T,
           uint64_t seed, int rank, int world, int prefetch, LoaderState state = {});
    ~Loader() override;

    // Blocks until a batch is ready; rethrows an error of the loader thread.
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override;
    // The state right after the last batch handed out: what a checkpoint saves.
    LoaderState state() const;
    int epoch() const { return consumed_.epoch; }

  private:
    struct Batch {
        std::vector<int32_t> tokens;  // (B, T+1)
        LoaderState after;
    };
    void run();

    int B_, T_;
    size_t prefetch_;
    Packer packer_;
    LoaderState consumed_;
    std::deque<Batch> queue_;
    mutable std::mutex mutex_;
    std::condition_variable not_empty_, not_full_;
    bool stop_ = false;
    std::exception_ptr error_;
    std::thread thread_;
};

}  // namespace hlat
