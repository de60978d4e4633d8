// The whole model against the PyTorch reference (tests/reference, float64):
// the same weights and batches go into both; the loss, every gradient tensor
// and the losses of 10 AdamW steps with clipping and the schedule must agree.
// Each comparison prints its error so a failure says where.
#include "test_util.h"
#include "trainer/safetensors.h"
#include "trainer/trainer.h"
#include "trainer/weights.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

namespace hlat {
namespace {

constexpr int kSteps = 10;

TrainConfig parity_config(bool gqa, bool checkpointing) {
    TrainConfig c;
    c.model.vocab_size = 97;
    c.model.dim = 64;
    c.model.n_layers = 2;
    c.model.n_heads = 4;
    c.model.n_kv_heads = gqa ? 2 : 4;
    c.model.hidden_dim = 96;
    c.model.max_seq_len = 80;
    c.model.rope_theta = 500.0;  // a small theta makes every rotation frequency matter at T = 80
    c.optimizer.grad_clip = 1.0;
    c.optimizer.decay_norms_and_embeddings = !gqa;  // cover both weight-decay groupings
    c.schedule = {3e-3, 3e-4, 3, kSteps};
    c.run.batch_size = 2;
    c.run.seq_len = 80;  // > 64: the attention blocking is exercised
    c.run.grad_accum = 2;
    c.run.activation_checkpointing = checkpointing;
    c.run.seed = 7;
    return c;
}

// Token streams with structure to learn (a noisy affine recurrence), so the
// loss moves visibly over 10 steps. Layout (steps, accum, 2, B, T).
std::vector<int32_t> make_tokens(const TrainConfig& c) {
    const int B = c.run.batch_size, T = c.run.seq_len, V = c.model.vocab_size;
    std::mt19937 rng(99);
    std::vector<int32_t> out;
    for (int s = 0; s < kSteps * c.run.grad_accum; s++) {
        std::vector<int32_t> inputs, targets;
        for (int b = 0; b < B; b++) {
            int tok = rng() % V;
            std::vector<int32_t> seq;
            for (int t = 0; t <= T; t++) {
                seq.push_back(tok);
                tok = (rng() % 4 == 0) ? (int)(rng() % V) : (tok * 5 + 3) % V;
            }
            inputs.insert(inputs.end(), seq.begin(), seq.end() - 1);
            targets.insert(targets.end(), seq.begin() + 1, seq.end());
        }
        out.insert(out.end(), inputs.begin(), inputs.end());
        out.insert(out.end(), targets.begin(), targets.end());
    }
    return out;
}

class ReplayBatches : public BatchSource {
  public:
    explicit ReplayBatches(const std::vector<int32_t>& tokens) : tokens_(tokens) {}
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
        const long n = (long)B * T;
        std::copy(tokens_.begin() + pos_, tokens_.begin() + pos_ + n, inputs);
        std::copy(tokens_.begin() + pos_ + n, tokens_.begin() + pos_ + 2 * n, targets);
        pos_ += 2 * n;
    }

