// `hlat ingest` and the config loaders against careless and hostile input:
// every good line is kept (a bad one stops the import after them, or is
// skipped on request), a partial last line is reported, steps going back are
// handled by the documented rule, messages quote at most 200 escaped bytes,
// deep nesting is refused before parsing, and a killed follower's run does not
// stay "running".
#include "telemetry/reader.h"
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"
#include "test_util.h"
#include "web/api.h"
#include "web/ingest_api.h"

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

namespace hlat {
namespace {

using namespace telemetry;

std::string jsonl(int from, int to, double value = 1.0) {
    std::string out;
    for (int s = from; s < to; s++) out += fmt::format("{{\"step\": {}, \"loss\": {}}}\n", s, value);
    return out;
}

class HostileIngest : public ::testing::Test {
  protected:
    test::ScratchDir dir{"hostile_ingest"};
    std::string store() const { return dir.file("s.db"); }
    test::CommandResult ingest(const std::string& text, const std::string& run, const std::string& extra = "") {
        std::ofstream(dir.file(run + ".jsonl"), std::ios::binary) << text;
        return test::run_command(fmt::format("{} ingest --store {} --run {} {} {}", HLAT_BINARY, store(), run, extra,
                                             dir.file(run + ".jsonl")));
    }
    size_t stored(const std::string& run, const std::string& key = "loss") {
        Reader r(store());
        return r.series(r.find_run(run)->id, key, 0, 1L << 40).size();
    }
    std::string status(const std::string& run) { return Reader(store()).find_run(run)->status; }
};

TEST_F(HostileIngest, ABadLineKeepsEveryGoodLineBeforeIt) {
    const std::string text = jsonl(0, 10000) + "this is not json\n" + jsonl(10000, 10100);
    auto r = ingest(text, "stop");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("stop.jsonl:10001: not valid JSON: \"this is not json\""), std::string::npos) << r.output;
    EXPECT_EQ(stored("stop"), 10000u) << "all 10,000 good lines before the bad one";
    EXPECT_EQ(status("stop"), "stopped");
    r = ingest(text, "skip", "--on-bad-line=skip");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(stored("skip"), 10100u);
    Reader reader(store());
    auto events = reader.events(reader.find_run("skip")->id);
    EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const Event& e) { return e.kind == "ingest_error"; }));
    // Followed, the bad line sits in the middle of a 64 KB read: only it is passed over.
    r = ingest(text, "followed", "--follow --idle-exit 1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(stored("followed"), 10100u);
    EXPECT_EQ(status("followed"), "finished");
}

// A line with a NUL byte is a bad line naming its column: the parser before
// read up to the NUL and dropped the rest of the line without a word.
TEST_F(HostileIngest, ANulByteInALineIsABadLine) {
    const std::string text = std::string("{\"step\": 0, \"loss\": 1.0}\n{\"step\": 1, \"loss\": 2.0}") + '\0' +
                             "{\"step\": 2, \"loss\": 3.0}\n{\"step\": 3, \"loss\": 4.0}\n";
    auto r = ingest(text, "nul");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("nul.jsonl:2: a NUL byte at column 25"), std::string::npos) << r.output;
    EXPECT_EQ(stored("nul"), 1u) << "the line before it, nothing of it";
}

// A console line of 50,000 digits or spaces segfaulted `--pattern` (the
// regex engine recursed once per character): RE2 matches in linear time.
TEST_F(HostileIngest, PatternLinesOfAnyLengthAreMatchedWithoutRecursion) {
    std::string text;
    for (int s = 0; s < 10; s++) text += fmt::format("step: {} loss: {}\n", s, 3.0 - 0.1 * s);
    text += "step: " + std::string(50000, '7') + " loss: 1.0\n";  // a step too large to be one: a bad line
    text += "step: 10 loss:" + std::string(50000, ' ') + "2.0\n";  // white space runs are one \\s*
    text += std::string(50000, ' ') + "\n";
    text += "step: 11 loss: " + std::string(50000, '9') + "\n";  // a loss too large to hold: a bad line
    for (int s = 12; s < 15; s++) text += fmt::format("step: {} loss: 1.5\n", s);
    auto r = ingest(text, "console", "--pattern 'step: {step} loss: {loss}' --on-bad-line=skip");
    EXPECT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
    EXPECT_NE(r.output.find("console.jsonl:11:"), std::string::npos) << "the oversized step is named by its line";
    EXPECT_EQ(stored("console"), 14u) << "steps 0-14 but the bad line's";
}

