// A store that cannot be written for a while (another process holds it
// locked past busy_timeout_ms, the disk is full) loses nothing: the writer
// keeps the batch, retries it, says it is failing meanwhile and writes again
// by itself once it can; `hlat serve` answers 503 then, and 200 after. An
// error that cannot pass (a constraint) stops the writer and says so at once.
#include "telemetry/reader.h"
#include "telemetry/sqlite.h"
#include "telemetry/writer.h"
#include "test_http.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

namespace hlat {
namespace {

using json = nlohmann::json;
using namespace telemetry;
using namespace std::chrono_literals;

RunRecord run_named(const std::string& name) {
    RunRecord r;
    r.name = name;
    r.started_at = 1000.0;
    return r;
}

// Polls `done` every 20 ms for at most `limit`: a bound against hanging, not a timing.
bool eventually(const std::function<bool()>& done, std::chrono::seconds limit = 30s) {
    for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
        if (done()) return true;
        std::this_thread::sleep_for(20ms);
    }
    return done();
}

// Another process's connection holding the store's write lock (BEGIN
// EXCLUSIVE, as `sqlite3 s.db` would), until release().
class Lock {
  public:
    explicit Lock(const std::string& path) {
        sqlite3_open(path.c_str(), &db_);
        ok_ = sqlite3_exec(db_, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) == SQLITE_OK;
    }
    ~Lock() { release(); }
    bool ok() const { return ok_; }
    void release() {
        if (!db_) return;
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        sqlite3_close(db_);
        db_ = nullptr;
    }

  private:
    sqlite3* db_ = nullptr;
    bool ok_ = false;
};

size_t stored(const std::string& db, int64_t run) { return Reader(db).series(run, "loss", 0, 1 << 30).size(); }

TEST(Writer, KeepsAndRetriesItsBatchWhileAnotherProcessHoldsTheStore) {
    test::ScratchDir dir("writer_locked");
    const std::string db = dir.file("s.db");
    WriterOptions quick;
    quick.busy_timeout_ms = 200;
    quick.failing_wait_ms = 300;
    Writer w(db, quick);
    const int64_t id = w.open_run(run_named("r"), false);
    w.metric(id, "loss", 0, 1.0, 0.0);
    w.flush();
    EXPECT_TRUE(w.health().ok);

    Lock lock(db);
    ASSERT_TRUE(lock.ok());
    const auto locked_at = std::chrono::steady_clock::now();
    for (int s = 1; s <= 200; s++) w.metric(id, "loss", s, 1.0, 0.0);
    ASSERT_TRUE(eventually([&] { return !w.health().ok; })) << "the store is locked: the writer must say so";
    WriterHealth h = w.health();
    EXPECT_TRUE(h.retrying);
    EXPECT_NE(h.error.find("is locked by another connection (waited 200 ms)"), std::string::npos) << h.error;
    EXPECT_GE(h.queued_rows, 200u) << "the failed batch is kept";
    EXPECT_GT(h.since, 0.0);

    // Whoever waits on a commit learns why, within its bound, and what it asked for stays queued.
    try {
        w.flush();
        ADD_FAILURE() << "flush returned while the store was locked";
    } catch (const StoreError& e) {
        EXPECT_TRUE(e.transient());
        EXPECT_NE(std::string(e.what()).find("store is not writable, retrying: "), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("locked by another connection"), std::string::npos) << e.what();
    }
    EXPECT_THROW(w.check_writable(), StoreError);
    for (int s = 201; s <= 300; s++) w.metric(id, "loss", s, 1.0, 0.0);  // still taken while it fails

    std::this_thread::sleep_until(locked_at + 1s);  // held well past busy_timeout_ms
    EXPECT_FALSE(w.health().ok);
    lock.release();
    ASSERT_TRUE(eventually([&] { return w.health().ok; })) << "writes resume by themselves: " << w.health().error;
    w.flush();
    EXPECT_EQ(stored(db, id), 301u) << "every row written before, during and after the lock";
    EXPECT_GT(w.stats().failed_commits, 0);
    w.metric(id, "loss", 301, 1.0, 0.0);
    w.flush();
    EXPECT_EQ(stored(db, id), 302u) << "and the writer goes on";
}

// A VFS over the default one whose writes fail with SQLITE_FULL, as the
// default one's do on ENOSPC, while `full` is set: a disk that fills up and
// is freed again.
namespace full_disk {

std::atomic<bool> full{false};
sqlite3_vfs* base = nullptr;
sqlite3_vfs vfs;

struct File {
    sqlite3_file file;   // pMethods: ours
    sqlite3_file* real;  // the base VFS's file, allocated right after this
};
sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

int x_write(sqlite3_file* f, const void* p, int n, sqlite3_int64 off) {
    return full ? SQLITE_FULL : real(f)->pMethods->xWrite(real(f), p, n, off);
}
int x_close(sqlite3_file* f) { return real(f)->pMethods->xClose(real(f)); }
int x_read(sqlite3_file* f, void* p, int n, sqlite3_int64 off) { return real(f)->pMethods->xRead(real(f), p, n, off); }
int x_truncate(sqlite3_file* f, sqlite3_int64 size) { return real(f)->pMethods->xTruncate(real(f), size); }
int x_sync(sqlite3_file* f, int flags) { return real(f)->pMethods->xSync(real(f), flags); }
int x_file_size(sqlite3_file* f, sqlite3_int64* size) { return real(f)->pMethods->xFileSize(real(f), size); }
int x_lock(sqlite3_file* f, int l) { return real(f)->pMethods->xLock(real(f), l); }
int x_unlock(sqlite3_file* f, int l) { return real(f)->pMethods->xUnlock(real(f), l); }
int x_reserved(sqlite3_file* f, int* out) { return real(f)->pMethods->xCheckReservedLock(real(f), out); }
int x_control(sqlite3_file* f, int op, void* arg) { return real(f)->pMethods->xFileControl(real(f), op, arg); }
int x_sector(sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); }
int x_device(sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); }
int x_shm_map(sqlite3_file* f, int i, int size, int extend, void volatile** p) {
    return real(f)->pMethods->xShmMap(real(f), i, size, extend, p);
}
int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
    return real(f)->pMethods->xShmLock(real(f), offset, n, flags);
}
void x_shm_barrier(sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); }
int x_shm_unmap(sqlite3_file* f, int del) { return real(f)->pMethods->xShmUnmap(real(f), del); }

