// The writer: records queued from any thread, committed in batches by its
// own thread, retried while the store fails (writer.h); the SQL is
// writer_sql.h.
#include "telemetry/writer.h"

#include "telemetry/writer_sql.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <tuple>

namespace hlat::telemetry {

// The backoff between attempts on a failing store: short at first (a lock
// held a moment longer than busy_timeout_ms), then no busier than every 2 s.
constexpr std::chrono::milliseconds kFirstRetry{50}, kLastRetry{2000};

using Clock = std::chrono::steady_clock;

namespace {

std::string what_of(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "unknown error";
    }
}

}  // namespace

Writer::Writer(const std::string& path, WriterOptions options)
    : path_(path), options_(options), connection_(std::make_unique<Connection>(path, options.busy_timeout_ms)) {
    thread_ = std::thread(&Writer::run, this);
}

Writer::~Writer() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
        stop_deadline_ = Clock::now() + std::chrono::milliseconds(options_.close_wait_ms);
    }
    not_empty_.notify_all();
    if (thread_.joinable()) thread_.join();
}

StoreError Writer::not_writable() const {
    return StoreError(fmt::format("store is not writable, retrying: {} ({} queued rows are kept and written when it "
                                  "recovers)",
                                  failing_->error, queued_rows_ + committing_rows_),
                      failing_->code);
}

void Writer::check_wait(Clock::time_point began) const {
    if (!failing_ || !failing_->retrying) return;
    if (Clock::now() - std::max(began, failing_->began) >= std::chrono::milliseconds(options_.failing_wait_ms))
        throw not_writable();
}

RunDeleted Writer::run_deleted(int64_t run) const {
    return RunDeleted(fmt::format("run {} was deleted from store {} while it was being written (hlat runs --delete?): "
                                  "nothing more of it is stored",
                                  run, path_),
                      run);
}

void Writer::push(Item item) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    if (deleted_runs_.count(item.run)) throw run_deleted(item.run);
    auto full = [&] { return queued_rows_ + item.rows > options_.queue_rows && queued_rows_ > 0; };
    if (full()) {
        stats_.queue_full_waits++;
        const auto t0 = Clock::now();
        auto count_wait = [&] { stats_.queue_wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count(); };
        // In slices: a store that fails while we wait must not hold us past failing_wait_ms.
        while (!error_ && full()) {
            not_full_.wait_for(lock, std::chrono::milliseconds(50));
            try {
                check_wait(t0);
            } catch (...) {
                count_wait();
                throw;
            }
        }
        count_wait();
        if (error_) std::rethrow_exception(error_);
    }
    queued_rows_ += item.rows;
    bool urgent = std::holds_alternative<Flush>(item.payload) || std::holds_alternative<OpenRun>(item.payload);
    queue_.push_back(std::move(item));
    if (urgent || queued_rows_ >= options_.batch_rows) not_empty_.notify_one();
}

// Waits for a commit's answer: as long as it takes while the store works, at
// most failing_wait_ms of it failing.
template <class T>
T Writer::await(std::future<T>& answer) {
    const auto began = Clock::now();
    while (answer.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
        std::lock_guard<std::mutex> lock(mutex_);
        check_wait(began);
    }
    return answer.get();
}

struct Writer::Committed {
    struct Opened {
        std::shared_ptr<std::promise<int64_t>> promise;
        int64_t id;
        std::exception_ptr error;  // the run existed and resume was not asked for
    };
    std::vector<Opened> opened;
    std::vector<std::shared_ptr<std::promise<void>>> flushed;
    long rows = 0;
};

void Writer::run() {
    auto last_commit = Clock::now();
    for (;;) {
        std::deque<Item> batch;
        if (!wait_for_batch(batch, last_commit)) return;
        Committed done;
        try {
            commit(batch, done);
        } catch (const StoreError& e) {
            connection_->forget_uncommitted();
            if (keep_for_retry(batch, e)) continue;
            fail(batch, std::current_exception(), e.transient() ? "gave up at close" : "stopped");
            return;
        } catch (...) {
            connection_->forget_uncommitted();
            fail(batch, std::current_exception(), "stopped");
            return;
        }
        committed(done);
        last_commit = Clock::now();
    }
}

