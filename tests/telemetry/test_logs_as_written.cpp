// Logs as other trainers write them, read with no flag but the file: a bare
// "<step> <loss>" file (torchtitan's golden losses), torchtitan's and
// Megatron's console output, times counted from the run's start or in
// milliseconds, a run's seed and precision given by --meta, a trainer's own
// alert lines, and a finished log that went NaN leaving no halt pending.
#include "report/postmortem.h"
#include "report/setting_verdict.h"
#include "telemetry/console_formats.h"
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
using namespace std::string_literals;

double value_at(const std::vector<MetricPoint>& pts, const std::string& key, int64_t step) {
    for (const auto& p : pts)
        if (p.key == key && p.step == step) return p.value;
    ADD_FAILURE() << "no " << key << " at step " << step;
    return -1.0;
}

// What torchtitan prints (colour codes, the logger's prefix, a validation line).
const char* kTorchtitanLog =
    "[rank0]:[titan] 2025-06-01 10:00:00,000 - root - INFO - Starting job: Llama 3 8B training\n"
    "[rank0]:[titan] 2025-06-01 10:00:01,000 - root - INFO - Training starts at step 1.\n"
    "[rank0]:[titan] 2025-06-01 10:00:05,000 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.2365  \x1b[33mgrad_norm: "
    " 3.9561  \x1b[38;2;54;234;195mmemory: 42.30GiB(44.52%)  \x1b[34mtps: 1,040  \x1b[36mtflops: 0.06  \x1b[35mmfu: "
    "0.01%\x1b[39m\n"
    "[rank0]:[titan] 2025-06-01 10:00:06,000 - root - INFO - step:  2  loss: 11.5000  grad_norm:  3.1000  memory: "
    "42.30GiB(44.52%)  tps: 12,345  tflops: 0.70  mfu: 0.09%\n"
    "[rank0]:[titan] 2025-06-01 10:00:07,000 - root - INFO - validate step:  2  loss: 11.9000  memory: 40.00GiB(42.00%)\n";

// What Megatron-LM prints, after its argument dump.
const char* kMegatronLog =
    "------------------------ arguments ------------------------\n"
    "  accumulate_allreduce_grads_in_fp32 .............. True\n"
    "  lr .............................................. 0.00015\n"
    " [2025-06-01 10:00:00] iteration       10/  500000 | consumed samples:          640 | elapsed time per iteration "
    "(ms): 1234.5 | learning rate: 1.500000E-05 | global batch size:    64 | lm loss: 1.051355E+01 | loss scale: 1.0 | "
    "grad norm: 11.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    " [2025-06-01 10:00:02] iteration       20/  500000 | consumed samples:         1280 | lm loss: 9.871000E+00 | "
    "grad norm: 8.5 |\n"
    "-----------------------------------------------------------------------------------------------\n"
    " validation loss at iteration 20 | lm loss value: 9.912000E+00 | lm loss PPL: 2.018E+04 | \n";

// modded-nanogpt's log: its own source code, then llm.c-like step lines.
const char* kModdedNanogptLog =
    "import os\nimport sys\nwith open(sys.argv[0]) as f:\n    code = f.read()\n"
    "====================================================================================================\n"
    "step:0/3200 val_loss:10.8258 train_time:0ms step_avg:nanms\n"
    "step:1/3200 train_loss:10.8258 train_time:29785ms step_avg:nanms\n"
    "step:2/3200 train_loss:10.1234 train_time:30112ms step_avg:nanms\n";

