#include "trainer/data/loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <stdexcept>

namespace hlat {

nlohmann::json LoaderState::to_json() const {
    nlohmann::json segments = nlohmann::json::array();
    for (const Segment& g : carry_segments) segments.push_back({g.doc, g.token, g.tokens});
    return {{"epoch", epoch}, {"cursor", cursor}, {"carry", carry}, {"carry_segments", segments},
            {"batch", batch}, {"skip", skip}};
}

LoaderState LoaderState::from_json(const nlohmann::json& j) {
    try {
        LoaderState s;
        s.epoch = j.at("epoch").get<int>();
        s.cursor = j.at("cursor").get<long>();
        s.carry = j.at("carry").get<std::vector<int32_t>>();
        // Checkpoints before batch provenance (issue 36) have none of these:
        // their carried tokens belong to no known document.
        if (j.contains("carry_segments")) {
            for (const auto& g : j.at("carry_segments"))
                s.carry_segments.push_back({g.at(0).get<long>(), g.at(1).get<long>(), g.at(2).get<long>()});
        } else if (!s.carry.empty()) {
            s.carry_segments.push_back({-1, 0, (long)s.carry.size()});
        }
        s.batch = j.value("batch", 0L);
        s.skip = j.value("skip", std::vector<long>{});
        long covered = 0;
        for (const Segment& g : s.carry_segments) covered += g.tokens;
        if (s.epoch < 0 || s.cursor < 0 || s.batch < 0) throw std::runtime_error("negative epoch, cursor or batch");
        if (covered != (long)s.carry.size()) throw std::runtime_error("carry_segments do not cover the carry");
        std::sort(s.skip.begin(), s.skip.end());
        return s;
    } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format("malformed loader state: {}", e.what()));
    }
}

Packer::Packer(std::shared_ptr<const std::vector<Document>> docs, const Tokenizer& tokenizer, uint64_t seed,
               int rank, int world, bool shuffle, LoaderState state)
    : docs_(std::move(docs)), tokenizer_(tokenizer), seed_(seed), rank_(rank), world_(world), shuffle_(shuffle) {
    start_epoch(state.epoch);
    cursor_ = state.cursor;
    carry_ = std::move(state.carry);
    pieces_.assign(state.carry_segments.begin(), state.carry_segments.end());
}

void Packer::start_epoch(int epoch) {
    epoch_ = epoch;
    cursor_ = 0;
    std::vector<long> all(docs_->size());
    for (size_t i = 0; i < all.size(); i++) all[i] = (long)i;
    if (shuffle_) {
        // Fisher-Yates with our own draw, so the order is the same on every
        // standard library, not only libstdc++.
        std::mt19937_64 rng(seed_ ^ (0x9e3779b97f4a7c15ull * (uint64_t)(epoch + 1)));
        for (size_t i = all.size(); i > 1; i--) std::swap(all[i - 1], all[rng() % i]);
    }
    order_.clear();
    for (size_t i = rank_; i < all.size(); i += world_) order_.push_back(all[i]);
}

bool Packer::next_sequence(std::vector<int32_t>& out, int length, std::vector<Segment>* segments) {
    while (carry_.size() - head_ < (size_t)length) {
        if (cursor_ >= (long)order_.size()) {
            if (!shuffle_) return false;
            start_epoch(epoch_ + 1);
            if (order_.empty()) return false;
        }
        if (head_ > 0 && head_ * 2 > carry_.size()) {  // compact now and then, not per sequence
            carry_.erase(carry_.begin(), carry_.begin() + head_);
            head_ = 0;
        }
        const long doc = order_[cursor_++];
        const size_t before = carry_.size();
        tokenizer_.encode((*docs_)[doc].text, carry_);
        carry_.push_back(tokenizer_.eos_id());
        pieces_.push_back({doc, 0, (long)(carry_.size() - before)});
    }
    out.insert(out.end(), carry_.begin() + head_, carry_.begin() + head_ + length);
    head_ += length;
    // The sequence's documents come off the front of the pieces.
    for (long left = length; left > 0;) {
        Segment& front = pieces_.front();
        const long take = std::min(left, front.tokens);
        if (segments) segments->push_back({front.doc, front.token, take});
        front.token += take;
        front.tokens -= take;
        left -= take;
        if (front.tokens == 0) pieces_.pop_front();
    }
    return true;
}

LoaderState Packer::state() const {
    LoaderState s{epoch_, cursor_, std::vector<int32_t>(carry_.begin() + head_, carry_.end()), {}, 0, {}};
    s.carry_segments.assign(pieces_.begin(), pieces_.end());
    return s;
}

std::string planted_text(const std::string& kind, long batch, size_t min_bytes) {
    std::string text;
    if (kind == "repeat") {
        while (text.size() < min_bytes) text += "buy now buy now ";
        return text;
    }
    // Random bytes, kept valid UTF-8 (a tokenizer reads text): printable
    // ASCII and two-byte Latin letters, drawn from the batch's own seed.
    std::mt19937_64 rng(0x5eedbadull ^ (uint64_t)batch);
    while (text.size() < min_bytes) {
        const uint64_t r = rng();
        if (r % 3 == 0) {
            text += (char)(0xc3);
            text += (char)(0x80 + (r >> 8) % 0x40);
        } else {
            text += (char)(0x21 + (r >> 8) % 0x5e);
        }
    }
    return text;
}