// Waits until a batch is due (enough rows, someone waiting on a flush or an
// open, or flush_ms since the last commit; on a failing store, the end of the
// backoff) and takes the queue. False when the writer stops with nothing left.
bool Writer::wait_for_batch(std::deque<Item>& batch, Clock::time_point& last_commit) {
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            auto urgent = [&] {
                for (const Item& i : queue_)
                    if (std::holds_alternative<Flush>(i.payload) || std::holds_alternative<OpenRun>(i.payload))
                        return true;
                return false;
            };
            if (failing_) {
                while (Clock::now() < retry_at_) not_empty_.wait_until(lock, retry_at_);
            } else {
                not_empty_.wait_until(lock, last_commit + std::chrono::milliseconds(options_.flush_ms), [&] {
                    return stop_ || queued_rows_ >= options_.batch_rows || urgent();
                });
            }
            if (!queue_.empty()) {
                batch.swap(queue_);
                committing_rows_ = queued_rows_;
                queued_rows_ = 0;
                break;
            }
            if (stop_) return false;
        }
        last_commit = Clock::now();
    }
    not_full_.notify_all();
    return true;
}

void Writer::commit(std::deque<Item>& batch, Committed& done) {
    Connection& c = *connection_;
    Transaction t(c.db);
    for (Item& item : batch) {
        done.rows += (long)item.rows;
        std::visit(
            [&](auto& p) {
                using T = std::decay_t<decltype(p)>;
                if constexpr (std::is_same_v<T, OpenRun>) {
                    try {
                        done.opened.push_back({p.result, c.open_run(p.run, p.resume), nullptr});
                    } catch (const RunExists&) {  // found before anything was written
                        done.opened.push_back({p.result, 0, std::current_exception()});
                    }
                } else if constexpr (std::is_same_v<T, Flush>) {
                    done.flushed.push_back(p.done);
                } else if (!c.write_unless_deleted(item.run, p)) {
                    done.rows -= (long)item.rows;  // dropped, not committed
                }
            },
            item.payload);
    }
    c.refresh_blocks();
    t.commit();
}

// After a commit: the stats, the store's recovery if it was failing, then
// whoever waited on the batch.
void Writer::committed(Committed& done) {
    std::optional<Failing> recovered;
    size_t rows = 0;
    std::vector<int64_t> gone;
    gone.swap(connection_->newly_gone);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.rows_committed += done.rows;
        stats_.commits++;
        rows = committing_rows_;
        committing_rows_ = 0;
        recovered.swap(failing_);
        deleted_runs_.insert(gone.begin(), gone.end());
    }
    if (recovered)
        spdlog::info("store {} is writable again after {:.1f} s and {} failed attempts; {} kept rows committed", path_,
                     now_seconds() - recovered->since, recovered->attempts, rows);
    for (int64_t run : gone)  // once a run: later records of it are refused before they are queued
        spdlog::error("store {}: run {} was deleted while it was being written (hlat runs --delete?); its rows are "
                      "dropped and its writer is told at its next call",
                      path_, run);
    // After the stats: whoever waited on a flush sees them up to date.
    for (auto& o : done.opened) {
        if (o.error) o.promise->set_exception(o.error);
        else o.promise->set_value(o.id);
    }
    for (auto& flushed : done.flushed) flushed->set_value();
}

// A failure that may pass: the transaction was rolled back, so the batch goes
// back to the head of the queue, whole and in order, and is tried again
// (with whatever was queued since) after the backoff. False when the error
// will not pass, or the writer is closing and has retried for close_wait_ms.
bool Writer::keep_for_retry(std::deque<Item>& batch, const StoreError& e) {
    if (!e.transient()) return false;
    bool started = false;
    size_t rows = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.failed_commits++;
        const auto now = Clock::now();
        if (stop_ && now >= stop_deadline_) return false;
        if (!failing_) {
            failing_ = Failing{e.what(), e.code, now_seconds(), now, true, 0};
            retry_delay_ = kFirstRetry;
            started = true;
        } else {
            failing_->error = e.what();
            failing_->code = e.code;
            retry_delay_ = std::min(retry_delay_ * 2, kLastRetry);
        }
        failing_->attempts++;
        retry_at_ = now + retry_delay_;
        for (auto it = batch.rbegin(); it != batch.rend(); ++it) queue_.push_front(std::move(*it));
        queued_rows_ += committing_rows_;
        committing_rows_ = 0;
        rows = queued_rows_;
    }
    not_full_.notify_all();  // a caller waiting on a full queue starts counting its bound
    // Once when it starts, not at every retry: the recovery says when it ends.
    if (started)
        spdlog::error("store {} is not writable: {}; its {} queued rows are kept and retried (at most {} s apart) "
                      "until it is",
                      path_, e.what(), rows, kLastRetry.count() / 1000);
    return true;
}