  private:
    const std::vector<int32_t>& tokens_;
    long pos_ = 0;
};

struct Reference {
    std::string dir;
    std::vector<double> losses, grad_norms;
};

// Writes weights, config and tokens, and runs the PyTorch reference once per
// model shape (activation checkpointing does not change the math).
const Reference& reference_for(bool gqa) {
    static std::map<bool, Reference> cache;
    static std::map<bool, std::unique_ptr<test::ScratchDir>> dirs;
    if (cache.count(gqa)) return cache[gqa];
    TrainConfig c = parity_config(gqa, false);
    dirs[gqa] = std::make_unique<test::ScratchDir>(gqa ? "parity_gqa" : "parity_mha");
    const test::ScratchDir& dir = *dirs[gqa];
    Model model(c.model, c.run.batch_size, c.run.seq_len, false);
    model.init_weights(c.run.seed);
    save_weights(model, dir.file("weights.safetensors"));
    std::ofstream(dir.file("config.json")) << config_to_json(c).dump(2);
    std::vector<int32_t> tokens = make_tokens(c);
    std::ofstream(dir.file("tokens.i32"), std::ios::binary)
        .write((const char*)tokens.data(), tokens.size() * sizeof(int32_t));
    std::string cmd = fmt::format("OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 {}/tests/reference/parity.py {}",
                                  HLAT_SOURCE_DIR, dir.path().string());
    test::CommandResult r = test::run_command(cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    Reference ref;
    ref.dir = dir.path().string();
    std::ifstream in(dir.file("reference.json"));
    if (in) {
        auto j = nlohmann::json::parse(in);
        ref.losses = j["losses"].get<std::vector<double>>();
        ref.grad_norms = j["grad_norms"].get<std::vector<double>>();
    }
    return cache[gqa] = ref;
}

struct Variant {
    bool gqa, checkpointing;
};

class ModelParity : public ::testing::TestWithParam<Variant> {};

INSTANTIATE_TEST_SUITE_P(Variants, ModelParity,
                         ::testing::Values(Variant{false, false}, Variant{false, true},
                                           Variant{true, false}, Variant{true, true}),
                         [](const auto& info) {
                             return std::string(info.param.gqa ? "GQA" : "MHA") +
                                    (info.param.checkpointing ? "_Checkpointed" : "_Stored");
                         });

TEST_P(ModelParity, LossAndEveryGradientMatchPyTorch) {
    const Variant v = GetParam();
    const Reference& ref = reference_for(v.gqa);
    ASSERT_EQ(ref.losses.size(), (size_t)kSteps);
    TrainConfig c = parity_config(v.gqa, v.checkpointing);
    std::vector<int32_t> tokens = make_tokens(c);
    ReplayBatches batches(tokens);

    Model model(c.model, c.run.batch_size, c.run.seq_len, v.checkpointing);
    load_weights(model, ref.dir + "/weights.safetensors");
    model.zero_grad();
    const int B = c.run.batch_size, T = c.run.seq_len, accum = c.run.grad_accum;
    std::vector<int32_t> inputs(B * T), targets(B * T);
    double loss = 0.0;
    for (int micro = 0; micro < accum; micro++) {
        batches.next_batch(inputs.data(), targets.data(), B, T);
        loss += model.forward(inputs.data(), targets.data()) / accum;
        model.backward(1.0f / (B * T * accum));
    }
    double loss_err = std::fabs(loss - ref.losses[0]) / std::fabs(ref.losses[0]);
    std::printf("loss hlat %.8f torch %.8f rel err %.2e\n", loss, ref.losses[0], loss_err);
    EXPECT_LT(loss_err, 1e-5);

    test::ScratchDir out(v.gqa ? "grads_gqa" : "grads_mha");
    save_weights(model, out.file("grads.safetensors"), /*grads=*/true);
    SafetensorsFile ours(out.file("grads.safetensors"));
    SafetensorsFile theirs(ref.dir + "/reference_grads.safetensors");
    ASSERT_EQ(ours.names(), theirs.names());
    for (const std::string& name : ours.names()) {
        auto shape = ours.shape(name);
        long n = 1;
        for (auto d : shape) n *= d;
        std::vector<float> a(n), b(n);
        ours.read(name, shape, a.data());
        theirs.read(name, shape, b.data());
        double err = test::relative_error(a, b);
        std::printf("grad %-48s rel err %.2e\n", name.c_str(), err);
        EXPECT_LT(err, 1e-4) << name;
    }
}

TEST_P(ModelParity, TenAdamWStepsMatchPyTorch) {
    const Variant v = GetParam();
    const Reference& ref = reference_for(v.gqa);
    ASSERT_EQ(ref.losses.size(), (size_t)kSteps);
    TrainConfig c = parity_config(v.gqa, v.checkpointing);
    std::vector<int32_t> tokens = make_tokens(c);
    ReplayBatches batches(tokens);
    Trainer trainer(c, batches, 0.0);
    load_weights(trainer.model(), ref.dir + "/weights.safetensors");
    int clipped = 0;
    for (int s = 0; s < kSteps; s++) {
        StepStats st = trainer.step();
        double err = std::fabs(st.loss - ref.losses[s]) / std::fabs(ref.losses[s]);
        double gerr = std::fabs(st.grad_norm - ref.grad_norms[s]) / ref.grad_norms[s];
        std::printf("step %d loss hlat %.6f torch %.6f rel err %.2e | grad norm %.4f vs %.4f\n", s,
                    st.loss, ref.losses[s], err, st.grad_norm, ref.grad_norms[s]);
        EXPECT_LT(err, 1e-4) << "step " << s;
        EXPECT_LT(gerr, 1e-3) << "step " << s;
        clipped += st.clipped;
    }
    EXPECT_GT(clipped, 0) << "the run should exercise clipping";
    EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.05) << "the reference run should learn";
}

}  // namespace
}  // namespace hlat
