// The telemetry store: what goes in comes out (NaN and Inf included), spikes
// survive downsampling, uptime follows the events, readers see commits while
// the writer runs, and every bad store is refused with a reason.
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "telemetry/schema.h"
#include "telemetry/writer.h"
#include "test_util.h"

#include <fmt/format.h>

#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

namespace hlat {
namespace {

using namespace telemetry;

RunRecord run_named(const std::string& name, double t = 1000.0) {
    RunRecord r;
    r.name = name;
    r.config = R"({"model": {"dim": 8}})";
    r.precision = "fp32";
    r.started_at = t;
    return r;
}

TEST(Store, ValuesRoundTripExactlyWithNanAndInf) {
    test::ScratchDir dir("store_roundtrip");
    std::string db = dir.file("s.db");
    int64_t id;
    {
        Writer w(db);
        id = w.open_run(run_named("a"), false);
        w.metrics(id, {{"loss", 0, 2.5, 1.0}, {"loss", 1, NAN, 2.0}, {"loss", 2, INFINITY, 3.0},
                       {"loss", 3, -INFINITY, 4.0}, {"loss", 4, 0.1 + 0.2, 5.0}});
        w.event(id, {"start", 0, 1.0, ""});
        w.alert(id, {"grad_spike", "warning", 3, "grad norm 5.0 over mean 1.0", R"({"norm": 5.0})", 4.0});
        w.checkpoint(id, {4, "/tmp/ckpt", 5.0});
        w.eval(id, {4, "heldout", "loss", 3.25, 5.0, 4096});
    }  // the destructor drains and commits
    Reader r(db);
    auto s = r.series(id, "loss", 0, 100);
    ASSERT_EQ(s.size(), 5u);
    EXPECT_EQ(s[0].value, 2.5);
    EXPECT_TRUE(std::isnan(s[1].value));
    EXPECT_EQ(s[2].value, INFINITY);
    EXPECT_EQ(s[3].value, -INFINITY);
    EXPECT_EQ(s[4].value, 0.1 + 0.2) << "doubles are stored bit for bit";
    EXPECT_EQ(r.keys(id), std::vector<std::string>{"loss"});
    ASSERT_EQ(r.alerts(id).size(), 1u);
    EXPECT_EQ(r.alerts(id)[0].message, "grad norm 5.0 over mean 1.0");
    EXPECT_EQ(r.checkpoints(id)[0].path, "/tmp/ckpt");
    EXPECT_EQ(r.evals(id)[0].value, 3.25);
    EXPECT_EQ(r.evals(id)[0].tokens, 4096);
    auto runs = r.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].run.name, "a");
    EXPECT_EQ(runs[0].last_step, 4);
    EXPECT_EQ(runs[0].alerts, 1);
}

TEST(Store, DownsamplingKeepsEverySpike) {
    test::ScratchDir dir("store_downsample");
    std::string db = dir.file("s.db");
    const int n = 100000;
    int64_t id;
    {
        Writer w(db);
        id = w.open_run(run_named("long"), false);
        std::vector<MetricPoint> pts;
        for (int i = 0; i < n; i++) {
            double v = 1.0 + 0.001 * (i % 7);
            if (i == 31337) v = 50.0;   // a one-step spike
            if (i == 77777) v = -9.0;   // a one-step dip
            if (i == 88888) v = NAN;
            pts.push_back({"grad_norm", i, v, 0.0});
        }
        w.metrics(id, std::move(pts));
    }
    Reader r(db);
    for (auto [first, last, buckets] : {std::tuple<int64_t, int64_t, int>{0, n - 1, 500}, {0, n - 1, 2000},
                                        {31000, 32000, 200}, {10, 99990, 777}}) {
        auto b = r.downsample(id, "grad_norm", first, last, buckets);
        ASSERT_FALSE(b.empty());
        EXPECT_LE((int)b.size(), buckets);
        double hi = -INFINITY, lo = INFINITY;
        bool nan = false;
        for (const Bucket& x : b) {
            hi = std::max(hi, x.max);
            lo = std::min(lo, x.min);
            nan |= x.has_nan;
            EXPECT_GE(x.first_step, first);
            EXPECT_LE(x.last_step, last);
        }
        if (first <= 31337 && 31337 <= last) {
            EXPECT_EQ(hi, 50.0) << first << ".." << last;
        }
        if (first <= 77777 && 77777 <= last) {
            EXPECT_EQ(lo, -9.0) << first << ".." << last;
        }
        if (first <= 88888 && 88888 <= last) {
            EXPECT_TRUE(nan);
        }
        EXPECT_EQ(b.back().last_step, std::min<int64_t>(last, n - 1));
    }
    // Downsampled buckets agree with the raw points they summarize.
    auto b = r.downsample(id, "grad_norm", 0, n - 1, 1000);
    auto raw = r.series(id, "grad_norm", b[5].first_step, b[5].last_step);
    double mx = -INFINITY;
    for (auto& p : raw) mx = std::max(mx, p.value);
    EXPECT_EQ(b[5].max, mx);
    EXPECT_EQ(b[5].last, raw.back().value);
}

