#include "web/ingest_api.h"

#include "session/ingest_parsed.h"
#include "session/external_run.h"
#include "session/run_session.h"
#include "telemetry/ingest.h"
#include "telemetry/log_text.h"
#include "telemetry/reader.h"
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"
#include "web/json_reply.h"
#include "web/limits.h"

#include <fmt/format.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>

namespace hlat::web {

using json = nlohmann::json;
using namespace hlat::telemetry;

namespace {

json parse_body(const std::string& body) {
    if (body.empty()) return json::object();
    check_json_depth(body, "the body");
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw BadRequest("the body is not a JSON object");
    return j;
}

// A batch for a run deleted while its session was open (batch_session).
struct RunGone {};

const std::vector<std::string> kEndStatuses = {"finished", "halted", "crashed", "stopped"};

// A request's "step", checked as hlat ingest's lines are (a double beyond
// int64's range would wrap); 0 when absent.
int64_t step_of(const json& j) {
    if (!j.contains("step")) return 0;
    const json& s = j.at("step");
    const double v = s.is_number() ? s.get<double>() : NAN;
    if (!valid_step(v))
        throw BadRequest(fmt::format("step {} is not an integer from 0 to 9e15", excerpt(s.dump(), 40)));
    return s.is_number_unsigned() ? (int64_t)s.get<uint64_t>() : s.is_number_integer() ? s.get<int64_t>() : (int64_t)v;
}

// A request's "time": when the client says the start or end happened (a
// run synced from a spool keeps its own dates), Unix seconds; 0 (now) when absent.
double time_of(const json& j) {
    if (!j.contains("time") || j.at("time").is_null()) return 0.0;
    const json& t = j.at("time");
    const double v = t.is_number() ? t.get<double>() : NAN;
    if (!valid_time(v, now_seconds()))
        throw BadRequest(fmt::format("time {} is not Unix seconds from 1e8 up to now + 1 day", excerpt(t.dump(), 40)));
    return v;
}

}  // namespace

IngestEndpoints::IngestEndpoints(std::string store) : store_(std::move(store)) {}
IngestEndpoints::~IngestEndpoints() = default;

Writer& IngestEndpoints::writer() {
    std::lock_guard<std::mutex> lock(mutex_);
    return writer_locked();
}

Writer& IngestEndpoints::writer_locked() {
    if (!writer_) {
        writer_ = std::make_unique<Writer>(store_);
        opened_ = writer_.get();
    }
    return *writer_;
}

std::shared_ptr<IngestEndpoints::Live> IngestEndpoints::live_of(int64_t run,
                                                                 std::unique_ptr<session::RunSession> fresh,
                                                                 std::unique_lock<std::mutex>* lock) {
    std::shared_ptr<Live>& slot = sessions_[run];
    if (slot && !fresh) return slot;
    if (slot) {  // its batch in flight ends first; a batch waiting on it then finds it ended
        std::lock_guard<std::mutex> old(slot->mutex);
        slot->ended = true;
    }
    auto live = std::make_shared<Live>();
    *lock = std::unique_lock<std::mutex>(live->mutex);
    live->session = std::move(fresh);
    slot = live;
    return live;
}

Response IngestEndpoints::deleted_while_open(const std::string& name) {
    if (auto id = session_ids_.find(name); id != session_ids_.end()) {
        if (auto it = sessions_.find(id->second); it != sessions_.end()) {
            std::lock_guard<std::mutex> lock(it->second->mutex);  // a batch of it in flight ends first
            it->second->ended = true;
            sessions_.erase(it);
        }
    }
    return error(410, fmt::format("run {} was deleted from the store (hlat runs --delete) while this client wrote it; "
                                  "nothing more of it is stored: start it again to store a new run",
                                  excerpt(name, 100)));
}

// Writes a run's end (finished, crashed, stale, ...) through its session,
// which is then closed (mutex_ held; waits for the run's batch in flight).
void IngestEndpoints::end_run(const RunRecord& run, const std::string& status, int64_t step, const std::string& detail,
                              double wall_time) {
    starts_.erase(run.name);  // a start retried after its run ended opens it again
    session_ids_.erase(run.name);
    {
        std::lock_guard<std::mutex> warned(warned_mutex_);
        times_warned_.erase(run.id);
    }
    auto it = sessions_.find(run.id);
    if (it == sessions_.end()) return session::write_end(*writer_, run.id, status, step, detail, wall_time);
    std::shared_ptr<Live> live = it->second;
    sessions_.erase(it);
    std::lock_guard<std::mutex> lock(live->mutex);
    live->ended = true;
    if (!live->session) return session::write_end(*writer_, run.id, status, step, detail, wall_time);
    live->session->finish(status, step, detail, wall_time);
}

json IngestEndpoints::run_state(Reader& reader, const RunRecord& run) {
    if (std::optional<session::HaltAnswer> halt = session::pending_halt(reader, run.id))
        return {{"state", "halt"}, {"halt", halt->to_json()}};
    return {{"state", run.status}};
}

// The start's "start_id": the client's name for this one start, the same in
// each retry of it; "" when absent.
static std::string start_id_of(const json& j) {
    if (!j.contains("start_id")) return "";
    if (!j["start_id"].is_string() || j["start_id"].get<std::string>().size() > 100)
        throw BadRequest("start_id must be a string of at most 100 bytes");
    return j["start_id"].get<std::string>();
}

Response IngestEndpoints::start(const std::string& name, const std::string& body) {
    json j = parse_body(body);
    session::ExternalStart external;
    external.name = name;
    external.source = "client";
    external.halt = "client";
    external.config = j.value("config", json::object());
    external.precision = j.value("precision", "");
    external.meta = j.value("meta", json::object());
    if (!external.meta.is_object()) throw BadRequest("meta must be a JSON object");
    external.host = j.value("host", "");
    const int64_t step = step_of(j);
    const double time = time_of(j);
    external.started_at = time;
    RunRecord r = session::external_run_record(external);
    try {
        session::detectors_of(r);  // a bad detectors section is the client's error, now
    } catch (const std::exception& e) {
        throw BadRequest(e.what());
    }
    const std::string start_id = start_id_of(j);
    std::unique_lock<std::mutex> lock(mutex_);
    writer_locked();
    auto existing = Reader(store_).find_run(name);
    // A client whose start timed out (a server busy for longer than the
    // client waits) sends it again with the same start_id: that start was
    // taken, so it gets the first answer and no second session or "restart"
    // event.
    if (auto taken = starts_.find(name); !start_id.empty() && taken != starts_.end() &&
                                         taken->second.id == start_id && existing && existing->status == "running")
        return reply(200, {{"run", name}, {"state", "running"}, {"resumed", taken->second.resumed}});
    bool resume = j.value("resume", false);
    if (existing && !resume)
        return error(409, fmt::format("run \"{}\" already exists; resume it (resume=True) or choose another name", name));
    // The config (and its detectors) may have changed: a new session, caught
    // up below under the run's lock alone.
    session::SessionOptions options;
    options.catch_up = false;
    std::unique_ptr<session::RunSession> s =
        session::RunSession::open(writer_.get(), r, {resume, "", step, time, "hlat python client"}, options);
    std::unique_lock<std::mutex> run_lock;
    const int64_t id = s->run_id();
    std::shared_ptr<Live> live = live_of(id, std::move(s), &run_lock);
    session_ids_[name] = id;
    if (start_id.empty())
        starts_.erase(name);  // the session an earlier start_id opened is gone
    else
        starts_[name] = {start_id, existing.has_value()};
    lock.unlock();
    if (resume && existing) live->session->catch_up();
    return reply(200, {{"run", name}, {"state", "running"}, {"resumed", existing.has_value()}});
}

// The session of run `name` that a batch goes to, locked in *run_lock: a new
// run's, or one that comes back (stale, finished: running again, judged by
// its own detectors settings), or the open one's (attached and caught up
// from the store if this server has none yet). Catching up holds only the
// run's own lock.
session::RunSession& IngestEndpoints::batch_session(const std::string& name, int64_t first_step,
                                                    std::unique_lock<std::mutex>* run_lock) {
    for (;;) {
        std::unique_lock<std::mutex> lock(mutex_);
        writer_locked().check_writable();  // it may have started failing while this request waited
        Reader reader(store_);
        auto run = reader.find_run(name);
        if (!run && session_ids_.count(name)) throw RunGone{};
        std::shared_ptr<Live> live;
        if (!run || (run->status != "running" && run->status != "halted")) {
            RunRecord r = run ? *run : RunRecord{};
            r.name = name;
            if (!run) r.source = "ingest";
            r.started_at = now_seconds();
            session::SessionOptions options;
            options.catch_up = false;
            auto opened = session::RunSession::open(writer_.get(), r, {true, "", first_step, 0.0, "ingest"}, options);
            const int64_t id = opened->run_id();
            live = live_of(id, std::move(opened), run_lock);
            live->caught_up = !run.has_value();
            session_ids_[name] = id;
        } else {
            live = live_of(run->id, nullptr, run_lock);
            session_ids_[name] = run->id;
        }
        lock.unlock();
        if (!run_lock->owns_lock()) *run_lock = std::unique_lock<std::mutex>(live->mutex);
        if (live->ended) continue;  // ended (or replaced) while this batch waited: look again
        if (!live->session) {
            Reader fresh(store_);
            live->session = session::RunSession::attach(*writer_, fresh, *run);
        } else if (!live->caught_up) {
            live->session->catch_up();
        }
        live->caught_up = true;
        return *live->session;
    }
}

namespace {

// A body cut at line ends into pieces of about kParsePiece bytes (a longer
// line is a piece of its own).
std::vector<std::string_view> pieces_of(std::string_view body) {
    std::vector<std::string_view> out;
    while (!body.empty()) {
        const size_t line_end = body.size() <= limits::kParsePiece ? std::string_view::npos
                                                                    : body.find('\n', limits::kParsePiece);
        const size_t end = line_end == std::string_view::npos ? body.size() : line_end + 1;
        out.push_back(body.substr(0, end));
        body.remove_prefix(end);
    }
    return out;
}

size_t values_in(const ParsedBatch& batch) {
    size_t values = batch.points.size();
    for (const VectorPoint& v : batch.vectors) values += v.values.size();
    return values;
}

}  // namespace

Response IngestEndpoints::gone(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    return deleted_while_open(name);
}

// Parsed records take ~17 times the bytes of the lines they come from (short
// values): a body of several pieces is parsed a piece at a time, twice (first
// every line checked, so a bad line rejects the request whole before anything
// is written; then each piece parsed again and handed over), so that no more
// than a piece's records are in memory at once.
Response IngestEndpoints::ingest(const std::string& name, const std::string& body) {
    const std::vector<std::string_view> pieces = pieces_of(body);
    const double now = now_seconds();
    LineParser check("request", LogFormat::Jsonl);
    std::optional<ParsedBatch> only;  // a body of one piece is parsed once
    long clamped_times = 0;
    std::string time_note;
    for (std::string_view piece : pieces) {
        ParsedBatch parsed = check.parse(piece, now);
        clamped_times += parsed.clamped_times;
        if (!parsed.time_note.empty()) time_note = parsed.time_note;
        if (pieces.size() == 1) only = std::move(parsed);
    }
    double origin = 0.0;
    if (check.read_relative_time()) {  // seconds since the run's start: dated from its start, not this batch
        auto run = Reader(store_).find_run(name);
        origin = run ? run->started_at : now;
        only.reset();
    }
    // A failing store takes nothing new: a 503 now, rather than a request
    // waiting behind the others on the lock and queuing lines the client
    // would send again anyway.
    if (const Writer* w = open_writer()) w->check_writable();
    std::unique_lock<std::mutex> run_lock;
    session::RunSession* s = nullptr;
    try {
        s = &batch_session(name, std::max<int64_t>(0, check.last_step()), &run_lock);
    } catch (const RunGone&) {
        return gone(name);
    }
    if (clamped_times) {
        std::lock_guard<std::mutex> lock(warned_mutex_);  // not mutex_: this batch holds its run's lock
        if (times_warned_.insert(s->run_id()).second)     // once a run: its client says it every batch
            spdlog::warn("run {}: {}", excerpt(name, 100), time_note);
    }
    LineParser parser("request", LogFormat::Jsonl);
    if (origin > 0) parser.set_time_origin(origin);
    size_t values = 0;
    json alerts = json::array();
    try {  // the run may be deleted while this batch is written: its rows are refused, not put elsewhere
        for (std::string_view piece : pieces) {
            ParsedBatch parsed = only ? std::move(*only) : parser.parse(piece, now);
            values += values_in(parsed);
            for (const detectors::Fired& f : session::ingest_parsed(*s, std::move(parsed)))
                alerts.push_back({{"kind", f.alert.kind}, {"step", f.alert.step}, {"severity", f.alert.severity},
                                  {"message", f.alert.message}, {"policy", detectors::policy_name(f.policy)}});
        }
        writer_->flush();
        writer_->check_run(s->run_id());
    } catch (const RunDeleted&) {
        run_lock.unlock();  // mutex_ is never taken while a run's lock is held
        return gone(name);
    }
    Reader after(store_);
    const std::optional<RunRecord> stored = after.find_run(name);
    if (!stored || stored->id != s->run_id()) {
        run_lock.unlock();
        return gone(name);
    }
    json out = run_state(after, *stored);
    out["run"] = name;
    out["values"] = values;
    out["last_step"] = check.last_step();
    out["alerts"] = alerts;
    if (!s->unwatched_notice().empty()) out["unwatched"] = s->unwatched_notice();
    if (clamped_times) out["times_clamped"] = clamped_times, out["warning"] = time_note;
    return reply(200, out);
}

Response IngestEndpoints::finish(const std::string& name, const std::string& body) {
    json j = parse_body(body);
    std::string status = j.value("status", "finished");
    const int64_t step = step_of(j);
    if (std::find(kEndStatuses.begin(), kEndStatuses.end(), status) == kEndStatuses.end())
        throw BadRequest(fmt::format("status {} is not one of finished, halted, crashed, stopped", excerpt(status, 40)));
    std::lock_guard<std::mutex> lock(mutex_);
    writer_locked();
    Reader reader(store_);
    auto run = reader.find_run(name);
    if (!run) return error(404, fmt::format("no run named {}", excerpt(name, 100)));
    std::string detail = j.value("detail", "");
    if (detail.size() > 10000) throw BadRequest("detail must be at most 10,000 bytes");
    end_run(*run, status, step, detail, time_of(j));
    return reply(200, {{"run", name}, {"state", status}});
}

Response IngestEndpoints::state(const std::string& name) {
    Reader reader(store_);
    auto run = reader.find_run(name);
    if (!run) return error(404, fmt::format("no run named {}", excerpt(name, 100)));
    json out = run_state(reader, *run);
    out["run"] = name;
    return reply(200, out);
}

namespace {

// The `hlat ingest` of this host feeding the run: alive, gone (killed with
// -9, say: its run cannot be running, whatever the timeout), or unknown (not
// fed by one, or from another host).
enum class Follower { Unknown, Alive, Gone };

Follower follower_of(const RunRecord& run) {
    json meta = json::parse(run.meta, nullptr, false);
    if (meta.is_discarded() || !meta.contains("ingest_pid") || !meta["ingest_pid"].is_number_integer())
        return Follower::Unknown;
    const pid_t pid = (pid_t)meta["ingest_pid"].get<int64_t>();
    if (run.host != telemetry::host_name() || pid <= 0) return Follower::Unknown;
    if (::kill(pid, 0) == 0) return Follower::Alive;
    return errno == ESRCH ? Follower::Gone : Follower::Unknown;
}

// When a run last showed life, by this server's clock: `recorded` (its newest
// record's time, or its start) unless that lies ahead of `now` (a client's
// clock ahead, a time in another unit): such a time says nothing of when the
// record came, so the run counts from `seen`, when the sweep first found it
// so. Otherwise a run dated 2 days ahead would stay running 2 days after its
// last record, and one dated 1.7e12 s for ever.
double heard_at(double recorded, double now, double seen) { return recorded <= now ? recorded : std::min(seen, now); }

}  // namespace

// Ends `run` as stale after reading it again under the lock, which every
// start and batch holds until its rows are written: a start makes its run
// visible before its start event, so the read without the lock may have
// caught a run between the two (silent since forever, to that read), or
// before a batch. `seen_step` is that read's newest step; a run heard from
// after all goes into `heard`. Returns whether it ended the run.
bool IngestEndpoints::end_if_still_quiet(const RunRecord& run, int64_t seen_step, bool gone, double after_seconds,
                                         std::map<int64_t, Heard>& heard) {
    std::lock_guard<std::mutex> lock(mutex_);
    writer_locked();
    Reader reader(store_);
    const auto current = reader.find_run(run.name);
    if (!current || current->id != run.id || current->status != "running") return false;
    const double now = now_seconds();
    if (auto live = sessions_.find(run.id); live != sessions_.end()) {
        std::unique_lock<std::mutex> busy(live->second->mutex, std::try_to_lock);
        if (!busy.owns_lock()) {  // a batch (or its catch-up) is being taken: alive
            heard[run.id] = {now, seen_step};
            return false;
        }
    }
    const Reader::Activity a = reader.last_activity(run.id);
    activity_reads_++;
    const auto known = last_heard_.find(run.id);
    const double at = heard_at(std::max(a.wall_time, current->started_at), now,
                               known != last_heard_.end() ? known->second.at : now);
    if (!gone && (a.step != seen_step || now - at < after_seconds)) {
        heard[run.id] = {a.step != seen_step ? now : at, a.step};
        return false;
    }
    // Dated at the last sign of life, so uptime ends the segment there.
    end_run(*current, "stale", std::max<int64_t>(0, a.step),
            gone ? fmt::format("the hlat ingest feeding it is gone; last record {:.0f} s ago", now - a.wall_time)
                 : fmt::format("no records for {:.0f} s", now - at),
            at);
    return true;
}

// A run last heard of at t cannot be stale before t + after: each run's store
// is read once per that window (and when its follower is gone), so a sweep of
// thousands of quiet running runs every second reads next to nothing. A run
// is heard when its records are recent, and also when its newest step moved
// since the last read or a live `hlat ingest` of this host feeds it: an
// import of last month's log writes records dated last month, and is alive.
int IngestEndpoints::mark_stale(double after_seconds) {
    Reader reader(store_);
    int marked = 0;
    const double now = now_seconds();
    std::map<int64_t, Heard> heard;  // rebuilt: runs that ended drop out
    for (const RunRecord& run : reader.running_runs()) {
        if (run.source == "hlat") continue;
        const Follower follower = follower_of(run);
        const bool gone = follower == Follower::Gone;
        auto known = last_heard_.find(run.id);
        if (!gone && known != last_heard_.end() && now - known->second.at < after_seconds) {
            heard.insert(*known);
            continue;
        }
        const Reader::Activity a = reader.last_activity(run.id);
        activity_reads_++;
        // A run just opened has shown life.
        double at = heard_at(std::max(a.wall_time, run.started_at), now,
                             known != last_heard_.end() ? known->second.at : now);
        const bool moved = known != last_heard_.end() && a.step != known->second.step;
        if (moved || (known == last_heard_.end() && follower == Follower::Alive)) at = std::max(at, now);
        if (now - at < after_seconds && !gone) {
            heard[run.id] = {at, a.step};
            continue;
        }
        if (end_if_still_quiet(run, a.step, gone, after_seconds, heard)) marked++;
    }
    last_heard_ = std::move(heard);
    // The sessions just closed gave back their detectors' state (~14 KB a
    // run); glibc keeps freed heap unless asked, so a server that once held
    // thousands of open runs would keep their memory for good.
    if (marked > 0) ::malloc_trim(0);
    return marked;
}

}  // namespace hlat::web
