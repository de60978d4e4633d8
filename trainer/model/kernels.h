// Forward and backward kernels of the LLaMA block, on flat fp32 buffers.
//
// Letters: B batch, T sequence length, C model dim, V vocab, NH query heads,
// NKV key/value heads, HD head dim, H feed-forward hidden dim, N = B*T rows.
// QKV = (NH + 2*NKV) * HD is the width of the coalesced qkv projection; a row of
// qkv holds NH query heads, then NKV key heads, then NKV value heads.
//
// Argument order everywhere: outputs, then inputs, then sizes. Backward kernels
// accumulate (+=) into weight gradients (matmul_backward when asked to); into input gradients they accumulate
// where the name says so, and otherwise overwrite.
#pragma once

#include "trainer/model/bf16.h"

#include <cstdint>

namespace hlat {

// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T. No bias: LLaMA has none.
void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC);
// dinp (N, IC) = dout @ weight (overwritten); dweight (OC, IC) = dout^T @ inp,
// added to what dweight holds with accumulate, else written over it.
void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, bool accumulate);
// Its two halves, each on its own (the trainer times them apart).
void matmul_dinput(float* dinp, const float* dout, const float* weight, int N, int IC, int OC);
void matmul_dweight(float* dweight, const float* dout, const float* inp, int N, int IC, int OC, bool accumulate);

// out (N, C) = embed[tokens] ; dembed (V, C) += scattered dout.
void embedding_forward(float* out, const int32_t* tokens, const float* embed, int N, int C);
void embedding_backward(float* dembed, const float* dout, const int32_t* tokens, int N, int C);

// out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps); rstd (N) is kept
// for backward. dinp (N, C) and dweight (C) are accumulated.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps);
void rmsnorm_backward_accumulate(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, int N, int C);

// qk-norm (Wortsman et al. 2023; per head, as Qwen3 and OLMo-2 have it):
// RMSNorm in place over each query and key head of qkv (N, QKV), before RoPE.
// Head h of a row, x (HD), becomes x * rstd * w, w = q_weight (HD) for the NH
// query heads and k_weight (HD) for the NKV key heads; the v heads are left
// as they are. rstd (N, NH + NKV) is kept for backward, and so, when inp is
// not null, are the heads as they were, inp (N, NH + NKV, HD).
void qk_norm_forward(float* qkv, float* inp, float* rstd, const float* q_weight, const float* k_weight, int N,
                     int NH, int NKV, int HD, float eps);
// In place on the q and k heads of dqkv (N, QKV): the gradient of the norm's
// output becomes its input's; dq_weight and dk_weight (HD) are accumulated.
void qk_norm_backward(float* dqkv, float* dq_weight, float* dk_weight, const float* inp, const float* q_weight,
                      const float* k_weight, const float* rstd, int N, int NH, int NKV, int HD);

// Rotary tables (T, HD/2): angle of position t and frequency i is
// t * theta^(-2i/HD), the rotate-half convention of Hugging Face LLaMA.
void rope_tables(float* cos_table, float* sin_table, int T, int HD, float theta);
// Rotates the query and key heads of qkv (B, T, QKV) in place; backward applies
// the inverse rotation to their gradients in place.
void rope_forward(float* qkv, const float* cos_table, const float* sin_table, int B, int T, int NH,
                  int NKV, int HD);
void rope_backward(float* dqkv, const float* cos_table, const float* sin_table, int B, int T,
                   int NH, int NKV, int HD);

