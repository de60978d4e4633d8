// An external trainer's batch ids (issue 36): a record's "batch" ("ID" or a
// list of them) is kept as the step's batch record, the same way through
// `hlat ingest` (once and followed) and through the HTTP endpoint; it is no
// metric and a number named batch still is one; bad ids are a bad line
// naming the field; the fast JSON path reads them as the full one does; and a
// rewind_skip halt's reply carries the plan with the skipped step's ids.
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "api_requests.h"
#include "test_util.h"
#include "web/api.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace hlat {
namespace {

using json = nlohmann::json;
using namespace telemetry;
using test::get;
using test::post;

constexpr const char* kToken = "a-token-of-sixteen-chars";

// Steps [from, to): a steady grad norm of 1 (`spike` times that at step `spike_at`), each step's batch id "b<step>".
std::string steps(int from, int to, int spike_at = -1, double spike = 50.0) {
    std::string out;
    for (int s = from; s < to; s++)
        out += fmt::format("{{\"step\": {}, \"loss\": 2.0, \"grad_norm\": {}, \"batch\": \"b{}\"}}\n", s,
                           s == spike_at ? spike : 1.0, s);
    return out;
}

class BatchIds : public ::testing::Test {
  protected:
    test::ScratchDir dir{"batch_ids"};
    std::string store() const { return dir.file("s.db"); }
    test::CommandResult ingest(const std::string& text, const std::string& run, const std::string& extra = "") {
        std::ofstream(dir.file(run + ".jsonl"), std::ios::binary) << text;
        return test::run_command(fmt::format("{} ingest --store {} --run {} {} {}", HLAT_BINARY, store(), run, extra,
                                             dir.file(run + ".jsonl")));
    }
    // The ids stored for the step, or "-" when it has no batch record.
    std::string ids(const std::string& run, int64_t step) {
        Reader r(store());
        auto b = r.batch(r.find_run(run)->id, step);
        return b ? json::parse(b->data)["ids"].dump() : "-";
    }
    std::vector<std::string> keys(const std::string& run) {
        Reader r(store());
        return r.keys(r.find_run(run)->id);
    }
};

TEST_F(BatchIds, AJsonlLogsIdsAreKeptByHlatIngestOnceAndFollowed) {
    const std::string log = "{\"step\": 0, \"loss\": 2.0, \"batch\": \"3f9a\"}\n"
                            "{\"step\": 1, \"loss\": 1.9, \"batch\": [\"shard3:offset12345\", \"shard4:offset0\"]}\n"
                            "{\"step\": 2, \"loss\": 1.8, \"batch\": 7}\n"           // a number named batch: a metric
                            "{\"step\": 2, \"batch\": \"late\"}\n"                  // its ids in a second record
                            "{\"step\": 3, \"loss\": 1.7, \"batch\": \"first\"}\n"
                            "{\"step\": 3, \"batch\": \"second\"}\n"                // a step's first ids are kept
                            "{\"step\": 4, \"loss\": 1.6, \"batch\": null}\n"       // null: none
                            "{\"step\": 5, \"loss\": 1.5, \"batch\": \"caf\\u00e9 \\\"q\\\"\"}\n";  // escapes
    for (const std::string extra : {"", "--follow --idle-exit 1"}) {
        const std::string run = extra.empty() ? "once" : "followed";
        auto r = ingest(log, run, extra);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_EQ(ids(run, 0), R"(["3f9a"])") << run;
        EXPECT_EQ(ids(run, 1), R"(["shard3:offset12345","shard4:offset0"])") << run;
        EXPECT_EQ(ids(run, 2), R"(["late"])") << run;
        EXPECT_EQ(ids(run, 3), R"(["first"])") << run;
        EXPECT_EQ(ids(run, 4), "-") << run;
        EXPECT_EQ(ids(run, 5), R"(["café \"q\""])") << run;
        EXPECT_EQ(keys(run), (std::vector<std::string>{"batch", "loss"})) << "ids are no metric; the number 7 is";
        Reader reader(store());
        EXPECT_EQ(reader.series(reader.find_run(run)->id, "loss", 0, 100).size(), 6u) << run;
    }
}

