#include "trainer/model/kernels_bf16.h"

#include "trainer/model/aligned.h"
#include "trainer/model/kernel_profile.h"
#include "trainer/model/paired_blocks.h"
#include "trainer/model/sgemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
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

WeightPacker& weight_packer() {
    static WeightPacker packer = WeightPacker::Hlat;
    return packer;
}

using dnnl::memory;

// How a matmul's B operand (K, N) lies in memory.
enum class Layout { Plain, Transposed, Packed };

memory::desc plain_bf16(int rows, int cols, bool transposed) {
    return memory::desc({rows, cols}, memory::data_type::bf16,
                        transposed ? memory::dims{1, rows} : memory::dims{cols, 1});
}

// oneDNN's packed layout as a PairedBlockLayout where it is one: two
// dimensions, blocks of (2 a) x b rows and columns with the rows paired
// inside ("BA<a>a<b>b2a"), laid out densely one after another. Any other
// layout (another CPU's, another oneDNN's) is packed by oneDNN's reorders.
std::optional<PairedBlockLayout> as_paired_blocks(const memory::desc& desc) {
    const dnnl_memory_desc_t& d = desc.data;
    if (d.ndims != 2 || d.data_type != dnnl_bf16 || d.format_kind != dnnl_blocked || d.offset0 != 0 ||
        d.extra.flags != 0)
        return std::nullopt;
    const dnnl_blocking_desc_t& b = d.format_desc.blocking;
    if (b.inner_nblks != 3 || b.inner_idxs[0] != 0 || b.inner_idxs[1] != 1 || b.inner_idxs[2] != 0 ||
        b.inner_blks[2] != 2)
        return std::nullopt;
    PairedBlockLayout l{(int)b.inner_blks[0] * 2, (int)b.inner_blks[1], b.strides[0], b.strides[1], d.padded_dims[0],
                        d.padded_dims[1]};
    if (l.padded_k % l.k_block != 0 || l.padded_n % l.n_block != 0) return std::nullopt;
    const long block = (long)l.k_block * l.n_block, k_blocks = l.padded_k / l.k_block;
    const long n_blocks = l.padded_n / l.n_block;
    const bool k_inner = l.k_stride == block && l.n_stride == k_blocks * block;
    const bool n_inner = l.n_stride == block && l.k_stride == n_blocks * block;
    if (!k_inner && !n_inner) return std::nullopt;
    if ((size_t)(k_blocks * n_blocks * block) * sizeof(bf16) != desc.get_size()) return std::nullopt;
    return l;
}

dnnl::engine& cpu_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

// oneDNN's matmul and reorder primitives are built once per shape (building
// one costs far more than running it at these sizes) and kept for the life of
// the process.
class OneDnn {
  public:
    static OneDnn& instance() {
        static OneDnn o;
        return o;
    }

