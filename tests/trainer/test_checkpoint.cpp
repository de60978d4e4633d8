// Checkpoints: atomic folders with hashes, skipping damaged ones, keeping the
// newest K, and restoring model and optimizer exactly.
#include "test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config.h"
#include "trainer/files/safetensors.h"
#include "trainer/run/step_hook.h"

#include <filesystem>
#include <fstream>

namespace hlat {
namespace {

namespace fs = std::filesystem;

struct Fixture {
    test::ScratchDir dir{"checkpoint"};
    TrainConfig config;
    std::unique_ptr<Model> model;
    std::unique_ptr<AdamW> optimizer;
    explicit Fixture(bool qk_norm = false) {
        config.model = {};
        config.model.qk_norm = qk_norm;
        config.model.vocab_size = 40;
        config.model.dim = 16;
        config.model.n_layers = 2;
        config.model.n_heads = 2;
        config.model.n_kv_heads = 1;
        config.model.hidden_dim = 24;
        config.model.max_seq_len = 8;
        model = std::make_unique<Model>(config.model, 1, 8, false);
        model->init_weights(3);
        optimizer = std::make_unique<AdamW>(config.optimizer, model->num_parameters());
        for (long i = 0; i < model->num_parameters(); i++) {
            optimizer->first_moment().f32()[i] = 0.001f * i;
            optimizer->second_moment().f32()[i] = 0.002f * i;
        }
        optimizer->set_steps_taken(17);
    }
    std::string save(int step) {
        CheckpointState s;
        s.step = step;
        s.tokens_seen = step * 8L;
        s.config = config_to_json(config);
        s.loader = LoaderState{2, 5, {7, 8, 9}, {{4, 0, 3}}};
        s.corpus_fingerprint = "corpus";
        s.tokenizer_fingerprint = "tok";
        return save_checkpoint(dir.path().string(), *model, *optimizer, s, "", 3);
    }
};

TEST(Checkpoint, RoundTripsModelOptimizerAndState) {
    Fixture f;
    std::string path = f.save(17);
    EXPECT_EQ(fs::path(path).filename(), "step_00000017");
    verify_checkpoint(path);
    CheckpointState st = read_checkpoint_state(path);
    EXPECT_EQ(st.step, 17);
    EXPECT_EQ(st.tokens_seen, 136);
    ASSERT_TRUE(st.loader.has_value());
    EXPECT_EQ(*st.loader, (LoaderState{2, 5, {7, 8, 9}, {{4, 0, 3}}}));
    EXPECT_EQ(st.corpus_fingerprint, "corpus");

    Model m2(f.config.model, 1, 8, false);
    AdamW o2(f.config.optimizer, m2.num_parameters());
    load_checkpoint(path, m2, o2);
    EXPECT_TRUE(std::equal(m2.params(), m2.params() + m2.num_parameters(), f.model->params()));
    EXPECT_EQ(o2.first_moment().to_float(), f.optimizer->first_moment().to_float());
    EXPECT_EQ(o2.second_moment().to_float(), f.optimizer->second_moment().to_float());
    EXPECT_EQ(o2.steps_taken(), 17);
    for (const auto& e : fs::directory_iterator(f.dir.path() / "checkpoints"))
        EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "no temporary folder left";
}

// A qk-norm model's gains (q_norm, k_norm: HD per layer) are parameters like
// any other: saved, hashed, restored with their Adam moments. Models without
// qk-norm keep the layout every checkpoint before it was written in.
TEST(Checkpoint, QkNormGainsRoundTripAndOtherModelsKeepTheirLayout) {
    Fixture plain;
    const ModelConfig& m = plain.config.model;
    const long V = m.vocab_size, C = m.dim, L = m.n_layers, H = m.hidden_dim, HD = m.head_dim();
    const long before = V * C + L * C + L * m.qkv_dim() * C + L * C * m.n_heads * HD + L * C + L * 2 * H * C +
                        L * C * H + C + V * C;
    EXPECT_EQ(plain.model->num_parameters(), before);
    std::vector<std::string> kinds;
    for (const TensorKind& k : plain.model->tensor_kinds()) kinds.push_back(k.name);
    EXPECT_EQ(kinds, (std::vector<std::string>{"embed_tokens", "input_layernorm", "qkv_proj", "o_proj",
                                                "post_attention_layernorm", "gate_up_proj", "down_proj", "norm",
                                                "lm_head"}));
    EXPECT_EQ(plain.model->param_tensors().q_norm, nullptr);
    std::string plain_path = plain.save(5);
    for (const std::string& name : SafetensorsFile(plain_path + "/model.safetensors").names())
        EXPECT_EQ(name.find("_norm.weight") != std::string::npos && name.find("self_attn") != std::string::npos,
                  false)
            << name;

    Fixture f(/*qk_norm=*/true);
    EXPECT_EQ(f.model->num_parameters(), before + 2 * L * HD);
    for (const TensorKind& k : f.model->tensor_kinds())
        if (k.name == "q_norm" || k.name == "k_norm") {
            EXPECT_TRUE(k.replicated && k.norm_or_embedding) << k.name;
            EXPECT_EQ(k.numel(), L * HD) << k.name;
        }
    // Gains away from their initial ones, so that a restore that skipped them shows.
    for (long i = 0; i < L * HD; i++) {
        f.model->param_tensors().q_norm[i] = 1.0f + 0.01f * i;
        f.model->param_tensors().k_norm[i] = 2.0f - 0.01f * i;
    }
    std::string path = f.save(9);
    verify_checkpoint(path);
    SafetensorsFile weights(path + "/model.safetensors");
    EXPECT_EQ(weights.shape("model.layers.1.self_attn.q_norm.weight"), (std::vector<int64_t>{HD}));
    EXPECT_EQ(weights.shape("model.layers.0.self_attn.k_norm.weight"), (std::vector<int64_t>{HD}));

    Model m2(f.config.model, 1, 8, false);
    AdamW o2(f.config.optimizer, m2.num_parameters());
    load_checkpoint(path, m2, o2);
    EXPECT_TRUE(std::equal(m2.params(), m2.params() + m2.num_parameters(), f.model->params()));
    EXPECT_EQ(o2.first_moment().to_float(), f.optimizer->first_moment().to_float());
    EXPECT_EQ(m2.param_tensors().k_norm[3], f.model->param_tensors().k_norm[3]);
    EXPECT_NE(m2.param_tensors().k_norm[3], 1.0f);

    // Into a model without qk-norm the checkpoint does not load, and says why.
    Model other(plain.config.model, 1, 8, false);
    AdamW o3(plain.config.optimizer, other.num_parameters());
    try {
        load_checkpoint(path, other, o3);
        ADD_FAILURE() << "a qk-norm checkpoint loaded into a model without qk-norm";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("unexpected tensor model.layers.0.self_attn."), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("_norm.weight"), std::string::npos) << e.what();
    }
}

TEST(Checkpoint, KeepsTheNewestK) {
    Fixture f;
    for (int step : {10, 20, 30, 40, 50}) f.save(step);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(f.dir.path() / "checkpoints")) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"step_00000030", "step_00000040", "step_00000050"}));
}

