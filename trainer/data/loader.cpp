#include "trainer/data/loader.h"

#include <fmt/format.h>

#include <random>
#include <stdexcept>

namespace hlat {

nlohmann::json LoaderState::to_json() const {
    return {{"epoch", epoch}, {"cursor", cursor}, {"carry", carry}};
}

LoaderState LoaderState::from_json(const nlohmann::json& j) {
    try {
        LoaderState s;
        s.epoch = j.at("epoch").get<int>();
        s.cursor = j.at("cursor").get<long>();
        s.carry = j.at("carry").get<std::vector<int32_t>>();
        if (s.epoch < 0 || s.cursor < 0) throw std::runtime_error("negative epoch or cursor");
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

bool Packer::next_sequence(std::vector<int32_t>& out, int length) {
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
        tokenizer_.encode((*docs_)[order_[cursor_++]].text, carry_);
        carry_.push_back(tokenizer_.eos_id());
    }
    out.insert(out.end(), carry_.begin() + head_, carry_.begin() + head_ + length);
    head_ += length;
    return true;
}

LoaderState Packer::state() const {
    return {epoch_, cursor_, std::vector<int32_t>(carry_.begin() + head_, carry_.end())};
}

Loader::Loader(std::shared_ptr<const std::vector<Document>> train_docs, const Tokenizer& tokenizer, int B, int T,
               uint64_t seed, int rank, int world, int prefetch, LoaderState state)
    : B_(B), T_(T), prefetch_(prefetch < 1 ? 1 : prefetch),
      packer_(train_docs, tokenizer, seed, rank, world, true, state), consumed_(state) {
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

void Loader::run() {
    try {
        for (;;) {
            Batch batch;
            batch.tokens.reserve((size_t)B_ * (T_ + 1));
            for (int b = 0; b < B_; b++) packer_.next_sequence(batch.tokens, T_ + 1);
            batch.after = packer_.state();
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