    // C (M, N) = op(A) (M, K) @ B (K, N) (+ C with accumulate), B laid out as
    // `layout`; C is fp32, or bf16 (the fp32 sums rounded) with c_bf16.
    void matmul(void* C, bool c_bf16, const bf16* A, bool ta, const bf16* B, Layout layout, int M, int N, int K,
                bool accumulate) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto key = std::make_tuple(M, N, K, ta, (int)layout, accumulate, c_bf16);
        auto it = matmuls_.find(key);
        if (it == matmuls_.end()) {
            dnnl::primitive_attr attr;
            if (accumulate) {
                dnnl::post_ops ops;
                ops.append_sum(1.0f);
                attr.set_post_ops(ops);
            }
            MatmulEntry e;
            e.a = plain_bf16(M, K, ta);
            e.b = layout == Layout::Packed ? packed_layout(K, N) : plain_bf16(K, N, layout == Layout::Transposed);
            e.c = memory::desc({M, N}, c_bf16 ? memory::data_type::bf16 : memory::data_type::f32, memory::dims{N, 1});
            e.matmul = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(e.a, e.b, e.c), attr, engine_));
            it = matmuls_.emplace(key, std::move(e)).first;
        }
        MatmulEntry& e = it->second;
        memory a(e.a, engine_, const_cast<bf16*>(A)), b(e.b, engine_, const_cast<bf16*>(B)), c(e.c, engine_, C);
        e.matmul.execute(stream_, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
        stream_.wait();
    }

    // B (K, N) in the packed layout, held in `buffer` (sized here); filled
    // by pack_weight_pair, or by pack() where the layout is not paired blocks.
    memory packed(int K, int N, AlignedVector<bf16>& buffer) {
        std::lock_guard<std::mutex> lock(mutex_);
        const memory::desc layout = packed_layout(K, N);
        buffer.assign((layout.get_size() + sizeof(bf16) - 1) / sizeof(bf16), bf16{});
        return memory(layout, engine_, buffer.data());
    }
    void pack(memory& to, const bf16* from, bool transposed, int K, int N) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto key = std::make_tuple(K, N, transposed);
        auto it = reorders_.find(key);
        if (it == reorders_.end()) {
            memory::desc src = plain_bf16(K, N, transposed);
            it = reorders_.emplace(key, dnnl::reorder(dnnl::reorder::primitive_desc(engine_, src, engine_,
                                                                                     packed_layout(K, N))))
                     .first;
        }
        memory src(plain_bf16(K, N, transposed), engine_, const_cast<bf16*>(from));
        it->second.execute(stream_, src, to);
        stream_.wait();
    }

  private:
    OneDnn() : engine_(cpu_engine()), stream_(engine_) {}

    // The layout oneDNN's bf16 matmul picks for B (K, N) when left free. It
    // asks for the same one whatever M is; it is queried at a typical M of a
    // training step and then required of every M.
    memory::desc packed_layout(int K, int N) {
        auto key = std::make_pair(K, N);
        auto it = layouts_.find(key);
        if (it != layouts_.end()) return it->second;
        const int M = 2048;
        memory::desc a = plain_bf16(M, K, false), c({M, N}, memory::data_type::f32, memory::dims{N, 1});
        memory::desc any({K, N}, memory::data_type::bf16, memory::format_tag::any);
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, any, c), engine_);
        return layouts_.emplace(key, pd.weights_desc()).first->second;
    }

    struct MatmulEntry {
        memory::desc a, b, c;
        dnnl::matmul matmul;
    };
    dnnl::engine engine_;
    dnnl::stream stream_;
    std::mutex mutex_;
    std::map<std::tuple<int, int, int, bool, int, bool, bool>, MatmulEntry> matmuls_;
    std::map<std::tuple<int, int, bool>, dnnl::reorder> reorders_;
    std::map<std::pair<int, int>, memory::desc> layouts_;
};

// One thread's primitives for gemm_bf16_on_thread. Called inside a parallel
// region, oneDNN runs a primitive on the calling thread alone. Each thread
// keeps its own primitives and scratchpad, so threads share nothing and need
// no lock.
class ThreadMatmuls {
  public:
    static ThreadMatmuls& mine() {
        static thread_local ThreadMatmuls matmuls;
        return matmuls;
    }