// Each bad "batch" stops the import at its line with a sentence naming the
// field (the lines before it kept), and is a 400 over HTTP, nothing of the
// request written.
TEST_F(BatchIds, BadIdsAreABadLineNamingTheField) {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"("batch": ["a", 3])", R"(field "batch": batch id 1 is 3, not a string)"},
        {R"("batch": ["a", {"b": "c"}])", R"(field "batch": batch id 1 is {)"},
        {R"("batch": ")" + std::string(257, 'x') + "\"", R"(field "batch": the batch id is 257 bytes, the most is 256)"},
        {R"("batch": "")", R"(field "batch": the batch id is empty)"},
        {R"("batch": ["ok", "tab\there"])", R"(field "batch": batch id 1 holds a control character)"},
        {R"("batch": true)", R"(field "batch" is true, not a number)"},
        {R"("batch": [])", R"(field "batch" is an empty list or object)"},
    };
    std::string many = R"("batch": [)";
    for (int i = 0; i < 1025; i++) many += fmt::format("{}\"id{}\"", i ? "," : "", i);
    many += "]";
    std::vector<std::pair<std::string, std::string>> all = bad;
    all.push_back({many, R"(field "batch" holds 1025 batch ids; a step takes at most 1024)"});
    { Writer w(store()); }
    web::Api api(store(), kToken);
    for (size_t i = 0; i < all.size(); i++) {
        const auto& [field, message] = all[i];
        SCOPED_TRACE(field.substr(0, 80));
        const std::string run = fmt::format("bad{}", i);
        const std::string text = steps(0, 3) + "{\"step\": 3, \"loss\": 1.0, " + field + "}\n" + steps(4, 6);
        auto r = ingest(text, run);
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_NE(r.output.find(run + ".jsonl:4: " + message), std::string::npos) << r.output;
        EXPECT_EQ(ids(run, 2), R"(["b2"])") << "the lines before it are stored";
        Reader reader(store());
        EXPECT_EQ(reader.series(reader.find_run(run)->id, "loss", 0, 100).size(), 3u);

        const std::string http = "http" + run;
        ASSERT_EQ(api.handle(post("/api/v1/runs/" + http + "/start", kToken, "{}")).status, 200);
        auto reply = api.handle(post("/api/v1/runs/" + http + "/ingest", kToken, text));
        EXPECT_EQ(reply.status, 400) << reply.body;
        EXPECT_EQ(json::parse(reply.body)["error"].get<std::string>().find("request:4: " + message), 0u) << reply.body;
        Reader after(store());
        EXPECT_FALSE(after.batch(after.find_run(http)->id, 0)) << "nothing of the request is written";
    }
    // A number, or a list of numbers, named batch is a metric (and a vector) as it was before.
    ASSERT_EQ(api.handle(post("/api/v1/runs/numbers/start", kToken, "{}")).status, 200);
    auto reply = api.handle(post("/api/v1/runs/numbers/ingest", kToken,
                                 "{\"step\": 0, \"batch\": 32}\n{\"step\": 1, \"batch\": [1, 2]}\n"));
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(json::parse(reply.body)["values"], 3) << "1 number and a vector of 2";
}

// The fast JSON path (simdjson) and the full one read every line with a
// "batch" alike: the same ids, or both refuse it (the full one forced by a
// bare NaN, which only it reads). Lines without one stay on the fast path.
TEST_F(BatchIds, TheFastPathReadsIdsAsTheFullOneDoes) {
    const std::vector<std::string> lines = {
        R"({"step": 1, "loss": 2.5, "batch": "a"})",
        R"({"step": 2, "batch": ["a", "b", "a"], "loss": 1})",
        R"({"step": 3, "batch": "x\u00e9\n"})",                       // an escaped control character: refused
        R"({"step": 4, "batch": "\ud83d\ude00"})",                    // a surrogate pair
        R"({"step": 5, "batch": "\udc00"})",                          // a lone low surrogate
        R"({"step": 6, "batch": ["a", null]})",                       // null is no id
        R"({"step": 7, "batch": ["a"], "batch": "b"})",               // repeated: the DOM keeps the last
        R"({"step": 8, "batch": [["a"]]})",                           // nested
        R"({"step": 9, "batch": 3, "r": {"layers.0": 1}})",           // a metric
        R"({"step": 10, "batch": "1e-3"})",                           // a string: an id, not a number
        R"({"step": 11, "batch": "a", "r": {"layers.0": 1, "layers.1": 2}})",
    };
    LineParser fast("log", LogFormat::Jsonl), full("log", LogFormat::Jsonl);
    for (const std::string& line : lines) {
        SCOPED_TRACE(line);
        const std::string forced = line.substr(0, line.size() - 1) + R"(, "zz_forced": NaN})";
        std::optional<ParsedBatch> a, b;
        std::string why_a, why_b;
        try {
            a = fast.parse(line + "\n", 100.0);
        } catch (const IngestError& e) {
            why_a = e.what();
        }
        try {
            b = full.parse(forced + "\n", 100.0);
        } catch (const IngestError& e) {
            why_b = e.what();
        }
        ASSERT_EQ(a.has_value(), b.has_value()) << "both read it, or both refuse it: " << why_a << " | " << why_b;
        if (!a) continue;
        ASSERT_EQ(a->batches.size(), b->batches.size());
        for (size_t i = 0; i < a->batches.size(); i++) {
            EXPECT_EQ(a->batches[i].step, b->batches[i].step);
            EXPECT_EQ(a->batches[i].ids, b->batches[i].ids);
        }
        std::erase_if(b->points, [](const auto& p) { return p.key == "zz_forced"; });
        ASSERT_EQ(a->points.size(), b->points.size());
        for (size_t i = 0; i < a->points.size(); i++) EXPECT_EQ(a->points[i].key, b->points[i].key);
        EXPECT_EQ(a->vectors.size(), b->vectors.size());
    }
    // --map names another field as the batch ids, on either path.
    LineParser mapped("log", LogFormat::Jsonl, "", {{"sample_hash", "batch"}});
    ParsedBatch m = mapped.parse("{\"step\": 0, \"sample_hash\": \"h\", \"loss\": 1}\n", 100.0);
    ASSERT_EQ(m.batches.size(), 1u);
    EXPECT_EQ(m.batches[0].ids, std::vector<std::string>{"h"});
    EXPECT_EQ(m.points.size(), 1u);
}

