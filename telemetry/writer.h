// The store's writer: it owns its SQLite connection on its own thread. The
// training loop hands it records through a bounded queue and never waits on
// disk; the thread commits in batches (every batch_rows rows or flush_ms,
// whichever comes first). When the queue is full the caller waits (nothing is
// dropped) and the wait is counted. The destructor drains and commits.
#pragma once

#include "telemetry/records.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace hlat::telemetry {

struct WriterOptions {
    size_t queue_rows = 1 << 16;  // rows queued before callers wait
    size_t batch_rows = 8192;     // commit at least this often, in rows
    int flush_ms = 100;           // and at least this often, in time
    int busy_timeout_ms = 5000;   // bounded wait on a lock held by another process
};

struct WriterStats {
    long rows_committed = 0;
    long commits = 0;
    long queue_full_waits = 0;    // times a caller found the queue full
    double queue_wait_seconds = 0.0;
};

class Writer {
  public:
    // Opens or creates the store and migrates its schema; throws StoreError.
    explicit Writer(const std::string& path, WriterOptions options = {});
    ~Writer();
    Writer(const Writer&) = delete;

    // Registers a run and returns its id. With resume and an existing run of
    // that name, continues it instead: status back to running, and later
    // metrics of a step it already has replace the old values.
    int64_t open_run(const RunRecord& run, bool resume);

    void metric(int64_t run, const std::string& key, int64_t step, double value, double wall_time);
    void metrics(int64_t run, std::vector<MetricPoint> points);
    void rank_metric(int64_t run, RankMetricPoint point);
    void event(int64_t run, Event event);
    void alert(int64_t run, Alert alert);
    void checkpoint(int64_t run, CheckpointRecord checkpoint);
    void eval(int64_t run, EvalRecord eval);
    void set_status(int64_t run, const std::string& status, double ended_at);
    // Asks the trainer of a run to halt (it polls for this at every step);
    // `who` says who asked, for the halt event. Marked handled by the trainer.
    void request_halt(int64_t run, const std::string& who);
    void mark_halt_handled(int64_t run);
    // Removes the run and everything recorded of it, and waits for the commit.
    void delete_run(int64_t run);
    // A person's tags (a JSON array of strings) and free-text note on a run.
    void annotate(int64_t run, const std::string& tags_json, const std::string& note);

    // Blocks until everything queued before it is committed. Rethrows an
    // error of the writer thread (disk full, locked store, ...).
    void flush();
    WriterStats stats() const;
    const std::string& path() const { return path_; }

  private:
    struct Status {
        std::string status;
        double ended_at;
    };
    struct HaltRequest {
        std::string who;
        bool handled;
    };
    struct OpenRun {
        RunRecord run;
        bool resume;
        std::shared_ptr<std::promise<int64_t>> result;
    };
    struct Flush {
        std::shared_ptr<std::promise<void>> done;
    };
    struct DeleteRun {};
    struct Annotation {
        std::string tags_json, note;
    };
    using Payload = std::variant<std::vector<MetricPoint>, RankMetricPoint, Event, Alert, CheckpointRecord,
                                 EvalRecord, Status, HaltRequest, OpenRun, Flush, DeleteRun, Annotation>;
    struct Item {
        int64_t run;
        Payload payload;
        size_t rows;
    };
    class Connection;
    struct Committed;  // what a commit owes its waiters (writer.cpp)

    void push(Item item);
    // The writer thread: wait for a batch, commit it in one transaction, then
    // answer whoever waits on it; on an error, fail every waiter and stop.
    void run();
    bool wait_for_batch(std::deque<Item>& batch, std::chrono::steady_clock::time_point& last_commit);
    void commit(std::deque<Item>& batch, Committed& done);
    void fail(std::deque<Item>& batch, std::exception_ptr e);

    std::string path_;
    WriterOptions options_;
    std::unique_ptr<Connection> connection_;
    mutable std::mutex mutex_;
    std::condition_variable not_empty_, not_full_;
    std::deque<Item> queue_;
    size_t queued_rows_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
    WriterStats stats_;
    std::thread thread_;
};

// Seconds since the Unix epoch, as the store records time.
double now_seconds();

// This machine's host name, as a run records where it ran.
std::string host_name();

}  // namespace hlat::telemetry
