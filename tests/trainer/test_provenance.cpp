// Why it spiked (issue 36), end to end on a small corpus: a planted bad
// document causes a spike; the alert's attribution names it with its source
// and offset; `hlat replay` calls the planted batch reproducible and an
// injected silent data corruption not (naming the rank), and the spike goes
// away without the planted sequences; rewind_skip restarts before the spike
// and never trains on the planted batch again.
#include "telemetry/reader.h"
#include "test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config.h"
#include "trainer/run/replay.h"
#include "trainer/run/train.h"

#include <fmt/format.h>

#include <fstream>

namespace hlat {
namespace {

constexpr int kSpikeStep = 120;  // after the grad_spike rule's 100-step warm-up

class ProvenanceTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        small_ = new test::SmallTokenizer();
        write_jsonl(small_->dir.file("corpus.jsonl"), test::synthetic_documents(600, 11), "synthetic", "none");
    }
    static void TearDownTestSuite() { delete small_; }

    // A 2-layer model on the synthetic corpus; `detectors` and `run` fields override.
    nlohmann::json config(const std::string& name, nlohmann::json detectors = nlohmann::json::object(),
                          const nlohmann::json& run = nlohmann::json::object()) {
        nlohmann::json c = {
            {"model", {{"vocab_size", 320}, {"dim", 64}, {"n_layers", 2}, {"n_heads", 2}, {"n_kv_heads", 2},
                       {"hidden_dim", 192}, {"max_seq_len", 64}}},
            {"schedule", {{"max_lr", 3e-3}, {"min_lr", 3e-4}, {"warmup_steps", 20}, {"total_steps", 200}}},
            {"data", {{"corpus", {corpus()}}, {"tokenizer", small_->model_path}}},
            {"run", {{"batch_size", 8}, {"seq_len", 64}, {"threads", 1}, {"log_every", 100000}, {"eval_every", 0},
                     {"checkpoint_every", 50}, {"store", store()}, {"out_dir", dir.file(name)}, {"name", name},
                     {"peak_gflops", 1.0}}},
            {"detectors", detectors}};
        c["run"].update(run);
        return c;
    }
    std::string write_config(const std::string& name, const nlohmann::json& c) {
        std::ofstream(dir.file(name + ".json")) << c.dump(2);
        return dir.file(name + ".json");
    }
    int train_here(const nlohmann::json& c, int steps, const std::vector<std::string>& inject) {
        TrainConfig config = config_from_json(c);
        config.run.inject = inject;
        TrainOptions options;
        options.steps = steps;
        options.faults = parse_faults(inject);
        return train(config, options);
    }
    std::string corpus() const { return small_->dir.file("corpus.jsonl"); }
    std::string store() const { return dir.file("hlat.db"); }
    std::optional<telemetry::Alert> alert(const std::string& run, const std::string& kind, int64_t step) {
        telemetry::Reader reader(store());
        auto r = reader.find_run(run);
        if (r)
            for (const telemetry::Alert& a : reader.alerts(r->id))
                if (a.kind == kind && a.step == step) return a;
        return std::nullopt;
    }

    static test::SmallTokenizer* small_;
    test::ScratchDir dir{"provenance"};
};
test::SmallTokenizer* ProvenanceTest::small_ = nullptr;

