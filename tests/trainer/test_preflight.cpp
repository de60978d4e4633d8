// hlat preflight: the judgment on made-up fleets, then the command under
// mpirun on 2 ranks: a healthy machine passes, a rank with wrong arithmetic
// (sdc) or a slowed one (slow_rank) fails it by name, and the store keeps the
// result as a run of its own.
#include "test_util.h"
#include "webhook_listener.h"
#include "telemetry/reader.h"
#include "trainer/parallel/preflight.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <mutex>

namespace hlat {
namespace {

std::vector<RankMeasurement> healthy_fleet(int n) {
    std::vector<RankMeasurement> ranks;
    for (int r = 0; r < n; r++) ranks.push_back({r, fmt::format("node{}", r / 2), 200.0 + r, 400.0 - r, 20.0, 0, 42});
    return ranks;
}

bool names(const std::vector<std::string>& failures, const std::string& what) {
    for (const std::string& f : failures)
        if (f.find(what) != std::string::npos) return true;
    return false;
}

TEST(PreflightJudgment, AHealthyFleetPasses) { EXPECT_TRUE(judge_preflight(healthy_fleet(4), 0.8, 0.6).empty()); }

TEST(PreflightJudgment, ASlowRankIsNamedWithItsHostAndMeasurement) {
    auto ranks = healthy_fleet(4);
    ranks[3].triad_gbs = 11.0;  // 55% of the median 20
    auto failures = judge_preflight(ranks, 0.8, 0.6);
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_TRUE(names(failures, "rank 3 (node1): memory bandwidth (triad) 11.0 GB/s is 55% of the fleet median 20.0"))
        << failures[0];
    EXPECT_TRUE(judge_preflight(ranks, 0.8, 0.5).empty()) << "the fraction is the user's";
    ranks[3].triad_gbs = 20.0;
    ranks[2].fp32_gflops = 150.0;  // 75% of the median 200.5: GEMM rates are held to 80%
    EXPECT_TRUE(names(judge_preflight(ranks, 0.8, 0.6), "rank 2 (node1): fp32 GEMM 150.0 GFLOP/s"));
}

TEST(PreflightJudgment, WrongArithmeticIsNamedByTheExactGemmAndTheChecksumMajority) {
    auto ranks = healthy_fleet(3);
    ranks[1].model_checksum = 7;
    auto failures = judge_preflight(ranks, 0.8, 0.6);
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_TRUE(names(failures, "rank 1 (node0) computes wrong numbers: its model forward/backward checksum"));
    // Two ranks disagreeing: the one whose exact-integer GEMMs are right is trusted.
    auto two = healthy_fleet(2);
    two[0].model_checksum = 7;
    two[0].wrong_elements = 2;
    failures = judge_preflight(two, 0.8, 0.6);
    EXPECT_EQ(failures.size(), 2u);
    EXPECT_FALSE(names(failures, "rank 1")) << "rank 1 computed right";
    // And with nothing to break the tie, both are named.
    two[0].wrong_elements = 0;
    failures = judge_preflight(two, 0.8, 0.6);
    EXPECT_TRUE(names(failures, "rank 0") && names(failures, "rank 1"));
}

TEST(PreflightJudgment, BusBandwidthFollowsNcclTests) {
    EXPECT_DOUBLE_EQ(bus_bandwidth("all_reduce", 10.0, 4), 15.0);
    EXPECT_DOUBLE_EQ(bus_bandwidth("all_gather", 10.0, 4), 7.5);
    EXPECT_DOUBLE_EQ(bus_bandwidth("all_reduce", 10.0, 2), 10.0);
    EXPECT_DOUBLE_EQ(bus_bandwidth("reduce_scatter", 10.0, 4), 7.5);
}

class PreflightCommand : public ::testing::Test {
  protected:
    test::ScratchDir dir{"preflight"};
    std::string store = dir.file("s.db");
    test::CommandResult preflight(const std::string& name, const std::string& args = "") {
        return test::run_command(fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                                             "--oversubscribe -np 2 {} preflight --max-bytes 65536 --store {} --name "
                                             "{} {}",
                                             HLAT_BINARY, store, name, args));
    }
};

// Two ranks share this machine's two cores with whatever else the test suite
// runs, so one rank can measure 30% below the other with nothing wrong (CI saw
// a bf16 GEMM at 72% of the median). The healthy runs here judge at 40%: the
// thresholds themselves are tested in PreflightJudgment, and an injected
// slowdown of 3x still lands far below (a third of the other rank).
const char* kSharedMachineFractions = "--min-fraction 0.4 --min-memory-fraction 0.4";

TEST_F(PreflightCommand, PassesOnAHealthyMachineAndStoresItsRun) {
    auto r = preflight("healthy", kSharedMachineFractions);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("pre-flight passed"), std::string::npos) << r.output;
    // Every collective the trainer calls, sequence parallelism's pair too.
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"})
        EXPECT_NE(r.output.find(op), std::string::npos) << "the collectives table: " << op;
    telemetry::Reader reader(store);
    auto run = reader.find_run("healthy");
    ASSERT_TRUE(run.has_value());
    auto meta = nlohmann::json::parse(run->meta);
    EXPECT_EQ(meta["kind"], "preflight");
    ASSERT_EQ(meta["preflight"]["ranks"].size(), 2u);
    EXPECT_GT(meta["preflight"]["ranks"][1]["fp32_gemm_gflops"].get<double>(), 0.0);
    EXPECT_TRUE(reader.alerts(run->id).empty());
}

