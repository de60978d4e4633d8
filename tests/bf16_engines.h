// The bf16 matmul engines a test can run on this CPU, and a scope that puts
// the process's engine and attention blocking back whatever a test set.
#pragma once

#include "trainer/model/kernels.h"
#include "trainer/model/kernels_bf16.h"

#include <vector>

namespace hlat::test {

struct EngineScope {
    Bf16MatmulEngine saved = bf16_matmul_engine();
    ~EngineScope() {
        set_bf16_matmul_engine(saved);
        set_attention_blocking(AttentionBlocking::Auto);
    }
};

// oneDNN's bf16 products need avx512_bf16; the emulated engine runs anywhere.
inline std::vector<Bf16MatmulEngine> engines_here() {
    if (__builtin_cpu_supports("avx512bf16")) return {Bf16MatmulEngine::OneDnn, Bf16MatmulEngine::Emulated};
    return {Bf16MatmulEngine::Emulated};
}

}  // namespace hlat::test