    void run(bool ta, bool tb, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
             bool accumulate, float* C, int ldc) {
        auto key = std::make_tuple(M, N, K, ta, tb, lda, ldb, ldc, alpha, accumulate);
        auto it = cache_.find(key);
        if (it == cache_.end())
            it = cache_.emplace(key, build(ta, tb, M, N, K, alpha, lda, ldb, accumulate, ldc)).first;
        // The memory objects are kept with the primitive and pointed at this
        // call's data: making new ones costs allocations, which these small
        // products would feel (2x in attention's backward).
        Entry& e = it->second;
        e.a.set_data_handle(const_cast<bf16*>(A));
        e.b.set_data_handle(const_cast<bf16*>(B));
        e.c.set_data_handle(C);
        e.pad.set_data_handle(scratchpad_.data());
        e.matmul.execute(stream_, {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c},
                                   {DNNL_ARG_SCRATCHPAD, e.pad}});
        stream_.wait();
    }

  private:
    struct Entry {
        memory a, b, c, pad;
        dnnl::matmul matmul;
    };

    ThreadMatmuls() : stream_(cpu_engine()) {}

    Entry build(bool ta, bool tb, int M, int N, int K, float alpha, int lda, int ldb, bool accumulate, int ldc) {
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
        if (accumulate) {
            dnnl::post_ops ops;
            ops.append_sum(1.0f);
            attr.set_post_ops(ops);
        }
        // Strides of the stored matrices: op(X) = X^T reads X's rows as columns.
        memory::desc a({M, K}, memory::data_type::bf16, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
        memory::desc b({K, N}, memory::data_type::bf16, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
        memory::desc c({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
        if (scratchpad_.size() < pd.scratchpad_desc().get_size()) scratchpad_.resize(pd.scratchpad_desc().get_size());
        Entry e;
        e.a = memory(a, cpu_engine(), DNNL_MEMORY_NONE);
        e.b = memory(b, cpu_engine(), DNNL_MEMORY_NONE);
        e.c = memory(c, cpu_engine(), DNNL_MEMORY_NONE);
        e.pad = memory(pd.scratchpad_desc(), cpu_engine(), DNNL_MEMORY_NONE);
        e.matmul = dnnl::matmul(pd);
        return e;
    }

    dnnl::stream stream_;
    std::vector<uint8_t> scratchpad_;
    std::map<std::tuple<int, int, int, bool, bool, int, int, int, float, bool>, Entry> cache_;
};

// Scratch for the widened operands of the emulated engine and for a weight
// being packed; grows to the largest and stays.
struct Scratch {
    AlignedVector<float> wa, wb;
    AlignedVector<float> sums;   // a product's fp32 sums on their way to bf16
    AlignedVector<bf16> narrowed;  // a weight on its way to being packed
};

Scratch& scratch() {
    static thread_local Scratch s;
    return s;
}

}  // namespace

Bf16MatmulEngine bf16_matmul_engine() { return engine_choice(); }
void set_bf16_matmul_engine(Bf16MatmulEngine engine) { engine_choice() = engine; }
void set_weight_packer(WeightPacker packer) { weight_packer() = packer; }
bool bf16_engine_uses_amx() {
    return engine_choice() == Bf16MatmulEngine::OneDnn && dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
}

std::string bf16_matmul_engine_name() {
    if (engine_choice() == Bf16MatmulEngine::Emulated) return "emulated (bf16 widened, sgemm)";
    return bf16_engine_uses_amx() ? "oneDNN AMX" : "oneDNN avx512_bf16";
}

double bf16_engine_peak_gflops(double fp32_fma_peak, double bf16_dot_peak, double amx_peak) {
    if (engine_choice() == Bf16MatmulEngine::Emulated) return fp32_fma_peak;
    return bf16_engine_uses_amx() && amx_peak > 0 ? amx_peak : bf16_dot_peak;
}

void bf16_widen(float* out, const bf16* in, long n) {
#pragma omp parallel for simd
    for (long i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
}

void bf16_narrow(bf16* out, const float* in, long n) {
#pragma omp parallel for simd
    for (long i = 0; i < n; i++) out[i] = float_to_bf16_rne(in[i]);
}

void bf16_round_inplace(float* x, long n) {
#pragma omp parallel for simd
    for (long i = 0; i < n; i++) x[i] = bf16_to_float(float_to_bf16_rne(x[i]));
}

// x rounded to bf16 values, kept in fp32.
static void bf16_round(float* out, const float* x, long n) {
#pragma omp parallel for simd
    for (long i = 0; i < n; i++) out[i] = bf16_to_float(float_to_bf16_rne(x[i]));
}

// C (M, N) = A (M, K) @ op(B) on the emulated engine, B already widened (a
// weight): only A is widened here.
static void emulated_gemm(float* C, const bf16* A, const float* B, int M, int N, int K, bool trans_b) {
    Scratch& s = scratch();
    const long na = (long)M * K;
    if ((long)s.wa.size() < na) s.wa.resize(na);
    {
        KernelScope scope("widen to fp32 (emulated bf16)", 6.0 * na);
        bf16_widen(s.wa.data(), A, na);
    }
    sgemm(false, trans_b, M, N, K, 1.0f, s.wa.data(), K, B, trans_b ? K : N, 0.0f, C, N);
}

void gemm_bf16(float* C, const bf16* A, const bf16* B, int M, int N, int K, bool trans_a, bool trans_b,
               bool accumulate) {
    if (engine_choice() == Bf16MatmulEngine::OneDnn) {
        OneDnn::instance().matmul(C, false, A, trans_a, B, trans_b ? Layout::Transposed : Layout::Plain, M, N, K,
                                  accumulate);
        flip_bit_if_injected(C);
        return;
    }
    Scratch& s = scratch();
    long na = (long)M * K, nb = (long)K * N;
    if ((long)s.wa.size() < na) s.wa.resize(na);
    if ((long)s.wb.size() < nb) s.wb.resize(nb);
    {
        KernelScope scope("widen to fp32 (emulated bf16)", 6.0 * (na + nb));
        bf16_widen(s.wa.data(), A, na);
        bf16_widen(s.wb.data(), B, nb);
    }
    sgemm(trans_a, trans_b, M, N, K, 1.0f, s.wa.data(), trans_a ? M : K, s.wb.data(), trans_b ? K : N,
          accumulate ? 1.0f : 0.0f, C, N);
}

// The rows x cols matrix at in (leading dimension ld), widened into out, packed.
static void widen_matrix(float* out, const bf16* in, int rows, int cols, int ld) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) out[(long)i * cols + j] = bf16_to_float(in[(long)i * ld + j]);
}

void gemm_bf16_on_thread(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                         const bf16* B, int ldb, bool accumulate, float* C, int ldc) {
    if (engine_choice() == Bf16MatmulEngine::OneDnn) {
        ThreadMatmuls::mine().run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc);
        flip_bit_if_injected(C);
        return;
    }
    Scratch& s = scratch();
    int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K, b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    if ((long)s.wa.size() < (long)a_rows * a_cols) s.wa.resize((long)a_rows * a_cols);
    if ((long)s.wb.size() < (long)b_rows * b_cols) s.wb.resize((long)b_rows * b_cols);
    widen_matrix(s.wa.data(), A, a_rows, a_cols, lda);
    widen_matrix(s.wb.data(), B, b_rows, b_cols, ldb);
    sgemm(trans_a, trans_b, M, N, K, alpha, s.wa.data(), a_cols, s.wb.data(), b_cols, accumulate ? 1.0f : 0.0f, C,
          ldc);
}

