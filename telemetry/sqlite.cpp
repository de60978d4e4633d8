#include "telemetry/sqlite.h"

#include <cstring>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

namespace hlat::telemetry {

namespace fs = std::filesystem;

namespace {

thread_local const std::atomic<bool>* t_cancel[2] = {nullptr, nullptr};

int cancelled(void*) {
    for (const std::atomic<bool>* flag : t_cancel)
        if (flag && flag->load(std::memory_order_relaxed)) return 1;
    return 0;
}

}  // namespace

CancelScope::CancelScope(const std::atomic<bool>* a, const std::atomic<bool>* b) : saved_{t_cancel[0], t_cancel[1]} {
    t_cancel[0] = a;
    t_cancel[1] = b;
}

CancelScope::~CancelScope() {
    t_cancel[0] = saved_[0];
    t_cancel[1] = saved_[1];
}

Database::Database(const std::string& path, Mode mode, int busy_timeout_ms)
    : path_(path), busy_timeout_ms_(busy_timeout_ms) {
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::is_directory(parent))
        throw StoreError(fmt::format("cannot open store {}: folder {} does not exist", path, parent.string()));
    if (mode != Mode::Create && !fs::exists(path))
        throw StoreError(fmt::format("store {} does not exist", path));
    int flags = mode == Mode::ReadOnly ? SQLITE_OPEN_READONLY
                : mode == Mode::ReadWrite ? SQLITE_OPEN_READWRITE
                                          : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    int rc = sqlite3_open_v2(path.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        sqlite3_close(db_);
        db_ = nullptr;
        throw StoreError(fmt::format("cannot open store {}: {}", path, msg), rc);
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, busy_timeout_ms);
    if (mode == Mode::ReadOnly) sqlite3_progress_handler(db_, 4000, cancelled, nullptr);
    // The first read is where a file that is not a database shows itself.
    // Foreign keys are off in SQLite unless each connection asks: without
    // them a row of a run deleted meanwhile (hlat runs --delete while a
    // follower writes it) was stored for no run, and once ids were reused,
    // for the next one.
    try {
        exec("SELECT count(*) FROM sqlite_master");
        exec("PRAGMA foreign_keys=ON");
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

Database::~Database() { sqlite3_close(db_); }

bool transient_store_error(int code) {
    switch (code & 0xff) {
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
        case SQLITE_PROTOCOL:
        case SQLITE_FULL:
        case SQLITE_IOERR:
        case SQLITE_NOMEM:
        case SQLITE_CANTOPEN:
            return true;
        default:
            return false;
    }
}

bool StoreError::transient() const { return transient_store_error(code); }

void Database::fail(int rc, const std::string& doing) const {
    int primary = rc & 0xff;
    std::string what = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    if (primary == SQLITE_NOTADB)
        throw StoreError(fmt::format("{} is not an hlat store: not a SQLite database", path_), rc);
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
        throw StoreError(fmt::format("store {} is locked by another connection (waited {} ms) while {}", path_,
                                     busy_timeout_ms_, doing),
                         rc);
    if (primary == SQLITE_INTERRUPT)
        throw StoreError(fmt::format("store {}: cancelled while {} (the client left, or the server is stopping)", path_,
                                     doing),
                         rc);
    if (primary == SQLITE_READONLY)
        throw StoreError(fmt::format("store {} is read-only (file or folder permissions) while {}", path_, doing), rc);
    if (primary == SQLITE_CANTOPEN)
        throw StoreError(fmt::format("cannot open store {} while {}: {}", path_, doing, what), rc);
    throw StoreError(fmt::format("store {}: {} while {}", path_, what, doing), rc);
}

void Database::exec(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc != SQLITE_OK) fail(rc, "running " + sql.substr(0, 60));
}

void Database::exec_retrying_when_busy(const std::string& sql) {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms_);
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
        int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
        if (rc == SQLITE_OK) return;
        if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() >= give_up)
            fail(rc, "running " + sql.substr(0, 60));
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
}

Statement Database::prepare(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr);
    if (rc != SQLITE_OK) fail(rc, "preparing " + sql.substr(0, 60));
    return Statement(*this, stmt);
}

Statement& Statement::bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
}

Statement& Statement::bind(int i, double v) {
    if (std::isnan(v)) {
        sqlite3_bind_null(stmt_, i);
    } else {
        sqlite3_bind_double(stmt_, i, v);
    }
    return *this;
}

Statement& Statement::bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), (int)v.size(), SQLITE_TRANSIENT);
    return *this;
}

Statement& Statement::bind_floats(int i, const float* values, size_t n) {
    sqlite3_bind_blob(stmt_, i, values, (int)(n * sizeof(float)), SQLITE_TRANSIENT);
    return *this;
}

// Copied, not cast: SQLite's buffer need not be aligned for float.
void Statement::column_floats_into(int i, std::vector<float>& out) const {
    const void* data = sqlite3_column_blob(stmt_, i);
    out.resize((size_t)sqlite3_column_bytes(stmt_, i) / sizeof(float));
    if (data && !out.empty()) std::memcpy(out.data(), data, out.size() * sizeof(float));
}

std::vector<float> Statement::column_floats(int i) const {
    std::vector<float> out;
    column_floats_into(i, out);
    return out;
}

Statement& Statement::bind_null(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
}

bool Statement::step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "";
    sqlite3_reset(stmt_);
    db_->fail(rc, "running " + sql.substr(0, 60));
}

void Statement::reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
}

void Statement::run() {
    while (step()) {
    }
    reset();
}

double Statement::column_double_or_nan(int i) const {
    return column_is_null(i) ? NAN : sqlite3_column_double(stmt_, i);
}

std::string Statement::column_text(int i) const {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    return t ? std::string((const char*)t, sqlite3_column_bytes(stmt_, i)) : std::string();
}

Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
    if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
    db_.exec("COMMIT");
    done_ = true;
}

}  // namespace hlat::telemetry