TEST(Checkpoint, DamagedCheckpointsAreSkippedForThePreviousGoodOne) {
    Fixture f;
    f.save(10);
    f.save(20);
    std::string newest = f.save(30);
    // Flip one byte of the newest weights: the hash no longer matches.
    {
        std::fstream w(newest + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        w.seekp(100);
        w.put('\x42');
    }
    std::vector<std::string> skipped;
    auto good = latest_good_checkpoint(f.dir.path().string(), &skipped);
    ASSERT_TRUE(good.has_value());
    EXPECT_EQ(fs::path(*good).filename(), "step_00000020");
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_NE(skipped[0].find("model.safetensors does not match its sha256"), std::string::npos) << skipped[0];

    // A missing file and a missing manifest are skipped the same way.
    fs::remove(fs::path(*good) / "optimizer.safetensors");
    fs::remove(f.dir.path() / "checkpoints/step_00000010/manifest.json");
    skipped.clear();
    EXPECT_FALSE(latest_good_checkpoint(f.dir.path().string(), &skipped).has_value());
    ASSERT_EQ(skipped.size(), 3u);
    EXPECT_NE(skipped[1].find("optimizer.safetensors is missing"), std::string::npos) << skipped[1];
    EXPECT_NE(skipped[2].find("no readable manifest"), std::string::npos) << skipped[2];
}

TEST(Checkpoint, HalfWrittenFolderIsIgnored) {
    Fixture f;
    f.save(10);
    fs::create_directories(f.dir.path() / "checkpoints/step_00000020.tmp-999");
    std::vector<std::string> skipped;
    auto good = latest_good_checkpoint(f.dir.path().string(), &skipped);
    ASSERT_TRUE(good.has_value());
    EXPECT_EQ(fs::path(*good).filename(), "step_00000010");
    EXPECT_TRUE(skipped.empty());
}

}  // namespace
}  // namespace hlat

namespace hlat {
namespace {

// A hook whose state a checkpoint keeps, renamed since older checkpoints were written.
struct RenamedHook : StepHook {
    const char* name() const override { return "session"; }
    const char* former_name() const override { return "detectors"; }
    nlohmann::json state() const override { return kept; }
    void restore(const nlohmann::json& state) override { kept = state; }
    nlohmann::json kept;
};

// The detectors' windows of a checkpoint written before the session hook
// took its name ("detectors") still come back on resume.
TEST(Checkpoint, HookStateUnderAFormerNameIsRestored) {
    StepHooks hooks;
    auto hook = std::make_shared<RenamedHook>();
    hooks.add(hook);
    hooks.restore({{"detectors", {{"grad_spike", 1}}}});
    EXPECT_EQ(hook->kept, (nlohmann::json{{"grad_spike", 1}}));
    hooks.restore({{"session", 2}, {"detectors", 3}});
    EXPECT_EQ(hook->kept, 2) << "the current name wins";
    EXPECT_EQ(hooks.state(), (nlohmann::json{{"session", 2}}));
}

}  // namespace
}  // namespace hlat
