// Inference for scoring: the trainer's LLaMA forward pass, fp32, over one
// growing sequence with a key/value cache, so a shared context is computed
// once and each continuation after it costs only its own tokens.
//
// Letters as in trainer/model/kernels.h: C dim, V vocab, L layers, NH/NKV heads,
// HD head dim, H hidden dim, QKV = (NH + 2*NKV)*HD; n new tokens, P past ones.
#pragma once

#include "trainer/model/model.h"

#include <cstdint>
#include <vector>

namespace hlat::eval {

class Decoder {
  public:
    // Reads the weights of `model` (which must outlive the decoder) and
    // holds a cache of up to model.config().max_seq_len positions.
    explicit Decoder(const Model& model);

    // Runs tokens [0, n) at positions length() .. length()+n-1 and appends
    // them to the cache. Throws if the sequence would pass max_seq_len.
    // The final-norm hidden states of the new positions stay in hidden(i).
    void append(const int32_t* tokens, int n);
    // Forgets every position from `length` on (the shared context stays).
    void truncate(int length) { length_ = length < length_ ? length : length_; }
    int length() const { return length_; }
    int capacity() const { return T_; }

    // Final-norm hidden state (C) of the i-th token of the last append.
    const float* hidden(int i) const { return hidden_.data() + (long)i * C_; }
    // log softmax of the logits of `rows` hidden states (rows, C) into
    // logprobs (rows, V): the LM head runs on these rows only.
    void log_probs(float* logprobs, const float* hidden, int rows) const;

  private:
    const Model& model_;
    int C_, T_;
    int length_ = 0;
    std::vector<float> k_cache_, v_cache_;  // (L, T, NKV*HD), keys after RoPE
    std::vector<float> rope_cos_, rope_sin_;  // (T, HD/2)
    // Scratch for one append of up to T tokens.
    std::vector<float> x_, norm_, qkv_, att_, mid_, gate_up_, swiglu_, hidden_, scores_;
};

}  // namespace hlat::eval