TEST_F(HostileIngest, ATruncatedLastLineIsReportedWithoutLosingTheRest) {
    std::string text = jsonl(0, 100);
    text.resize(text.size() - 8);  // the last line cut mid-write, no newline
    auto r = ingest(text, "cut");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("cut.jsonl:100:"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("ends without a newline"), std::string::npos) << r.output;
    EXPECT_EQ(stored("cut"), 99u);
}

// `command` run as a child of its own (sh execs it): its exit code and peak
// resident memory in MB, measured by the kernel for that process alone.
std::pair<int, long> run_measured(const std::string& command) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::execl("/bin/sh", "sh", "-c", ("exec " + command + " > /dev/null 2>&1").c_str(), (char*)nullptr);
        ::_exit(127);
    }
    int status = 0;
    struct rusage usage{};
    ::wait4(pid, &status, 0, &usage);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, usage.ru_maxrss / 1024};
}

// `lines` JSONL lines of six values (about 100 bytes each) into `path`.
void write_large_log(const std::string& path, int lines) {
    std::ofstream out(path, std::ios::binary);
    for (int s = 0; s < lines; s++)
        out << fmt::format("{{\"step\": {}, \"loss\": {:.6f}, \"grad_norm\": {:.6f}, \"lr\": 0.0003, "
                           "\"tokens_per_s\": 123456.7, \"time\": {:.3f}}}\n",
                           s, 4.0 - s * 1e-6, 1.0 + (s % 7) * 0.01, 1.7e9 + s * 0.5);
}

// A large log is read and stored a piece at a time: a 60 MB import (600,000
// lines of six values) stores every value and its process stays far below
// the 743 MB it took when the whole file and every parsed point were held.
TEST_F(HostileIngest, ALargeImportIsStoredInBoundedMemory) {
    const std::string log = dir.file("large.jsonl");
    write_large_log(log, 600000);
    ASSERT_GT(std::filesystem::file_size(log), 60u << 20);
    const auto [exit_code, peak_mb] = run_measured(fmt::format("{} ingest --store {} --run large {}", HLAT_BINARY, store(), log));
    ASSERT_EQ(exit_code, 0);
    EXPECT_EQ(stored("large"), 600000u);
    EXPECT_EQ(stored("large", "tokens_per_s"), 600000u);
    EXPECT_EQ(status("large"), "finished");
    EXPECT_GT(peak_mb, 0);
    EXPECT_LT(peak_mb, 200) << "peak resident memory of a 60 MB import, in MB";
}

// Past the first 4 MB piece: a bad line stops the import there, every line
// before it stored; a CSV's header carries into every piece.
TEST_F(HostileIngest, PiecesOfALargeLogJoinUp) {
    std::string text = jsonl(0, 150000);  // about 4.5 MB: the bad line is in the second piece
    text += "not json\n" + jsonl(150000, 150010);
    auto r = ingest(text, "stops");
    EXPECT_EQ(r.exit_code, 1) << r.output.substr(0, 2000);
    EXPECT_NE(r.output.find("stops.jsonl:150001: not valid JSON"), std::string::npos) << r.output.substr(0, 2000);
    EXPECT_EQ(stored("stops"), 150000u);
    EXPECT_EQ(status("stops"), "stopped");
    std::string csv = "step,loss,grad_norm\n";
    for (int s = 0; s < 300000; s++) csv += fmt::format("{},{},1.0\n", s, 3.0 - s * 1e-6);
    std::ofstream(dir.file("big.csv"), std::ios::binary) << csv;
    r = test::run_command(fmt::format("{} ingest --store {} --run csv {}", HLAT_BINARY, store(), dir.file("big.csv")));
    ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
    EXPECT_EQ(stored("csv", "grad_norm"), 300000u) << "the header named the columns of every piece";
}

