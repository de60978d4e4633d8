// Other trainers' logs: the parser's verdicts, and `hlat ingest` / `hlat runs`
// as a user runs them.
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "telemetry/untrusted_text.h"
#include "test_util.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <thread>

namespace hlat {
namespace {

using namespace telemetry;

std::string parse_error(const std::string& text, LogFormat format = LogFormat::Jsonl, const std::string& pattern = "") {
    try {
        LineParser parser("log.jsonl", format, pattern);
        parser.parse(text, 0.0);
    } catch (const IngestError& e) {
        return e.what();
    }
    return "";
}

ParsedBatch parse(const std::string& text, LogFormat format = LogFormat::Jsonl, const std::string& pattern = "",
                  KeyMap rename = {}) {
    LineParser parser("log", format, pattern, std::move(rename));
    return parser.parse(text, 42.0);
}

double value_at(const std::vector<MetricPoint>& pts, const std::string& key, int64_t step) {
    for (const auto& p : pts)
        if (p.key == key && p.step == step) return p.value;
    ADD_FAILURE() << "no " << key << " at step " << step;
    return -1.0;
}

TEST(Ingest, JsonlRecordsBecomeMetrics) {
    LineParser parser("log.jsonl", LogFormat::Jsonl);
    auto pts = parser.parse("{\"step\": 0, \"loss\": 2.5, \"lr\": 1e-4, \"time\": 1700000000.25}\n"
                            "\n"
                            "{\"step\": 1, \"loss\": \"nan\", \"grad_norm\": \"inf\"}\n",
                            42.0).points;
    ASSERT_EQ(pts.size(), 4u);
    EXPECT_EQ(pts[0].key, "loss");
    EXPECT_EQ(pts[0].wall_time, 1700000000.25);
    EXPECT_TRUE(std::isnan(value_at(pts, "loss", 1)));
    EXPECT_EQ(value_at(pts, "grad_norm", 1), INFINITY);
    EXPECT_EQ(pts.back().wall_time, 42.0) << "no time field: the ingestion time";
    EXPECT_EQ(parser.last_step(), 1);
}

// What Python's json.dumps writes for non-finite floats, and null (pandas, JavaScript).
TEST(Ingest, BareNonFiniteLiteralsAndNull) {
    auto b = parse("{\"step\": 0, \"loss\": NaN, \"grad_norm\": Infinity, \"x\": -Infinity, \"eval\": null}\n"
                   "{\"step\": 1, \"loss\": 1.0, \"note_NaN\": 2, \"tag\": \"NaN\"}\n");
    EXPECT_TRUE(std::isnan(value_at(b.points, "loss", 0)));
    EXPECT_EQ(value_at(b.points, "grad_norm", 0), INFINITY);
    EXPECT_EQ(value_at(b.points, "x", 0), -INFINITY);
    EXPECT_EQ(value_at(b.points, "note_NaN", 1), 2.0) << "a key containing NaN is left alone";
    EXPECT_TRUE(std::isnan(value_at(b.points, "tag", 1))) << "the string \"NaN\" is a NaN too";
    for (const auto& p : b.points) EXPECT_NE(p.key, "eval") << "null is a missing value, not a NaN";
}

TEST(Ingest, EventLines) {
    auto b = parse("{\"step\": 10, \"replica_mismatch\": 1}\n{\"step\": 10, \"event\": \"replica_mismatch\", "
                   "\"detail\": \"rank 1 differs\"}\n");
    ASSERT_EQ(b.events.size(), 1u);
    EXPECT_EQ(b.events[0].kind, "replica_mismatch");
    EXPECT_EQ(b.events[0].detail, "rank 1 differs");
    EXPECT_EQ(b.events[0].step, 10);
}

TEST(Ingest, CsvRecordsBecomeMetrics) {
    auto b = parse("step, loss ,lr\n0,2.5,0.001\n1,2.4,\n", LogFormat::Csv);
    ASSERT_EQ(b.points.size(), 3u) << "an empty cell is a missing value";
    EXPECT_EQ(b.points[1].key, "lr");
    EXPECT_EQ(b.points[2].value, 2.4);
    EXPECT_NE(parse_error("epoch,loss\n", LogFormat::Csv).find("no \"step\" column"), std::string::npos);
}

// llm.c's main.log, as its logger writes it (train, validation, HellaSwag lines),
// and modded-nanogpt's variant with units.
TEST(Ingest, LlmcLogs) {
    auto b = parse("s:0 tel:10.9824\ns:0 trl:10.9947 lr:0.000006 norm:15.32\ns:1 trl:10.5012 lr:0.000012 norm:9.87\n"
                   "s:1 eval:0.2496\ns:2 trl:3.28 train_time:1234ms step_avg:nanms\n",
                   LogFormat::Llmc);
    EXPECT_EQ(value_at(b.points, "loss", 0), 10.9947);
    EXPECT_EQ(value_at(b.points, "heldout_loss", 0), 10.9824);
    EXPECT_EQ(value_at(b.points, "grad_norm", 1), 9.87);
    EXPECT_EQ(value_at(b.points, "lr", 1), 0.000012);
    EXPECT_EQ(value_at(b.points, "hellaswag_acc", 1), 0.2496);
    EXPECT_EQ(value_at(b.points, "train_time_ms", 2), 1234.0);
    EXPECT_TRUE(std::isnan(value_at(b.points, "step_avg_ms", 2)));
    auto code = parse("import torch\nprint('hello')\ns:0 trl:1.0\n", LogFormat::Llmc);
    EXPECT_EQ(code.skipped, 2) << "modded-nanogpt logs start with the script's code";
    EXPECT_NE(parse_error("s:0 trl:abc\n", LogFormat::Llmc).find("log.jsonl:1: \"abc\" is not a number"),
              std::string::npos);
}

// torchtitan's console line, colour codes and all.
TEST(Ingest, PatternLogs) {
    std::string titan =
        "[rank0]:2025-01-01 12:00:00,000 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.2345  \x1b[33mgrad_norm: "
        " 3.1416  \x1b[38;2;54;234;195mmemory: 34.52GiB(36.23%)  \x1b[34mtps: 1,234  \x1b[36mtflops: 56.78  "
        "\x1b[35mmfu: 12.34%\x1b[39m\n"
        "[rank0]: some other line\n"
        "step: 2  loss: 11.5  grad_norm: 2.0  memory: 34.52GiB(36.23%)  tps: 12,345  tflops: 56.0  mfu: 12.0%\n";
    auto b = parse(titan, LogFormat::Pattern, "step: {step} loss: {loss} grad_norm: {grad_norm} memory: {_}GiB({_}%) tps: {tps}");
    EXPECT_EQ(b.records, 2);
    EXPECT_EQ(b.skipped, 1);
    EXPECT_EQ(value_at(b.points, "loss", 1), 12.2345);
    EXPECT_EQ(value_at(b.points, "grad_norm", 1), 3.1416);
    EXPECT_EQ(value_at(b.points, "tps", 2), 12345.0) << "thousands separators";
    for (const auto& p : b.points) EXPECT_NE(p.key, "_");
    EXPECT_NE(parse_error("x\n", LogFormat::Pattern, "loss: {loss}").find("has no {step}"), std::string::npos);
    EXPECT_NE(parse_error("x\n", LogFormat::Pattern, "").find("--format pattern needs --pattern"), std::string::npos);
}

TEST(Ingest, NamesMapped) {
    auto b = parse("{\"iter\": 3, \"train_loss\": 2.0, \"norm\": 1.5}\n", LogFormat::Jsonl, "",
                   parse_key_map("train_loss=loss, norm=grad_norm,iter=step"));
    EXPECT_EQ(value_at(b.points, "loss", 3), 2.0);
    EXPECT_EQ(value_at(b.points, "grad_norm", 3), 1.5);
    EXPECT_THROW(parse_key_map("train_loss"), IngestError);
}

TEST(Ingest, FormatFromContentThenExtension) {
    EXPECT_EQ(detect_format("main.log", "s:0 tel:10.98\n"), LogFormat::Llmc);
    EXPECT_EQ(detect_format("metrics.txt", "{\"step\": 0}\n"), LogFormat::Jsonl);
    EXPECT_EQ(detect_format("m.txt", "loss,step\n1,0\n"), LogFormat::Csv);
    EXPECT_EQ(detect_format("run/events.out.tfevents.1.host", "\x09"), LogFormat::TensorBoard);
    EXPECT_EQ(detect_format("x.jsonl", "garbage"), LogFormat::Jsonl);
    try {
        detect_format("console.log", "epoch 1 done, loss 2\n");
        FAIL();
    } catch (const IngestError& e) {
        EXPECT_NE(std::string(e.what()).find("--format"), std::string::npos) << e.what();
    }
    EXPECT_THROW(format_from_name("wandb"), IngestError);
}

// A trainer resumed from an earlier checkpoint logs steps again: those below
// the last step read are skipped and counted, the first values kept; equal
// steps add to the step.
TEST(Ingest, StepsBelowTheLastAreStaleAndSkipped) {
    LineParser p("log.jsonl", LogFormat::Jsonl);
    ParsedBatch b = p.parse("{\"step\": 5, \"loss\": 1}\n{\"step\": 5, \"acc\": 0.5}\n{\"step\": 3, \"loss\": 9}\n"
                            "{\"step\": 4, \"loss\": 9}\n{\"step\": 6, \"loss\": 2}\n", 0.0);
    EXPECT_EQ(b.records, 3);
    EXPECT_EQ(b.stale, 2);
    ASSERT_EQ(b.points.size(), 3u);
    EXPECT_EQ(b.points[2].step, 6);
    EXPECT_EQ(b.points[2].value, 2.0);
}

// parse_until_bad keeps every good line before a bad one, says where the bad
// one is, and can go on after it.
TEST(Ingest, ParsingUntilABadLineKeepsWhatCameBefore) {
    LineParser p("log.jsonl", LogFormat::Jsonl);
    std::string text;
    for (int s = 0; s < 10000; s++) text += fmt::format("{{\"step\": {}, \"loss\": 1}}\n", s);
    text += "not json\n{\"step\": 10000, \"loss\": 2}\n";
    std::optional<BadLine> bad;
    ParsedBatch b = p.parse_until_bad(text, 0.0, &bad);
    EXPECT_EQ(b.records, 10000) << "every good line before the bad one";
    ASSERT_TRUE(bad.has_value());
    EXPECT_EQ(bad->line, 10001);
    EXPECT_NE(bad->message.find("log.jsonl:10001: not valid JSON: \"not json\""), std::string::npos) << bad->message;
    p.skip_lines(1);
    std::optional<BadLine> none;
    ParsedBatch rest = p.parse_until_bad(std::string_view(text).substr(bad->next), 0.0, &none);
    EXPECT_FALSE(none.has_value());
    EXPECT_EQ(rest.records, 1);
    EXPECT_EQ(p.last_step(), 10000);
}

// Hostile lines: a 10 MB line is quoted in 200 bytes, raw bytes are escaped,
// a line nested 100,000 deep is refused before parsing, and a key that is not
// UTF-8 is never taken.
TEST(Ingest, HostileLinesAreQuotedShortAndEscaped) {
    const std::string huge = "{\"step\": 1, \"loss\": " + std::string(10 << 20, '9') + "x}\n";
    std::string message = parse_error(huge);
    EXPECT_LT(message.size(), 400u) << "a 10 MB line is not echoed whole";
    EXPECT_NE(message.find(fmt::format("({} bytes)", huge.size() - 1)), std::string::npos) << message;
    message = parse_error("{\"step\": \"\xff\"}\n");
    EXPECT_NE(message.find("\\xff"), std::string::npos) << message;
    EXPECT_TRUE(valid_utf8(message));
    message = parse_error(std::string(100000, '[') + std::string(100000, ']') + "\n");
    EXPECT_NE(message.find("more than 64 deep"), std::string::npos) << message;
    message = parse_error("step,lo\xffss\n0,1\n", LogFormat::Csv);
    EXPECT_NE(message.find("metric key \"lo\\xffss\""), std::string::npos) << message;
    EXPECT_TRUE(valid_utf8(message));
}

TEST(Ingest, BadLinesNameFileAndLine) {
    EXPECT_NE(parse_error("{\"step\": 0, \"loss\": 1}\n{\"step\": 1, \"loss\": 1\n").find("log.jsonl:2: not valid JSON"),
              std::string::npos);
    EXPECT_NE(parse_error("{\"step\": 0, \"loss\": \"high\"}\n").find("log.jsonl:1: field \"loss\" is \"high\", not a number"),
              std::string::npos);
    EXPECT_NE(parse_error("{\"step\": 0, \"ok\": true}\n").find("field \"ok\" is true, not a number"), std::string::npos);
    EXPECT_NE(parse_error("{\"loss\": 1.0}\n").find("log.jsonl:1: no \"step\" field"), std::string::npos);
    EXPECT_NE(parse_error("{\"step\": 1.5, \"loss\": 1}\n").find("not a non-negative integer"), std::string::npos);
    EXPECT_NE(parse_error("step,loss\n0,1\n1,x\n", LogFormat::Csv).find("log.jsonl:3: column \"loss\" is \"x\", not a number"),
              std::string::npos);
    EXPECT_NE(parse_error("step,loss\n0,1,2\n", LogFormat::Csv).find("3 cells for 2 columns"), std::string::npos);
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

// A bad line stops an import after keeping every line before it; the fixed
// log resumes the same run.
TEST_F(IngestCli, AFailedImportKeepsItsGoodLinesAndResumes) {
    write("bad.jsonl", "{\"step\": 0, \"loss\": 3.0}\n{\"step\": 1, \"loss\": oops}\n{\"step\": 2, \"loss\": 1.0}\n");
    std::string db = dir.file("s.db");
    auto r = hlat(fmt::format("ingest --store {} --run bad {}", db, dir.file("bad.jsonl")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("bad.jsonl:2: not valid JSON"), std::string::npos) << r.output;
    EXPECT_EQ(Reader(db).find_run("bad")->status, "stopped");
    write("ok.jsonl", "{\"step\": 0, \"loss\": 3.0}\n{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": 1.0}\n");
    ASSERT_EQ(hlat(fmt::format("ingest --store {} --run bad --resume {}", db, dir.file("ok.jsonl"))).exit_code, 0);
    {
        Reader after(db);
        EXPECT_EQ(after.find_run("bad")->status, "finished");
        EXPECT_EQ(after.series(after.find_run("bad")->id, "loss", 0, 10).size(), 3u);
    }
    write("console.log", "step 1 loss 2\n");
    r = hlat(fmt::format("ingest --store {} --run c --pattern 'iter: {{step}}' {}", db, dir.file("console.log")));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("does --pattern match its lines?"), std::string::npos) << r.output;
    r = hlat(fmt::format("ingest --store {} --run c --format wandb {}", db, dir.file("console.log")));
    EXPECT_NE(r.output.find("unknown log format \"wandb\""), std::string::npos) << r.output;
    Reader reader(db);
    EXPECT_FALSE(reader.find_run("c").has_value());
}

// A log with a planted spike and a NaN: the alerts are raised while importing,
// stored and counted, and `hlat detect` replaying the stored run agrees.
TEST_F(IngestCli, ImportedRunsGoThroughTheDetectors) {
    std::string log;
    for (int s = 0; s < 80; s++) {
        double g = s == 50 ? 25.0 : 1.0 + 0.01 * (s % 7);
        log += s == 70 ? fmt::format("{{\"step\": {}, \"train_loss\": NaN, \"grad_norm\": {}}}\n", s, g)
                       : fmt::format("{{\"step\": {}, \"train_loss\": {}, \"grad_norm\": {}}}\n", s, 3.0 - 0.01 * s, g);
    }
    write("spiky.jsonl", log);
    std::string db = dir.file("s.db");
    auto r = hlat(fmt::format("ingest --store {} --run spiky --map train_loss=loss --meta precision=bf16,bytes_per_param=10 {}",
                              db, dir.file("spiky.jsonl")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Reader reader(db);
    auto run = reader.find_run("spiky");
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->precision, "bf16");
    EXPECT_NE(run->meta.find("\"bytes_per_param\":10"), std::string::npos) << run->meta;
    auto alerts = reader.alerts(run->id);
    ASSERT_EQ(alerts.size(), 2u);
    EXPECT_EQ(alerts[0].kind, "grad_spike");
    EXPECT_EQ(alerts[0].step, 50);
    EXPECT_EQ(alerts[1].kind, "nonfinite");
    EXPECT_EQ(alerts[1].step, 70);
    EXPECT_NE(alerts[1].message.find("reported a non-finite value"), std::string::npos)
        << "an ingested run's update was not skipped by hlat: " << alerts[1].message;
    EXPECT_EQ(reader.runs()[0].alerts, 2) << "counted in the runs list";

    r = hlat(fmt::format("detect --store {} --run spiky", db));
    EXPECT_EQ(r.exit_code, 3) << "a halt-policy alert (nonfinite) fired: " << r.output;
    EXPECT_NE(r.output.find("step      50  warning   grad_spike"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("step      70  critical  nonfinite"), std::string::npos) << r.output;
    r = hlat(fmt::format("detect --store {} --run spiky --save", db));
    EXPECT_NE(r.output.find("saved 0 new alerts (2 were stored already)"), std::string::npos)
        << "online and offline raised the same alerts: " << r.output;
}

TEST_F(IngestCli, DetectSaysWhenNoDetectorCanWatchARun) {
    write("m.csv", "step,objective\n0,2.0\n1,1.9\n");  // a name no tool's habit makes the loss
    std::string db = dir.file("s.db");
    auto r = hlat(fmt::format("ingest --store {} --run unmapped {}", db, dir.file("m.csv")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("run \"unmapped\" is not watched: none of its keys (objective) feeds a detector"),
              std::string::npos)
        << r.output;
    r = hlat(fmt::format("detect --store {} --run unmapped", db));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("its keys: objective"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--map"), std::string::npos) << r.output;
    r = hlat(fmt::format("ingest --store {} --run mapped --map objective=loss {}", db, dir.file("m.csv")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("not watched"), std::string::npos) << r.output;
    EXPECT_EQ(hlat(fmt::format("detect --store {} --run mapped", db)).exit_code, 0);
    // Another trainer's name for the loss needs no --map.
    write("hf.csv", "step,train_loss\n0,2.0\n1,1.9\n");
    r = hlat(fmt::format("ingest --store {} --run hf {}", db, dir.file("hf.csv")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("\"train_loss\" is read as hlat's \"loss\""), std::string::npos) << r.output;
    EXPECT_EQ(hlat(fmt::format("detect --store {} --run hf", db)).exit_code, 0);

    r = hlat(fmt::format("runs --store {} --delete unmapped", db));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Reader reader(db);
    EXPECT_FALSE(reader.find_run("unmapped").has_value());
    EXPECT_TRUE(reader.find_run("mapped").has_value());
    EXPECT_EQ(hlat(fmt::format("runs --store {} --delete unmapped", db)).exit_code, 1);
}

// ingest --follow lives through a bad line (it is recorded, not fatal), and
// with --on-halt exit a halt-policy alert ends it with code 3, run halted.
TEST_F(IngestCli, FollowSurvivesBadLinesAndHaltsOnAlert) {
    std::string db = dir.file("s.db"), log = dir.file("live.jsonl");
    std::string text;
    for (int s = 0; s < 30; s++) text += fmt::format("{{\"step\": {}, \"loss\": {}, \"grad_norm\": 1.0}}\n", s, 3.0 - 0.01 * s);
    text += "{\"step\": 30, \"loss\": oops}\n";
    text += "{\"step\": 31, \"loss\": NaN, \"grad_norm\": 1.0}\n";
    text += "{\"step\": 32, \"loss\": 2.0, \"grad_norm\": 1.0}\n";
    write("live.jsonl", text);
    auto r = hlat(fmt::format("ingest --store {} --run live --follow --idle-exit 20 --on-halt exit {}", db, log));
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("live.jsonl:31: not valid JSON: \"{\\\"step\\\": 30, \\\"loss\\\": oops}\" (line skipped; following goes on)"), std::string::npos) << r.output;
    Reader reader(db);
    auto run = reader.find_run("live");
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->status, "halted");
    EXPECT_EQ(reader.last_step(run->id, "loss"), 32) << "lines after the bad one were kept";
    auto alerts = reader.alerts(run->id);
    ASSERT_EQ(alerts.size(), 1u);
    EXPECT_EQ(alerts[0].kind, "nonfinite");
    bool recorded = false;
    for (const Event& e : reader.events(run->id)) recorded = recorded || e.kind == "ingest_error";
    EXPECT_TRUE(recorded);

    // Resumed (after a kill -9, say) it reads the log again from the start:
    // the rows are kept once, and the steps its detectors already saw raise
    // nothing again: no alert stored twice, no halt fired twice.
    write("live.jsonl", text + "{\"step\": 33, \"loss\": 2.0, \"grad_norm\": 1.0}\n");
    r = hlat(fmt::format("ingest --store {} --run live --resume --follow --idle-exit 1 --on-halt exit {}", db, log));
    EXPECT_EQ(r.exit_code, 0) << "the handled halt is not fired again\n" << r.output;
    Reader again(db);
    EXPECT_EQ(again.alerts(run->id).size(), 1u) << "the nonfinite alert of step 31 is stored once";
    EXPECT_EQ(again.last_step(run->id, "loss"), 33) << "and the new line is read";
    EXPECT_EQ(again.find_run("live")->status, "finished");
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
        fmt::format("{} {}/examples/pytorch_to_hlat.py {} 40", HLAT_PYTHON, HLAT_SOURCE_DIR, log));
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
