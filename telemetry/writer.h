// The store's writer: it owns its SQLite connection on its own thread. The
// training loop hands it records through a bounded queue and never waits on
// disk; the thread commits in batches (every batch_rows rows or flush_ms,
// whichever comes first). When the queue is full the caller waits (nothing is
// dropped) and the wait is counted. The destructor drains and commits.
//
// A commit that fails for a reason that may pass (the store locked by another
// process past busy_timeout_ms, a full disk, an I/O error) loses nothing: the
// transaction is rolled back, the batch stays queued, and the thread tries it
// again after a backoff (50 ms doubling to 2 s) until it commits; writes then
// go on by themselves. Meanwhile health() says so, and whoever waits on a
// commit (flush, open_run, a full queue) waits failing_wait_ms at most, then
// gets a StoreError naming the cause (what they asked for stays queued). Any
// other error (a corrupt file, a constraint bug) stops the writer: everyone
// waiting gets it, and so does every later call.
//
// A run deleted from the store while it is written (`hlat runs --delete`
// from another process) stops only its own writes: foreign keys refuse its
// rows, which are dropped (one error logged, naming the run), and every later
// call for that run throws RunDeleted. Run ids are never reused (schema 8),
// so its rows cannot land in a run created since.
#pragma once

#include "telemetry/clock.h"  // the writer stamps records with it; its includers use it too

#include "telemetry/records.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace hlat::telemetry {

struct StoreError;

// A call for a run that a write found deleted from the store (see above):
// not a StoreError, since no retry brings the run back.
struct RunDeleted : std::runtime_error {
    RunDeleted(const std::string& what, int64_t run) : std::runtime_error(what), run(run) {}
    int64_t run;
};

struct WriterOptions {
    size_t queue_rows = 1 << 16;  // rows queued before callers wait
    size_t batch_rows = 8192;     // commit at least this often, in rows
    int flush_ms = 100;           // and at least this often, in time
    int busy_timeout_ms = 5000;   // bounded wait on a lock held by another process
    int failing_wait_ms = 2000;   // how long a caller waits on a store that fails before StoreError
    int close_wait_ms = 10000;    // how long the destructor retries a failing store before it gives up
};

struct WriterStats {
    long rows_committed = 0;
    long commits = 0;
    long queue_full_waits = 0;    // times a caller found the queue full
    double queue_wait_seconds = 0.0;
    long failed_commits = 0;      // commits rolled back (and retried, when the error may pass)
};

// What the writer's thread last found of the store.
struct WriterHealth {
    bool ok = true;
    bool retrying = false;      // failing, with an error that may pass: the rows are kept and retried
    std::string error;          // why the last commit failed
    double since = 0.0;         // when the store started failing, Unix seconds
    size_t queued_rows = 0;     // rows waiting for a commit
    long attempts = 0;          // commits that failed since then
};

class Writer {
  public:
    // Opens or creates the store and migrates its schema; throws StoreError.
    explicit Writer(const std::string& path, WriterOptions options = {});
    ~Writer();
    Writer(const Writer&) = delete;

    // Registers a run and returns its id. With resume and an existing run of
    // that name, continues it instead: status back to running, and later
    // metrics of a step it already has replace the old values. Waits for the
    // commit as flush does: on a failing store a StoreError after
    // failing_wait_ms, and the run is registered once the store recovers.
    int64_t open_run(const RunRecord& run, bool resume);

    void metric(int64_t run, const std::string& key, int64_t step, double value, double wall_time);
    void metrics(int64_t run, std::vector<MetricPoint> points);
    // Statistics over layers, heads or tensors: a point's labels (when set)
    // become the key's labels for the run; a step written again replaces the row.
    void vectors(int64_t run, std::vector<VectorPoint> points);
    void rank_metric(int64_t run, RankMetricPoint point);
    // A step's batch provenance, and the documents it names for the first
    // time (a document written again replaces its row; so does a step).
    void batch(int64_t run, BatchRecord batch, std::vector<DocumentRecord> documents = {});
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

    // Blocks until everything queued before it is committed. While the store
    // fails, waits failing_wait_ms at most, then throws StoreError (transient())
    // naming the cause; what was queued stays queued. Rethrows an error that
    // stopped the writer.
    void flush();
    // Throws at once what flush would throw after its wait, if the store is
    // failing now: for a caller that would rather refuse work than queue it.
    void check_writable() const;
    // Throws RunDeleted when a write of `run` found it deleted from the
    // store: for a writer of one run (a follower) to stop after a flush,
    // rather than at its next record.
    void check_run(int64_t run) const;
    WriterStats stats() const;
    WriterHealth health() const;
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
    struct Provenance {
        BatchRecord batch;
        std::vector<DocumentRecord> documents;
    };
    struct Annotation {
        std::string tags_json, note;
    };
    using Payload = std::variant<std::vector<MetricPoint>, std::vector<VectorPoint>, RankMetricPoint, Event, Alert, CheckpointRecord,
                                 EvalRecord, Status, HaltRequest, OpenRun, Flush, DeleteRun, Annotation, Provenance>;
    struct Item {
        int64_t run;
        Payload payload;
        size_t rows;
    };
    class Connection;
    struct Committed;  // what a commit owes its waiters (writer.cpp)

    struct Failing {
        std::string error;
        int code;
        double since;                                // Unix seconds
        std::chrono::steady_clock::time_point began;
        bool retrying;
        long attempts;
    };

    void push(Item item);
    template <class T>
    T await(std::future<T>& answer);
    // Throws StoreError when the store has failed through failing_wait_ms of a
    // wait begun at `began` (mutex_ held).
    void check_wait(std::chrono::steady_clock::time_point began) const;
    StoreError not_writable() const;  // what a caller of a failing store gets (mutex_ held)
    RunDeleted run_deleted(int64_t run) const;
    // The writer thread: wait for a batch, commit it in one transaction, then
    // answer whoever waits on it; on an error that may pass, keep the batch and
    // retry; on any other, fail every waiter and stop.
    void run();
    bool wait_for_batch(std::deque<Item>& batch, std::chrono::steady_clock::time_point& last_commit);
    void commit(std::deque<Item>& batch, Committed& done);
    void committed(Committed& done);
    bool keep_for_retry(std::deque<Item>& batch, const StoreError& e);
    void fail(std::deque<Item>& batch, std::exception_ptr e, const std::string& why);

    std::string path_;
    WriterOptions options_;
    std::unique_ptr<Connection> connection_;
    mutable std::mutex mutex_;
    std::condition_variable not_empty_, not_full_;
    std::deque<Item> queue_;
    size_t queued_rows_ = 0;
    size_t committing_rows_ = 0;                    // taken from the queue by the commit under way
    std::optional<Failing> failing_;                // set while the last commit failed
    std::chrono::steady_clock::time_point retry_at_, stop_deadline_;
    std::chrono::milliseconds retry_delay_{0};
    bool stop_ = false;
    std::exception_ptr error_;                      // what stopped the writer
    std::set<int64_t> deleted_runs_;                // runs a commit found deleted: calls for them throw
    WriterStats stats_;
    std::thread thread_;
};

}  // namespace hlat::telemetry
