// The vocabulary-parallel embedding and cross-entropy of a tensor-parallel
// shard (Megatron's): each rank holds token ids [vocab_start, vocab_start + V)
// of embed_tokens and lm_head, V = vocab / TP. Letters as in kernels.h; V is
// the shard's vocabulary.
#pragma once

#include "trainer/model/model.h"

#include <cstdint>

namespace hlat {

// out (N, C) = this rank's rows for the tokens it holds, zero for the others;
// the group's sum of out is the embedding.
void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* embed, int N, int C,
                                      int vocab_start, int V);
// Accumulates dout into the rows of the tokens this rank holds.
void vocab_parallel_embedding_backward(float* dembed, const float* dout, const int32_t* tokens, int N, int C,
                                       int vocab_start, int V);

// logits (N, V) are this rank's columns of the full logits. Replaces them by
// the softmax probabilities over the whole vocabulary and writes each row's
// loss to losses (N) and, when not null, its log Z over the whole vocabulary
// to logz (N), the same on every rank; likewise its largest logit to row_max
// (N). Three all-reduces of N floats: the row maximum, the sum of
// exponentials and the target's logit.
void vocab_parallel_crossentropy_forward(float* logits, float* losses, float* logz, const int32_t* targets, int N,
                                         int V, int vocab_start, TensorParallelGroup& group,
                                         float* row_max = nullptr);
// Replaces the probabilities by dlogits = (p (1 + 2 z_loss log Z) -
// onehot(target)) * dloss (crossentropy_backward's), the one-hot only where
// this rank holds the target.
void vocab_parallel_crossentropy_backward(float* logits, const int32_t* targets, const float* logz, float z_loss,
                                          float dloss, int N, int V, int vocab_start);

}  // namespace hlat
