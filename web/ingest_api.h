// The endpoints of runs that hlat does not train (the Python client, curl):
//   POST /api/v1/runs/{run}/start   {"config": {...}, "precision": "bf16", "meta": {...}, "resume": false,
//                                    "time": UNIX_S (optional: a run synced from a spool keeps its date)}
//   POST /api/v1/runs/{run}/ingest  JSON lines as `hlat ingest` reads them; the reply carries the run's state
//   POST /api/v1/runs/{run}/finish  {"status": "finished|halted|crashed|stopped", "step": N, "detail": "...",
//                                    "time": UNIX_S (optional)}
//   GET  /api/v1/runs/{run}/state   {"state": "running|halt|<status>", "halt": {"by", "reason"}}; a
//                                    rewind_skip halt adds "rewind": {"restart_at_or_before", "skip_batch_ids",
//                                    "skip_steps", "alert_step", "max_rewinds"}
// Every batch goes through the run's session (session/run_session.h): stored,
// detected, its alerts routed; a reply names the alerts and the run's state,
// and says when none of the run's keys feeds a detector ("unwatched"). A run fed from outside that sends nothing for stale_after
// seconds is marked stale, and running again at its next batch. While the
// store fails (telemetry/writer.h), an ingest is refused at once (503): its
// lines are not taken, and the client sends them again. A run deleted while
// its session is open (hlat runs --delete) refuses its next batches (410)
// until it is started again.
// A line dated out of bounds (telemetry/ingest.h) is dated when read, and the
// reply says so ("times_clamped", "warning"). Staleness is judged by this
// server's clock: a record dated ahead of it counts from when the sweep saw it.
#pragma once

#include "web/api.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

namespace hlat::telemetry {
class Writer;
class Reader;
struct RunRecord;
}  // namespace hlat::telemetry
namespace hlat::session {
class RunSession;
}

namespace hlat::web {

class IngestEndpoints {
  public:
    explicit IngestEndpoints(std::string store);
    ~IngestEndpoints();

    Response start(const std::string& run, const std::string& body);
    Response ingest(const std::string& run, const std::string& body);
    Response finish(const std::string& run, const std::string& body);
    Response state(const std::string& run);
    // Marks running runs fed from outside (not hlat's trainer, which has
    // heartbeats and a supervisor) that have shown no life for `after`
    // seconds stale; returns how many. Called every second by `hlat serve`,
    // from one thread.
    int mark_stale(double after_seconds);
    // How often mark_stale has read a run's last activity from the store.
    int64_t activity_reads() const { return activity_reads_; }
    // The one writer of the server, opened at first use.
    telemetry::Writer& writer();
    // The writer if it is open, else null; takes no lock, so a health check
    // answers while a request waits on a failing store.
    const telemetry::Writer* open_writer() const { return opened_.load(); }

  private:
    // A run's session with its own lock: one batch of a run at a time (its
    // detectors see its steps in order), while other runs go on; catching up
    // a resumed run's stored steps holds this lock alone.
    struct Live {
        std::mutex mutex;
        std::unique_ptr<session::RunSession> session;  // null until attached, under `mutex`
        bool caught_up = true;  // false: catch up before its first batch
        bool ended = false;     // its run ended: a batch that waited on it looks again
    };
    // mutex_ held. With `fresh` (a start, a run that comes back): a Live for
    // it, locked in *lock, in place of any other of the run (once that one's
    // batch is done). Without: the run's Live, made and locked if it had none,
    // else returned unlocked (the caller waits for it after letting mutex_ go).
    std::shared_ptr<Live> live_of(int64_t run, std::unique_ptr<session::RunSession> fresh,
                                  std::unique_lock<std::mutex>* lock);
    session::RunSession& batch_session(const std::string& name, int64_t first_step,
                                       std::unique_lock<std::mutex>* run_lock);
    void end_run(const telemetry::RunRecord& run, const std::string& status, int64_t step, const std::string& detail,
                 double wall_time = 0.0);
    nlohmann::json run_state(telemetry::Reader& reader, const telemetry::RunRecord& run);
    // The writer, opened if it is not yet (mutex_ held).
    telemetry::Writer& writer_locked();
    struct Heard;
    bool end_if_still_quiet(const telemetry::RunRecord& run, int64_t seen_step, bool gone, double after_seconds,
                            std::map<int64_t, Heard>& heard);
    // The refusal of a batch for a run deleted while its session was open;
    // the session is closed (mutex_ held).
    Response deleted_while_open(const std::string& name);
    Response gone(const std::string& name);  // the same, taking mutex_

    std::string store_;
    // Guards the maps below and opening runs; never taken while a run's own
    // lock is held (a run's lock may be taken while it is held).
    std::mutex mutex_;
    std::unique_ptr<telemetry::Writer> writer_;
    std::atomic<telemetry::Writer*> opened_{nullptr};  // writer_, once open
    std::map<int64_t, std::shared_ptr<Live>> sessions_;  // by run id
    // Run name -> the id its session was opened for, until the run ends: a run
    // deleted meanwhile (hlat runs --delete) is told so (410), not opened
    // again under its name by the client's next batch.
    std::map<std::string, int64_t> session_ids_;
    std::mutex warned_mutex_;         // guards times_warned_ (taken with a run's lock held)
    std::set<int64_t> times_warned_;  // runs whose out-of-bounds times were logged, until they end
    struct Start {
        std::string id;  // the client's start_id
        bool resumed;    // the answer it was given
    };
    // Run name -> the start_id of the start that opened its session, while
    // that session runs (in memory: a server started again forgets them).
    std::map<std::string, Start> starts_;
    struct Heard {  // what the stale sweep last read of a run
        double at;     // when the run last showed life: its newest record, or when the sweep saw it move
        int64_t step;  // its newest step then
    };
    std::map<int64_t, Heard> last_heard_;  // run id -> what the sweep last read of it
    int64_t activity_reads_ = 0;
};

}  // namespace hlat::web