// Version 2: no memory-mapped reads (xFetch), which the writer does not use.
const sqlite3_io_methods methods = {2,         x_close,   x_read,    x_write,     x_truncate,    x_sync,
                                    x_file_size, x_lock,  x_unlock,  x_reserved,  x_control,     x_sector,
                                    x_device,  x_shm_map, x_shm_lock, x_shm_barrier, x_shm_unmap,
                                    nullptr,   nullptr};

int x_open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out_flags) {
    File* file = reinterpret_cast<File*>(f);
    file->real = reinterpret_cast<sqlite3_file*>(file + 1);
    file->file.pMethods = nullptr;
    const int rc = base->xOpen(base, name, file->real, flags, out_flags);
    if (file->real->pMethods) file->file.pMethods = &methods;
    return rc;
}

// Installed as the default VFS for the test's lifetime, then the base again.
struct Installed {
    Installed() {
        base = sqlite3_vfs_find(nullptr);
        vfs = *base;
        vfs.zName = "hlat-full-disk";
        vfs.szOsFile = (int)sizeof(File) + base->szOsFile;
        vfs.xOpen = x_open;
        sqlite3_vfs_register(&vfs, 1);
    }
    ~Installed() {
        sqlite3_vfs_unregister(&vfs);
        sqlite3_vfs_register(base, 1);
        full = false;
    }
};

}  // namespace full_disk