// The writer stops: nothing of the batch was committed, everyone waiting on
// it or on what is still queued learns why, and later calls rethrow the error.
void Writer::fail(std::deque<Item>& batch, std::exception_ptr e, const std::string& why) {
    auto tell = [&](Item& item) {
        if (auto* o = std::get_if<OpenRun>(&item.payload)) o->result->set_exception(e);
        if (auto* f = std::get_if<Flush>(&item.payload)) f->done->set_exception(e);
    };
    size_t lost = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        // The state first: a waiter told below and asking again finds it.
        error_ = e;
        lost = committing_rows_ + queued_rows_;
        const double since = failing_ ? failing_->since : now_seconds();
        failing_ = Failing{what_of(e), 0, since, Clock::now(), false, failing_ ? failing_->attempts + 1 : 1};
        for (Item& item : batch) tell(item);
        for (Item& item : queue_) tell(item);
        queue_.clear();
        queued_rows_ = committing_rows_ = 0;
    }
    not_full_.notify_all();
    spdlog::critical("store {}: the writer {} and {} rows are not stored: {}", path_, why, lost, what_of(e));
}

int64_t Writer::open_run(const RunRecord& run, bool resume) {
    check_name(run.name, "run name");  // nothing the store cannot hand back as JSON
    auto result = std::make_shared<std::promise<int64_t>>();
    auto future = result->get_future();
    push({0, OpenRun{run, resume, result}, 1});
    return await(future);
}

void Writer::metric(int64_t run, const std::string& key, int64_t step, double value, double wall_time) {
    push({run, std::vector<MetricPoint>{{key, step, value, wall_time}}, 1});
}

void Writer::metrics(int64_t run, std::vector<MetricPoint> points) {
    size_t n = points.size();
    push({run, std::move(points), n});
}

void Writer::batch(int64_t run, BatchRecord batch, std::vector<DocumentRecord> documents) {
    const size_t rows = 1 + documents.size();
    push({run, Provenance{std::move(batch), std::move(documents)}, rows});
}

void Writer::vectors(int64_t run, std::vector<VectorPoint> points) {
    size_t n = points.size();
    push({run, std::move(points), n});
}

void Writer::rank_metric(int64_t run, RankMetricPoint point) { push({run, std::move(point), 1}); }
void Writer::event(int64_t run, Event event) { push({run, std::move(event), 1}); }
void Writer::alert(int64_t run, Alert alert) { push({run, std::move(alert), 1}); }
void Writer::checkpoint(int64_t run, CheckpointRecord checkpoint) { push({run, std::move(checkpoint), 1}); }
void Writer::eval(int64_t run, EvalRecord eval) { push({run, std::move(eval), 1}); }
void Writer::set_status(int64_t run, const std::string& status, double ended_at) {
    push({run, Status{status, ended_at}, 1});
}

void Writer::request_halt(int64_t run, const std::string& who) { push({run, HaltRequest{who, false}, 1}); }
void Writer::mark_halt_handled(int64_t run) { push({run, HaltRequest{"", true}, 1}); }

void Writer::delete_run(int64_t run) {
    push({run, DeleteRun{}, 1});
    flush();
}

void Writer::annotate(int64_t run, const std::string& tags_json, const std::string& note) {
    push({run, Annotation{tags_json, note}, 1});
    flush();
}

void Writer::flush() {
    auto done = std::make_shared<std::promise<void>>();
    auto future = done->get_future();
    push({0, Flush{done}, 1});
    await(future);
}

void Writer::check_writable() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    if (failing_ && failing_->retrying) throw not_writable();
}

void Writer::check_run(int64_t run) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (deleted_runs_.count(run)) throw run_deleted(run);
}

WriterStats Writer::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

WriterHealth Writer::health() const {
    std::lock_guard<std::mutex> lock(mutex_);
    WriterHealth h;
    h.queued_rows = queued_rows_ + committing_rows_;
    if (!failing_) return h;
    h.ok = false;
    h.retrying = failing_->retrying;
    h.error = failing_->error;
    h.since = failing_->since;
    h.attempts = failing_->attempts;
    return h;
}

}  // namespace hlat::telemetry