TEST(LogsAsWritten, FormatsAreToldByContent) {
    EXPECT_EQ(detect_format("train.txt", kModdedNanogptLog), LogFormat::Llmc);
    EXPECT_EQ(detect_format("losses.txt", "1 10.8783\n2 10.7123\n3 10.5\n"), LogFormat::StepLoss);
    EXPECT_EQ(detect_format("losses.txt", "1 10.87\n2 10.7"), LogFormat::StepLoss) << "a head cut mid-line";
    EXPECT_EQ(detect_format("train.log", kTorchtitanLog), LogFormat::Torchtitan);
    EXPECT_EQ(detect_format("train.log", kMegatronLog), LogFormat::Megatron);
    EXPECT_THROW(detect_format("notes.txt", "1 10.8\nhello world\n"), IngestError) << "a stray line: not a loss file";
    EXPECT_THROW(detect_format("notes.txt", "step 5 done\n"), IngestError);
}

TEST(LogsAsWritten, StepLossFiles) {
    LineParser parser("losses.txt", LogFormat::StepLoss);
    auto b = parser.parse("1 10.8783\n2  10.7123\n3\tnan\n\n", 42.0);
    EXPECT_EQ(b.records, 3);
    EXPECT_EQ(value_at(b.points, "loss", 1), 10.8783);
    EXPECT_TRUE(std::isnan(value_at(b.points, "loss", 3)));
    try {
        parser.parse("4 10.1\n5 10.0.1\n", 42.0);
        ADD_FAILURE() << "a line that is no <step> <loss> is a bad line, as in JSONL";
    } catch (const IngestError& e) {
        EXPECT_NE(std::string(e.what()).find("losses.txt:6: not \"<step> <loss>\""), std::string::npos) << e.what();
    }
}

TEST(LogsAsWritten, ModdedNanogpt) {
    LineParser parser("train.txt", LogFormat::Llmc);
    auto b = parser.parse(kModdedNanogptLog, 42.0);
    EXPECT_EQ(b.records, 3);
    EXPECT_EQ(value_at(b.points, "val_loss", 0), 10.8258);
    EXPECT_EQ(value_at(b.points, "train_loss", 2), 10.1234) << "step 2 of 3200";
    EXPECT_EQ(value_at(b.points, "train_time_ms", 1), 29785.0);
}

TEST(LogsAsWritten, TorchtitanConsole) {
    LineParser parser("train.log", LogFormat::Torchtitan);
    auto b = parser.parse(kTorchtitanLog, 42.0);
    EXPECT_EQ(b.records, 3);
    EXPECT_EQ(b.skipped, 2) << "the banner lines";
    EXPECT_EQ(value_at(b.points, "loss", 1), 12.2365);
    EXPECT_EQ(value_at(b.points, "grad_norm", 1), 3.9561);
    EXPECT_EQ(value_at(b.points, "memory_GiB", 1), 42.30) << "the unit joins the name; the share in parentheses is dropped";
    EXPECT_EQ(value_at(b.points, "tps", 2), 12345.0) << "thousands separators";
    EXPECT_EQ(value_at(b.points, "mfu_pct", 2), 0.09);
    EXPECT_EQ(value_at(b.points, "heldout_loss", 2), 11.9) << "validate step: its loss is the held-out loss";
}

TEST(LogsAsWritten, MegatronConsole) {
    LineParser parser("train.log", LogFormat::Megatron);
    auto b = parser.parse(kMegatronLog, 42.0);
    EXPECT_EQ(b.records, 3);
    EXPECT_EQ(value_at(b.points, "lm loss", 10), 10.51355);
    EXPECT_EQ(value_at(b.points, "grad norm", 10), 11.234);
    EXPECT_EQ(value_at(b.points, "learning rate", 10), 1.5e-5);
    EXPECT_EQ(value_at(b.points, "elapsed time per iteration (ms)", 10), 1234.5);
    EXPECT_EQ(value_at(b.points, "consumed samples", 20), 1280.0);
    EXPECT_EQ(value_at(b.points, "lm loss validation", 20), 9.912) << "Megatron's own TensorBoard name";
}

