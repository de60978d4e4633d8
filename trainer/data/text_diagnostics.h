// Simple data diagnostics for a sequence a spike is blamed on (issue 36), the
// kind OLMo 2 used to trace its spikes to repeated n-grams: how much of the
// sequence repeats itself, how much information its bytes carry, and whether
// its document is a copy of an earlier one.
#pragma once

#include "trainer/data/corpus.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hlat {

// The share of the sequence's token n-grams (n = 4) that occurred earlier in
// it: about 0 for prose, near 1 for one phrase over and over. 0 for fewer
// than n + 1 tokens.
double repeated_ngram_share(const std::vector<int32_t>& tokens, int n = 4);

// Shannon entropy of the text's byte values, in bits per byte: about 4.5 for
// English prose, near 0 for one repeated character, near 8 for random bytes.
double byte_entropy(std::string_view text);

// Exact duplicates among documents: the first document with the same text.
class DuplicateIndex {
  public:
    explicit DuplicateIndex(const std::vector<Document>& docs);
    // The index of the first document whose text equals doc's, if it is not doc itself; -1 otherwise.
    long first_copy(long doc) const;

  private:
    const std::vector<Document>& docs_;
    std::unordered_map<uint64_t, long> first_;  // text hash -> first document with it
};

}  // namespace hlat