// The planted document is among the alert's top 3 sequences, named with its
// source and offset; the real documents of the batch are stored with the
// file they came from and the byte offset of their line there.
TEST_F(ProvenanceTest, APlantedBadDocumentIsNamedByTheSpikesAttribution) {
    ASSERT_EQ(train_here(config("planted"), kSpikeStep + 5, {fmt::format("bad_batch@{}", kSpikeStep)}), 0);
    std::optional<telemetry::Alert> spike = alert("planted", "grad_spike", kSpikeStep);
    ASSERT_TRUE(spike) << "the planted batch makes a gradient spike at its step";
    const nlohmann::json data = nlohmann::json::parse(spike->data);
    ASSERT_TRUE(data.contains("attribution")) << spike->data;
    const nlohmann::json& top = data["attribution"]["batch"]["top"];
    int planted_in_top3 = 0;
    for (const auto& seq : top)
        if (seq["loss_rank"].get<int>() <= 3 && seq["documents"][0]["id"] == fmt::format("planted-random-batch-{}", kSpikeStep)) {
            planted_in_top3++;
            EXPECT_NE(seq["documents"][0]["source"].get<std::string>().find("--inject bad_batch"), std::string::npos);
            EXPECT_EQ(seq["documents"][0]["offset"], 0);
            EXPECT_FALSE(seq["preview"].get<std::string>().empty());
        }
    EXPECT_EQ(planted_in_top3, 3) << "the 4 planted sequences have the highest losses:\n" << top.dump(1);
    EXPECT_FALSE(data["attribution"]["moved_first"]["label"].get<std::string>().empty());

    // Every document the run stored points at its own line of the corpus.
    telemetry::Reader reader(store());
    const int64_t run = reader.find_run("planted")->id;
    std::optional<telemetry::BatchRecord> batch = reader.batch(run, 7);
    ASSERT_TRUE(batch);
    std::vector<int64_t> refs;
    const nlohmann::json record = nlohmann::json::parse(batch->data);
    for (const auto& seq : record["sequences"])
        for (const auto& doc : seq[6]) refs.push_back(doc[0].get<int64_t>());
    std::vector<telemetry::DocumentRecord> docs = reader.documents(run, refs);
    ASSERT_FALSE(docs.empty());
    std::ifstream file(corpus(), std::ios::binary);
    for (const telemetry::DocumentRecord& d : docs) {
        EXPECT_EQ(d.source, corpus());
        file.seekg(d.offset);
        std::string line;
        std::getline(file, line);
        EXPECT_EQ(nlohmann::json::parse(line)["id"], d.doc_id) << "offset " << d.offset;
    }
}

// Replay: the planted batch comes back bit for bit (the data did it), and
// without its 4 highest-loss sequences the spike is gone.
TEST_F(ProvenanceTest, ReplayCallsAPlantedBatchReproducibleAndTheSpikeGoesWithoutIt) {
    ASSERT_EQ(train_here(config("replayed"), kSpikeStep + 2, {fmt::format("bad_batch@{}", kSpikeStep)}), 0);
    ASSERT_TRUE(alert("replayed", "grad_spike", kSpikeStep));
    ReplayOptions o;
    o.store = store();
    o.run = "replayed";
    o.step = kSpikeStep;
    o.without = 4;
    o.scratch = dir.file("replay_scratch");
    nlohmann::json report = replay_step(o);
    EXPECT_EQ(report["verdict"], "reproducible") << report.dump(1);
    EXPECT_EQ(report["from_checkpoint"], dir.file("replayed") + "/checkpoints/step_00000100");
    EXPECT_EQ(report["loss"]["stored"], report["loss"]["replayed"]);
    EXPECT_EQ(report["sequences_differing"], 0);
    EXPECT_GT(report["without"]["ratio_with"].get<double>(), 5.0);
    EXPECT_LT(report["without"]["ratio"].get<double>(), 2.0);
    EXPECT_TRUE(report["without"]["spike_gone"].get<bool>()) << report.dump(1);
}

// A rank whose arithmetic goes wrong at a step (sdc) stored numbers a replay
// cannot give back: not reproducible, naming that rank.
TEST_F(ProvenanceTest, ReplayCallsSilentDataCorruptionNotReproducibleAndNamesTheRank) {
    const std::string cfg = write_config("sdc", config("sdc"));
    const std::string mpirun = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 ";
    test::CommandResult r = test::run_command(fmt::format("{}{} train --config {} --dp 2 --steps 58 --inject sdc@55:1",
                                                          mpirun, HLAT_BINARY, cfg));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = test::run_command(fmt::format("{}{} replay --store {} --run sdc --step 55 --json {}", mpirun, HLAT_BINARY,
                                      store(), dir.file("sdc.json")));
    EXPECT_NE(r.exit_code, 0) << "not reproducible exits 2\n" << r.output;
    nlohmann::json report = nlohmann::json::parse(std::ifstream(dir.file("sdc.json")));
    EXPECT_EQ(report["verdict"], "not reproducible");
    EXPECT_EQ(report["first_difference"]["step"], 55) << "steps 50-54 come back exactly";
    EXPECT_EQ(report["ranks_differing"], nlohmann::json::array({1}));
    EXPECT_NE(r.output.find("on rank(s) 1"), std::string::npos) << r.output;
    r = test::run_command(fmt::format("{}{} replay --store {} --run sdc --step 54", mpirun, HLAT_BINARY, store()));
    EXPECT_EQ(r.exit_code, 0) << "the step before the corruption is reproducible\n" << r.output;
}

