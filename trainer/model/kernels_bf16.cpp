#include "trainer/model/kernels_bf16.h"

#include "trainer/model/sgemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace hlat {
namespace {

Bf16MatmulEngine detect_engine() {
    const char* forced = std::getenv("HLAT_BF16_MATMUL");
    if (forced && *forced) {
        if (std::strcmp(forced, "emulated") == 0) return Bf16MatmulEngine::Emulated;
        throw std::runtime_error(std::string("HLAT_BF16_MATMUL is \"") + forced +
                                 "\"; the only value it takes is \"emulated\" (unset: the CPU decides)");
    }
    return __builtin_cpu_supports("avx512bf16") ? Bf16MatmulEngine::OneDnn : Bf16MatmulEngine::Emulated;
}

Bf16MatmulEngine& engine_choice() {
    static Bf16MatmulEngine engine = detect_engine();
    return engine;
}

void widen(float* out, const bf16* in, long n) {
#pragma omp parallel for simd
    for (long i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
}

// oneDNN matmul primitives are built once per shape (building one costs far
// more than running it at these sizes) and kept for the life of the process.
class OneDnnMatmuls {
  public:
    OneDnnMatmuls() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

    void run(float* C, const bf16* A, const bf16* B, int M, int N, int K, bool ta, bool tb, bool accumulate) {
        using dnnl::memory;
        std::lock_guard<std::mutex> lock(mutex_);
        auto key = std::make_tuple(M, N, K, ta, tb, accumulate);
        auto it = cache_.find(key);
        if (it == cache_.end()) {
            dnnl::primitive_attr attr;
            if (accumulate) {
                dnnl::post_ops ops;
                ops.append_sum(1.0f);
                attr.set_post_ops(ops);
            }
            Entry e;
            e.a = memory::desc({M, K}, memory::data_type::bf16, ta ? memory::dims{1, M} : memory::dims{K, 1});
            e.b = memory::desc({K, N}, memory::data_type::bf16, tb ? memory::dims{1, K} : memory::dims{N, 1});
            e.c = memory::desc({M, N}, memory::data_type::f32, memory::dims{N, 1});
            e.matmul = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(e.a, e.b, e.c), attr, engine_));
            it = cache_.emplace(key, std::move(e)).first;
        }
        Entry& e = it->second;
        memory a(e.a, engine_, const_cast<bf16*>(A)), b(e.b, engine_, const_cast<bf16*>(B)), c(e.c, engine_, C);
        e.matmul.execute(stream_, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
        stream_.wait();
    }

  private:
    struct Entry {
        dnnl::memory::desc a, b, c;
        dnnl::matmul matmul;
    };
    dnnl::engine engine_;
    dnnl::stream stream_;
    std::mutex mutex_;
    std::map<std::tuple<int, int, int, bool, bool, bool>, Entry> cache_;
};

// Scratch for the widened operands of the emulated engine; grows to the
// largest matmul and stays.
struct Scratch {
    std::vector<float> wa, wb;
};

Scratch& scratch() {
    static thread_local Scratch s;
    return s;
}

}  // namespace

Bf16MatmulEngine bf16_matmul_engine() { return engine_choice(); }
void set_bf16_matmul_engine(Bf16MatmulEngine engine) { engine_choice() = engine; }
std::string bf16_matmul_engine_name() {
    return engine_choice() == Bf16MatmulEngine::OneDnn ? "oneDNN avx512_bf16" : "emulated (bf16 widened, sgemm)";
}

void bf16_narrow(bf16* out, const float* in, long n) {
#pragma omp parallel for simd
    for (long i = 0; i < n; i++) out[i] = float_to_bf16_rne(in[i]);
}

void bf16_round_inplace(float* x, long n) {
#pragma omp parallel for simd
    for (long i = 0; i < n; i++) x[i] = bf16_to_float(float_to_bf16_rne(x[i]));
}

void gemm_bf16(float* C, const bf16* A, const bf16* B, int M, int N, int K, bool trans_a, bool trans_b,
               bool accumulate) {
    if (engine_choice() == Bf16MatmulEngine::OneDnn) {
        static OneDnnMatmuls matmuls;
        matmuls.run(C, A, B, M, N, K, trans_a, trans_b, accumulate);
        flip_bit_if_injected(C);
        return;
    }
    Scratch& s = scratch();
    long na = (long)M * K, nb = (long)K * N;
    if ((long)s.wa.size() < na) s.wa.resize(na);
    if ((long)s.wb.size() < nb) s.wb.resize(nb);
    widen(s.wa.data(), A, na);
    widen(s.wb.data(), B, nb);
    sgemm(trans_a, trans_b, M, N, K, 1.0f, s.wa.data(), trans_a ? M : K, s.wb.data(), trans_b ? K : N,
          accumulate ? 1.0f : 0.0f, C, N);
}

void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, int N, int IC, int OC) {
    gemm_bf16(out, inp, weight, N, OC, IC, false, true, false);
}

void matmul_backward_bf16(float* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                          int N, int IC, int OC) {
    gemm_bf16(dinp, dout, weight, N, IC, OC, false, false, false);
    gemm_bf16(dweight, dout, inp, OC, IC, N, true, false, true);
}

}  // namespace hlat
