// BF16 kernels: narrowing and widening arrays, and matmuls with bf16 inputs and
// fp32 accumulation, which every bf16 precision mode computes with.
//
// Letters as in kernels.h. The matmul engine is chosen once at runtime: on a
// CPU with avx512_bf16, oneDNN's bf16 kernels; elsewhere the bf16 inputs are
// widened to fp32 and go through sgemm. The product of two bf16 values is
// exact in fp32, so both engines compute the same products and differ only in
// the order of the fp32 sums.
#pragma once

#include "trainer/model/aligned.h"
#include "trainer/model/bf16.h"

#include <memory>
#include <string>
#include <vector>

namespace hlat {

enum class Bf16MatmulEngine { OneDnn, Emulated };

// The engine in use: OneDnn when the CPU has avx512_bf16, unless the
// environment variable HLAT_BF16_MATMUL=emulated asks for the fallback; any
// other value of it throws, naming it.
Bf16MatmulEngine bf16_matmul_engine();
void set_bf16_matmul_engine(Bf16MatmulEngine engine);  // tests and benchmarks
std::string bf16_matmul_engine_name();
// Whether oneDNN's bf16 matmul dispatches to AMX's tile multiply here
// (Sapphire Rapids and later), not to avx512_bf16's dot product.
bool bf16_engine_uses_amx();
// The engine's ceiling from the probe's three (peak_probe.h): AMX's tile
// multiply where oneDNN runs on it, else the bf16 dot product's; the fp32
// FMA's for the emulated engine, which widens bf16 and multiplies with sgemm
// whatever the CPU's bf16 instructions could do.
double bf16_engine_peak_gflops(double fp32_fma_peak, double bf16_dot_peak, double amx_peak);

// out[i] = bf16(in[i]), round-to-nearest-even.
void bf16_narrow(bf16* out, const float* in, long n);
// out[i] = float(in[i]), exact. Inside a parallel region it runs on the
// calling thread.
void bf16_widen(float* out, const bf16* in, long n);
// x[i] = float(bf16(x[i])): the value a bf16 tensor would hold, kept in fp32.
void bf16_round_inplace(float* x, long n);

// C (M, N) = op(A) @ op(B) + (accumulate ? C : 0), row-major; op(X) is X or X^T.
// A and B are bf16, C fp32; sums in fp32.
void gemm_bf16(float* C, const bf16* A, const bf16* B, int M, int N, int K, bool trans_a, bool trans_b,
               bool accumulate);

// C (M, N, leading dimension ldc) = alpha * op(A) @ op(B) (+ C with
// accumulate), leading dimensions as in BLAS, run on the calling thread
// alone: for the small products each thread of a parallel region computes
// for itself (attention's per-head blocks).
void gemm_bf16_on_thread(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                         const bf16* B, int ldb, bool accumulate, float* C, int ldc);

// Who packs a weight for oneDNN: hlat, in one pass over the fp32 weight
// (paired_blocks.h), where oneDNN's layout is the one it knows, or oneDNN's
// reorders after narrowing. The same bits either way; tests compare the two.
enum class WeightPacker { Hlat, OneDnn };
void set_weight_packer(WeightPacker packer);  // tests and benchmarks

// A linear layer's weight W (OC, IC) in bf16, as the matmuls read it. On
// oneDNN it is held twice, each copy packed into the blocked layout oneDNN's
// kernels read fastest: W^T for the forward and W for the input gradient.
// Given the plain array, oneDNN would repack it on every call; packed once
// per optimizer step, those products run 10-20% faster on the model's shapes,
// with the same sums to the bit. Both copies lie in hlat's buffers (on huge
// pages where 2 MiB or more), not in oneDNN's allocations, which are on
// 4 KiB pages: there the pack took 1.3-1.8x as long on an AMX Xeon, and the
// products reading the copies were slower too. The emulated engine keeps W's
// bf16 values widened to fp32, once per optimizer step, for sgemm to read.
// The engine is the one in use when the weight is made.
class Bf16Weight {
  public:
    Bf16Weight(int out_features, int in_features);
    ~Bf16Weight();
    Bf16Weight(Bf16Weight&&) noexcept;
    Bf16Weight& operator=(Bf16Weight&&) noexcept;