std::vector<int32_t> planted_tokens(const Tokenizer& tokenizer, const PlantedBatch& p, int B, int T) {
    const long n = (long)std::min(p.rows, B) * (T + 1);
    std::vector<int32_t> tokens;
    for (size_t bytes = 4 * n; (long)tokens.size() < n; bytes *= 2) {  // text enough for n tokens
        tokens.clear();
        tokenizer.encode(planted_text(p.kind, p.batch, bytes), tokens);
    }
    tokens.resize(n);
    return tokens;
}

Loader::Loader(std::shared_ptr<const std::vector<Document>> train_docs, const Tokenizer& tokenizer, int B, int T,
               uint64_t seed, int rank, int world, int prefetch, LoaderState state, std::vector<PlantedBatch> planted)
    : B_(B), T_(T), prefetch_(prefetch < 1 ? 1 : prefetch),
      packer_(train_docs, tokenizer, seed, rank, world, true, state), tokenizer_(tokenizer),
      next_index_(state.batch), skip_(state.skip), consumed_(state) {
    for (const PlantedBatch& p : planted)
        if (p.rank == rank) planted_.push_back(p);
    // A rank's epoch must hold at least one batch, or training would cycle
    // through the same few documents within every step.
    long needed = (long)B * (T + 1), have = 0;
    {
        Packer probe(train_docs, tokenizer, seed, rank, world, false, {});
        std::vector<int32_t> seq;
        for (long i = 0; i < needed && probe.next_sequence(seq, 1); i++) have++;
    }
    if (have < needed)
        throw std::runtime_error(fmt::format(
            "the training corpus gives rank {} only {} tokens, fewer than one batch of {} x {} = {}", rank, have, B,
            T + 1, needed));
    thread_ = std::thread(&Loader::run, this);
}

Loader::~Loader() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    not_full_.notify_all();
    if (thread_.joinable()) thread_.join();
}

// Packs the batch at `index` of the stream, with any document planted there.
Loader::Batch Loader::pack(long index) {
    Batch batch;
    batch.provenance.batch = index;
    batch.provenance.rows.resize(B_);
    batch.tokens.reserve((size_t)B_ * (T_ + 1));
    const PlantedBatch* planted = nullptr;
    for (const PlantedBatch& p : planted_)
        if (p.batch == index) planted = &p;
    const int planted_rows = planted ? std::min(planted->rows, B_) : 0;
    for (int b = planted_rows; b < B_; b++) packer_.next_sequence(batch.tokens, T_ + 1, &batch.provenance.rows[b]);
    if (planted) plant(batch, *planted);
    return batch;
}

// The planted document takes the batch's first rows: the real documents
// move on to the rows after it, as if it had been read from the corpus.
void Loader::plant(Batch& batch, const PlantedBatch& p) {
    const int rows = std::min(p.rows, B_);
    const std::vector<int32_t> tokens = planted_tokens(tokenizer_, p, B_, T_);
    batch.tokens.insert(batch.tokens.begin(), tokens.begin(), tokens.end());
    for (int b = 0; b < rows; b++)
        batch.provenance.rows[b] = {{kPlantedDocument + p.batch, (long)b * (T_ + 1), T_ + 1}};
}

void Loader::run() {
    try {
        for (;;) {
            // A skipped batch is packed (the stream moves past it) and thrown away.
            long index = next_index_++;
            while (std::binary_search(skip_.begin(), skip_.end(), index)) {
                pack(index);
                index = next_index_++;
            }
            Batch batch = pack(index);
            batch.after = packer_.state();
            batch.after.batch = next_index_;
            batch.after.skip = skip_;
            std::unique_lock<std::mutex> lock(mutex_);
            not_full_.wait(lock, [&] { return stop_ || queue_.size() < prefetch_; });
            if (stop_) return;
            queue_.push_back(std::move(batch));
            not_empty_.notify_one();
        }
    } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        not_empty_.notify_all();
    }
}

void Loader::next_batch(int32_t* inputs, int32_t* targets, int B, int T) {
    if (B != B_ || T != T_)
        throw std::logic_error(fmt::format("loader packs {} x {}, asked for {} x {}", B_, T_, B, T));
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    Batch batch = std::move(queue_.front());
    queue_.pop_front();
    consumed_ = std::move(batch.after);
    last_ = std::move(batch.provenance);
    lock.unlock();
    not_full_.notify_one();
    for (int b = 0; b < B; b++) {
        const int32_t* seq = batch.tokens.data() + (long)b * (T + 1);
        std::copy(seq, seq + T, inputs + (long)b * T);
        std::copy(seq + 1, seq + T + 1, targets + (long)b * T);
    }
}

LoaderState Loader::state() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return consumed_;
}

}  // namespace hlat