// Causal softmax attention. out (B, T, NH*HD) from qkv (B, T, QKV). The causal
// mask (key position <= query position + lookahead) is generated here, never
// passed in. lookahead is 0 for a correct model; 1 is the injected mask_leak
// fault, where every position also sees the next token.
// att (B, NH, T, T) receives the probabilities when non-null; when null they are
// computed into per-thread scratch and not kept (activation checkpointing).
// Only the entries the backward reads are written: in fp32 each 64-row
// block's up to the end of the 64-column block holding its last visible key,
// masked ones zero; in the bf16 modes (whose products read a bf16 copy) only
// the visible keys. The rest is left as it was (half a T x T matrix's
// writes, or more, which no one reads).
// scratch holds AttentionScratch::floats(T) floats per OpenMP thread.
struct AttentionScratch {
    static long floats(int T) { return 2L * T * T; }
};
// probs_bf16 rounds the probabilities themselves to bf16 (precision.softmax =
// bf16); the softmax and its backward are fp32 either way.
// stats, when not null, receives per (batch, head) pair (B, NH) the largest
// pre-softmax logit q.k/sqrt(HD) over the visible keys, and the sum over the
// T query rows of the attention entropy -sum p log p (nats), both measured
// inside the softmax (docs/internals.md).
struct AttentionStats {
    float* logit_max;    // (B, NH)
    float* entropy_sum;  // (B, NH)
};
void attention_forward(float* out, float* att, float* scratch, const float* qkv, int B, int T,
                       int NH, int NKV, int HD, int lookahead = 0, bool probs_bf16 = false,
                       const AttentionStats* stats = nullptr);
// dqkv (B, T, QKV) is overwritten. att holds the forward probabilities, or is
// null, in which case they are recomputed from qkv.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int NH, int NKV, int HD, int lookahead = 0,
                        bool probs_bf16 = false);

// Attention with bf16 products (the bf16 modes' default; precision.attention =
// fp32 runs the fp32 kernels above on bf16 values) reads qkv in bf16,
// head-major: heads (B, NH + 2 NKV, T, HD), q heads then k then v, each head's
// T x HD slice contiguous, as its products read it. The four products take
// bf16 operands and sum in fp32, as every bf16 matmul does; dout is rounded as
// read, and the probabilities and score gradients as they enter their
// products, as FlashAttention does in bf16. On the emulated engine
// (kernels_bf16.h) those bf16 values are held in fp32 for sgemm, each head
// widened once. dqkv is written in the row-major (B, T, QKV) layout, in fp32.
// The attention kernels are in attention.cpp.
void qkv_heads_bf16(bf16* heads, const float* qkv, int B, int T, int NH, int NKV, int HD);  // narrowed
void attention_forward(float* out, float* att, float* scratch, const bf16* qkv_heads, int B, int T, int NH,
                       int NKV, int HD, int lookahead = 0, bool probs_bf16 = false,
                       const AttentionStats* stats = nullptr);
void attention_backward(float* dqkv, float* scratch, const float* dout, const bf16* qkv_heads, const float* att,
                        int B, int T, int NH, int NKV, int HD, int lookahead = 0, bool probs_bf16 = false);
// How those bf16 products walk a head: Auto picks by CPU (blocks of 64 query
// rows, or the whole head where oneDNN runs bf16 on AMX: attention.cpp says
// why, with q k^T, p v and their backward's dO v^T and dS k on hlat's own
// tile products where the shapes fit: amx_tiles.h); the tests force each, to
// check them all (WholeHeadOnTiles is WholeHead where the tiles cannot run).
enum class AttentionBlocking { Auto, RowBlocks, WholeHead, WholeHeadOnTiles };
void set_attention_blocking(AttentionBlocking blocking);

// out (N, H) = silu(gate) * up, gate_up (N, 2H) = [gate | up].
void swiglu_forward(float* out, const float* gate_up, int N, int H);
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N, int H);

// out = a + b over n floats.
void residual_forward(float* out, const float* a, const float* b, long n);

// Fused softmax + cross-entropy in fp32. logits (N, V) are replaced by the
// probabilities; losses (N) get -log p[target]; logz (N), when not null, each
// row's log-partition log Z = logsumexp(logits); row_max (N), when not null,
// each row's largest logit (the model's internals, docs/internals.md).
void crossentropy_forward(float* logits, float* losses, float* logz, const int32_t* targets, int N, int V,
                          float* row_max = nullptr);
// Replaces the probabilities by dlogits = (p - onehot(target)) * dloss, plus
// the gradient of PaLM's auxiliary z-loss z_loss * (log Z)^2 per token,
// 2 z_loss log Z p * dloss, when z_loss > 0 (logz then holds forward's log Z).
void crossentropy_backward(float* logits, const int32_t* targets, const float* logz, float z_loss, float dloss, int N,
                           int V);

