// Distributed training through the binary under mpirun (2 processes on this
// 2-core machine, --oversubscribe): data and tensor parallelism and ZeRO-1
// match one process; checkpoints move between layouts; the replica and drift
// checks catch the faults they exist for and stay quiet on clean runs; a rank
// killed mid-run leaves nothing corrupt behind.
//
// Tolerances: distributed_runs.h.
#include "distributed_runs.h"
#include "roads.h"
#include "test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/data/corpus.h"
#include "telemetry/reader.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <map>
#include <set>

namespace hlat {
namespace {

namespace fs = std::filesystem;

TEST_F(DistributedTest, DataParallelMatchesOneProcessWithTheSameGlobalBatch) {
    auto r = train(1, config("b8", 8), "single", "--steps 20");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, config("b4", 4), "dp2", "--steps 20 --dp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("2 data-parallel x 1 tensor-parallel"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("% hidden"), std::string::npos) << "the step line reports the communication";
    expect_same_curves("single", "dp2", 0, 20);
    EXPECT_EQ(steps("dp2")[19]["tokens_seen"], steps("single")[19]["tokens_seen"]);
    EXPECT_TRUE(alerts("dp2").empty()) << "a clean DP run raises nothing";
}

TEST_F(DistributedTest, TensorParallelMatchesOneProcess) {
    auto r = train(1, config("b8", 8), "single_tp_ref", "--steps 20");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, config("b8", 8), "tp2", "--steps 20 --tp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("1 data-parallel x 2 tensor-parallel"), std::string::npos) << r.output;
    expect_same_curves("single_tp_ref", "tp2", 0, 20);
    EXPECT_TRUE(alerts("tp2").empty()) << "a clean TP run raises nothing";
}

// qk-norm's gains are replicated, but each tensor-parallel rank normalises
// only its own heads: their gradients are summed over the group. The z-loss's
// log Z spans the whole vocabulary (the vocab-parallel cross-entropy's). Both
// layouts match one process, the z-loss term included, and the replicated
// gains stay equal on every rank.
TEST_F(DistributedTest, QkNormAndZLossMatchOneProcessUnderTensorAndDataParallelism) {
    auto with_qk_norm_z_loss = [](const std::string& path) {
        auto j = nlohmann::json::parse(std::ifstream(path));
        j["model"]["qk_norm"] = true;
        j["model"]["z_loss"] = 1e-2;
        j["parallel"] = {{"check_every", 5}};
        std::ofstream(path) << j.dump();
        return path;
    };
    auto r = train(1, with_qk_norm_z_loss(config("qk_b8", 8)), "qk_single", "--steps 12");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::string db = dir_->file("qk_norm.db");
    r = train(2, with_qk_norm_z_loss(config("qk_b8", 8)), "qk_tp2", "--steps 12 --tp 2", db);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, with_qk_norm_z_loss(config("qk_b4", 4)), "qk_dp2", "--steps 12 --dp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_same_curves("qk_single", "qk_tp2", 0, 12);
    expect_same_curves("qk_single", "qk_dp2", 0, 12);
    auto single = steps("qk_single"), tp = steps("qk_tp2"), dp = steps("qk_dp2");
    for (int s = 0; s < 12; s++) {
        double z = single[s]["z_loss"].get<double>();
        EXPECT_GT(z, 0.0) << "step " << s;
        EXPECT_LE(std::fabs(tp[s]["z_loss"].get<double>() - z), kTolerance * z) << "step " << s;
        EXPECT_LE(std::fabs(dp[s]["z_loss"].get<double>() - z), kTolerance * z) << "step " << s;
    }
    telemetry::Reader reader(db);
    auto run = reader.find_run("qk_tp2");
    ASSERT_TRUE(run.has_value());
    auto drift = reader.series(run->id, "tp_drift", 0, 1000);
    EXPECT_FALSE(drift.empty()) << "the replicated gains were compared across ranks";
    for (auto& p : drift) EXPECT_EQ(p.value, 0.0) << "step " << p.step;
    EXPECT_TRUE(alerts("qk_tp2").empty());
}

TEST_F(DistributedTest, Zero1MatchesPlainDataParallelWithHalfTheOptimizerState) {
    auto r = train(2, config("b4", 4), "dp2_ref", "--steps 20 --dp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, config("b4", 4), "zero1", "--steps 20 --dp 2 --zero1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO-1: 1/2 of"), std::string::npos) << r.output;
    expect_same_curves("dp2_ref", "zero1", 0, 20);
}

// Under ZeRO-1 each replica keeps its range of the bf16 moments and Kahan
// compensation in 2 bytes an element; a checkpoint gathers them and a resume
// hands each replica its range back, so the resumed run is the straight one
// to the bit.
TEST_F(DistributedTest, Zero1ResumesBf16StateBitExactly) {
    std::string cfg = config("kahan", 4, R"(, "precision": {"mode": "bf16_kahan"})");
    auto r = train(2, cfg, "kahan_straight", "--steps 20 --dp 2 --zero1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, cfg, "kahan_resumed", "--steps 10 --dp 2 --zero1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, cfg, "kahan_resumed", "--steps 20 --dp 2 --zero1 --resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto a = steps("kahan_straight"), b = steps("kahan_resumed");
    for (int s = 10; s < 20; s++)
        for (const char* key : {"loss", "grad_norm", "param_norm"})
            EXPECT_EQ(a[s][key].get<double>(), b[s][key].get<double>()) << key << " at step " << s;
}

// precision.reduce bf16: the gradients travel as bf16, so the run is close to
// the fp32-reduced one (within bf16's relative step, 2^-8, over 20 steps) but
// not the same, and the replicas still agree bit for bit (the bf16 addition
// commutes), with ZeRO-1 as with the all-reduce.
TEST_F(DistributedTest, Bf16ReductionIsCloseToFp32AndKeepsReplicasEqual) {
    std::string fp32 = config("mixed_fp32", 4, R"(, "precision": {"mode": "mixed"}, "parallel": {"check_every": 5})");
    std::string bf16 = config("mixed_bf16", 4,
                              R"(, "precision": {"mode": "mixed", "reduce": "bf16"}, "parallel": {"check_every": 5})");
    auto r = train(2, fp32, "reduce_fp32", "--steps 20 --dp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* zero : {"", "--zero1"}) {
        SCOPED_TRACE(zero);
        std::string out = std::string("reduce_bf16") + (*zero ? "_zero1" : "");
        r = train(2, bf16, out, std::string("--steps 20 --dp 2 ") + zero);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find("in bf16"), std::string::npos) << r.output;
        EXPECT_TRUE(alerts(out).empty()) << r.output;
        auto a = steps("reduce_fp32"), b = steps(out);
        double max_diff = 0.0;
        for (int s = 0; s < 20; s++)
            max_diff = std::max(max_diff, std::fabs(a[s]["loss"].get<double>() - b[s]["loss"].get<double>()) /
                                              a[s]["loss"].get<double>());
        EXPECT_LT(max_diff, 1.0 / 256) << "bf16 reduction drifted beyond bf16 precision";
        EXPECT_GT(max_diff, 0.0) << "the reduction did not change: bf16 not in use?";
    }
}

// Checkpoints hold the whole model: a DP=2 checkpoint resumes on one process
// and a TP=2 one at DP=2, each continuing the curve of a run never stopped.
TEST_F(DistributedTest, CheckpointsLoadAtAnotherLayout) {
    auto r = train(1, config("b8", 8), "straight", "--steps 30");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, config("b4", 4), "moved_dp", "--steps 20 --dp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(1, config("b8", 8), "moved_dp", "--steps 30 --resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("checkpoint of dp 2 x tp 1 at dp 1 x tp 1"), std::string::npos) << r.output;
    expect_same_curves("straight", "moved_dp", 20, 30);

    r = train(2, config("b8", 8), "moved_tp", "--steps 20 --tp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, config("b4", 4), "moved_tp", "--steps 30 --dp 2 --resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_same_curves("straight", "moved_tp", 20, 30);
}

// Each all-reduce bug leaves the loss looking normal but the replicas apart:
// the replica hash check (every 5 steps here) names it at its first check.
// The reduced gradients are hashed too (before clipping), so the skipped
// tensor is named: the parameters all differ once each replica clips by its
// own gradient norm.
TEST_F(DistributedTest, EveryAllreduceBugIsCaughtByTheReplicaHashes) {
    std::string cfg = config("bugs", 4, R"(, "parallel": {"check_every": 5, "hash_grads": true})");
    for (const char* flavour : {"sum", "skip", "stale"}) {
        SCOPED_TRACE(flavour);
        std::string out = fmt::format("bug_{}", flavour);
        std::string db = dir_->file("bugs.db");
        auto r = train(2, cfg, out, fmt::format("--steps 20 --dp 2 --inject allreduce_bug@6:{}", flavour), db);
        EXPECT_EQ(r.exit_code, 3) << "replica_mismatch halts by default\n" << r.output;
        std::vector<std::string> a = alerts(out);
        ASSERT_EQ(a.size(), 1u) << r.output;
        EXPECT_EQ(a[0], "replica_mismatch@9");  // the first check after step 6
        EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
        // Replayed offline from the store, the same alert with the same sentence.
        auto replay = test::run_command(fmt::format("{} detect --store {} --run {}", HLAT_BINARY, db, out));
        ASSERT_EQ(replay.exit_code, 3) << "replica_mismatch has the halt policy: " << replay.output;
        EXPECT_NE(replay.output.find("1 alerts"), std::string::npos) << replay.output;
        EXPECT_NE(replay.output.find("replica_mismatch       data-parallel replicas disagree"), std::string::npos)
            << replay.output;
        test::expect_roads_agree(db, out, *dir_);
        if (std::string(flavour) == "skip") {
            EXPECT_NE(r.output.find("reduced gradients of rank 1 differ from their replica 0, first at "
                                    "layers.0.down_proj"),
                      std::string::npos)
                << r.output;
        }
    }
}

// Stochastic rounding keyed by rank rounds the replicated norm weights
// differently on each TP rank: they drift and the detector says so. Keyed by
// tensor and element only they stay equal. Re-syncing from TP rank 0 every
// step keeps the drift to what one step adds.
TEST_F(DistributedTest, TpDriftAppearsOnlyWithRankKeyedRounding) {
    auto cfg = [&](const char* name, const char* precision, const char* resync) {
        return config(name, 8, fmt::format(R"(, "precision": {{"mode": "bf16_sr"{}}},
            "parallel": {{"check_every": 2{}}},
            "detectors": {{"leak_probe": {{"policy": "off"}}, "straggler": {{"policy": "off"}},
                          "tp_drift": {{"threshold": 1e-9}}}})",
                                           precision, resync));
    };
    std::string db = dir_->file("drift.db");
    auto r = train(2, cfg("keyed", R"(, "sr_key_rank": true)", ""), "drift_keyed", "--steps 12 --tp 2", db);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::string> a = alerts("drift_keyed");
    ASSERT_FALSE(a.empty()) << r.output;
    EXPECT_EQ(a[0], "tp_drift@1") << "at the first check";
    test::expect_roads_agree(db, "drift_keyed", *dir_);
    r = train(2, cfg("unkeyed", "", ""), "drift_unkeyed", "--steps 12 --tp 2", db);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(alerts("drift_unkeyed").empty()) << r.output;
    r = train(2, cfg("resync", R"(, "sr_key_rank": true)", R"(, "resync_every": 1)"), "drift_resync",
              "--steps 12 --tp 2", db);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("re-synced from their group leaders"), std::string::npos) << r.output;