struct Bf16Weight::Storage {
    Bf16MatmulEngine engine;
    // The emulated engine's W (OC, IC): its bf16 values widened once per
    // optimizer step, as every sgemm it feeds would widen them again.
    AlignedVector<float> widened;
    // oneDNN's: W^T (IC, OC) and W (OC, IC), packed, in buffers of hlat's
    // own: on huge pages, as oneDNN's allocations are not (see Bf16Weight).
    AlignedVector<bf16> transposed_buffer, natural_buffer;
    dnnl::memory transposed, natural;
    // Their layouts, where hlat packs them itself (pack_weight_pair).
    std::optional<PairedBlockLayout> transposed_layout, natural_layout;
};

Bf16Weight::Bf16Weight(int out_features, int in_features)
    : out_(out_features), in_(in_features), storage_(std::make_unique<Storage>()) {
    storage_->engine = engine_choice();
    if (storage_->engine == Bf16MatmulEngine::Emulated) {
        storage_->widened.assign((long)out_ * in_, 0.0f);
        return;
    }
    storage_->transposed = OneDnn::instance().packed(in_, out_, storage_->transposed_buffer);
    storage_->natural = OneDnn::instance().packed(out_, in_, storage_->natural_buffer);
    storage_->transposed_layout = as_paired_blocks(storage_->transposed.get_desc());
    storage_->natural_layout = as_paired_blocks(storage_->natural.get_desc());
}

Bf16Weight::~Bf16Weight() = default;
Bf16Weight::Bf16Weight(Bf16Weight&&) noexcept = default;
Bf16Weight& Bf16Weight::operator=(Bf16Weight&&) noexcept = default;

long Bf16Weight::bytes() const {
    if (storage_->engine == Bf16MatmulEngine::Emulated) return (long)storage_->widened.size() * sizeof(float);
    return (long)(storage_->transposed.get_desc().get_size() + storage_->natural.get_desc().get_size());
}

void Bf16Weight::assign(const float* w) {
    const long n = (long)out_ * in_;
    if (storage_->engine == Bf16MatmulEngine::Emulated) return bf16_round(storage_->widened.data(), w, n);
    const Storage& s = *storage_;
    if (s.transposed_layout && s.natural_layout && weight_packer() == WeightPacker::Hlat)
        return pack_weight_pair(static_cast<bf16*>(s.transposed.get_data_handle()), *s.transposed_layout,
                                static_cast<bf16*>(s.natural.get_data_handle()), *s.natural_layout, w, out_, in_);
    // Narrowed once into scratch, then packed twice.
    AlignedVector<bf16>& narrowed = scratch().narrowed;
    if ((long)narrowed.size() < n) narrowed.resize(n);
    bf16_narrow(narrowed.data(), w, n);
    OneDnn::instance().pack(storage_->transposed, narrowed.data(), true, in_, out_);
    OneDnn::instance().pack(storage_->natural, narrowed.data(), false, out_, in_);
}

void matmul_forward_bf16(float* out, const bf16* inp, const Bf16Weight& w, int N) {
    const Bf16Weight::Storage& s = w.storage();
    if (s.engine == Bf16MatmulEngine::Emulated)
        return emulated_gemm(out, inp, s.widened.data(), N, w.out_features(), w.in_features(), true);
    OneDnn::instance().matmul(out, false, inp, false, static_cast<const bf16*>(s.transposed.get_data_handle()),
                              Layout::Packed, N, w.out_features(), w.in_features(), false);
    flip_bit_if_injected(out);
}

