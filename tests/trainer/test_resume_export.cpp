// The run as a user drives it through the binary: exact resume, refusal to
// resume against other data, fallback past a damaged checkpoint, and the
// Hugging Face export read back by the PyTorch reference.
#include "test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config.h"
#include "trainer/files/file_io.h"
#include "trainer/files/safetensors.h"
#include "trainer/model/weights.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>

namespace hlat {
namespace {

namespace fs = std::filesystem;

class RunTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        small_ = new test::SmallTokenizer();
        write_corpus(small_->dir.file("corpus.jsonl"), small_->docs);
        std::ofstream(small_->dir.file("config.json")) << fmt::format(R"({{
          "model": {{"vocab_size": 320, "dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                    "hidden_dim": 64, "max_seq_len": 32}},
          "schedule": {{"max_lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "total_steps": 8}},
          "data": {{"corpus": ["{}"], "tokenizer": "{}", "prefetch_batches": 3}},
          "run": {{"batch_size": 4, "seq_len": 32, "grad_accum": 2, "threads": 2, "eval_every": 3,
                  "eval_batches": 1, "checkpoint_every": 3, "keep_checkpoints": 5}}
        }})", small_->dir.file("corpus.jsonl"), small_->model_path);
    }
    static void TearDownTestSuite() { delete small_; }

    static void write_corpus(const std::string& path, const std::vector<Document>& docs) {
        std::ofstream out(path);
        for (const Document& d : docs) out << nlohmann::json{{"id", d.id}, {"text", d.text}}.dump() << "\n";
    }

    test::CommandResult train(const std::string& out_dir, int steps, const std::string& extra = "") {
        return test::run_command(fmt::format(
            "{} train --config {} --out-dir {} --steps {} --metrics-jsonl {}.jsonl --store {} {}", HLAT_BINARY,
            small_->dir.file("config.json"), out_dir, steps, out_dir, dir.file("hlat.db"), extra));
    }

    // step -> loss, exactly as written (JSON keeps every bit of a double).
    static std::map<int, double> losses(const std::string& out_dir) {
        std::map<int, double> out;
        std::ifstream in(out_dir + ".jsonl");
        for (std::string line; std::getline(in, line);) {
            auto j = nlohmann::json::parse(line);
            if (!j.contains("event")) out[j["step"].get<int>()] = j["loss"].get<double>();
        }
        return out;
    }

    void expect_pytorch_logits_from_export(const std::string& ckpt, const std::string& hf);

    static test::SmallTokenizer* small_;
    test::ScratchDir dir{"run"};
};
test::SmallTokenizer* RunTest::small_ = nullptr;

// In every precision mode: stochastic rounding is keyed by (seed, step,
// tensor, element), so the resumed run rounds exactly as the straight one.
TEST_F(RunTest, ResumeIsBitIdenticalToTrainingStraightInEveryPrecision) {
    for (std::string precision : {"fp32", "mixed", "bf16", "bf16_sr", "bf16_kahan"}) {
        SCOPED_TRACE(precision);
        std::string a = dir.file("straight-" + precision), b = dir.file("resumed-" + precision);
        std::string flag = "--precision " + precision;
        auto r = train(a, 8, flag);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        r = train(b, 4, flag);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        r = train(b, 8, flag + " --resume");
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("step_00000004 at step 4"), std::string::npos) << r.output;
        auto la = losses(a), lb = losses(b);
        ASSERT_EQ(la.size(), 8u);
        ASSERT_EQ(lb.size(), 8u);
        for (int s = 0; s < 8; s++) {
            std::printf("%s step %d straight %.17g resumed %.17g\n", precision.c_str(), s, la[s], lb[s]);
            EXPECT_EQ(la[s], lb[s]) << "step " << s;
        }
        EXPECT_LT(la[7], la[0]) << "it learns";
        // The final weights agree to the bit as well.
        auto weights = [](const std::string& run) {
            std::vector<char> bytes = read_file(run + "/checkpoints/step_00000008/model.safetensors");
            return bytes;
        };
        EXPECT_TRUE(weights(a) == weights(b)) << "final weights differ";
        // The optimizer state is saved at the width the mode keeps it in.
        SafetensorsFile opt(b + "/checkpoints/step_00000008/optimizer.safetensors");
        bool bf16 = precision.rfind("bf16", 0) == 0;
        for (const std::string& name : opt.names()) EXPECT_EQ(opt.dtype(name), bf16 ? "BF16" : "F32") << name;
        EXPECT_EQ(opt.contains("kahan_compensation"), precision == "bf16_kahan");
    }
}

TEST_F(RunTest, FallsBackPastADamagedCheckpointAndStillMatches) {
    std::string a = dir.file("straight"), c = dir.file("damaged");
    ASSERT_EQ(train(a, 8).exit_code, 0);
    ASSERT_EQ(train(c, 4).exit_code, 0);  // checkpoints at steps 3 and 4
    {
        std::fstream w(c + "/checkpoints/step_00000004/optimizer.safetensors",
                       std::ios::in | std::ios::out | std::ios::binary);
        w.seekp(64);
        w.put('\x13');
    }
    auto r = train(c, 8, "--resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("skipping checkpoint"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("at step 3"), std::string::npos) << r.output;
    auto la = losses(a), lc = losses(c);
    for (int s = 3; s < 8; s++) EXPECT_EQ(la[s], lc[s]) << "step " << s << " recomputed after the fallback";
}

TEST_F(RunTest, ResumeAgainstAnotherCorpusIsRefusedUnlessAllowed) {
    std::string b = dir.file("changed");
    ASSERT_EQ(train(b, 2).exit_code, 0);
    auto docs = small_->docs;
    docs.push_back({"extra", "a new document changes the corpus fingerprint"});
    test::ScratchDir other("other_corpus");
    write_corpus(other.file("corpus.jsonl"), docs);
    std::string cfg = other.file("config.json");
    {
        std::ifstream in(small_->dir.file("config.json"));
        auto j = nlohmann::json::parse(in);
        j["data"]["corpus"] = {other.file("corpus.jsonl")};
        std::ofstream(cfg) << j.dump();
    }
    std::string cmd = fmt::format("{} train --config {} --out-dir {} --steps 3 --resume --store {}", HLAT_BINARY, cfg,
                                  b, dir.file("hlat.db"));
    auto r = test::run_command(cmd);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("the corpus differs from the checkpoint's"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--allow-data-change"), std::string::npos) << r.output;
    r = test::run_command(cmd + " --allow-data-change");
    EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(RunTest, ExportLoadsIntoPyTorchByHuggingFaceNames) {
    std::string a = dir.file("for_export");
    ASSERT_EQ(train(a, 3).exit_code, 0);
    std::string ckpt = a + "/checkpoints/step_00000003", hf = dir.file("hf");
    auto r = test::run_command(fmt::format("{} export --checkpoint {} --out {}", HLAT_BINARY, ckpt, hf));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* f : {"model.safetensors", "config.json", "tokenizer.model"})
        EXPECT_TRUE(fs::exists(fs::path(hf) / f)) << f;
    SafetensorsFile exported(hf + "/model.safetensors");
    EXPECT_EQ(exported.shape("model.layers.1.self_attn.k_proj.weight"), (std::vector<int64_t>{16, 32}));
    EXPECT_EQ(exported.shape("model.layers.0.mlp.up_proj.weight"), (std::vector<int64_t>{64, 32}));
    EXPECT_FALSE(exported.contains("model.layers.0.self_attn.qkv_proj.weight"));
    EXPECT_FALSE(exported.contains("model.layers.0.self_attn.q_norm.weight"));
    expect_pytorch_logits_from_export(ckpt, hf);
}

// A qk-norm model is exported as Qwen3 (its q_norm and k_norm per head); a
// z-loss run reports the z-loss term beside the cross-entropy.
TEST_F(RunTest, QkNormZLossRunExportsAsQwen3AndLoadsIntoPyTorch) {
    std::string config = dir.file("qk_norm.json");
    auto j = nlohmann::json::parse(std::ifstream(small_->dir.file("config.json")));
    j["model"]["qk_norm"] = true;
    j["model"]["z_loss"] = 1e-3;
    std::ofstream(config) << j.dump();
    std::string a = dir.file("qk_norm_run");
    auto r = test::run_command(fmt::format("{} train --config {} --out-dir {} --steps 3 --metrics-jsonl {}.jsonl --store {}",
                                           HLAT_BINARY, config, a, a, dir.file("hlat.db")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    int records = 0;
    std::ifstream in(a + ".jsonl");
    for (std::string line; std::getline(in, line);) {
        auto rec = nlohmann::json::parse(line);
        if (rec.contains("event") || !rec.contains("loss")) continue;
        records++;
        ASSERT_TRUE(rec.contains("z_loss")) << line;
        // log Z of a near-uniform start is about log V: the term is near 1e-3 (log 320)^2 = 0.033.
        EXPECT_GT(rec["z_loss"].get<double>(), 0.0) << line;
        EXPECT_LT(rec["z_loss"].get<double>(), 0.2) << line;
    }
    EXPECT_EQ(records, 3);

    std::string ckpt = a + "/checkpoints/step_00000003", hf = dir.file("hf_qk_norm");
    r = test::run_command(fmt::format("{} export --checkpoint {} --out {}", HLAT_BINARY, ckpt, hf));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto hf_config = nlohmann::json::parse(std::ifstream(hf + "/config.json"));
    EXPECT_EQ(hf_config["architectures"], nlohmann::json::array({"Qwen3ForCausalLM"}));
    EXPECT_EQ(hf_config["model_type"], "qwen3");
    SafetensorsFile exported(hf + "/model.safetensors");
    EXPECT_EQ(exported.shape("model.layers.1.self_attn.q_norm.weight"), (std::vector<int64_t>{8}));
    EXPECT_EQ(exported.shape("model.layers.1.self_attn.k_norm.weight"), (std::vector<int64_t>{8}));
    expect_pytorch_logits_from_export(ckpt, hf);
}

// hlat's logits for some tokens, from the checkpoint, against the PyTorch
// reference's from the exported folder.
void RunTest::expect_pytorch_logits_from_export(const std::string& ckpt, const std::string& hf) {
    TrainConfig config = config_from_json(read_checkpoint_state(ckpt).config);
    const int B = 2, T = 32;
    Model model(config.model, B, T, false);
    load_weights(model, ckpt + "/model.safetensors");
    std::vector<int32_t> tokens(B * T);
    for (int i = 0; i < B * T; i++) tokens[i] = (i * 37 + 11) % config.model.vocab_size;
    model.forward(tokens.data(), nullptr);
    std::ofstream(dir.file("tokens.i32"), std::ios::binary).write((const char*)tokens.data(), tokens.size() * 4);
    auto r = test::run_command(fmt::format("{} {}/tests/reference/hf_logits.py {} {} {} {} {}", HLAT_PYTHON,
                                           HLAT_SOURCE_DIR, hf, dir.file("tokens.i32"), B, T,
                                           dir.file("logits.safetensors")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    SafetensorsFile torch_out(dir.file("logits.safetensors"));
    const long V = config.model.vocab_size;
    std::vector<float> theirs((long)B * T * V);
    torch_out.read("logits", {B, T, V}, theirs.data());
    double err = test::relative_error(model.activations().logits, theirs.data(), (long)theirs.size());
    std::printf("logits hlat vs PyTorch from the HF export: rel err %.2e\n", err);
    EXPECT_LT(err, 1e-4);
}

TEST_F(RunTest, ExportOfADamagedCheckpointIsRefused) {
    std::string a = dir.file("damaged_export");
    ASSERT_EQ(train(a, 1).exit_code, 0);
    std::string ckpt = a + "/checkpoints/step_00000001";
    fs::remove(ckpt + "/state.json");
    auto r = test::run_command(fmt::format("{} export --checkpoint {} --out {}", HLAT_BINARY, ckpt, dir.file("x")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("state.json is missing"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hlat