    // The drift series in the store.
    telemetry::Reader reader(db);
    auto drift = [&](const char* name) {
        auto run = reader.find_run(name);
        EXPECT_TRUE(run.has_value()) << name;
        std::vector<double> values;
        for (auto& p : reader.series(run->id, "tp_drift", 0, 1000)) values.push_back(p.value);
        EXPECT_EQ(values.size(), 6u) << name << ": one value per check";
        return values;
    };
    std::vector<double> keyed = drift("drift_keyed"), unkeyed = drift("drift_unkeyed"), resync = drift("drift_resync");
    EXPECT_GT(keyed.back(), 0.0);
    for (double d : unkeyed) EXPECT_EQ(d, 0.0);
    EXPECT_LE(*std::max_element(resync.begin(), resync.end()), keyed.back());
}

// A rank killed between checkpoints: the job dies, the checkpoints on disk
// all verify, and the resumed run rewrites the lost steps in place (no
// duplicates) and continues the curve of a run that was never killed.
TEST_F(DistributedTest, AKilledRankCorruptsNothingAndTheResumeIsSeamless) {
    std::string cfg = config("b4", 4);
    std::string db = dir_->file("crash.db");
    auto r = train(2, cfg, "uninterrupted", "--steps 30 --dp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, cfg, "killed", "--steps 30 --dp 2 --inject crash@14:1", db);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("fault crash: killing rank 1"), std::string::npos) << r.output;
    for (const fs::path& ck : checkpoint_dirs(fs::path(dir_->file("killed")) / "checkpoints"))
        EXPECT_NO_THROW(verify_checkpoint(ck.string())) << ck;
    EXPECT_EQ(checkpoint_dirs(fs::path(dir_->file("killed")) / "checkpoints").size(), 1u) << "only step 10's";

    r = test::run_command(fmt::format("HLAT_ATTEMPT=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                                      "--oversubscribe -np 2 {} train --config {} --out-dir {} --metrics-jsonl "
                                      "{}.jsonl --store {} --steps 30 --dp 2 --resume --inject crash@14:1",
                                      HLAT_BINARY, cfg, dir_->file("killed"), dir_->file("killed"), db));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("at step 10"), std::string::npos) << r.output;
    expect_same_curves("uninterrupted", "killed", 10, 30);

    telemetry::Reader reader(db);
    auto run = reader.find_run("killed");
    ASSERT_TRUE(run.has_value());
    auto loss = reader.series(run->id, "loss", 0, 1000);
    ASSERT_EQ(loss.size(), 30u) << "one row per step, the re-run steps 10..13 replaced";
    std::set<int64_t> seen;
    for (auto& p : loss) seen.insert(p.step);
    EXPECT_EQ(seen.size(), 30u);
    EXPECT_EQ(*seen.rbegin(), 29);
    auto uninterrupted = steps("uninterrupted");
    for (auto& p : loss)
        EXPECT_LE(std::fabs(p.value - uninterrupted[(int)p.step]["loss"].get<double>()), kTolerance * p.value)
            << "step " << p.step;
}

// `hlat run`: a crash is relaunched from the latest checkpoint with --resume,
// the store gets crash, restart and downtime events and an uptime below one,
// and the curve has each step once.
TEST_F(DistributedTest, TheSupervisorRelaunchesACrashFromTheLatestCheckpoint) {
    std::string db = dir_->file("supervised.db");
    auto r = test::run_command(fmt::format("{} run --backoff 0.2 -- --config {} --out-dir {} --store {} --steps 30 "
                                           "--inject crash@14",
                                           HLAT_BINARY, config("b8", 8), dir_->file("supervised"), db));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("restart 1 of at most 10"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    telemetry::Reader reader(db);
    auto run = reader.find_run("supervised");
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->status, "finished");
    std::vector<std::string> kinds;
    for (auto& e : reader.events(run->id))
        if (e.kind != "checkpoint" && e.kind != "heartbeat") kinds.push_back(e.kind);
    EXPECT_EQ(kinds, (std::vector<std::string>{"start", "crash", "restart", "downtime", "stop"}));
    telemetry::Uptime u = reader.uptime(run->id);
    EXPECT_EQ(u.restarts, 1);
    EXPECT_GT(u.ratio, 0.0);
    EXPECT_LT(u.ratio, 1.0);
    EXPECT_EQ(reader.series(run->id, "loss", 0, 1000).size(), 30u);
}

TEST_F(DistributedTest, TheSupervisorNeverRestartsAHaltAndGivesUpAfterItsLimit) {
    auto r = test::run_command(fmt::format("{} run --backoff 0.2 -- --config {} --out-dir {} --store none --steps 30 "
                                           "--inject nan@8",
                                           HLAT_BINARY, config("b8", 8), dir_->file("halted")));
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("a detector halted the job: not restarting"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("launch 2"), std::string::npos) << r.output;

    r = test::run_command(fmt::format("{} run --max-restarts 0 -- --config {} --out-dir {} --store none --steps 30 "
                                      "--inject crash@5",
                                      HLAT_BINARY, config("b8", 8), dir_->file("given_up")));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("giving up"), std::string::npos) << r.output;

