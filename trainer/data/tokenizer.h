// SentencePiece tokenizers: training one with LLaMA's settings, and using any
// SentencePiece model (hlat's or a real LLaMA tokenizer.model) unchanged.
#pragma once

#include "trainer/data/corpus.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace hlat {

class Tokenizer {
  public:
    // Loads a SentencePiece model; errors name the file.
    explicit Tokenizer(const std::string& model_path);
    ~Tokenizer();
    // Appends the ids of text to out.
    void encode(const std::string& text, std::vector<int32_t>& out) const;
    std::string decode(const std::vector<int32_t>& ids) const;
    int vocab_size() const;
    int eos_id() const;
    int bos_id() const;
    // sha256 of the model file: a checkpoint records it to refuse resuming
    // with another tokenizer.
    const std::string& fingerprint() const { return fingerprint_; }
    const std::string& path() const { return path_; }

  private:
    std::string path_, fingerprint_;
    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Trains a BPE SentencePiece model at out_prefix.model with LLaMA's settings
// (byte_fallback, split_digits, identity normalization, extra whitespace kept,
// unk 0, bos 1, eos 2, no pad) on the documents, one paragraph per line.
void train_tokenizer(const std::vector<Document>& docs, const std::string& out_prefix, int vocab_size,
                     int threads);

}  // namespace hlat
