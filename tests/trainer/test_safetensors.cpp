#include "test_util.h"
#include "trainer/files/file_io.h"
#include "trainer/model/model.h"
#include "trainer/files/safetensors.h"
#include "trainer/model/weights.h"

#include <fstream>

namespace hlat {
namespace {

ModelConfig tiny() {
    ModelConfig m;
    m.vocab_size = 11;
    m.dim = 8;
    m.n_layers = 2;
    m.n_heads = 2;
    m.n_kv_heads = 1;
    m.hidden_dim = 12;
    m.max_seq_len = 4;
    return m;
}

TEST(Weights, SaveLoadRoundTripAndNames) {
    test::ScratchDir dir("weights");
    Model a(tiny(), 1, 4, false), b(tiny(), 1, 4, false);
    a.init_weights(1);
    save_weights(a, dir.file("w.safetensors"), false, {{"step", "3"}});
    load_weights(b, dir.file("w.safetensors"));
    EXPECT_TRUE(std::equal(a.params(), a.params() + a.num_parameters(), b.params()));
    SafetensorsFile f(dir.file("w.safetensors"));
    EXPECT_EQ(f.metadata().at("step"), "3");
    EXPECT_EQ(f.shape("model.layers.1.self_attn.qkv_proj.weight"), (std::vector<int64_t>{16, 8}));
    EXPECT_EQ(f.shape("model.layers.0.mlp.gate_up_proj.weight"), (std::vector<int64_t>{24, 8}));
    EXPECT_EQ(f.shape("model.norm.weight"), (std::vector<int64_t>{8}));
    EXPECT_TRUE(f.contains("lm_head.weight"));
    EXPECT_EQ(f.names().size(), 2u + 6u * 2u + 1u);
}

TEST(Weights, ScaledInitShrinksOutputProjections) {
    ModelConfig m = tiny();
    m.dim = 64;
    m.hidden_dim = 128;
    m.n_layers = 4;
    Model model(m, 1, 4, false);
    model.init_weights(5);
    const TensorKind* down = nullptr;
    for (auto& k : model.tensor_kinds()) if (k.name == "down_proj") down = &k;
    ASSERT_NE(down, nullptr);
    long per_layer = down->rows * down->cols;
    for (int l = 0; l < 4; l++) {
        const float* w = model.params() + down->offset + l * per_layer;
        double ss = 0.0;
        for (long i = 0; i < per_layer; i++) ss += (double)w[i] * w[i];
        double std = std::sqrt(ss / per_layer);
        EXPECT_NEAR(std, 0.02 / std::sqrt(2.0 * (l + 1)), 0.002) << "layer " << l;
    }
}

TEST(Weights, MismatchedModelIsNamed) {
    test::ScratchDir dir("weights_mismatch");
    Model a(tiny(), 1, 4, false);
    save_weights(a, dir.file("w.safetensors"));
    ModelConfig other = tiny();
    other.hidden_dim = 16;
    Model b(other, 1, 4, false);
    try {
        load_weights(b, dir.file("w.safetensors"));
        FAIL() << "expected a shape error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("gate_up_proj"), std::string::npos) << e.what();
    }
    ModelConfig deeper = tiny();
    deeper.n_layers = 3;
    Model c(deeper, 1, 4, false);
    EXPECT_THROW(load_weights(c, dir.file("w.safetensors")), std::runtime_error);
}

TEST(Safetensors, CorruptFilesAreRefusedWithReason) {
    test::ScratchDir dir("corrupt");
    Model a(tiny(), 1, 4, false);
    save_weights(a, dir.file("w.safetensors"));
    std::vector<char> bytes = read_file(dir.file("w.safetensors"));

    auto expect_refused = [&](const std::vector<char>& data, const std::string& why) {
        std::ofstream(dir.file("bad.safetensors"), std::ios::binary).write(data.data(), data.size());
        try {
            SafetensorsFile f(dir.file("bad.safetensors"));
            FAIL() << "accepted a file with " << why;
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find("not a valid safetensors file"), std::string::npos)
                << e.what();
        }
    };
    expect_refused(std::vector<char>(bytes.begin(), bytes.begin() + bytes.size() / 2), "truncated data");
    expect_refused(std::vector<char>(bytes.begin(), bytes.begin() + 5), "no header length");
    auto garbled = bytes;
    garbled[8] = '!';  // the header's opening brace
    expect_refused(garbled, "a broken header");
    EXPECT_THROW(SafetensorsFile(dir.file("missing.safetensors")), std::runtime_error);
}

}  // namespace
}  // namespace hlat
