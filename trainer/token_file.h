// A binary file of token ids (uint16 or uint32, native little-endian), read
// into memory and cut into training batches of consecutive windows.
#pragma once

#include "trainer/batch_source.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hlat {

class TokenFile : public BatchSource {
  public:
    // Loads and validates: the size must be a multiple of the token width, every
    // id below vocab_size, and at least min_tokens ids present. Errors name the
    // file and, for a bad id, its position.
    TokenFile(const std::string& path, const std::string& dtype, int vocab_size, long min_tokens);

    long size() const { return (long)tokens_.size(); }
    // inputs (B, T) and targets (B, T) = inputs shifted by one, from the next
    // B windows of T+1 tokens; wraps to the start when the file runs out.
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override;

  private:
    std::vector<int32_t> tokens_;
    long position_ = 0;
};

}  // namespace hlat