    // Sets W from w (OC, IC, fp32), rounded to nearest even.
    void assign(const float* w);
    int out_features() const { return out_; }
    int in_features() const { return in_; }
    long bytes() const;  // allocated

    struct Storage;  // the engine's copies, in kernels_bf16.cpp
    const Storage& storage() const { return *storage_; }

  private:
    int out_, in_;
    std::unique_ptr<Storage> storage_;
};

// A linear layer's output gradient dout (N, OC) as its two backward products
// (the input's and the weight's gradients) read it, made once for both. On
// oneDNN it is dout's bf16 values; on the emulated engine the same values
// widened to fp32, which each product would otherwise widen again.
class Bf16OutputGrad {
  public:
    // From fp32 sums, rounded to nearest even (on oneDNN into `narrowed`, n
    // values long), or from bf16 values, which must outlive the products.
    void assign(const float* dout, bf16* narrowed, long n);
    void assign(const bf16* dout16, long n);
    // The engine in use when it was assigned, which the products check
    // against the weight's: each reads only its own engine's copy.
    Bf16MatmulEngine engine() const { return engine_; }
    const bf16* values() const { return values_; }             // oneDNN
    const float* widened() const { return widened_.data(); }  // emulated engine

  private:
    Bf16MatmulEngine engine_ = Bf16MatmulEngine::Emulated;
    const bf16* values_ = nullptr;
    AlignedVector<float> widened_;  // grows to the largest and stays
};

// The linear layers, N rows of tokens. Their outputs and input gradients are
// bf16 tensors, left here as the fp32 sums: whoever reads them first rounds
// them, in the same pass as its own work (the _bf16 kernels of kernels.h), or
// with bf16_round_inplace where no kernel can.
// out (N, OC) = inp (N, IC) @ W^T.
void matmul_forward_bf16(float* out, const bf16* inp, const Bf16Weight& w, int N);
// The same product rounded to bf16 as it is stored, for an output whose only
// reader wants it rounded (SwiGLU's input): half the bytes written and read.
// The same bits as the fp32 sums narrowed (bf16_narrow), except that oneDNN's
// conversion (vcvtneps2bf16) flushes fp32 denormals, below 2^-126, to zero.
// The emulated engine computes the fp32 sums into a scratch it keeps and
// narrows them: there the fp32 copy remains.
void matmul_forward_bf16(bf16* out16, const bf16* inp, const Bf16Weight& w, int N);
// dinp (N, IC) = dout (N, OC) @ W.
void matmul_dinput_bf16(float* dinp, const Bf16OutputGrad& dout, const Bf16Weight& w, int N);
// The same product rounded to bf16 as it is stored, for an input gradient
// whose only reader wants it rounded (SwiGLU's backward; config M, bf16, a
// Xeon with AMX: down_proj's input gradient 20.3 -> 13.0 ms a step, SwiGLU's
// backward 20.7 -> 18.5). The fp32 sums narrowed, denormals aside, at the
// shapes hlat uses it on (K the model's width): with a K far longer than the
// output is wide, oneDNN may sum in another order when it stores bf16.
void matmul_dinput_bf16(bf16* dinp16, const Bf16OutputGrad& dout, const Bf16Weight& w, int N);
// dweight (OC, IC) = dout^T @ inp, added to what dweight holds with
// accumulate, else written over it; the sum kept in fp32.
void matmul_dweight_bf16(float* dweight, const Bf16OutputGrad& dout, const bf16* inp, int N, int IC, int OC,
                         bool accumulate);

}  // namespace hlat
