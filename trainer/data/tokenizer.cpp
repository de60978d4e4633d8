#include "trainer/data/tokenizer.h"

#include "trainer/files/file_io.h"
#include "trainer/files/sha256.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <stdexcept>
#include <unistd.h>

namespace hlat {

Tokenizer::Tokenizer(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
    file_size(model_path);  // a missing file gets the system's reason, not SentencePiece's
    auto status = sp_->Load(model_path);
    if (!status.ok())
        throw std::runtime_error(fmt::format("cannot load tokenizer {}: {}", model_path, status.ToString()));
    fingerprint_ = sha256_file(model_path);
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::encode(const std::string& text, std::vector<int32_t>& out) const {
    std::vector<int> ids;
    auto status = sp_->Encode(text, &ids);
    if (!status.ok()) throw std::runtime_error(fmt::format("tokenizer {}: {}", path_, status.ToString()));
    out.insert(out.end(), ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string text;
    sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    return text;
}

int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int Tokenizer::eos_id() const { return sp_->eos_id(); }
int Tokenizer::bos_id() const { return sp_->bos_id(); }

void train_tokenizer(const std::vector<Document>& docs, const std::string& out_prefix, int vocab_size,
                     int threads) {
    // One paragraph per line: SentencePiece skips lines longer than
    // max_sentence_length, so whole documents would mostly be skipped.
    std::string lines;
    for (const Document& d : docs) {
        size_t pos = 0;
        while (pos < d.text.size()) {
            size_t end = d.text.find("\n\n", pos);
            if (end == std::string::npos) end = d.text.size();
            std::string para = d.text.substr(pos, end - pos);
            pos = end + 2;
            for (char& c : para)
                if (c == '\n') c = ' ';
            if (para.find_first_not_of(' ') != std::string::npos) lines += para + "\n";
        }
    }
    std::string input = fmt::format("{}.train-input.{}.txt", out_prefix, getpid());
    write_file_atomic(input, {lines});
    std::string args = fmt::format(
        "--input={} --model_prefix={} --vocab_size={} --model_type=bpe --byte_fallback=true "
        "--split_digits=true --normalization_rule_name=identity --remove_extra_whitespaces=false "
        "--unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --character_coverage=0.99995 "
        "--max_sentence_length=16384 --input_sentence_size=2000000 --shuffle_input_sentence=true "
        "--num_threads={} --minloglevel=2",
        input, out_prefix, vocab_size, threads);
    auto status = sentencepiece::SentencePieceTrainer::Train(args);
    std::remove(input.c_str());
    if (!status.ok()) throw std::runtime_error(fmt::format("tokenizer training failed: {}", status.ToString()));
}

}  // namespace hlat