// An import interrupted (Ctrl-C, SIGTERM) ends its run "stopped" with what it
// stored so far, not "running" until the server's stale sweep.
TEST_F(HostileIngest, AnInterruptedImportEndsItsRunStopped) {
    const std::string log = dir.file("interrupted.jsonl");
    write_large_log(log, 400000);
    const pid_t pid = ::fork();
    if (pid == 0) {
        const std::string command = fmt::format("exec {} ingest --store {} --run cut {} > /dev/null 2>&1", HLAT_BINARY,
                                                store(), log);
        ::execl("/bin/sh", "sh", "-c", command.c_str(), (char*)nullptr);
        ::_exit(127);
    }
    bool storing = false;  // wait until the import is storing, then interrupt it
    for (int i = 0; i < 600 && !storing; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::optional<RunRecord> run;
        try {
            run = Reader(store()).find_run("cut");
        } catch (const std::exception&) {
        }
        storing = run.has_value();
    }
    ::kill(pid, SIGTERM);
    int wait_status = 0;
    ::waitpid(pid, &wait_status, 0);
    ASSERT_TRUE(storing) << "the import never opened its run";
    EXPECT_EQ(WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1, 1);
    EXPECT_EQ(status("cut"), "stopped");
    EXPECT_LT(stored("cut"), 400000u) << "interrupted before the end";
}

// A line past kMaxLineBytes is a bad line that says so, and a reader keeps
// at most 1 MB of it: the lines around it are stored.
TEST_F(HostileIngest, ALineOverOneMegabyteIsABadLine) {
    std::string text = jsonl(0, 5) + "{\"step\": 5, \"note\": \"" + std::string(3 << 20, 'x') + "\"}\n" + jsonl(6, 10);
    auto r = ingest(text, "long", "--on-bad-line=skip");
    EXPECT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
    EXPECT_NE(r.output.find("long.jsonl:6: the line is over 1 MB"), std::string::npos) << r.output.substr(0, 2000);
    EXPECT_LT(r.output.size(), 4000u) << "the message quotes a short excerpt";
    EXPECT_EQ(stored("long"), 9u);
}

TEST_F(HostileIngest, StepsGoingBackKeepTheFirstValues) {
    auto r = ingest(jsonl(0, 10, 1.0) + jsonl(5, 15, 2.0), "resumed");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("5 records at steps below an earlier one were skipped"), std::string::npos) << r.output;
    Reader reader(store());
    auto points = reader.series(reader.find_run("resumed")->id, "loss", 0, 100);
    ASSERT_EQ(points.size(), 15u);
    EXPECT_EQ(points[7].value, 1.0) << "the first value of a repeated step is kept";
    EXPECT_EQ(points[12].value, 2.0);
}

TEST_F(HostileIngest, HostileLinesAndNamesGetShortClearErrors) {
    auto r = ingest(jsonl(0, 10) + "{\"step\": 10, \"loss\": " + std::string(10 << 20, '7') + "x}\n", "huge");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_LT(r.output.size(), 2000u) << "a 10 MB line is quoted in 200 bytes, not echoed";
    EXPECT_EQ(stored("huge"), 10u);
    r = ingest(jsonl(0, 3), "\"$(printf 'bad\\377name')\"");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("--run \"bad\\xffname\": must be 1 to 200 bytes of UTF-8"), std::string::npos) << r.output;
    EXPECT_TRUE(valid_utf8(r.output));
    std::ofstream(dir.file("bad.csv"), std::ios::binary) << "step,lo\xffss\n0,1\n";
    r = test::run_command(fmt::format("{} ingest --store {} --run csvkey {}", HLAT_BINARY, store(), dir.file("bad.csv")));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("metric key \"lo\\xffss\""), std::string::npos) << r.output;
    Reader reader(store());
    for (const RunSummary& s : reader.runs())
        for (const std::string& k : reader.keys(s.run.id)) EXPECT_TRUE(valid_utf8(k)) << "no bad key is stored";
}