TEST(Writer, KeepsAndRetriesItsBatchWhileTheDiskIsFull) {
    test::ScratchDir dir("writer_full");
    const std::string db = dir.file("s.db");
    full_disk::Installed installed;
    WriterOptions quick;
    quick.failing_wait_ms = 300;
    Writer w(db, quick);
    const int64_t id = w.open_run(run_named("r"), false);
    w.flush();

    full_disk::full = true;
    for (int s = 0; s < 500; s++) w.metric(id, "loss", s, 0.5 * s, 0.0);
    ASSERT_TRUE(eventually([&] { return !w.health().ok; })) << "the disk is full: the writer must say so";
    EXPECT_TRUE(w.health().retrying);
    EXPECT_NE(w.health().error.find("full"), std::string::npos) << w.health().error;
    try {
        w.flush();
        ADD_FAILURE() << "flush returned while the disk was full";
    } catch (const StoreError& e) {
        EXPECT_EQ(e.code & 0xff, SQLITE_FULL) << e.what();
        EXPECT_TRUE(e.transient());
    }
    for (int s = 500; s < 600; s++) w.metric(id, "loss", s, 0.5 * s, 0.0);

    full_disk::full = false;  // space freed
    ASSERT_TRUE(eventually([&] { return w.health().ok; })) << w.health().error;
    w.flush();
    auto loss = Reader(db).series(id, "loss", 0, 1 << 30);
    ASSERT_EQ(loss.size(), 600u) << "nothing queued while the disk was full is lost";
    for (int s = 0; s < 600; s++) EXPECT_EQ(loss[s].value, 0.5 * s);
}

