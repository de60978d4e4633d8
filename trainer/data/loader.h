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
#include <string>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hlat {

// A stretch of one document inside a packed sequence (batch provenance): the
// document (its index in the packer's list, or a planted one: see
// kPlantedDocument), the position of the stretch's first token within the
// document's tokens (its EOS counted last), and how many tokens.
struct Segment {
    long doc = -1;
    long token = 0;
    long tokens = 0;
    bool operator==(const Segment&) const = default;
};

// Documents an injected bad_batch planted are numbered from here on, by the
// batch they were planted in: kPlantedDocument + batch index.
constexpr long kPlantedDocument = 1L << 40;

// Where a rank's stream stands: the epoch, the next document of the rank's
// order for that epoch, the tokens already read but not yet packed (and the
// documents they belong to), how many batches were packed, and the batches
// that recovery skips (rewind_skip: by index in the stream, packed and thrown
// away). The order of an epoch is a pure function of (seed, epoch), so no RNG
// state needs saving beyond these.
struct LoaderState {
    int epoch = 0;
    long cursor = 0;
    std::vector<int32_t> carry;
    std::vector<Segment> carry_segments = {};  // cover `carry`, in order
    long batch = 0;                        // index of the next batch to pack
    std::vector<long> skip = {};           // batch indices never handed out, sorted
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
    // Appends one sequence of `length` tokens to out, and, when asked, the
    // documents it holds to `segments`. Returns false when an unshuffled
    // packer runs out of documents.
    bool next_sequence(std::vector<int32_t>& out, int length, std::vector<Segment>* segments = nullptr);
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
    std::deque<Segment> pieces_;  // the documents of carry_[head_:], in order
};

// A document planted in the stream by an injected fault (bad_batch, to prove
// attribution and recovery): `rows` whole sequences of one batch of one rank.
struct PlantedBatch {
    long batch = -1;          // index in the rank's stream
    int rank = 0;             // data-parallel rank
    int rows = 1;
    std::string kind;         // "repeat" (one phrase over and over) or "random" (random bytes)
};
// The planted document's text: a pure function of the kind and the batch.
std::string planted_text(const std::string& kind, long batch, size_t min_bytes);
// Its tokens, as its min(rows, B) rows of T + 1 hold them (the loader's and the attribution's one source).
std::vector<int32_t> planted_tokens(const Tokenizer& tokenizer, const PlantedBatch& p, int B, int T);

// What one handed-out batch held: its index in the stream and each row's documents.
struct BatchProvenance {
    long batch = -1;
    std::vector<std::vector<Segment>> rows;
};

class Loader : public BatchSource {
  public:
    // Starts the background thread at `state`. Throws if the rank's share of
    // an epoch holds fewer tokens than one batch of B * (T+1).
    Loader(std::shared_ptr<const std::vector<Document>> train_docs, const Tokenizer& tokenizer, int B, int T,
           uint64_t seed, int rank, int world, int prefetch, LoaderState state = {},
           std::vector<PlantedBatch> planted = {});
    ~Loader() override;

    // Blocks until a batch is ready; rethrows an error of the loader thread.
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override;
    // The state right after the last batch handed out: what a checkpoint saves.
    LoaderState state() const;
    int epoch() const { return consumed_.epoch; }
    const BatchProvenance* last_provenance() const override { return &last_; }

  private:
    struct Batch {
        std::vector<int32_t> tokens;  // (B, T+1)
        BatchProvenance provenance;
        LoaderState after;
    };
    void run();
    Batch pack(long index);
    void plant(Batch& batch, const PlantedBatch& p);

    int B_, T_;
    size_t prefetch_;
    Packer packer_;
    const Tokenizer& tokenizer_;
    std::vector<PlantedBatch> planted_;
    long next_index_;
    std::vector<long> skip_;
    LoaderState consumed_;
    BatchProvenance last_;
    std::deque<Batch> queue_;
    mutable std::mutex mutex_;
    std::condition_variable not_empty_, not_full_;
    bool stop_ = false;
    std::exception_ptr error_;
    std::thread thread_;
};

}  // namespace hlat