TEST_F(HostileIngest, DeepNestingIsRefusedBeforeParsing) {
    const std::string deep = std::string(60000, '[') + std::string(60000, ']');
    std::ofstream(dir.file("deep.json")) << "{\"model\": " << deep << "}";
    auto r = test::run_command(fmt::format("{} ingest --store {} --run deep --config '{}' {}", HLAT_BINARY, store(),
                                           "{\"a\": " + deep + "}", dir.file("deep.json")));
    EXPECT_EQ(r.exit_code, 1) << r.output.substr(0, 400);
    EXPECT_NE(r.output.find("--config nests arrays or objects more than 64 deep"), std::string::npos) << r.output.substr(0, 400);
    r = test::run_command(fmt::format("{} train --config {} --steps 1", HLAT_BINARY, dir.file("deep.json")));
    EXPECT_EQ(r.exit_code, 1) << r.output.substr(0, 400);
    EXPECT_NE(r.output.find("more than 64 deep"), std::string::npos) << r.output.substr(0, 400);
    r = ingest(deep + "\n", "deepline");
    EXPECT_EQ(r.exit_code, 1) << r.output.substr(0, 400);
    EXPECT_NE(r.output.find("deepline.jsonl:1: nests arrays or objects more than 64 deep"), std::string::npos)
        << r.output.substr(0, 400);
}

// kill -9 of `hlat ingest --follow`: the server's stale sweep sees the
// follower is gone and ends the run at its last committed step, at once.
TEST_F(HostileIngest, AKilledFollowerDoesNotLeaveItsRunRunning) {
    std::ofstream(dir.file("live.jsonl")) << jsonl(0, 50);
    const std::string cmd = fmt::format("{} ingest --follow --store {} --run live {} > {} 2>&1 & echo $!", HLAT_BINARY,
                                        store(), dir.file("live.jsonl"), dir.file("follow.log"));
    const pid_t pid = std::stoi(test::run_command(cmd).output);
    bool committed = false;
    for (int i = 0; i < 200 && !committed; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        try {
            Reader r(store());
            auto run = r.find_run("live");
            committed = run && r.series(run->id, "loss", 0, 100).size() == 50;
        } catch (const std::exception&) {  // the store may not exist yet
        }
    }
    ASSERT_TRUE(committed);
    ::kill(pid, SIGKILL);
    for (int i = 0; i < 100 && ::kill(pid, 0) == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(status("live"), "running") << "nothing ran to end it";
    web::Api api(store(), "a-token-of-sixteen-chars");
    EXPECT_EQ(api.mark_stale(1e9), 1) << "gone, whatever the timeout";
    Reader reader(store());
    auto run = reader.find_run("live");
    EXPECT_EQ(run->status, "stale");
    auto events = reader.events(run->id);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().kind, "stale");
    EXPECT_EQ(events.back().step, 49) << "ended at its last committed step";
    EXPECT_NE(events.back().detail.find("hlat ingest feeding it is gone"), std::string::npos) << events.back().detail;
}

// The server sweeps for stale runs every second: with 2,000 quiet running
// runs fed from outside, each run's store is read once per stale window, not
// once per sweep (5,000 such runs took 16% of a core from an idle server),
// and a run silent for longer than the window is still found at once.
TEST_F(HostileIngest, TheStaleSweepDoesNotReadEveryRunEverySecond) {
    const double now = now_seconds();
    {
        Writer w(store());
        for (int i = 0; i < 2000; i++) {
            RunRecord r;
            r.name = fmt::format("quiet{}", i);
            r.source = "client";
            w.metric(w.open_run(r, false), "loss", 0, 2.0, now);
        }
        RunRecord old;
        old.name = "silent";
        old.source = "client";
        w.metric(w.open_run(old, false), "loss", 0, 2.0, now - 1000);
    }
    web::IngestEndpoints sweep(store());
    EXPECT_EQ(sweep.mark_stale(300), 1) << "the run silent for 1000 s";
    EXPECT_EQ(status("silent"), "stale");
    const int64_t first = sweep.activity_reads();
    EXPECT_EQ(first, 2002) << "each run read once, the silent one again under the lock before it is ended";
    for (int i = 0; i < 5; i++) EXPECT_EQ(sweep.mark_stale(300), 0);
    EXPECT_EQ(sweep.activity_reads(), first) << "no run is read again within its window";
    EXPECT_EQ(sweep.mark_stale(0.0), 2000) << "past the window, each is read and found stale";
}