TEST(LogsAsWritten, TimeFromTheRunsStartAndInMilliseconds) {
    LineParser relative("log.jsonl", LogFormat::Jsonl);
    auto b = relative.parse("{\"step\": 0, \"loss\": 3, \"time\": 0.5}\n{\"step\": 1, \"loss\": 2, \"time\": 12.5}\n",
                            1.7e9);
    ASSERT_EQ(b.points.size(), 2u);
    EXPECT_EQ(b.points[0].wall_time, 1.7e9) << "time 0.5 since the start is dated when it is read";
    EXPECT_EQ(b.points[1].wall_time, 1.7e9 + 12.0) << "and the spacing is kept";
    LineParser nanos("log.jsonl", LogFormat::Jsonl);
    b = nanos.parse("{\"step\": 0, \"loss\": 3, \"time\": 1700000000250000000}\n", 42.0);
    EXPECT_NEAR(b.points[0].wall_time, 1700000000.25, 1e-6) << "time.time_ns()";
    LineParser started("log.jsonl", LogFormat::Jsonl);
    started.set_time_origin(1.6e9);
    b = started.parse("{\"step\": 0, \"loss\": 3, \"time\": 30}\n", 1.7e9);
    EXPECT_EQ(b.points[0].wall_time, 1.6e9 + 30) << "dated from the run's start where the caller knows it";
    LineParser millis("log.jsonl", LogFormat::Jsonl);
    b = millis.parse("{\"step\": 0, \"loss\": 3, \"time\": 1700000000500}\n", 42.0);
    EXPECT_EQ(b.points[0].wall_time, 1700000000.5);
    LineParser unix_time("log.jsonl", LogFormat::Jsonl);
    b = unix_time.parse("{\"step\": 0, \"loss\": 3, \"time\": 1700000000.25}\n", 42.0);
    EXPECT_EQ(b.points[0].wall_time, 1700000000.25);
}

TEST(LogsAsWritten, AlertLines) {
    LineParser parser("log.jsonl", LogFormat::Jsonl);
    auto b = parser.parse("{\"step\": 3, \"alert\": \"data\", \"text\": \"shard 7 unreadable\", \"level\": \"error\"}\n",
                          42.0);
    ASSERT_EQ(b.events.size(), 1u);
    EXPECT_EQ(b.events[0].kind, "alert");
    auto detail = nlohmann::json::parse(b.events[0].detail);
    EXPECT_EQ(detail["level"], "critical") << "error reads as critical";
    EXPECT_EQ(detail["text"], "shard 7 unreadable");
    EXPECT_THROW(parser.parse("{\"step\": 4, \"alert\": \"x\", \"level\": \"loud\"}\n", 42.0), IngestError);
    EXPECT_THROW(parser.parse("{\"step\": 4, \"alert\": \"\"}\n", 42.0), IngestError);
    EXPECT_THROW(parser.parse("{\"step\": 4, \"event\": \"alert\", \"detail\": \"{\\\"title\\\": 5}\"}\n", 42.0),
                 IngestError)
        << "the event kind alert is only written as an alert line";
    b = parser.parse("{\"step\": 5, \"loss\": 2, \"alert\": 0}\n", 42.0);
    EXPECT_EQ(value_at(b.points, "alert", 5), 0.0) << "a number named alert is a metric, as it always was";
}

class LogsCli : public ::testing::Test {
  protected:
    test::ScratchDir dir{"logs_as_written"};
    std::string db = dir.file("s.db");
    test::CommandResult hlat(const std::string& args) {
        return test::run_command(fmt::format("{} {}", HLAT_BINARY, args));
    }
    std::string write(const std::string& name, const std::string& text) {
        std::ofstream(dir.file(name)) << text;
        return dir.file(name);
    }
};

