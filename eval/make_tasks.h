// `hlat make-tasks`: the frozen task files built from a corpus's held-out
// split, with a fixed seed, so every checkpoint of every run is scored on the
// same items.
//   heldout_perplexity   held-out documents, scored by rolling log-likelihood
//   next_sentence_mc4    first sentences of a prose paragraph; the true next
//                        sentence among three length-matched sentences of
//                        other held-out documents (HellaSwag-like)
//   cloze_lastword       a passage up to the last word of a sentence whose word
//                        occurs earlier in the passage (LAMBADA-like)
// Items sharing any 13-word sequence with the training text are dropped (the
// harness's decontamination rule). Each file's header records the corpus
// (files, sha256, their manifests, the split's fingerprint), the seed and how
// many candidates were dropped.
#pragma once

#include "trainer/data/dataset.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hlat::eval {

struct MakeTasksOptions {
    std::string out_dir = "data/tasks";
    uint64_t seed = 1234;
    long items = 500;    // per task, at most
    int ngram = 13;      // decontamination n-gram length, in words
    bool force = false;  // overwrite existing files (they are frozen otherwise)
};

// Writes the three task files and returns their paths. Refuses to overwrite
// an existing file unless options.force.
std::vector<std::string> make_tasks(const Dataset& dataset, const DataConfig& data, const MakeTasksOptions& options);

// Sentences of a prose paragraph (lines joined by single spaces): split after
// . ! or ? followed by a space and an upper-case letter, except after common
// abbreviations (e.g., i.e., etc.) and single letters.
std::vector<std::string> split_sentences(const std::string& paragraph);

// The 13-gram index of a text collection: words lower-cased, every character
// that is not an ASCII letter or digit a separator, n-grams hashed.
class NgramIndex {
  public:
    explicit NgramIndex(int n) : n_(n) {}
    void add(const std::string& text);
    void finish();  // sorts; call after the last add
    bool overlaps(const std::string& text) const;
    size_t size() const { return hashes_.size(); }

  private:
    std::vector<uint64_t> grams(const std::string& text) const;
    int n_;
    std::vector<uint64_t> hashes_;
};

}  // namespace hlat::eval