// Resident memory of this process, MB (VmRSS).
double resident_mb() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    return 0.0;
}

// Each run fed over HTTP holds an open session (~14 KB: its detectors'
// state) until it ends; once the sweep ends 3,000 of them stale, that memory
// goes back to the system, not kept by the allocator for good (it was: 57 MB
// with them open, 57 MB after).
TEST_F(HostileIngest, MemoryOfRunsEndedStaleIsGivenBack) {
    web::IngestEndpoints api(store());
    const double before = resident_mb();
    std::string batch;
    for (int s = 0; s < 10; s++) batch += fmt::format("{{\"step\": {}, \"loss\": {}, \"grad_norm\": 1.0}}\n", s, 3.0 - s * 0.01);
    for (int i = 0; i < 3000; i++) {
        const std::string run = fmt::format("open{}", i);
        ASSERT_EQ(api.start(run, "{}").status, 200);
        ASSERT_EQ(api.ingest(run, batch).status, 200);
    }
    const double open = resident_mb();
    ASSERT_GT(open - before, 20.0) << "3,000 open sessions hold memory (before " << before << " MB, open " << open << ")";
    EXPECT_EQ(api.mark_stale(0.0), 3000);
    const double after = resident_mb();
    EXPECT_LT(after - before, (open - before) / 2) << "before " << before << " MB, open " << open << ", after " << after;
}

// A start makes its run visible before its start event is written: a sweep
// that reads it between the two sees a run with no record and no event,
// which is not silent since 1970 but since it started (the sweep once ended
// such runs "stale", and the client's first batch opened them again).
TEST_F(HostileIngest, ARunSeenBeforeItsStartEventIsNotStale) {
    const double now = now_seconds();
    {
        Writer w(store());
        RunRecord r;
        r.name = "just-opened";
        r.source = "client";
        r.started_at = now;
        w.open_run(r, false);
        RunRecord earlier = r;
        earlier.name = "opened-long-ago";
        earlier.started_at = now - 1000;
        w.open_run(earlier, false);
    }
    web::IngestEndpoints sweep(store());
    EXPECT_EQ(sweep.mark_stale(300), 1);
    EXPECT_EQ(status("just-opened"), "running");
    EXPECT_EQ(status("opened-long-ago"), "stale");
    const auto events = Reader(store()).events(Reader(store()).find_run("opened-long-ago")->id);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].detail, "no records for 1000 s");
    EXPECT_DOUBLE_EQ(events[0].wall_time, now - 1000) << "dated at its start, its last sign of life";
}

// An import of last month's log by an `hlat ingest` that is alive: its
// records are a month old, and it is not stale while it writes; once its
// newest step stops moving for the window, it is.
TEST_F(HostileIngest, AnImportOfAnOldLogIsNotStaleWhileItsImporterWrites) {
    const double month_ago = now_seconds() - 30 * 86400.0;
    int64_t id = 0;
    {
        Writer w(store());
        RunRecord r;
        r.name = "old-log";
        r.source = "ingest";
        r.host = host_name();
        r.meta = fmt::format(R"({{"ingest_pid": {}}})", (int64_t)::getpid());  // this test is the live importer
        id = w.open_run(r, false);
        w.metric(id, "loss", 0, 2.0, month_ago);
    }
    web::IngestEndpoints sweep(store());
    EXPECT_EQ(sweep.mark_stale(0.3), 0) << "a live importer's month-old records";
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    {
        Writer w(store());
        w.metric(id, "loss", 1, 1.9, month_ago + 1);
    }
    EXPECT_EQ(sweep.mark_stale(0.3), 0) << "its newest step moved since the last look";
    EXPECT_EQ(status("old-log"), "running");
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(sweep.mark_stale(0.3), 1) << "no step for the window: stale, importer or not";
    EXPECT_EQ(status("old-log"), "stale");
}

