// Plain, obviously-correct versions of the kernels that kernels.cpp does the
// clever way (BLAS, blocking, masking by skipping work). Tests hold the fast
// kernels against these. Same arguments and conventions as kernels.h.
#pragma once

namespace hlat::reference {

void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC);
void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);
// att (B, NH, T, T) is always filled here; masked entries are zero.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                       int HD);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int NH, int NKV, int HD);

}  // namespace hlat::reference