// What version 7 added (batch provenance), what version 6 added (statistics
// over layers, heads and tensors), then what version 5 added (bucket means
// and times, run tags and notes).
const std::string kDropVersion5 =
    "DROP TABLE batches; DROP TABLE documents; "
    "DROP TABLE vectors; DROP TABLE vector_labels; "
    "ALTER TABLE metric_blocks DROP COLUMN sum_value; ALTER TABLE metric_blocks DROP COLUMN n_values; "
    "ALTER TABLE metric_blocks DROP COLUMN first_time; ALTER TABLE metric_blocks DROP COLUMN last_time; "
    "ALTER TABLE runs DROP COLUMN tags; ALTER TABLE runs DROP COLUMN note; ";

// Each bucket's mean and its first and last wall times agree with the raw
// points it covers, whether read from metric_blocks or from the rows, and a
// version 4 store (blocks without them) gets them on migration.
TEST(Store, BucketsCarryTheirMeanAndWallTimes) {
    test::ScratchDir dir("store_bucket_mean");
    std::string db = dir.file("s.db");
    int64_t id;
    {
        Writer w(db);
        id = w.open_run(run_named("timed"), false);
        std::vector<MetricPoint> pts;
        for (int i = 0; i < 10000; i++) pts.push_back({"loss", i, i == 4321 ? NAN : 3.0 + (i % 11) * 0.1, 1000.0 + 0.5 * i});
        w.metrics(id, std::move(pts));
    }
    auto check = [&](const char* when) {
        Reader r(db);
        for (int buckets : {100, 5000}) {  // 128-step buckets from blocks; 2-step buckets from rows
            for (const Bucket& b : r.downsample(id, "loss", 0, 9999, buckets)) {
                auto raw = r.series(id, "loss", b.first_step, b.last_step);
                double sum = 0;
                int n = 0;
                for (auto& p : raw)
                    if (!std::isnan(p.value)) sum += p.value, n++;
                ASSERT_NEAR(b.mean, sum / n, 1e-12) << when << ", " << buckets << " buckets, from " << b.first_step;
                ASSERT_EQ(b.first_time, raw.front().wall_time) << when;
                ASSERT_EQ(b.last_time, raw.back().wall_time) << when;
            }
        }
    };
    check("as written");
    sqlite3* raw;
    sqlite3_open(db.c_str(), &raw);
    ASSERT_EQ(sqlite3_exec(raw,
                           (kDropVersion5 + "PRAGMA user_version = 4").c_str(),
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
    { Writer w(db); }  // migrates
    check("after migrating a version 4 store");
}

TEST(Store, ResumedRunReplacesRecomputedStepsAndBlocks) {
    test::ScratchDir dir("store_resume");
    std::string db = dir.file("s.db");
    {
        Writer w(db);
        int64_t id = w.open_run(run_named("r"), false);
        for (int i = 0; i < 100; i++) w.metric(id, "loss", i, i == 90 ? 1000.0 : 5.0, 0.0);
    }
    {
        Writer w(db);
        EXPECT_THROW(w.open_run(run_named("r"), false), StoreError) << "a second run of the same name needs resume";
    }
    {
        Writer w(db);
        int64_t id = w.open_run(run_named("r"), true);
        for (int i = 80; i < 120; i++) w.metric(id, "loss", i, 4.0, 0.0);
    }
    Reader r(db);
    int64_t id = r.find_run("r")->id;
    auto s = r.series(id, "loss", 0, 1000);
    ASSERT_EQ(s.size(), 120u) << "no duplicate, no missing step";
    EXPECT_EQ(s[90].value, 4.0);
    auto b = r.downsample(id, "loss", 0, 127, 1);
    ASSERT_EQ(b.size(), 1u);
    auto blocks = r.downsample(id, "loss", 0, 255, 2);  // 128-step buckets from 64-step blocks
    for (const Bucket& x : blocks) EXPECT_LE(x.max, 5.0) << "the replaced spike left no stale block maximum";
}

TEST(Store, UptimeFollowsEvents) {
    test::ScratchDir dir("store_uptime");
    std::string db = dir.file("s.db");
    int64_t id;
    {
        Writer w(db);
        id = w.open_run(run_named("u"), false);
        w.event(id, {"start", 0, 100.0, ""});
        w.event(id, {"heartbeat", 10, 150.0, ""});
        w.metric(id, "loss", 12, 1.0, 170.0);  // died without a word after this
        w.event(id, {"restart", 12, 200.0, ""});
        w.event(id, {"crash", 30, 260.0, "boom"});
        w.event(id, {"restart", 30, 300.0, ""});
        w.event(id, {"stop", 50, 400.0, ""});
    }
    Uptime u = Reader(db).uptime(id);
    EXPECT_DOUBLE_EQ(u.training_seconds, 70.0 + 60.0 + 100.0);
    EXPECT_DOUBLE_EQ(u.wall_seconds, 300.0);
    EXPECT_NEAR(u.ratio, 230.0 / 300.0, 1e-12);
    EXPECT_EQ(u.restarts, 2);
    // The stretches the ratio counts, which the page's timeline draws: the
    // first one a kill cut ends at its last metric, not at its heartbeat.
    EXPECT_EQ(u.segments, (std::vector<std::pair<double, double>>{{100.0, 170.0}, {200.0, 260.0}, {300.0, 400.0}}));
}

std::string store_error(const std::function<void()>& f) {
    try {
        f();
    } catch (const StoreError& e) {
        return e.what();
    }
    return "";
}

TEST(Store, HaltRequestsArePendingUntilHandled) {
    test::ScratchDir dir("store_halt");
    Writer w(dir.file("s.db"));
    int64_t id = w.open_run(run_named("h"), false);
    w.flush();
    Reader r(dir.file("s.db"));
    EXPECT_FALSE(r.pending_halt(id).has_value());
    w.request_halt(id, "web 127.0.0.1");
    w.flush();
    EXPECT_EQ(r.pending_halt(id), "web 127.0.0.1");
    w.mark_halt_handled(id);
    w.flush();
    EXPECT_FALSE(r.pending_halt(id).has_value());
}

TEST(Store, Version1StoresAreMigratedKeepingTheirData) {
    test::ScratchDir dir("store_migrate");
    {
        Writer w(dir.file("s.db"));
    }
    sqlite3* raw;
    sqlite3_open(dir.file("s.db").c_str(), &raw);
    // What a version 1 store looked like: no halt requests, evals without tokens.
    ASSERT_EQ(sqlite3_exec(raw,
                           (kDropVersion5 + "DROP TABLE halt_requests; ALTER TABLE evals DROP COLUMN tokens; ALTER TABLE runs DROP COLUMN meta; "
                           "INSERT INTO runs(id, name, status, started_at) VALUES (7, 'old', 'finished', 0); "
                           "INSERT INTO evals(run_id, step, task, metric, value, wall_time) "
                           "VALUES (7, 99, 'heldout', 'loss', 2.5, 0); PRAGMA user_version = 1").c_str(),
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
    EXPECT_FALSE(Reader(dir.file("s.db")).pending_halt(1).has_value()) << "a reader migrates an older store";
    auto old = Reader(dir.file("s.db")).evals(7);
    ASSERT_EQ(old.size(), 1u) << "evaluations survive the migration";
    EXPECT_EQ(old[0].value, 2.5);
    EXPECT_EQ(old[0].tokens, 0) << "tokens seen were not recorded before version 3";
    Writer w(dir.file("s.db"));
    int64_t id = w.open_run(run_named("m"), false);
    w.request_halt(id, "test");
    w.flush();
    EXPECT_EQ(Reader(dir.file("s.db")).pending_halt(id), "test");
}

TEST(Store, ReaderSeesCommitsWhileTheWriterRuns) {
    test::ScratchDir dir("store_live");
    std::string db = dir.file("s.db");
    Writer w(db);
    int64_t id = w.open_run(run_named("live"), false);
    Reader r(db);  // opened before any metric exists
    for (int i = 0; i < 10; i++) w.metric(id, "loss", i, 1.0, 0.0);
    w.flush();
    EXPECT_EQ(r.series(id, "loss", 0, 100).size(), 10u);
    for (int i = 10; i < 20; i++) w.metric(id, "loss", i, 1.0, 0.0);
    w.flush();
    EXPECT_EQ(r.series(id, "loss", 0, 100).size(), 20u);
}

TEST(Store, FullQueueMakesTheCallerWaitAndCountsIt) {
    test::ScratchDir dir("store_full");
    WriterOptions small;
    small.queue_rows = 16;
    small.batch_rows = 8;
    Writer w(dir.file("s.db"), small);
    int64_t id = w.open_run(run_named("q"), false);
    for (int i = 0; i < 5000; i++) w.metric(id, "loss", i, 1.0, 0.0);
    w.flush();
    EXPECT_EQ(w.stats().rows_committed, 5000 + 2) << "every row arrives (and the open and flush requests)";
    EXPECT_GT(w.stats().queue_full_waits, 0);
    EXPECT_EQ(Reader(dir.file("s.db")).series(id, "loss", 0, 10000).size(), 5000u);
}

TEST(Store, BadStoresAreRefusedWithAReason) {
    test::ScratchDir dir("store_bad");
    std::ofstream(dir.file("text.db")) << "this is a text file, not a database, and it is long enough to matter";
    std::string e = store_error([&] { Reader r(dir.file("text.db")); });
    EXPECT_NE(e.find("is not an hlat store: not a SQLite database"), std::string::npos) << e;
    e = store_error([&] { Writer w(dir.file("text.db")); });
    EXPECT_NE(e.find("not a SQLite database"), std::string::npos) << e;

    e = store_error([&] { Reader r(dir.file("absent.db")); });
    EXPECT_NE(e.find("absent.db does not exist"), std::string::npos) << e;
    e = store_error([&] { Writer w(dir.file("no/such/folder/s.db")); });
    EXPECT_NE(e.find("folder " + dir.file("no/such/folder") + " does not exist"), std::string::npos) << e;

    // A store written by a newer hlat.
    {
        Writer w(dir.file("new.db"));
    }
    sqlite3* raw;
    sqlite3_open(dir.file("new.db").c_str(), &raw);
    sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
    sqlite3_close(raw);
    e = store_error([&] { Reader r(dir.file("new.db")); });
    EXPECT_NE(e.find(fmt::format("schema version 99, newer than this hlat understands ({})", kSchemaVersion)),
              std::string::npos)
        << e;
    e = store_error([&] { Writer w(dir.file("new.db")); });
    EXPECT_NE(e.find("schema version 99"), std::string::npos) << e;
}

TEST(Store, ReadOnlyStoreIsReported) {
    test::ScratchDir dir("store_ro");
    { Writer w(dir.file("s.db")); }
    // What a write through a read-only handle reports (a read-only file, folder
    // or mount all end in SQLITE_READONLY).
    std::string e = store_error([&] {
        Database db(dir.file("s.db"), Database::Mode::ReadOnly, 100);
        db.exec("CREATE TABLE t(x)");
    });
    EXPECT_NE(e.find("is read-only"), std::string::npos) << e;
    if (::geteuid() != 0) {  // root ignores permission bits, so only a normal user can see the real case
        std::filesystem::create_directories(dir.file("ro"));
        { Writer w(dir.file("ro/s.db")); }
        ::chmod(dir.file("ro/s.db").c_str(), 0444);
        ::chmod(dir.file("ro").c_str(), 0555);
        e = store_error([&] {
            Writer w(dir.file("ro/s.db"));
            w.open_run(run_named("x"), false);
        });
        ::chmod(dir.file("ro").c_str(), 0755);
        EXPECT_NE(e.find("read-only"), std::string::npos) << e;
    }
}

// Two trainers launched at once on a new store (paper_lessons runs two at a
// time) both switch it to WAL. SQLite answers one of them SQLITE_BUSY without
// calling the busy handler (waiting could deadlock), so the switch itself
// must be retried: here eight connections open each new file at once.
TEST(Store, ConnectionsOpeningANewStoreAtOnceAllSucceed) {
    test::ScratchDir dir("store_open_at_once");
    constexpr int kFiles = 20, kConnections = 8;
    for (int f = 0; f < kFiles; ++f) {
        std::string db = dir.file(fmt::format("s{}.db", f));
        std::atomic<int> ready{0};
        std::vector<std::string> errors(kConnections);
        std::vector<std::thread> threads;
        for (int c = 0; c < kConnections; ++c)
            threads.emplace_back([&, c] {
                ready.fetch_add(1);
                while (ready.load() < kConnections) std::this_thread::yield();
                try {
                    Database d(db, Database::Mode::Create, 5000);
                    prepare_schema(d, true);
                } catch (const StoreError& e) {
                    errors[c] = e.what();
                }
            });
        for (std::thread& t : threads) t.join();
        for (const std::string& e : errors) EXPECT_EQ(e, "") << "file " << f;
        Database d(db, Database::Mode::ReadOnly, 1000);
        Statement mode = d.prepare("PRAGMA journal_mode");
        ASSERT_TRUE(mode.step());
        EXPECT_EQ(mode.column_text(0), "wal") << "file " << f;
    }
}

TEST(Store, LockedStoreIsRetriedThenReported) {
    test::ScratchDir dir("store_locked");
    std::string db = dir.file("s.db");
    { Writer w(db); }
    sqlite3* other;
    sqlite3_open(db.c_str(), &other);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
    WriterOptions quick;
    quick.busy_timeout_ms = 300;
    quick.failing_wait_ms = 300;  // how long open_run waits on the failing store before it reports
    quick.close_wait_ms = 0;      // and the writer, closed, gives up after one more try
    auto t0 = std::chrono::steady_clock::now();
    std::string e = store_error([&] {
        Writer w(db, quick);
        w.open_run(run_named("blocked"), false);
    });
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(e.find("is locked by another connection (waited 300 ms)"), std::string::npos) << e;
    EXPECT_GE(waited, 0.25) << "the lock was waited for before giving up";
    sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(other);
    Writer w(db, quick);
    EXPECT_GT(w.open_run(run_named("free"), false), 0) << "works once the lock is gone";
}

// Issue 52, class 7: `hlat runs --delete A` while A's writer (a follower)
// still writes, then a new run B. Run ids are never given again, so A's next
// rows cannot land in B; foreign keys refuse them, the writer drops them and
// A's next call says the run is gone. Other runs of the same writer go on.
TEST(Store, ADeletedRunsWriterNeverWritesIntoTheNextRun) {
    test::ScratchDir dir("store_deleted_run");
    const std::string db = dir.file("s.db");
    Writer follower(db);  // A's writer, as `hlat ingest --follow` holds it
    const int64_t other = follower.open_run(run_named("other"), false);
    const int64_t a = follower.open_run(run_named("a"), false);  // the newest: its id was the one given again
    for (int s = 0; s < 10; s++) follower.metric(a, "loss", s, 2.0, 1000.0 + s);
    follower.flush();
    Writer(db).delete_run(a);  // hlat runs --delete a: its own writer, its own connection
    const int64_t b = Writer(db).open_run(run_named("b"), false);
    EXPECT_NE(b, a) << "the deleted run's id was given to the next run";
    for (int s = 10; s < 20; s++) follower.metric(a, "loss", s, 9.0, 1000.0 + s);
    follower.metric(other, "loss", 0, 1.0, 1000.0);
    follower.flush();  // commits: A's rows are refused and dropped, the other run's stored
    Reader r(db);
    EXPECT_TRUE(r.series(b, "loss", 0, 100).empty()) << "A's follower wrote into B";
    EXPECT_EQ(r.series(other, "loss", 0, 100).size(), 1u) << "the writer goes on for its other runs";
    std::string said;
    try {
        follower.metric(a, "loss", 20, 9.0, 1020.0);
        follower.flush();
    } catch (const std::exception& e) {
        said = e.what();
    }
    EXPECT_NE(said.find(fmt::format("run {} was deleted", a)), std::string::npos)
        << "A's writer is told, at its next call: \"" << said << "\"";
    EXPECT_TRUE(Reader(db).series(b, "loss", 0, 100).empty());
    EXPECT_TRUE(Reader(db).series(a, "loss", 0, 100).empty()) << "nothing stored for the deleted run either";
}

// A store of schema 7 (runs without AUTOINCREMENT) migrates: its runs keep
// their ids and rows, and the next id is above every run id any table holds,
// so rows a deleted run's writer left behind before foreign keys were on
// (here: run 3, deleted while its follower wrote) never join a new run.
TEST(Store, Version7StoresMigrateToRunIdsNeverReused) {
    test::ScratchDir dir("store_migrate_ids");
    const std::string db = dir.file("s.db");
    {
        Writer w(db);
        w.open_run(run_named("one"), false);
        w.metric(w.open_run(run_named("two"), false), "loss", 0, 1.5, 1000.0);
    }
    sqlite3* raw;
    sqlite3_open(db.c_str(), &raw);
    ASSERT_EQ(sqlite3_exec(raw,
                           "CREATE TABLE runs7 AS SELECT * FROM runs; DROP TABLE runs; "
                           "CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, config TEXT NOT NULL "
                           "DEFAULT '{}', precision TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, host TEXT NOT NULL "
                           "DEFAULT '', git_revision TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT 'hlat', "
                           "started_at REAL NOT NULL, ended_at REAL NOT NULL DEFAULT 0, meta TEXT NOT NULL DEFAULT "
                           "'{}', tags TEXT NOT NULL DEFAULT '[]', note TEXT NOT NULL DEFAULT ''); "
                           "INSERT INTO runs SELECT * FROM runs7; DROP TABLE runs7; "
                           "INSERT INTO metrics(run_id, key_id, step, value, wall_time) "
                           "SELECT 3, id, 5, 7.0, 1000 FROM metric_keys WHERE name = 'loss'; "
                           "PRAGMA user_version = 7",
                           nullptr, nullptr, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(raw);
    sqlite3_close(raw);
    Writer w(db);  // migrates
    Reader r(db);
    Database migrated(db, Database::Mode::ReadOnly, 100);
    EXPECT_EQ(schema_version(migrated), kSchemaVersion);
    ASSERT_TRUE(r.find_run("two").has_value());
    EXPECT_EQ(r.find_run("two")->id, 2) << "a run keeps its id";
    EXPECT_EQ(r.series(2, "loss", 0, 10).size(), 1u) << "and its rows";
    const int64_t next = w.open_run(run_named("three"), false);
    EXPECT_GT(next, 3) << "the id the left-behind rows carry is not given again";
    EXPECT_TRUE(r.series(next, "loss", 0, 10).empty()) << "a new run adopted a deleted run's rows";
    w.delete_run(next);
    EXPECT_GT(w.open_run(run_named("four"), false), next) << "the newest run's id, deleted, is not given again";
}

// -0.0 reads back as -0.0: it came back 0, for SQLite stored it, a whole
// number in a REAL column, as the integer 0.
TEST(Store, NegativeZeroReadsBackWithItsSign) {
    test::ScratchDir dir("store_negative_zero");
    const std::string db = dir.file("s.db");
    int64_t id;
    {
        Writer w(db);
        id = w.open_run(run_named("z"), false);
        w.metric(id, "loss", 0, -0.0, 1000.0);
        w.rank_metric(id, {"step_time", 0, 1, -0.0, 1000.0});
    }
    auto points = Reader(db).series(id, "loss", 0, 10);
    ASSERT_EQ(points.size(), 1u);
    EXPECT_TRUE(std::signbit(points[0].value)) << "stored -0.0 read back as " << points[0].value;
    sqlite3* raw;
    sqlite3_open(db.c_str(), &raw);
    sqlite3_stmt* s;
    sqlite3_prepare_v2(raw, "SELECT value FROM rank_metrics", -1, &s, nullptr);
    ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
    EXPECT_TRUE(std::signbit(sqlite3_column_double(s, 0))) << "a rank's value keeps its sign too";
    sqlite3_finalize(s);
    sqlite3_close(raw);
}

}  // namespace
}  // namespace hlat