// Issue 52, class 7, as it happened: `hlat ingest --follow` writes run a,
// `hlat runs --delete a`, a new run b is imported, and a's log grows by ten
// steps, which went into b (a's id, given again). Now b keeps its own steps
// only, and the follower stops at once, saying that a was deleted.
TEST_F(HostileIngest, AFollowerOfADeletedRunStopsAndNeverWritesIntoTheNextRun) {
    std::ofstream(dir.file("a.jsonl")) << jsonl(0, 50);
    test::run_command(fmt::format("({} ingest --follow --idle-exit 20 --store {} --run a {}; echo \"exit $?\") > {} 2>&1 &",
                                  HLAT_BINARY, store(), dir.file("a.jsonl"), dir.file("follow.log")));
    bool committed = false;
    for (int i = 0; i < 200 && !committed; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        try {
            Reader r(store());
            auto run = r.find_run("a");
            committed = run && r.series(run->id, "loss", 0, 100).size() == 50;
        } catch (const std::exception&) {  // the store may not exist yet
        }
    }
    ASSERT_TRUE(committed);
    auto deleted = test::run_command(fmt::format("{} runs --store {} --delete a", HLAT_BINARY, store()));
    ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
    auto b = ingest(jsonl(0, 20, 3.0), "b");
    ASSERT_EQ(b.exit_code, 0) << b.output;
    std::ofstream(dir.file("a.jsonl"), std::ios::app) << jsonl(50, 60, 9.0);
    std::string log;
    for (int i = 0; i < 250 && log.find("exit ") == std::string::npos; i++) {  // 25 s at most
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::ifstream in(dir.file("follow.log"));
        log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    EXPECT_NE(log.find("exit 1"), std::string::npos) << log;
    EXPECT_NE(log.find("run \"a\" was deleted from " + store()), std::string::npos) << log;
    Reader r(store());
    const auto points = r.series(r.find_run("b")->id, "loss", 0, 100);
    EXPECT_EQ(points.size(), 20u) << "a's follower wrote into b";
    for (const SeriesPoint& p : points) EXPECT_EQ(p.value, 3.0) << "step " << p.step;
    EXPECT_FALSE(r.find_run("a").has_value()) << "the follower brought a back";
}

// Issue 52, class 6: a line whose time lies past now + 1 day (a clock 2 days
// ahead, 1.7e21 read as nanoseconds) is kept, dated when it was read, with a
// warning naming the line and the field; a time within bounds stays as written.
TEST_F(HostileIngest, LineTimesOutOfBoundsAreDatedWhenRead) {
    const double now = now_seconds();
    const std::string text = fmt::format("{{\"step\": 0, \"loss\": 1.0, \"time\": {:.3f}}}\n"
                                         "{{\"step\": 1, \"loss\": 1.0, \"time\": {:.3f}}}\n"
                                         "{{\"step\": 2, \"loss\": 1.0, \"time\": 1.7e21}}\n",
                                         now - 60, now + 2 * 86400.0);
    auto r = ingest(text, "ahead");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(dir.file("ahead.jsonl") + ":2: \"time\""), std::string::npos) << r.output;
    Reader reader(store());
    const auto points = reader.series(reader.find_run("ahead")->id, "loss", 0, 10);
    ASSERT_EQ(points.size(), 3u) << "no line is lost";
    EXPECT_NEAR(points[0].wall_time, now - 60, 1e-3) << "a time in bounds is kept";
    for (int i : {1, 2}) {
        EXPECT_LE(points[i].wall_time, now_seconds()) << "step " << i;
        EXPECT_GE(points[i].wall_time, now - 1) << "step " << i;
    }
}

}  // namespace
}  // namespace hlat