// The same kernels for the bf16 precision modes, fused with the roundings
// around them. A bf16 matmul leaves fp32 sums (kernels_bf16.h) that stand for
// a bf16 tensor: the kernel that reads them first rounds each value to bf16 as
// it loads it ("rounds as read" below), and a kernel whose result feeds a bf16
// matmul writes it narrowed. Each is bit-identical to the fp32 kernel with
// bf16_round_inplace before it and bf16_narrow after it, without those two
// passes over memory.

// out = bf16(rmsnorm(inp)): the next matmul's input, written narrowed.
void rmsnorm_forward_bf16(bf16* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);
// Where a bf16 mode's stream gradient goes besides dinp, each in the pass
// that sums it: with `round`, dinp's sums are left rounded to bf16 values (a
// bf16 stream, as bf16_round_inplace would leave them); with `narrowed`, the
// sums (rounded or not) are also written there narrowed, as bf16_narrow would
// (the next matmul's output gradient).
struct Bf16StreamGrad {
    bool round = false;
    bf16* narrowed = nullptr;
};
// rmsnorm_backward_accumulate with dout rounded as read.
void rmsnorm_backward_accumulate_bf16(float* dinp, float* dweight, const float* dout, const float* inp,
                                      const float* weight, const float* rstd, int N, int C,
                                      Bf16StreamGrad out = {});
// qk_norm_forward on a matmul's fp32 sums: the q and k heads rounded as read
// (inp keeps those bf16 values) and their output rounded to bf16 values in
// place, as rmsnorm_forward_bf16 narrows its output; the v heads left.
void qk_norm_forward_bf16(float* qkv, float* inp, float* rstd, const float* q_weight, const float* k_weight, int N,
                          int NH, int NKV, int HD, float eps);
// qk_norm_backward with the q and k heads' gradient rounded as read.
void qk_norm_backward_bf16(float* dqkv, float* dq_weight, float* dk_weight, const float* inp, const float* q_weight,
                           const float* k_weight, const float* rstd, int N, int NH, int NKV, int HD);
// qkv (a matmul's fp32 sums, left as they are) rounded as read, q and k
// rotated and rounded again, all of it written narrowed into heads, the
// head-major layout attention's bf16 products read (above).
void rope_forward_bf16(bf16* heads, const float* qkv, const float* cos_table, const float* sin_table, int B, int T,
                       int NH, int NKV, int HD);
// The same from qkv16, the matmul's output stored in bf16 by its product.
void rope_forward_bf16(bf16* heads, const bf16* qkv16, const float* cos_table, const float* sin_table, int B, int T,
                       int NH, int NKV, int HD);
// The same as bf16 values left in qkv (fp32): rounded as read, q and k rotated
// and rounded again, in place; for attention with fp32 products.
void rope_forward_bf16_values(float* qkv, const float* cos_table, const float* sin_table, int B, int T, int NH,
                              int NKV, int HD);
// dqkv16 = bf16(rope_backward(dqkv)), dqkv left as it was.
void rope_backward_bf16(bf16* dqkv16, const float* dqkv, const float* cos_table, const float* sin_table, int B,
                        int T, int NH, int NKV, int HD);
// out = bf16(swiglu) of gate_up16's values (the gate_up product, stored in
// bf16 by matmul_forward_bf16 and kept for the backward).
void swiglu_forward_bf16(bf16* out, const bf16* gate_up16, int N, int H);
// dgate_up = bf16(swiglu_backward) of gate_up16's values and dout16's (the
// down projection's input gradient, stored in bf16 by its product).
void swiglu_backward_bf16(bf16* dgate_up, const bf16* dout16, const bf16* gate_up16, int N, int H);
// out = a + b with a (a matmul's output) rounded as read; the sum rounded to
// bf16 too when round_sum (the pure bf16 modes' residual stream).
void residual_forward_bf16(float* out, const float* a, const float* b, long n, bool round_sum);
// The same with a stored in bf16 by its product.
void residual_forward_bf16(float* out, const bf16* a, const float* b, long n, bool round_sum);
// crossentropy_forward with the logits rounded as read.
void crossentropy_forward_bf16(float* logits, float* losses, float* logz, const int32_t* targets, int N, int V,
                               float* row_max = nullptr);
// dlogits = bf16(crossentropy_backward's result); probs left as they were.
void crossentropy_backward_bf16(bf16* dlogits, const float* probs, const int32_t* targets, const float* logz,
                                float z_loss, float dloss, int N, int V);

}  // namespace hlat