// A product stored in bf16 where oneDNN does not store it (the emulated
// engine): its n fp32 sums into scratch, then narrowed into out16.
template <typename Product>
static void narrowed_product(bf16* out16, long n, const Product& product) {
    AlignedVector<float>& sums = scratch().sums;
    if ((long)sums.size() < n) sums.resize(n);
    product(sums.data());
    bf16_narrow(out16, sums.data(), n);
}

void matmul_forward_bf16(bf16* out16, const bf16* inp, const Bf16Weight& w, int N) {
    const Bf16Weight::Storage& s = w.storage();
    const long n = (long)N * w.out_features();
    if (s.engine == Bf16MatmulEngine::Emulated)
        return narrowed_product(out16, n, [&](float* sums) { matmul_forward_bf16(sums, inp, w, N); });
    OneDnn::instance().matmul(out16, true, inp, false, static_cast<const bf16*>(s.transposed.get_data_handle()),
                              Layout::Packed, N, w.out_features(), w.in_features(), false);
    flip_bit_if_injected(out16);
}

void Bf16OutputGrad::assign(const float* dout, bf16* narrowed, long n) {
    engine_ = engine_choice();
    // On the emulated engine: fp32 read, the bf16 value written as fp32.
    KernelScope scope("narrow to bf16", (engine_ == Bf16MatmulEngine::Emulated ? 8.0 : 6.0) * n);
    if (engine_ == Bf16MatmulEngine::OneDnn) {
        bf16_narrow(narrowed, dout, n);
        values_ = narrowed;
        return;
    }
    if ((long)widened_.size() < n) widened_.resize(n);
    bf16_round(widened_.data(), dout, n);
    values_ = nullptr;
}

void Bf16OutputGrad::assign(const bf16* dout16, long n) {
    engine_ = engine_choice();
    values_ = dout16;
    if (engine_ == Bf16MatmulEngine::OneDnn) return;
    if ((long)widened_.size() < n) widened_.resize(n);
    KernelScope scope("widen to fp32 (emulated bf16)", 6.0 * n);
    bf16_widen(widened_.data(), dout16, n);
}

void matmul_dinput_bf16(float* dinp, const Bf16OutputGrad& dout, const Bf16Weight& w, int N) {
    const Bf16Weight::Storage& s = w.storage();
    const int IC = w.in_features(), OC = w.out_features();
    if (dout.engine() != s.engine)
        throw std::logic_error("matmul_dinput_bf16: output gradient and weight made for different engines");
    if (s.engine == Bf16MatmulEngine::Emulated)
        return sgemm(false, false, N, IC, OC, 1.0f, dout.widened(), OC, s.widened.data(), IC, 0.0f, dinp, IC);
    OneDnn::instance().matmul(dinp, false, dout.values(), false, static_cast<const bf16*>(s.natural.get_data_handle()),
                              Layout::Packed, N, IC, OC, false);
    flip_bit_if_injected(dinp);
}

void matmul_dinput_bf16(bf16* dinp16, const Bf16OutputGrad& dout, const Bf16Weight& w, int N) {
    const Bf16Weight::Storage& s = w.storage();
    const long n = (long)N * w.in_features();
    if (s.engine == Bf16MatmulEngine::Emulated || dout.engine() != s.engine)  // the fp32 product throws on the latter
        return narrowed_product(dinp16, n, [&](float* sums) { matmul_dinput_bf16(sums, dout, w, N); });
    OneDnn::instance().matmul(dinp16, true, dout.values(), false, static_cast<const bf16*>(s.natural.get_data_handle()),
                              Layout::Packed, N, w.in_features(), w.out_features(), false);
    flip_bit_if_injected(dinp16);
}

// dweight (OC, IC) = dout^T (OC, N) @ inp (N, IC): on the emulated engine only
// inp is widened here.
void matmul_dweight_bf16(float* dweight, const Bf16OutputGrad& dout, const bf16* inp, int N, int IC, int OC,
                         bool accumulate) {
    if (dout.engine() == Bf16MatmulEngine::OneDnn)  // bf16 values, which gemm_bf16 reads on either engine
        return gemm_bf16(dweight, dout.values(), inp, OC, IC, N, true, false, accumulate);
    Scratch& s = scratch();
    const long nb = (long)N * IC;
    if ((long)s.wb.size() < nb) s.wb.resize(nb);
    {
        KernelScope scope("widen to fp32 (emulated bf16)", 6.0 * nb);
        bf16_widen(s.wb.data(), inp, nb);
    }
    sgemm(true, false, OC, IC, N, 1.0f, dout.widened(), OC, s.wb.data(), IC, accumulate ? 1.0f : 0.0f, dweight, IC);
}

}  // namespace hlat