    // Bad input is not a crash: a missing token file fails before training, once.
    r = test::run_command(fmt::format("{} run -- --config {} --data {} --out-dir {} --store {} --steps 30", HLAT_BINARY,
                                      config("b8", 8), dir_->file("missing.bin"), dir_->file("bad_input"),
                                      dir_->file("bad_input.db")));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("failed before training started"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("launch 2"), std::string::npos) << r.output;
    r = test::run_command(fmt::format("{} run -- --config {} --no-such-option", HLAT_BINARY, config("b8", 8)));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("training options are not valid"), std::string::npos) << r.output;
}

// `hlat run -- hlat train ...`, the command spelled whole after "--" (as
// bench/uptime once did), is the same job as `hlat run -- ...`; another
// program there is refused with the right form, before anything starts.
TEST_F(DistributedTest, TheSupervisorTakesTheTrainCommandSpelledWholeAndRefusesAnother) {
    for (const char* spelled : {"{0} train", "train"}) {
        auto r = test::run_command(fmt::format(fmt::runtime("{0} run --backoff 0.2 -- " + std::string(spelled) +
                                                            " --config {1} --out-dir {2} --store none --steps 12"),
                                               HLAT_BINARY, config("b8", 8), dir_->file(spelled[0] == 't' ? "t" : "h")));
        EXPECT_EQ(r.exit_code, 0) << spelled << ": " << r.output;
        EXPECT_EQ(r.output.find("unexpected argument"), std::string::npos) << r.output;
    }
    auto r = test::run_command(fmt::format("{} run -- python3 train.py --config {}", HLAT_BINARY, config("b8", 8)));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("give only its options after --, e.g. `hlat run -- --config run.json` (got \"python3\""),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("launch 1"), std::string::npos) << r.output;
}