// rewind_skip under the supervisor, on loss_jump (the recommended trigger):
// the planted batch is a one-step loss outlier, judged at the next step; the
// run stops there, restarts from the checkpoint at step 100, skips the planted
// batch, and finishes; the skip list is in the last checkpoint's loader state
// and the rewind is an event.
TEST_F(ProvenanceTest, RewindSkipRestartsBeforeTheSpikeAndNeverTrainsOnThePlantedBatchAgain) {
    const std::string cfg = write_config(
        "rewound", config("rewound", {{"loss_jump", {{"policy", "rewind_skip"}}}, {"rewind", {{"min_steps_back", 10}}}}));
    test::CommandResult r = test::run_command(fmt::format("{} run --backoff 0 -- --config {} --steps {} --inject bad_batch@{}",
                                                          HLAT_BINARY, cfg, kSpikeStep + 10, kSpikeStep));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("rewind 1 after loss_jump at step 120"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("checkpoints/step_00000100"), std::string::npos) << r.output;
    telemetry::Reader reader(store());
    const telemetry::RunRecord run = *reader.find_run("rewound");
    EXPECT_EQ(run.status, "finished");
    int rewinds = 0;
    for (const telemetry::Event& e : reader.events(run.id))
        if (e.kind == "rewind") {
            rewinds++;
            const nlohmann::json plan = nlohmann::json::parse(e.detail);
            EXPECT_EQ(plan["alert_step"], kSpikeStep);
            EXPECT_EQ(plan["restart_at_or_before"], kSpikeStep - 10);
            EXPECT_EQ(plan["skip_batches"], nlohmann::json::array({kSpikeStep}));
        }
    EXPECT_EQ(rewinds, 1);
    // The step now trained on the batch after the planted one.
    const nlohmann::json batch = nlohmann::json::parse(reader.batch(run.id, kSpikeStep)->data);
    for (const auto& seq : batch["sequences"]) {
        EXPECT_EQ(seq[3], kSpikeStep + 1);
        EXPECT_LT(seq[6][0][0].get<int64_t>(), kPlantedDocument);
    }
    std::vector<std::string> skipped;
    std::optional<std::string> last = latest_good_checkpoint(dir.file("rewound"), &skipped);
    ASSERT_TRUE(last);
    EXPECT_EQ(read_checkpoint_state(*last).loader->skip, (std::vector<long>{kSpikeStep}));
    EXPECT_LT(reader.series(run.id, "grad_norm", kSpikeStep, kSpikeStep)[0].value, 5.0);
}

// Bad data that runs on (two bad batches in a row): the second spike comes
// at the same step after the first rewind, and the second rewind skips the
// batch that brought it, keeping the first skip.
TEST_F(ProvenanceTest, ASpikeAgainAfterARewindIsRewoundAndBothBatchesSkipped) {
    const std::string cfg = write_config("repeat", config("repeat", {{"grad_spike", {{"policy", "rewind_skip"}}}}));
    test::CommandResult r = test::run_command(
        fmt::format("{} run --backoff 0 -- --config {} --steps {} --inject bad_batch@{}:random:8 bad_batch@{}:random:8",
                    HLAT_BINARY, cfg, kSpikeStep + 5, kSpikeStep, kSpikeStep + 1));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("rewind 2 after grad_spike at step 120"), std::string::npos) << r.output;
    std::vector<std::string> skipped;
    std::optional<std::string> last = latest_good_checkpoint(dir.file("repeat"), &skipped);
    ASSERT_TRUE(last);
    // Batch 120, then at step 120 again batch 121.
    EXPECT_EQ(read_checkpoint_state(*last).loader->skip, (std::vector<long>{kSpikeStep, kSpikeStep + 1}));
}

TEST(BadBatchFault, SpecsAreParsedAndBadOnesNamed) {
    Faults f = parse_faults({"bad_batch@30", "bad_batch@40:repeat:3"});
    ASSERT_EQ(f.bad_batches.size(), 2u);
    EXPECT_EQ(f.bad_batches[0].step, 30);
    EXPECT_EQ(f.bad_batches[0].kind, "random");
    EXPECT_EQ(f.bad_batches[0].rows, 0);
    EXPECT_EQ(f.bad_batches[1].kind, "repeat");
    EXPECT_EQ(f.bad_batches[1].rows, 3);
    for (const char* bad : {"bad_batch@5:zeros", "bad_batch@5:random:0", "bad_batch@x", "bad_batch@5:random:2:1"})
        EXPECT_THROW(parse_faults({bad}), ConfigError) << bad;
}

}  // namespace
}  // namespace hlat