// Over HTTP, with grad_spike's policy rewind_skip: the steps' ids are kept,
// and the halt reply (and GET state) carries the plan: where to restart and
// which batch ids to skip, those of the spike's step and the one before it
// (skip_steps 2). A body of 200 steps (a backlog after an outage) whose spike
// is at step 150 gets the same plan. A restart clears it.
TEST_F(BatchIds, ARewindSkipHaltTellsTheClientWhichIdsToSkip) {
    { Writer w(store()); }
    web::Api api(store(), kToken);
    const json start = {{"config", {{"detectors", {{"grad_spike", {{"policy", "rewind_skip"}}},
                                                   {"rewind", {{"min_steps_back", 10}, {"skip_steps", 2}}}}}}}};
    ASSERT_EQ(api.handle(post("/api/v1/runs/live/start", kToken, start.dump())).status, 200);
    auto send = [&](const std::string& run, const std::string& lines) {
        auto r = api.handle(post("/api/v1/runs/" + run + "/ingest", kToken, lines));
        EXPECT_EQ(r.status, 200) << r.body;
        return json::parse(r.body);
    };
    json reply = send("live", steps(0, 30));
    EXPECT_EQ(reply["state"], "running") << reply;
    EXPECT_FALSE(reply.contains("halt"));
    reply = send("live", steps(30, 32, 31));
    ASSERT_EQ(reply["state"], "halt") << reply;
    EXPECT_EQ(reply["halt"]["by"], "detector");
    ASSERT_TRUE(reply["halt"].contains("rewind")) << reply;
    const json plan = reply["halt"]["rewind"];
    EXPECT_EQ(plan["alert_step"], 31);
    EXPECT_EQ(plan["restart_at_or_before"], 20) << "10 steps before the first skipped step (30)";
    EXPECT_EQ(plan["skip_steps"], json({30, 31}));
    EXPECT_EQ(plan["skip_batch_ids"], json({"b30", "b31"}));
    EXPECT_EQ(json::parse(api.handle(get("/api/v1/runs/live/state")).body)["halt"]["rewind"], plan);
    EXPECT_EQ(ids("live", 31), R"(["b31"])");
    EXPECT_EQ(ids("live", 0), R"(["b0"])");

    // The client reloads a checkpoint and comes back: a restart, no plan any more.
    ASSERT_EQ(api.handle(post("/api/v1/runs/live/finish", kToken, R"({"status": "halted", "step": 31})")).status, 200);
    json resumed = start;
    resumed["resume"] = true;
    ASSERT_EQ(api.handle(post("/api/v1/runs/live/start", kToken, resumed.dump())).status, 200);
    reply = send("live", steps(20, 22));
    EXPECT_EQ(reply["state"], "running") << reply;

    ASSERT_EQ(api.handle(post("/api/v1/runs/backlog/start", kToken, start.dump())).status, 200);
    reply = send("backlog", steps(0, 200, 150));
    ASSERT_EQ(reply["state"], "halt") << reply;
    EXPECT_EQ(reply["halt"]["rewind"]["skip_batch_ids"], json({"b149", "b150"})) << reply;
    EXPECT_EQ(ids("backlog", 199), R"(["b199"])");

    // A plain halt policy: a halt without a plan.
    const json halt = {{"config", {{"detectors", {{"grad_spike", {{"policy", "halt"}}}}}}}};
    ASSERT_EQ(api.handle(post("/api/v1/runs/plain/start", kToken, halt.dump())).status, 200);
    reply = send("plain", steps(0, 32, 31));
    ASSERT_EQ(reply["state"], "halt") << reply;
    EXPECT_FALSE(reply["halt"].contains("rewind")) << reply;
}

}  // namespace
}  // namespace hlat
