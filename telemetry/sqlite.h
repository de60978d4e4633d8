// A thin RAII layer over the SQLite C API: a connection and prepared
// statements whose errors throw StoreError naming the file and the SQL step.
// One connection belongs to one thread.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace hlat::telemetry {

// A store failure, with SQLite's extended result code when SQLite raised it
// (0 when hlat did: a run that already exists, a schema too new, ...).
struct StoreError : std::runtime_error {
    explicit StoreError(const std::string& what, int code = 0) : std::runtime_error(what), code(code) {}
    int code;
    // Whether the same write may succeed later, untouched: see transient_store_error.
    bool transient() const;
};

// Whether an SQLite result code says "not now" rather than "never": the
// store is locked by another process (BUSY, LOCKED, PROTOCOL: a WAL lock race),
// the disk or a quota is full (FULL), the OS failed a read or write (IOERR:
// an NFS hiccup, a full disk reported as EIO), memory ran out (NOMEM) or a
// file could not be opened for now (CANTOPEN: out of descriptors). All else
// (a corrupt file, not a database, a constraint or SQL bug, read-only, a
// schema mismatch) fails the same way on every try, so retrying it would
// only hide it.
bool transient_store_error(int code);

class Statement;

// While one lives, reads on this thread's read-only connections end with a
// StoreError ("cancelled") as soon as either flag is set: a request whose
// client left, a server that stops. SQLite checks every few thousand steps of
// its program, so a read of any size stops within milliseconds.
class CancelScope {
  public:
    explicit CancelScope(const std::atomic<bool>* a, const std::atomic<bool>* b = nullptr);
    ~CancelScope();
    CancelScope(const CancelScope&) = delete;

  private:
    const std::atomic<bool>* saved_[2];
};

class Database {
  public:
    enum class Mode { ReadOnly, ReadWrite, Create };
    // Opens (or creates) the file, waits up to busy_timeout_ms when another
    // process holds a lock. Errors name the file and say what is wrong
    // (missing folder, not a database, read-only, ...).
    Database(const std::string& path, Mode mode, int busy_timeout_ms);
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    void exec(const std::string& sql);
    // exec, retried on SQLITE_BUSY until the busy timeout has passed. For
    // statements that SQLite answers "busy" at once instead of calling its busy
    // handler (where waiting could deadlock): switching the journal mode while
    // another connection switches it too. (A try that SQLite does wait on may
    // itself wait the timeout: at worst about twice it in all.)
    void exec_retrying_when_busy(const std::string& sql);
    Statement prepare(const std::string& sql);
    int64_t last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
    const std::string& path() const { return path_; }
    sqlite3* handle() { return db_; }
    // Turns an SQLite result code into a StoreError with context.
    [[noreturn]] void fail(int rc, const std::string& doing) const;

  private:
    std::string path_;
    sqlite3* db_ = nullptr;
    int busy_timeout_ms_;
};

class Statement {
  public:
    Statement(Database& db, sqlite3_stmt* stmt) : db_(&db), stmt_(stmt) {}
    Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }
    ~Statement() { sqlite3_finalize(stmt_); }
    Statement(const Statement&) = delete;

    Statement& bind(int i, int64_t v);
    Statement& bind(int i, int v) { return bind(i, (int64_t)v); }
    // NaN binds as NULL (SQLite would do that anyway); read back with column_double_or_nan.
    Statement& bind(int i, double v);
    Statement& bind(int i, const std::string& v);
    Statement& bind_null(int i);
    // A BLOB of n float32 values in this machine's byte order (little-endian
    // on every machine hlat builds for), read back with column_floats.
    Statement& bind_floats(int i, const float* values, size_t n);
    // Returns true while there is a row.
    bool step();
    void reset();
    // Runs to completion and resets, for statements that return no rows.
    void run();

    int64_t column_int(int i) const { return sqlite3_column_int64(stmt_, i); }
    double column_double(int i) const { return sqlite3_column_double(stmt_, i); }
    double column_double_or_nan(int i) const;
    std::string column_text(int i) const;
    bool column_is_null(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
    // A BLOB column as float32 values (a length not a multiple of 4 loses its tail).
    std::vector<float> column_floats(int i) const;
    // The same into a buffer the caller reuses across rows.
    void column_floats_into(int i, std::vector<float>& out) const;

  private:
    Database* db_;
    sqlite3_stmt* stmt_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back if not committed.
class Transaction {
  public:
    explicit Transaction(Database& db);
    ~Transaction();
    void commit();

  private:
    Database& db_;
    bool done_ = false;
};

}  // namespace hlat::telemetry