TEST_F(LogsCli, ALossFileImportsByContent) {
    std::string text;
    for (int s = 1; s <= 30; s++) text += fmt::format("{} {:.4f}\n", s, 10.0 - 0.1 * s);
    auto r = hlat(fmt::format("ingest --store {} --run titan-golden --meta precision=bfloat16 {}", db,
                              write("llama3.txt", text)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Reader reader(db);
    EXPECT_EQ(reader.find_run("titan-golden")->precision, "bf16") << "PyTorch's name read as hlat's";
    auto series = reader.series(reader.find_run("titan-golden")->id, "loss", 0, 100);
    ASSERT_EQ(series.size(), 30u);
    EXPECT_NEAR(series[29].value, 7.0, 1e-9);
    EXPECT_EQ(reader.runs()[0].steps(), 30) << "steps 1 to 30 are 30 steps";
    r = hlat(fmt::format("ingest --store {} --run titan-console {}", db, write("console.log", kTorchtitanLog)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(Reader(db).series(Reader(db).find_run("titan-console")->id, "tokens_per_s", 0, 10).size(), 2u)
        << "torchtitan's tps is hlat's tokens_per_s";
    r = hlat(fmt::format("ingest --store {} --run megatron {}", db, write("megatron.log", kMegatronLog)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Reader after(db);
    const int64_t id = after.find_run("megatron")->id;
    EXPECT_EQ(after.series(id, "loss", 0, 100).size(), 2u) << "lm loss is hlat's loss";
    EXPECT_EQ(after.series(id, "heldout_loss", 0, 100).size(), 1u);
    EXPECT_EQ(after.series(id, "lr", 0, 100).size(), 1u) << "learning rate";
}

// `--follow` started with the trainer, before its first step line: it waits
// for a line that tells the format, then reads from the top.
TEST_F(LogsCli, AFollowedConsoleLogWaitsForItsFormat) {
    std::string log = write("live.log", "[rank0]:[titan] 2025-06-01 10:00:00,000 - root - INFO - Starting job\n");
    const std::string cmd = fmt::format("{} ingest --store {} --run live --follow --idle-exit 3 {} > {} 2>&1 &",
                                        HLAT_BINARY, db, log, dir.file("out.txt"));
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    std::ofstream(log, std::ios::app) << kTorchtitanLog;
    std::string out;
    for (int i = 0; i < 200 && out.find("ingested") == std::string::npos; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::ifstream f(dir.file("out.txt"));
        out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    EXPECT_NE(out.find("no line tells its format yet"), std::string::npos) << out;
    Reader reader(db);
    auto run = reader.find_run("live");
    ASSERT_TRUE(run.has_value()) << out;
    EXPECT_EQ(reader.series(run->id, "loss", 0, 10).size(), 2u) << out;
}

// Imported again with --resume (the open last step read again): the loss
// jump's note dated a step back and the trainer's alert at the last step are
// not stored twice.
TEST_F(LogsCli, AResumedImportRaisesNoAlertTwice) {
    std::string text;
    for (int s = 0; s < 60; s++) text += fmt::format("{{\"step\": {}, \"loss\": 2.0}}\n", s);
    text += "{\"step\": 60, \"loss\": 5.0}\n{\"step\": 61, \"loss\": 2.0}\n"
            "{\"step\": 61, \"alert\": \"data\", \"text\": \"a shard skipped\", \"level\": \"info\"}\n";
    std::string file = write("r.jsonl", text);
    for (int i = 0; i < 2; i++) {
        auto r = hlat(fmt::format("ingest --store {} --run r {} {}", db, i ? "--resume" : "", file));
        ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    Reader reader(db);
    std::vector<std::pair<std::string, int64_t>> alerts;
    for (const auto& a : reader.alerts(reader.find_run("r")->id)) alerts.push_back({a.kind, a.step});
    EXPECT_EQ(alerts, (std::vector<std::pair<std::string, int64_t>>{{"loss_jump", 60}, {"alert", 61}}));
    auto r = hlat(fmt::format("detect --store {} --run r --save", db));
    EXPECT_NE(r.output.find("saved 0 new alerts (2 were stored already)"), std::string::npos)
        << "replay raises the trainer's alert as the import did: " << r.output;
}

// A log that stops at a bad line before any record leaves no run: the retry
// its message suggests finds the name free. A binary file's error is escaped.
TEST_F(LogsCli, ABadFirstLineLeavesNoRun) {
    auto r = hlat(fmt::format("ingest --store {} --run nul {}", db, write("nul.jsonl", "\0\x01{\"step\":1}\n{\"step\": 2, \"loss\": 1}\n"s)));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("nothing is stored"), std::string::npos) << r.output;
    r = hlat(fmt::format("ingest --store {} --run nul --on-bad-line=skip {}", db, dir.file("nul.jsonl")));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(Reader(db).series(Reader(db).find_run("nul")->id, "loss", 0, 10).size(), 1u);
    r = hlat(fmt::format("ingest --store {} --run bin {}", db, write("bin.log", "\x7f" "ELF\x02\x01\0\0\x03 x"s)));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("\\x7fELF"), std::string::npos) << "escaped: " << r.output;
    EXPECT_NE(r.output.find("--format"), std::string::npos) << "the whole message, past the NUL: " << r.output;
}

// A finished log that went NaN: its alerts are stored, it ends "diverged",
// and no halt is left pending on a run nothing can stop.
TEST_F(LogsCli, AOneShotImportRequestsNoHalt) {
    std::string text;
    for (int s = 0; s < 60; s++)
        text += s < 40 ? fmt::format("{{\"step\": {}, \"loss\": {}}}\n", s, 3.0 - 0.01 * s)
                       : fmt::format("{{\"step\": {}, \"loss\": NaN}}\n", s);
    auto r = hlat(fmt::format("ingest --store {} --run nan {}", db, write("nan.jsonl", text)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("-> halt"), std::string::npos) << r.output;
    Reader reader(db);
    auto run = reader.find_run("nan");
    EXPECT_EQ(run->status, "diverged") << "its loss NaN from step 40 to the end";
    EXPECT_EQ(reader.alerts(run->id).size(), 1u) << "one alert for the stretch of 20 NaN steps";
    EXPECT_FALSE(reader.pending_halt(run->id).has_value()) << "no halt request on a finished run";
}

// The seed and precision by --meta (repeatable, or comma-separated): three
// seeds of bf16 all worse than their fp32 seeds give a paired verdict.
TEST_F(LogsCli, SeedAndPrecisionByMeta) {
    const double fp32[] = {3.0, 3.0005, 2.9995}, gaps[] = {0.012, 0.005, 0.017};
    std::vector<std::string> names;
    for (int seed = 0; seed < 3; seed++)
        for (const char* precision : {"fp32", "bf16"}) {
            const double heldout = fp32[seed] + (precision[0] == 'b' ? gaps[seed] : 0.0);
            std::string name = fmt::format("{}-s{}", precision, seed);
            std::string file = write(name + ".jsonl", fmt::format("{{\"step\": 0, \"loss\": 4.0}}\n"
                                                                  "{{\"step\": 100, \"loss\": 3.1, \"val_loss\": {}}}\n",
                                                                  heldout));
            auto r = hlat(fmt::format("ingest --store {} --run {} --meta seed={} --meta precision={} {}", db, name,
                                      seed, precision, file));
            ASSERT_EQ(r.exit_code, 0) << r.output;
            names.push_back(name);
        }
    Reader reader(db);
    auto runs = report::postmortem(reader, names, 50);
    EXPECT_EQ(runs[1].seed, 0);
    EXPECT_EQ(runs[5].seed, 2);
    auto settings = report::summarize_settings(runs);
    ASSERT_EQ(settings.size(), 2u);
    EXPECT_TRUE(settings[1].paired) << settings[1].verdict;
    EXPECT_EQ(settings[1].verdict.rfind("worse in 3 of 3 seeds (+0.0113; the 95% interval ±", 0), 0u) << settings[1].verdict;
}

}  // namespace
}  // namespace hlat
