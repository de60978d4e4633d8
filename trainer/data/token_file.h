// A binary file of token ids (uint16 or uint32, native little-endian), read
// into memory and cut into training batches of consecutive windows: window k
// holds tokens [k*T, k*T + T] (wrapping to the start when the file runs out).
// One global stream: with data parallelism each call takes world batches of B
// windows and rank r keeps the r-th, so the job trains on the same windows at
// any world size with the same global batch.
#pragma once

#include "trainer/data/batch_source.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hlat {

class TokenFile : public BatchSource {
  public:
    // Loads and validates: the size must be a multiple of the token width, every
    // id below vocab_size, and at least min_tokens ids present. Errors name the
    // file and, for a bad id, its position.
    TokenFile(const std::string& path, const std::string& dtype, int vocab_size, long min_tokens, int rank = 0,
              int world = 1);

    long size() const { return (long)tokens_.size(); }
    // inputs (B, T) and targets (B, T) = inputs shifted by one, from the next
    // B windows of T+1 tokens; wraps to the start when the file runs out.
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override;
    // Continues after `tokens_seen` tokens of the whole job (a resumed run).
    void seek(long tokens_seen, int T) { next_window_ = tokens_seen / T; }

  private:
    std::vector<int32_t> tokens_;
    int rank_, world_;
    long next_window_ = 0;  // of the global stream
};

}  // namespace hlat