TEST(Writer, AnErrorThatCannotPassStopsTheWriterAndSaysSo) {
    test::ScratchDir dir("writer_permanent");
    const std::string db = dir.file("s.db");
    Writer w(db);
    const int64_t id = w.open_run(run_named("r"), false);
    w.flush();
    // A constraint no retry can satisfy (as a schema bug would be).
    sqlite3* other;
    sqlite3_open(db.c_str(), &other);
    ASSERT_EQ(sqlite3_exec(other,
                           "CREATE TRIGGER refuse BEFORE INSERT ON metrics BEGIN SELECT RAISE(ABORT, 'refused'); END",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(other);
    w.metric(id, "loss", 0, 1.0, 0.0);
    try {
        w.flush();
        ADD_FAILURE() << "flush returned although the row could not be stored";
    } catch (const StoreError& e) {
        EXPECT_FALSE(e.transient()) << e.what();
        EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
    }
    const WriterHealth h = w.health();
    EXPECT_FALSE(h.ok);
    EXPECT_FALSE(h.retrying) << "not retried forever in silence";
    EXPECT_NE(h.error.find("refused"), std::string::npos) << h.error;
    EXPECT_THROW(w.metric(id, "loss", 1, 1.0, 0.0), StoreError) << "later calls hear of it";
}

TEST(Writer, OpeningAnExistingRunWithoutResumeFailsThatCallerOnly) {
    test::ScratchDir dir("writer_exists");
    const std::string db = dir.file("s.db");
    Writer w(db);
    const int64_t id = w.open_run(run_named("r"), false);
    EXPECT_THROW(w.open_run(run_named("r"), false), StoreError);
    w.metric(id, "loss", 0, 1.0, 0.0);
    w.flush();
    EXPECT_TRUE(w.health().ok);
    EXPECT_EQ(stored(db, id), 1u) << "the writer goes on";
}

// `hlat serve` in its own process, on a free port, ended (SIGTERM) with the test.
class Serve {
  public:
    Serve(const test::ScratchDir& dir, const std::string& store, const std::string& token) : log_(dir.file("serve.log")) {
        const std::string token_file = dir.file("token");
        std::ofstream(token_file) << token << "\n";
        const int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        pid_ = ::fork();
        if (pid_ == 0) {
            ::dup2(out, 1);
            ::dup2(out, 2);
            ::execl(HLAT_BINARY, HLAT_BINARY, "serve", "--store", store.c_str(), "--create", "--port", "0",
                    "--token-file", token_file.c_str(), "--stale-after", "0", (char*)nullptr);
            ::_exit(127);
        }
        ::close(out);
        const std::regex url(R"(open http://127\.0\.0\.1:(\d+)/)");
        eventually([&] {
            std::smatch m;
            const std::string text = log();
            if (std::regex_search(text, m, url)) port_ = std::stoi(m[1]);
            return port_ > 0;
        });
    }
    ~Serve() { stop(); }
    // SIGTERM, and the exit waited for (its log is then complete).
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        int status;
        ::waitpid(pid_, &status, 0);
        pid_ = 0;
    }
    int port() const { return port_; }
    std::string log() const {
        std::ifstream in(log_);
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }

  private:
    std::string log_;
    pid_t pid_ = 0;
    int port_ = 0;
};

TEST(WebStoreFailing, IngestAnswers503WhileTheStoreIsLockedAndStoresEveryAcknowledgedRowAfter) {
    test::ScratchDir dir("web_store_failing");
    const std::string store = dir.file("s.db"), token = "store-failing-test-token-0123";
    Serve serve(dir, store, token);
    ASSERT_GT(serve.port(), 0) << serve.log();
    const int port = serve.port();
    auto ingest = [&](int first) {
        std::string lines;
        for (int s = first; s < first + 10; s++) lines += fmt::format("{{\"step\": {}, \"loss\": {}}}\n", s, 1.0 + s);
        return test::http_post(port, "/api/v1/runs/fed/ingest", token, lines);
    };
    EXPECT_EQ(test::http_get(port, "/api/v1/health"), std::make_pair(200, std::string(R"({"store":"ok"})")));
    std::set<int> acknowledged;  // first steps of the batches answered 200
    ASSERT_EQ(ingest(0).first, 200);
    acknowledged.insert(0);

    // Another process holds the store past the server's busy timeout (5 s)
    // while a client goes on sending, as the Python client does.
    Lock lock(store);
    ASSERT_TRUE(lock.ok());
    std::atomic<bool> sending{true};
    std::mutex m;
    std::map<int, int> answers;  // status -> how many
    std::thread client([&] {
        for (int first = 10; sending; first += 10) {
            const auto [status, body] = ingest(first);
            std::lock_guard<std::mutex> g(m);
            answers[status]++;
            if (status == 200) acknowledged.insert(first);
            if (status == 503) {
                EXPECT_NE(body.find("store is not writable, retrying"), std::string::npos) << body;
            }
            std::this_thread::sleep_for(50ms);
        }
    });
    json failing = json::object();
    EXPECT_TRUE(eventually([&] {
        auto [status, body] = test::http_get(port, "/api/v1/health");
        if (status == 503) failing = json::parse(body, nullptr, false);
        return status == 503;
    })) << "health never said the store was failing";
    // Held until the client has been refused twice: the request that waited on
    // the failing commit, then one refused at once.
    EXPECT_TRUE(eventually([&] {
        std::lock_guard<std::mutex> g(m);
        return answers[503] >= 2;
    })) << "ingests were not refused while the store failed";
    lock.release();
    EXPECT_TRUE(eventually([&] { return test::http_get(port, "/api/v1/health").first == 200; }))
        << "the store never recovered: " << test::http_get(port, "/api/v1/health").second;
    sending = false;
    client.join();

    auto [status, body] = ingest(100000);
    EXPECT_EQ(status, 200) << "ingest works again after the lock: " << body;
    if (status == 200) acknowledged.insert(100000);
    EXPECT_EQ(failing.value("store", ""), "failing") << failing.dump();
    EXPECT_NE(failing.value("error", "").find("locked by another connection"), std::string::npos) << failing.dump();
    EXPECT_TRUE(failing.value("retrying", false)) << failing.dump();
    EXPECT_GE(failing.value("queued_rows", 0), 1) << failing.dump();
    EXPECT_GT(failing.value("since", 0.0), 0.0) << failing.dump();
    {
        std::lock_guard<std::mutex> g(m);
        EXPECT_EQ(answers[500], 0) << "a store that may come back is a 503, never a 500";
    }

    serve.stop();
    Reader reader(store);
    auto run = reader.find_run("fed");
    ASSERT_TRUE(run.has_value());
    std::set<int64_t> steps;
    for (const auto& p : reader.series(run->id, "loss", 0, 1 << 30)) steps.insert(p.step);
    for (int first : acknowledged)
        for (int s = first; s < first + 10; s++) EXPECT_TRUE(steps.count(s)) << "acknowledged step " << s << " was lost";
    const std::string log = serve.log();
    EXPECT_NE(log.find("is not writable"), std::string::npos) << log;
    EXPECT_NE(log.find("is writable again"), std::string::npos) << log;
}

}  // namespace
}  // namespace hlat
