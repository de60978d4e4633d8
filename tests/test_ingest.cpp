// Other trainers' logs: the parser's verdicts, and `hlat ingest` / `hlat runs`
// as a user runs them.
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "test_util.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace hlat {
namespace {

using namespace telemetry;

std::string parse_error(const std::string& text, bool csv = false, std::vector<std::string> header = {}) {
    int64_t last = -1;
    try {
        parse_records("log.jsonl", text, 1, csv, header, &last, 0.0);
    } catch (const IngestError& e) {
        return e.what();
    }
    return "";
}

TEST(Ingest, JsonlRecordsBecomeMetrics) {
    int64_t last = -1;
    auto pts = parse_records("log.jsonl",
                             "{\"step\": 0, \"loss\": 2.5, \"lr\": 1e-4, \"time\": 1700000000.25}\n"
                             "\n"
                             "{\"step\": 1, \"loss\": \"nan\", \"grad_norm\": \"inf\"}\n",
                             1, false, {}, &last, 42.0);
    ASSERT_EQ(pts.size(), 4u);
    EXPECT_EQ(pts[0].key, "loss");
    EXPECT_EQ(pts[0].wall_time, 1700000000.25);
    auto at = [&](const std::string& key, int64_t step) {
        for (const auto& p : pts)
            if (p.key == key && p.step == step) return p;
        ADD_FAILURE() << "no " << key << " at step " << step;
        return pts[0];
    };
    EXPECT_TRUE(std::isnan(at("loss", 1).value));
    EXPECT_EQ(at("grad_norm", 1).value, INFINITY);
    EXPECT_EQ(at("grad_norm", 1).wall_time, 42.0) << "no time field: the ingestion time";
    EXPECT_EQ(last, 1);
}

TEST(Ingest, CsvRecordsBecomeMetrics) {
    auto header = parse_csv_header("log.csv", "step, loss ,lr");
    int64_t last = -1;
    auto pts = parse_records("log.csv", "0,2.5,0.001\n1,2.4,\n", 2, true, header, &last, 0.0);
    ASSERT_EQ(pts.size(), 3u) << "an empty cell is a missing value";
    EXPECT_EQ(pts[1].key, "lr");
    EXPECT_EQ(pts[2].value, 2.4);
    try {
        parse_csv_header("log.csv", "epoch,loss");
        FAIL();
    } catch (const IngestError& e) {
        EXPECT_NE(std::string(e.what()).find("no \"step\" column"), std::string::npos);
    }
}

TEST(Ingest, BadLinesNameFileAndLine) {
    EXPECT_NE(parse_error("{\"step\": 0, \"loss\": 1}\n{\"step\": 1, \"loss\": 1\n").find("log.jsonl:2: not valid JSON"),
              std::string::npos);
    EXPECT_NE(parse_error("{\"step\": 0, \"loss\": \"high\"}\n").find("log.jsonl:1: field \"loss\" is \"high\", not a number"),
              std::string::npos);
    EXPECT_NE(parse_error("{\"step\": 0, \"ok\": true}\n").find("field \"ok\" is true, not a number"), std::string::npos);
    EXPECT_NE(parse_error("{\"loss\": 1.0}\n").find("log.jsonl:1: no \"step\" field"), std::string::npos);
    EXPECT_NE(parse_error("{\"step\": 1.5, \"loss\": 1}\n").find("not a non-negative integer"), std::string::npos);
    EXPECT_NE(parse_error("{\"step\": 5, \"loss\": 1}\n{\"step\": 4, \"loss\": 1}\n")
                  .find("log.jsonl:2: step 4 goes backwards (after step 5)"),
              std::string::npos);
    EXPECT_NE(parse_error("0,1\n1,x\n", true, {"step", "loss"}).find("log.jsonl:2: column \"loss\" is \"x\", not a number"),
              std::string::npos);
    EXPECT_NE(parse_error("0,1,2\n", true, {"step", "loss"}).find("3 cells for 2 columns"), std::string::npos);
}

class IngestCli : public ::testing::Test {
  protected:
    test::ScratchDir dir{"ingest_cli"};
    test::CommandResult hlat(const std::string& args) {
        return test::run_command(fmt::format("{} {}", HLAT_BINARY, args));
    }
    void write(const std::string& name, const std::string& text) { std::ofstream(dir.file(name)) << text; }
};

TEST_F(IngestCli, ImportsAndListsRuns) {
    write("a.jsonl", "{\"step\": 0, \"loss\": 3.0}\n{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": 1.5}");
    write("b.csv", "step,loss,lr\n0,4.0,0.1\n10,3.5,0.1\n");
    std::string db = dir.file("s.db");
    auto r = hlat(fmt::format("ingest --store {} --run jsonl-run {}", db, dir.file("a.jsonl")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = hlat(fmt::format("ingest --store {} --run csv-run {}", db, dir.file("b.csv")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Reader reader(db);
    auto s = reader.series(reader.find_run("jsonl-run")->id, "loss", 0, 10);
    ASSERT_EQ(s.size(), 3u) << "the last line needs no newline";
    EXPECT_EQ(s[2].value, 1.5);

    r = hlat("runs --store " + db);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("RUN"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("STATUS"), std::string::npos);
    EXPECT_NE(r.output.find("UPTIME"), std::string::npos);
    EXPECT_NE(r.output.find("jsonl-run"), std::string::npos);
    EXPECT_NE(r.output.find("1.5000"), std::string::npos) << "last loss";
    EXPECT_NE(r.output.find("csv-run"), std::string::npos);
    EXPECT_NE(r.output.find("finished"), std::string::npos);
}

TEST_F(IngestCli, ABadLineWritesNothingOfItsBatch) {
    write("bad.jsonl", "{\"step\": 0, \"loss\": 3.0}\n{\"step\": 1, \"loss\": oops}\n{\"step\": 2, \"loss\": 1.0}\n");
    std::string db = dir.file("s.db");
    auto r = hlat(fmt::format("ingest --store {} --run bad {}", db, dir.file("bad.jsonl")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("bad.jsonl:2: not valid JSON"), std::string::npos) << r.output;
    Reader reader(db);
    auto run = reader.find_run("bad");
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->status, "crashed");
    EXPECT_TRUE(reader.series(run->id, "loss", 0, 10).empty()) << "step 0 was in the rejected batch";
}

TEST_F(IngestCli, BadStoresAndFiles) {
    write("ok.jsonl", "{\"step\": 0, \"loss\": 3.0}\n");
    write("notdb.db", "plain text, definitely not SQLite, long enough for the header check to fail");
    auto r = hlat(fmt::format("ingest --store {} --run x {}", dir.file("notdb.db"), dir.file("ok.jsonl")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("not a SQLite database"), std::string::npos) << r.output;
    r = hlat(fmt::format("ingest --store {} --run x {}", dir.file("missing/s.db"), dir.file("ok.jsonl")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
    r = hlat(fmt::format("runs --store {}", dir.file("absent.db")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("absent.db does not exist"), std::string::npos) << r.output;
    r = hlat(fmt::format("ingest --store {} --run x {}", dir.file("s.db"), dir.file("absent.jsonl")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("cannot open"), std::string::npos) << r.output;
}

TEST_F(IngestCli, FollowTailsAGrowingFile) {
    std::string db = dir.file("s.db"), log = dir.file("live.jsonl");
    write("live.jsonl", "{\"step\": 0, \"loss\": 3.0}\n{\"step\": 1, \"lo");  // a line still being written
    std::string cmd = fmt::format("{} ingest --store {} --run live --follow --idle-exit 4 {} > {} 2>&1 &",
                                  HLAT_BINARY, db, log, dir.file("out.txt"));
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    {
        std::ofstream append(log, std::ios::app);
        append << "ss\": 2.0}\n{\"step\": 2, \"loss\": 1.0}\n";
    }
    // The follower exits by itself 4 s after the file stops growing.
    for (int i = 0; i < 200; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::ifstream out(dir.file("out.txt"));
        std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
        if (text.find("ingested") != std::string::npos) break;
    }
    Reader reader(db);
    auto run = reader.find_run("live");
    ASSERT_TRUE(run.has_value());
    auto s = reader.series(run->id, "loss", 0, 10);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[1].value, 2.0) << "the partial line was read once complete";
    EXPECT_EQ(run->status, "finished");
}

TEST_F(IngestCli, PyTorchExampleStreamsIntoTheStore) {
    std::string db = dir.file("s.db"), log = dir.file("torch.jsonl");
    std::ofstream(log).close();
    std::string follow = fmt::format("{} ingest --store {} --run torch-loop --follow --idle-exit 8 {} > {} 2>&1 &",
                                     HLAT_BINARY, db, log, dir.file("follow.txt"));
    ASSERT_EQ(std::system(follow.c_str()), 0);
    auto r = test::run_command(
        fmt::format("/usr/bin/python3 {}/examples/pytorch_to_hlat.py {} 40", HLAT_SOURCE_DIR, log));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (int i = 0; i < 300; i++) {  // the follower leaves 8 s after the last line
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::ifstream out(dir.file("follow.txt"));
        std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
        if (text.find("ingested") != std::string::npos) break;
    }
    Reader reader(db);
    auto run = reader.find_run("torch-loop");
    ASSERT_TRUE(run.has_value());
    auto loss = reader.series(run->id, "loss", 0, 1000);
    ASSERT_EQ(loss.size(), 40u);
    EXPECT_LT(loss.back().value, loss.front().value) << "the example's loop learns";
    EXPECT_EQ(reader.keys(run->id), (std::vector<std::string>{"grad_norm", "loss", "lr"}));
}

}  // namespace
}  // namespace hlat
