// Log-likelihoods of continuations and of whole documents, computed the way
// lm-evaluation-harness computes them, on the fp32 Decoder.
//
// Every scored sequence starts with the tokenizer's EOS: in training it is
// what precedes each document, so it is this model's start-of-text marker
// (the harness's prefix token for models without BOS).
#pragma once

#include "eval/decoder.h"
#include "trainer/data/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hlat::eval {

// The harness's boundary between a context and a continuation: trailing
// whitespace of the context moves to the front of the continuation; the
// context is encoded alone, the pair encoded whole, and the continuation is
// what the whole encoding has past the context's token count.
struct EncodedPair {
    std::vector<int32_t> context, continuation;
};
EncodedPair encode_pair(const Tokenizer& tokenizer, std::string context, std::string continuation);

// One window of rolling log-likelihood over a document of n tokens: the model
// reads input tokens [input_begin, input_end) (-1 stands for the prefix
// token) and the last (pred_end - pred_begin) positions predict tokens
// [pred_begin, pred_end). Every token is predicted by exactly one window; a
// window reads at most max_len tokens and, after the first, gives each
// predicted token at least context_len - 1 tokens of left context (the
// harness's get_rolling_token_windows; context_len = 1 is its disjoint mode).
struct Window {
    long input_begin, input_end, pred_begin, pred_end;
};
std::vector<Window> rolling_windows(long n, int max_len, int context_len);

struct ContinuationScore {
    double loglik = 0.0;  // sum of log p over the continuation's tokens
    bool greedy = true;   // every token was the argmax
    int tokens = 0;
};

class Scorer {
  public:
    // model must outlive the scorer.
    Scorer(const Model& model, int prefix_token);

    // Scores each continuation after the same context: the context runs
    // through the model once, then each continuation over its cached keys and
    // values. A context too long for the longest continuation to fit is cut
    // from the left, as the harness cuts; a continuation longer than the model
    // is an error.
    std::vector<ContinuationScore> score(const std::vector<int32_t>& context,
                                         const std::vector<std::vector<int32_t>>& continuations);
    // Sum of log p over every token of a document, by rolling windows.
    ContinuationScore score_rolling(const std::vector<int32_t>& tokens, int context_len);

    int max_len() const { return decoder_.capacity(); }
    int prefix_token() const { return prefix_token_; }
    long tokens_run() const { return tokens_run_; }  // through the decoder so far

  private:
    // Adds log p(targets[i]) from the hidden states of rows, and whether each was the argmax.
    void accumulate(ContinuationScore& s, const float* hidden, const int32_t* targets, int rows);

    Decoder decoder_;
    int prefix_token_, V_;
    std::vector<float> logprobs_;
    long tokens_run_ = 0;
};

}  // namespace hlat::eval