// A failure is an alert routed like any run's: stored with the run's
// lifecycle, and posted to the webhook the config names.
TEST_F(PreflightCommand, FailsNamingARankThatComputesWrongNumbers) {
    test::WebhookListener listener;
    ASSERT_GT(listener.port, 0);
    std::ofstream(dir.file("hook.json"))
        << nlohmann::json{{"detectors", {{"webhook", fmt::format("http://127.0.0.1:{}/hook", listener.port)}}}}.dump();
    auto r = preflight("sdc", "--inject sdc:1 --config " + dir.file("hook.json"));
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("rank 1 (" ), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("computes wrong numbers"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("rank 0 ("), std::string::npos) << "rank 0 is healthy:\n" << r.output;
    telemetry::Reader reader(store);
    auto run = reader.find_run("sdc");
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->status, "finished");
    auto alerts = reader.alerts(run->id);
    ASSERT_FALSE(alerts.empty());
    EXPECT_EQ(alerts[0].kind, "preflight");
    EXPECT_EQ(alerts[0].severity, "critical");
    EXPECT_NE(alerts[0].message.find("rank 1"), std::string::npos);
    std::vector<std::string> kinds;
    for (const telemetry::Event& e : reader.events(run->id)) kinds.push_back(e.kind);
    EXPECT_EQ(kinds, (std::vector<std::string>{"start", "stop"}));
    std::lock_guard<std::mutex> lock(listener.mutex);
    // The failures at step 0 are one episode of one kind: posted once.
    ASSERT_EQ(listener.bodies.size(), 1u);
    nlohmann::json posted = nlohmann::json::parse(listener.bodies[0]);
    EXPECT_EQ(posted["run"], "sdc");
    EXPECT_EQ(posted["kind"], "preflight");
    EXPECT_EQ(posted["message"], alerts[0].message);
}

TEST_F(PreflightCommand, FailsNamingASlowRank) {
    auto r = preflight("slow", "--inject slow_rank:0:3");
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("rank 0 ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("of the fleet median"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("rank 1 ("), std::string::npos) << "rank 1 is healthy:\n" << r.output;
}

// `hlat run --preflight`: the pre-flight runs under the job's launcher before
// the launch; when it fails the job never starts.
TEST_F(PreflightCommand, TheSupervisorLaunchesOnlyAfterAPassingPreflight) {
    test::write_tiny_training(dir, 20, {{"store", store}, {"name", "job"}, {"out_dir", dir.file("job")}});
    const std::string launcher = "--launcher \"mpirun --oversubscribe -np 2\"";
    const std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
    auto r = test::run_command(fmt::format("{}{} run {} --preflight --preflight-args \"--max-bytes 4096 --inject "
                                           "slow_rank:1:3\" -- --config {} --data {} --dp 2 --steps 4",
                                           env, HLAT_BINARY, launcher, dir.file("c.json"), dir.file("t.u16")));
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("the pre-flight failed"), std::string::npos) << r.output;
    telemetry::Reader reader(store);
    EXPECT_FALSE(reader.find_run("job").has_value()) << "no job on a failed fleet";
    EXPECT_TRUE(reader.find_run("job-preflight-1").has_value());

    r = test::run_command(fmt::format("{}{} run {} --preflight --preflight-args \"--max-bytes 4096 {}\" -- --config "
                                      "{} --data {} --dp 2 --steps 4",
                                      env, HLAT_BINARY, launcher, kSharedMachineFractions, dir.file("c.json"),
                                      dir.file("t.u16")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    telemetry::Reader after(store);
    ASSERT_TRUE(after.find_run("job").has_value());
    EXPECT_EQ(after.find_run("job")->status, "finished");
}

}  // namespace
}  // namespace hlat
