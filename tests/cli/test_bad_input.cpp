// What a user sees for bad input: one clear line and a non-zero exit, from the
// real binary, and the library errors behind it.
#include "test_util.h"
#include "trainer/data/token_file.h"

#include <fmt/format.h>

#include <fstream>

namespace hlat {
namespace {

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

void write_u16(const std::string& path, const std::vector<uint16_t>& ids) {
    std::ofstream(path, std::ios::binary).write((const char*)ids.data(), ids.size() * 2);
}

std::string token_error(const std::string& path, const std::string& dtype, int vocab, long min) {
    try {
        TokenFile f(path, dtype, vocab, min);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(TokenFile, ReadsWindowsAndWraps) {
    test::ScratchDir dir("tokens_ok");
    write_u16(dir.file("t.u16"), {1, 2, 3, 4, 5, 6, 7});
    TokenFile f(dir.file("t.u16"), "uint16", 8, 4);
    std::vector<int32_t> in(6), tg(6);
    f.next_batch(in.data(), tg.data(), 2, 3);
    EXPECT_EQ(in, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(tg, (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
    f.next_batch(in.data(), tg.data(), 1, 3);  // 7 has no successor window: wraps
    EXPECT_EQ(std::vector<int32_t>(in.begin(), in.begin() + 3), (std::vector<int32_t>{1, 2, 3}));
}

TEST(TokenFile, SizeNotAMultipleOfWidth) {
    test::ScratchDir dir("tokens_odd");
    write_bytes(dir.file("t.u16"), {1, 0, 2, 0, 3});
    std::string e = token_error(dir.file("t.u16"), "uint16", 10, 1);
    EXPECT_NE(e.find("5 bytes, not a multiple of 2"), std::string::npos) << e;
    write_bytes(dir.file("t.u32"), {1, 0, 0, 0, 2, 0});
    e = token_error(dir.file("t.u32"), "uint32", 10, 1);
    EXPECT_NE(e.find("not a multiple of 4"), std::string::npos) << e;
}

TEST(TokenFile, IdOutsideVocabularyNamesPosition) {
    test::ScratchDir dir("tokens_vocab");
    write_u16(dir.file("t.u16"), {1, 2, 50, 3});
    std::string e = token_error(dir.file("t.u16"), "uint16", 50, 1);
    EXPECT_NE(e.find("token 50 at position 2 is outside the vocabulary (size 50)"), std::string::npos) << e;
}

TEST(TokenFile, MissingAndTooShort) {
    test::ScratchDir dir("tokens_missing");
    std::string e = token_error(dir.file("nope.u16"), "uint16", 10, 1);
    EXPECT_NE(e.find("nope.u16"), std::string::npos) << e;
    EXPECT_NE(e.find("No such file"), std::string::npos) << e;
    write_u16(dir.file("short.u16"), {1, 2});
    e = token_error(dir.file("short.u16"), "uint16", 10, 9);
    EXPECT_NE(e.find("at least 9"), std::string::npos) << e;
}

// The binary: each bad input gives exactly one line on the terminal and exit 1.
class TrainCli : public ::testing::Test {
  protected:
    test::ScratchDir dir{"cli"};
    test::CommandResult train(const std::string& args) {
        return test::run_command(fmt::format("{} train --out-dir {} --store {} {}", HLAT_BINARY, dir.file("run"),
                                             dir.file("hlat.db"), args));
    }
    void expect_one_line_error(const test::CommandResult& r, const std::string& needle) {
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
        EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    }
    std::string config(const std::string& text) {
        std::ofstream(dir.file("c.json")) << text;
        return dir.file("c.json");
    }
};

TEST_F(TrainCli, ConfigWithWrongType) {
    expect_one_line_error(train("--config " + config(R"({"model": {"dim": "wide"}})")), "model.dim");
}

TEST_F(TrainCli, ConfigWithOutOfRangeValue) {
    expect_one_line_error(train("--config " + config(R"({"schedule": {"max_lr": -1}})")), "schedule.max_lr");
}

TEST_F(TrainCli, ConfigWithUnknownField) {
    expect_one_line_error(train("--config " + config(R"({"run": {"batchsize": 4}})")),
                          "unknown config field \"run.batchsize\"");
}

TEST_F(TrainCli, ConfigThatIsNotJson) {
    expect_one_line_error(train("--config " + config("{\"model\": ")), "not valid JSON");
}

TEST_F(TrainCli, MissingConfigAndDataFiles) {
    expect_one_line_error(train("--config " + dir.file("absent.json")), "absent.json");
    expect_one_line_error(train("--data " + dir.file("absent.u16")), "absent.u16");
}

TEST_F(TrainCli, TruncatedTokenFile) {
    write_bytes(dir.file("odd.u16"), std::vector<char>(4097, 1));
    expect_one_line_error(train("--data " + dir.file("odd.u16")), "not a multiple of 2");
}

TEST_F(TrainCli, TokenIdAboveVocabulary) {
    std::string cfg = config(R"({"model": {"vocab_size": 100, "dim": 16, "n_layers": 1, "n_heads": 2,
        "n_kv_heads": 2, "hidden_dim": 32, "max_seq_len": 8}, "run": {"batch_size": 1, "seq_len": 8}})");
    write_u16(dir.file("big.u16"), {1, 2, 3, 4, 5, 6, 7, 8, 100, 9});
    expect_one_line_error(train("--config " + cfg + " --data " + dir.file("big.u16")),
                          "token 100 at position 8");
}

TEST_F(TrainCli, UnknownOption) {
    test::CommandResult r = train("--stepz 3");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("stepz"), std::string::npos) << r.output;
}

TEST_F(TrainCli, HelpListsEveryOptionWithDefault) {
    test::CommandResult r = train("--help");
    EXPECT_EQ(r.exit_code, 0);
    for (const char* opt : {"--config", "--data", "--steps", "--threads", "--init", "--save", "--metrics-jsonl",
                            "--resume", "--out-dir", "--store", "--name", "--allow-data-change"})
        EXPECT_NE(r.output.find(opt), std::string::npos) << opt;
    EXPECT_NE(r.output.find("(=0)"), std::string::npos) << "defaults are shown";
    EXPECT_NE(r.output.find("\"beta2\": 0.95"), std::string::npos) << "config defaults are shown";
}

TEST_F(TrainCli, TrainsAndSavesOnGoodInput) {
    std::string cfg = config(R"({"model": {"vocab_size": 50, "dim": 16, "n_layers": 1, "n_heads": 2,
        "n_kv_heads": 1, "hidden_dim": 32, "max_seq_len": 8}, "run": {"batch_size": 2, "seq_len": 8},
        "schedule": {"warmup_steps": 1, "total_steps": 3}})");
    std::vector<uint16_t> ids(200);
    for (size_t i = 0; i < ids.size(); i++) ids[i] = (uint16_t)(i * 7 % 50);
    write_u16(dir.file("ok.u16"), ids);
    test::CommandResult r = train(fmt::format("--config {} --data {} --save {} --metrics-jsonl {}", cfg,
                                              dir.file("ok.u16"), dir.file("w.safetensors"),
                                              dir.file("m.jsonl")));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("step      3/3"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("MFU"), std::string::npos) << r.output;
    EXPECT_TRUE(std::filesystem::exists(dir.file("w.safetensors")));
    std::ifstream m(dir.file("m.jsonl"));
    int lines = 0;
    for (std::string line; std::getline(m, line);) lines++;
    EXPECT_EQ(lines, 4) << "a start record and one record per step";
    EXPECT_TRUE(std::filesystem::exists(dir.file("run/checkpoints/step_00000003/manifest.json")));
}

}  // namespace
}  // namespace hlat