// A rank that stops responding stalls the whole job in its next collective;
// the store's heartbeats go quiet and the supervisor kills the job (mpirun
// and every rank) and relaunches it.
TEST_F(DistributedTest, TheSupervisorKillsAHungJobAndRelaunchesIt) {
    std::string db = dir_->file("hung.db");
    auto r = test::run_command(fmt::format(
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {} run --backoff 0.2 --hang-timeout 5 "
        "--launcher \"mpirun --oversubscribe -np 2\" -- --config {} --dp 2 --out-dir {} --store {} --steps 30 "
        "--inject hang@14:1",
        HLAT_BINARY, config("b4", 4), dir_->file("hung"), db));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("the job hangs; killing it"), std::string::npos) << r.output;
    telemetry::Reader reader(db);
    auto run = reader.find_run("hung");
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->status, "finished");
    EXPECT_EQ(reader.uptime(run->id).restarts, 1);
    EXPECT_EQ(reader.series(run->id, "loss", 0, 1000).size(), 30u);
}

// With a corpus each data-parallel rank reads its own document stream; a
// checkpoint keeps every rank's position, so a resumed DP=2 run is
// bit-identical to one never stopped. Another DP size cannot continue those
// streams: refused, unless the user allows the data change.
TEST_F(DistributedTest, EveryRanksCorpusStreamResumesExactly) {
    test::SmallTokenizer small;
    std::string corpus = dir_->file("corpus.jsonl");
    {
        std::ofstream out(corpus);
        for (const Document& d : small.docs) out << nlohmann::json{{"id", d.id}, {"text", d.text}}.dump() << "\n";
    }
    std::string cfg = dir_->file("corpus.json");
    std::ofstream(cfg) << fmt::format(R"({{
      "model": {{"vocab_size": 320, "dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 64,
                "max_seq_len": 32}},
      "schedule": {{"max_lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "total_steps": 10}},
      "data": {{"corpus": ["{}"], "tokenizer": "{}", "prefetch_batches": 3}},
      "run": {{"batch_size": 2, "seq_len": 32, "threads": 1, "eval_every": 0, "checkpoint_every": 5,
              "peak_gflops": 100}}
    }})", corpus, small.model_path);
    auto r = train(2, cfg, "corpus_straight", "--steps 10 --dp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, cfg, "corpus_resumed", "--steps 5 --dp 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(2, cfg, "corpus_resumed", "--steps 10 --dp 2 --resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto a = steps("corpus_straight"), b = steps("corpus_resumed");
    for (int s = 0; s < 10; s++) EXPECT_EQ(a[s]["loss"].get<double>(), b[s]["loss"].get<double>()) << "step " << s;

    r = train(1, cfg, "corpus_resumed", "--steps 12 --resume");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("the data-parallel world size differs from the checkpoint's"), std::string::npos)
        << r.output;
    r = train(1, cfg, "corpus_resumed", "--steps 12 --resume --allow-data-change");
    EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(DistributedTest, AWrongProcessCountIsAClearError) {
    auto r = train(2, config("b4", 4), "wrong", "--steps 2 --dp 2 --tp 2");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--dp 2 x --tp 2 = 4 processes, but the job has 2"), std::string::npos) << r.output;
    r = train(1, config("b4", 4), "wrong1", "--steps 2 --dp 2");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("start it with mpirun"), std::string::npos) << r.output;
    r = train(1, config("b4", 4), "wrong2", "--steps 2 --tp 3");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("parallel.tp = 3 must divide model.n_heads"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hlat
