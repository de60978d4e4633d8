#include "trainer/model/weights.h"

#include "trainer/files/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace hlat {
namespace {

struct NamedSlice {
    std::string name;
    std::vector<int64_t> shape;
    long offset;  // into the flat parameter buffer
};

std::string hf_name(const TensorKind& k, int layer) {
    if (!k.layers) return k.name == "lm_head" ? "lm_head.weight" : "model." + k.name + ".weight";
    const bool attention = k.name == "qkv_proj" || k.name == "q_norm" || k.name == "k_norm" || k.name == "o_proj";
    const char* block = attention ? "self_attn." : (k.name == "gate_up_proj" || k.name == "down_proj") ? "mlp." : "";
    return fmt::format("model.layers.{}.{}{}.weight", layer, block, k.name);
}

std::vector<NamedSlice> named_slices(const Model& model) {
    std::vector<NamedSlice> out;
    for (const TensorKind& k : model.tensor_kinds()) {
        std::vector<int64_t> shape = {k.rows};
        if (k.cols > 1) shape.push_back(k.cols);
        for (int l = 0; l < (k.layers ? k.layers : 1); l++)
            out.push_back({hf_name(k, l), shape, k.offset + l * k.rows * k.cols});
    }
    return out;
}

}  // namespace

void save_weights(const Model& model, const std::string& path, bool grads,
                  const std::map<std::string, std::string>& metadata) {
    const float* base = grads ? model.grads() : model.params();
    std::vector<TensorOut> tensors;
    for (const NamedSlice& s : named_slices(model)) tensors.push_back({s.name, s.shape, base + s.offset});
    save_safetensors(path, tensors, metadata);
}

void load_weights(Model& model, const std::string& path) {
    SafetensorsFile file(path);
    std::vector<NamedSlice> slices = named_slices(model);
    std::set<std::string> expected;
    for (const NamedSlice& s : slices) expected.insert(s.name);
    for (const std::string& name : file.names())
        if (!expected.count(name))
            throw std::runtime_error(fmt::format(
                "{}: unexpected tensor {} (does the file match the model config?)", path, name));
    std::vector<float> staged(model.num_parameters());
    for (const NamedSlice& s : slices) {
        if (!file.contains(s.name)) throw std::runtime_error(fmt::format("{}: missing tensor {}", path, s.name));
        file.read(s.name, s.shape, staged.data() + s.offset);
    }
    std::copy(staged.begin(), staged.end(), model.params());
}

}  // namespace hlat
