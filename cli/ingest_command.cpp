// hlat ingest: another trainer's log into the store, through the run's
// session (session/run_session.h) as `hlat train` would have raised them:
// JSONL, CSV, llm.c's main.log, TensorBoard event files or console lines
// matched by a pattern; once, or following the file as it grows.
#include "cli/commands.h"
#include "cli/options.h"
#include "session/ingest_parsed.h"
#include "session/external_run.h"
#include "session/run_session.h"
#include "telemetry/ingest.h"
#include "telemetry/log_text.h"
#include "telemetry/reader.h"
#include "telemetry/tensorboard.h"
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

namespace hlat::cli {
namespace po = boost::program_options;
using namespace hlat::telemetry;

namespace {

constexpr int kExitHalted = 3;  // as hlat train: a supervisor must not restart a halted run

std::atomic<int> g_ingest_stop{0};  // lock-free: set in a handler, on the signal thread
extern "C" void stop_ingesting(int) { g_ingest_stop = 1; }

// What --on-halt asks for when a halt is requested (a halt-policy alert or the page).
struct OnHalt {
    std::string how = "none";  // none, exit, signal
    pid_t pid = 0;
    int signal = SIGTERM;
};

OnHalt parse_on_halt(const std::string& text) {
    OnHalt h;
    if (text.empty() || text == "none") return h;
    if (text == "exit") return h.how = "exit", h;
    if (text.rfind("signal:", 0) == 0) {
        h.how = "signal";
        std::string rest = text.substr(7);
        size_t colon = rest.find(':');
        try {
            h.pid = (pid_t)std::stol(rest.substr(0, colon));
            if (colon != std::string::npos) h.signal = std::stoi(rest.substr(colon + 1));
        } catch (const std::exception&) {
            h.pid = 0;
        }
        if (h.pid > 0 && h.signal > 0) return h;
    }
    throw std::runtime_error(fmt::format("--on-halt \"{}\": use exit, signal:PID or signal:PID:SIGNAL", text));
}

struct Options {
    std::string store, run, file, pattern;
    LogFormat format = LogFormat::Jsonl;
    bool auto_format = true, follow = false, resume = false;
    bool skip_bad_lines = false;  // --on-bad-line=skip (the default under --follow)
    double idle_exit = 0.0;
    KeyMap rename;
    nlohmann::json config, meta = nlohmann::json::object();
    std::string precision;
    OnHalt on_halt;
};

// --meta precision=bf16,bytes_per_param=10 (the option may repeat): precision
// is a column of the run, the rest its meta (hlat compare reads seed there).
void parse_meta(const std::string& text, Options& o) {
    for (auto& [key, value] : parse_key_map(text)) {
        if (key == "precision") {
            o.precision = telemetry::precision_name(value);
            continue;
        }
        char* end = nullptr;
        double v = std::strtod(value.c_str(), &end);
        o.meta[key] = end && *end == '\0' ? nlohmann::json(v) : nlohmann::json(value);
    }
}

RunRecord run_record(const Options& o, const std::string& name) {
    session::ExternalStart start;
    start.name = name;
    start.source = "ingest";
    start.halt = o.follow ? o.on_halt.how : "none";
    start.halt_pid = o.on_halt.pid;
    start.halt_signal = o.on_halt.signal;
    start.config = o.config;
    start.meta = o.meta;
    start.meta["format"] = format_name(o.format);
    start.meta["ingest_pid"] = (int64_t)getpid();  // `hlat serve` marks the run stale at once if this process is gone
    start.precision = o.precision;
    start.host = telemetry::host_name();
    return session::external_run_record(start);
}

// A finished import's run, opened at its first record and fed piece by
// piece: its start and stop are dated by the log's first and last records,
// so uptime is that of the log, not of the import.
class ImportedRun {
  public:
    ImportedRun(Writer& writer, const Options& o, std::string name) : writer_(writer), o_(o), name_(std::move(name)) {}

    void add(ParsedBatch b) {
        const std::vector<MetricPoint>& points = b.points;
        double first = points.empty() ? now_seconds() : points.front().wall_time;
        for (const MetricPoint& p : points) {
            first = std::min(first, p.wall_time), last_point_time_ = std::max(last_point_time_, p.wall_time);
            last_step_ = std::max(last_step_, p.step);
        }
        if (!session_) {
            const int64_t step = !points.empty() ? points.front().step : !b.events.empty() ? b.events.front().step : 0;
            session::SessionOptions options;
            options.halts = false;  // nothing is left to halt: its alerts are stored, no halt request
            session_ = session::RunSession::open(&writer_, run_record(o_, name_),
                                                 {o_.resume, "start", step, first, "ingest " + o_.file}, options);
            opened_at_ = first;
        }
        values_ += points.size();
        values_ += b.vectors.size();
        alerts_ += session::ingest_parsed(*session_, std::move(b)).size();
    }

    // Ends the run with `status`, dated by its last record (its start when no
    // record had a time); a run that never saw a record was never opened.
    void finish(const std::string& status) {
        if (!session_) return;
        session_->finish(status, last_step_, "ingest " + status, last_point_time_ > 0 ? last_point_time_ : opened_at_);
        spdlog::info("ingested {} values up to step {} into run \"{}\" of {}: {} alerts", values_, last_step_, name_,
                     o_.store, alerts_);
    }

  private:
    Writer& writer_;
    const Options& o_;
    const std::string name_;
    std::unique_ptr<session::RunSession> session_;
    double opened_at_ = 0.0, last_point_time_ = 0.0;
    int64_t last_step_ = 0;
    size_t values_ = 0, alerts_ = 0;
};

int import_tensorboard(const Options& o) {
    std::vector<TensorBoardRun> runs = read_tensorboard(o.file, o.rename);  // everything parsed before any write
    Writer writer(o.store);
    for (TensorBoardRun& r : runs) {
        ImportedRun run(writer, o, r.folder.empty() ? o.run : o.run + "/" + r.folder);
        ParsedBatch b;
        b.points = std::move(r.points);
        run.add(std::move(b));
        run.finish("finished");
    }
    return 0;
}

// Every good line of `text`. At a bad line: with `skip`, pass over it and go
// on; without, stop there. Each bad line met is in *bad_lines (with `next`
// counted from the start of text); without `skip` the last one is where it stopped.
ParsedBatch parse_good_lines(LineParser& parser, std::string_view text, bool skip, std::vector<BadLine>* bad_lines) {
    ParsedBatch all;
    for (size_t pos = 0; pos < text.size();) {
        std::optional<BadLine> bad;
        ParsedBatch b = parser.parse_until_bad(text.substr(pos), now_seconds(), &bad);
        all.records += b.records, all.skipped += b.skipped, all.stale += b.stale, all.clamped_times += b.clamped_times;
        if (!b.time_note.empty()) spdlog::warn("{}", b.time_note);  // once: the parser gives it once
        std::move(b.points.begin(), b.points.end(), std::back_inserter(all.points));
        std::move(b.events.begin(), b.events.end(), std::back_inserter(all.events));
        std::move(b.vectors.begin(), b.vectors.end(), std::back_inserter(all.vectors));
        std::move(b.batches.begin(), b.batches.end(), std::back_inserter(all.batches));
        if (!bad) break;
        pos += bad->next;
        bad->next = pos;
        bad_lines->push_back(std::move(*bad));
        if (!skip) break;
        parser.skip_lines(1);
    }
    return all;
}

// Each bad line as the ingest_error event that records it (at the last good
// step), logged when it is skipped: `skipped` says what happens next.
std::vector<Event> ingest_errors(const LineParser& parser, const std::vector<BadLine>& bad_lines, bool skip,
                                 const char* skipped) {
    std::vector<Event> events;
    for (const BadLine& bad : bad_lines) {
        events.push_back({"ingest_error", std::max<int64_t>(0, parser.last_step()), now_seconds(), bad.message});
        if (skip) spdlog::error("{} ({})", bad.message, skipped);
    }
    return events;
}

// A log read a piece at a time: whole lines, about kPiece bytes of them, or
// what is left at the end of the file. Memory stays within two pieces
// whatever the file's size, and a line that never ends is cut (append_capped).
class LogPieces {
  public:
    explicit LogPieces(std::ifstream& in) : in_(in) {}
    bool next(std::string& piece) {
        char buf[1 << 16];
        while (in_ && pending_.size() < kPiece) {
            in_.read(buf, sizeof buf);
            append_capped(pending_, std::string_view(buf, (size_t)in_.gcount()), cutting_);
        }
        const size_t cut = in_ ? pending_.rfind('\n') : std::string::npos;
        if (cut == std::string::npos) piece = std::move(pending_), pending_.clear();
        else piece.assign(pending_, 0, cut + 1), pending_.erase(0, cut + 1);
        return !piece.empty();
    }

  private:
    static constexpr size_t kPiece = 4 << 20;
    // A piece that is not the file's end ends at a newline: one fits in it.
    static_assert(kPiece > kMaxLineBytes + 1);
    std::ifstream& in_;
    std::string pending_;
    bool cutting_ = false;
};

// A whole log, read and stored a piece at a time, so a log of any size is
// imported in bounded memory. Every good line is kept: at a bad line the
// import stops (the lines before it stored, the run "stopped", exit 1) or,
// with --on-bad-line=skip, records it as an ingest_error event and goes on.
// A log with no record at all is an error that writes nothing.
int import_lines(const Options& o, LineParser& parser, std::ifstream& in) {
    std::optional<Writer> writer;
    std::optional<ImportedRun> run;
    LogPieces pieces(in);
    std::string piece;
    ParsedBatch counts;
    std::optional<BadLine> stopped_at;
    std::signal(SIGINT, stop_ingesting);  // an import cut short ends its run "stopped", not "running"
    std::signal(SIGTERM, stop_ingesting);
    while (!stopped_at && !g_ingest_stop && pieces.next(piece)) {
        std::vector<BadLine> bad_lines;
        ParsedBatch b = parse_good_lines(parser, piece, o.skip_bad_lines, &bad_lines);
        counts.records += b.records, counts.skipped += b.skipped, counts.stale += b.stale;
        counts.clamped_times += b.clamped_times;
        for (BadLine& bad : bad_lines)
            if (bad.next == piece.size() && piece.back() != '\n')
                bad.message += " (the file ends without a newline: a write cut short?)";
        for (Event& e : ingest_errors(parser, bad_lines, o.skip_bad_lines, "line skipped")) b.events.push_back(std::move(e));
        if (!o.skip_bad_lines && !bad_lines.empty()) stopped_at = bad_lines.back();
        if (b.points.empty() && b.events.empty() && b.vectors.empty() && b.batches.empty() && b.records == 0) continue;
        // A log that stops at a bad line before its first record leaves no run behind: the
        // retry its message suggests (--on-bad-line=skip) must not find the name taken.
        if (!run && counts.records == 0 && stopped_at)
            throw IngestError(fmt::format("{}; nothing is stored (--on-bad-line=skip passes over bad lines)",
                                          stopped_at->message));
        if (!run) writer.emplace(o.store), run.emplace(*writer, o, o.run);
        run->add(std::move(b));
    }
    if (g_ingest_stop && !run) throw IngestError(fmt::format("{}: interrupted before any record; nothing is stored", o.file));
    if (!run)
        throw IngestError(fmt::format("{}: no line is a record of format {}{}", o.file, format_name(o.format),
                                      o.format == LogFormat::Pattern ? " (does --pattern match its lines?)" : ""));
    if (counts.skipped) spdlog::info("{}: {} lines are not records and were skipped", o.file, counts.skipped);
    if (counts.clamped_times)
        spdlog::warn("{}: {} records had a time out of bounds and are dated when they were read", o.file,
                     counts.clamped_times);
    if (counts.stale) spdlog::warn("{}: {} records at steps below an earlier one were skipped (a resumed trainer's "
                                   "repeated steps: the first values are kept)", o.file, counts.stale);
    if (g_ingest_stop) {
        run->finish("stopped");
        spdlog::error("{}: the import was interrupted; the {} records read so far are stored", o.file, counts.records);
        return 1;
    }
    run->finish(stopped_at ? "stopped" : "finished");
    if (!stopped_at) return 0;
    spdlog::error("{}: the import stopped here; the {} records before it are stored (--on-bad-line=skip passes "
                  "over bad lines)", stopped_at->message, counts.records);
    return 1;
}

}  // namespace

namespace {

// A record {"step": N, "event": "end", "detail": "STATUS[: why]"} (what the
// Python client writes when its run ends) ends following with that status:
// finished, stopped, halted or crashed. Taken out of the batch; *status set.
void take_end_record(std::vector<Event>& events, std::string* status, std::string* detail) {
    for (auto it = events.begin(); it != events.end();) {
        if (it->kind != "end") {
            ++it;
            continue;
        }
        const std::string word = it->detail.substr(0, it->detail.find(':'));
        for (const char* known : {"finished", "stopped", "halted", "crashed"})
            if (word == known) *status = word, *detail = it->detail;
        it = events.erase(it);
    }
}

// The complete lines read so far through the session. By default a followed
// log does not die at a bad line: monitoring would end at the very step that
// matters (--on-bad-line). Returns the bad line that stops following, or "";
// *end_status is set by an end record.
std::string ingest_complete_lines(const Options& o, LineParser& parser, std::string& pending,
                                  session::RunSession& s, long& values, std::string* end_status,
                                  std::string* end_detail) {
    size_t cut = pending.rfind('\n');
    if (cut == std::string::npos) return "";  // a partial last line waits
    std::vector<BadLine> bad_lines;
    ParsedBatch b = parse_good_lines(parser, std::string_view(pending).substr(0, cut + 1), o.skip_bad_lines, &bad_lines);
    for (const Event& e : ingest_errors(parser, bad_lines, o.skip_bad_lines, "line skipped; following goes on"))
        s.event(e.kind, e.step, e.detail);
    pending.erase(0, cut + 1);
    values += (long)(b.points.size() + b.vectors.size());
    take_end_record(b.events, end_status, end_detail);
    session::ingest_parsed(s, std::move(b));
    s.flush();
    return !o.skip_bad_lines && !bad_lines.empty() ? bad_lines.back().message : "";
}

// A halt-policy alert or a halt asked for from the page, once: the halt event,
// then what --on-halt says. Returns true when following ends now.
bool act_on_halt(const Options& o, session::RunSession& s, int64_t step, std::string& halt_reason) {
    if (!halt_reason.empty()) return false;
    std::optional<session::HaltAnswer> halt = session::take_halt(s, step);
    if (!halt) return false;
    halt_reason = halt->reason;
    spdlog::error("halt: {}{}", halt_reason, o.on_halt.how == "none" ? " (--on-halt none: nothing is stopped)" : "");
    if (const nlohmann::json& plan = halt->rewind; !plan.is_null())  // rewind_skip's: what the trainer does next
        spdlog::error("rewind: restart from the newest checkpoint at or before step {}, skipping the batches of "
                      "steps {} (batch ids {})", plan.value("restart_at_or_before", 0L),
                      safe_dump(plan.value("skip_steps", nlohmann::json::array())),
                      safe_dump(plan.value("skip_batch_ids", nlohmann::json::array())));
    if (o.on_halt.how == "exit") return true;
    if (o.on_halt.how == "signal" && ::kill(o.on_halt.pid, o.on_halt.signal) != 0)
        spdlog::error("cannot signal process {}: {}", o.on_halt.pid, std::strerror(errno));
    return false;
}

// --on-halt signal:PID names the trainer's process: once it is gone, and what
// it wrote has been read, following ends (a process that exists but is not
// ours to signal, EPERM, is not gone).
bool trainer_gone(const Options& o) {
    return o.on_halt.how == "signal" && ::kill(o.on_halt.pid, 0) != 0 && errno == ESRCH;
}

// The end of a followed run whose trainer went away unhalted: its exit status
// is its parent's to know, so the run is "stopped" (not "finished", which a
// crash would then wear), saying why.
std::string gone_detail(const Options& o) {
    return fmt::format("ingest: the trainer (process {}) ended", o.on_halt.pid);
}

// When following ends, besides the log's own end: asked after each read.
struct FollowEnd {
    bool draining = false;  // the trainer is gone: one more read to the end, then stop
    std::chrono::steady_clock::time_point last_growth = std::chrono::steady_clock::now();

    // The trainer gone (--on-halt signal:PID) ends it once what it wrote is
    // read; a signal, and --idle-exit without growth, at once. Sets how the
    // run ends when that is not the default.
    bool now(const Options& o, bool at_end, bool halted, std::string& status, std::string& detail) {
        if (draining && at_end) {
            if (!halted) status = "stopped", detail = gone_detail(o);
            return true;
        }
        draining = trainer_gone(o);
        if (g_ingest_stop) {
            status = "stopped";
            return true;
        }
        const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_growth).count();
        return o.idle_exit > 0 && idle >= o.idle_exit;
    }
};

int follow_lines(const Options& o, LineParser& parser, std::ifstream& in) {
    Writer writer(o.store);
    auto s = session::RunSession::open(&writer, run_record(o, o.run), {o.resume, "", 0, 0.0, "ingest --follow " + o.file});
    std::signal(SIGINT, stop_ingesting);
    std::signal(SIGTERM, stop_ingesting);
    std::string pending, status = "finished", halt_reason, bad_line, end_status, end_detail;
    bool cutting = false;  // dropping the rest of a line past kMaxLineBytes
    FollowEnd end;
    long values = 0;
    for (;;) {
        char buf[1 << 16];
        in.read(buf, sizeof buf);
        if (std::streamsize n = in.gcount(); n > 0) {
            append_capped(pending, std::string_view(buf, (size_t)n), cutting);
            end.last_growth = std::chrono::steady_clock::now();
        }
        bool at_end = in.eof();
        in.clear();
        bad_line = ingest_complete_lines(o, parser, pending, *s, values, &end_status, &end_detail);
        writer.check_run(s->run_id());  // its last batch, flushed, may have found it deleted
        if (!bad_line.empty()) {
            status = "stopped";
            break;
        }
        if (!end_status.empty()) break;  // the writer said how its run ended
        if (act_on_halt(o, *s, std::max<int64_t>(0, parser.last_step()), halt_reason)) break;
        // After signalling, the trainer's last lines are read until it is gone.
        if (end.now(o, at_end, !halt_reason.empty(), status, end_detail)) break;
        if (at_end) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    bool halted = !halt_reason.empty() && o.on_halt.how != "none";
    if (!end_status.empty()) status = end_status, halted = status == "halted";
    s->finish(halted ? "halted" : status, std::max<int64_t>(0, parser.last_step()),
              end_detail.empty() ? "ingest " + status : end_detail);
    spdlog::info("ingested {} values up to step {} into run \"{}\" of {}", values, parser.last_step(), o.run, o.store);
    if (!bad_line.empty()) {
        spdlog::error("{}: following stopped here (--on-bad-line=stop); every line before it is stored", bad_line);
        return 1;
    }
    return halted ? kExitHalted : 0;
}

// A followed run deleted from the store meanwhile (hlat runs --delete): its
// rows are refused (telemetry/writer.h), so following stops, saying so,
// rather than read on for nothing; the run has no end to write.
int follow_until_deleted(const Options& o, LineParser& parser, std::ifstream& in) {
    try {
        return follow_lines(o, parser, in);
    } catch (const RunDeleted&) {
        spdlog::error("run \"{}\" was deleted from {} (hlat runs --delete) while {} was followed into it; following "
                      "stops, and nothing more of it is stored",
                      o.run, o.store, o.file);
        return 1;
    }
}

// A TensorBoard log directory a running job writes (torchtitan, Megatron,
// SummaryWriter): its new records read every 200 ms through the session, with
// the halt, --on-halt, --idle-exit and the signals of a followed text log. A
// corrupt record stops following (every record before it is stored).
int follow_tensorboard(const Options& o) {
    TensorBoardTail tail(o.file, o.rename);
    Writer writer(o.store);
    auto s = session::RunSession::open(&writer, run_record(o, o.run), {o.resume, "", 0, 0.0, "ingest --follow " + o.file});
    std::signal(SIGINT, stop_ingesting);
    std::signal(SIGTERM, stop_ingesting);
    std::string status = "finished", halt_reason, error, end_detail;
    FollowEnd end;
    long values = 0;
    int64_t last_step = 0;
    for (;;) {
        std::vector<MetricPoint> points = tail.read_new();
        if (!points.empty()) {
            end.last_growth = std::chrono::steady_clock::now();
            values += (long)points.size();
            last_step = std::max(last_step, points.back().step);
            ParsedBatch b;
            b.records = (long)points.size();
            b.points = std::move(points);
            session::ingest_parsed(*s, std::move(b));
            s->flush();
        }
        writer.check_run(s->run_id());
        if (!tail.error().empty()) {
            error = tail.error();
            status = "stopped";
            break;
        }
        if (act_on_halt(o, *s, last_step, halt_reason)) break;
        if (end.now(o, true, !halt_reason.empty(), status, end_detail)) break;  // a read takes all there is
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const bool halted = !halt_reason.empty() && o.on_halt.how != "none";
    s->finish(halted ? "halted" : status, last_step, end_detail.empty() ? "ingest " + status : end_detail);
    spdlog::info("ingested {} values up to step {} into run \"{}\" of {}", values, last_step, o.run, o.store);
    if (!error.empty()) {
        spdlog::error("{}: following stopped here; every record before it is stored", error);
        return 1;
    }
    return halted ? kExitHalted : 0;
}

// A followed path the trainer has not made yet (torchtitan makes its tb/
// folder at its first step; a launcher starts the follower beside it): waited
// for every 200 ms, until it appears (true), --idle-exit passes, the trainer
// named by --on-halt signal:PID is gone, or a signal (false).
bool wait_for_path(const Options& o) {
    std::signal(SIGINT, stop_ingesting);
    std::signal(SIGTERM, stop_ingesting);
    spdlog::info("waiting for {} to appear", o.file);
    const auto start = std::chrono::steady_clock::now();
    while (!std::filesystem::exists(o.file)) {
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (g_ingest_stop || trainer_gone(o) || (o.idle_exit > 0 && waited >= o.idle_exit)) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return true;
}

// The log's format from its first MB (a console log's banner and config dump
// come first). A followed log whose lines do not tell yet (empty, or a
// trainer still printing its banner) is read again every 200 ms until they
// do, --idle-exit passes, or a signal; the client's JSONL tells by its first
// line.
LogFormat format_of(const Options& o, std::ifstream& in) {
    constexpr size_t kHead = 1 << 20;
    std::signal(SIGINT, stop_ingesting);
    std::signal(SIGTERM, stop_ingesting);
    const auto started = std::chrono::steady_clock::now();
    for (bool said = false;; said = true) {
        std::string head(kHead, '\0');
        in.read(head.data(), (std::streamsize)head.size());
        head.resize((size_t)in.gcount());
        in.clear();
        in.seekg(0);
        try {
            return detect_format(o.file, head);
        } catch (const IngestError& e) {
            const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            if (!o.follow || g_ingest_stop || head.size() == kHead || (o.idle_exit > 0 && waited >= o.idle_exit)) throw;
            if (!said) spdlog::info("{}: no line tells its format yet; waiting for one (or name it with --format)", o.file);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

Options parse_ingest_options(const po::variables_map& vm) {
    Options o;
    o.store = vm["store"].as<std::string>();
    o.run = vm["run"].as<std::string>();
    o.file = vm["file"].as<std::string>();
    if (o.run.empty() || o.file.empty()) throw std::runtime_error("--run and a file to ingest are required");
    std::string format = vm["format"].as<std::string>();
    o.auto_format = format == "auto";
    if (!o.auto_format) o.format = format_from_name(format);
    o.pattern = vm["pattern"].as<std::string>();
    if (!o.pattern.empty() && o.auto_format) o.auto_format = false, o.format = LogFormat::Pattern;
    o.rename = parse_key_map(vm["map"].as<std::string>());
    if (vm.count("meta"))
        for (const std::string& pairs : vm["meta"].as<std::vector<std::string>>()) parse_meta(pairs, o);
    o.follow = vm.count("follow") > 0;
    o.resume = vm.count("resume") > 0;
    o.idle_exit = vm["idle-exit"].as<double>();
    o.on_halt = parse_on_halt(vm["on-halt"].as<std::string>());
    const std::string on_bad = vm["on-bad-line"].as<std::string>();
    if (on_bad != "default" && on_bad != "stop" && on_bad != "skip")
        throw std::runtime_error(fmt::format("--on-bad-line {}: use stop or skip", excerpt(on_bad, 40)));
    o.skip_bad_lines = on_bad == "skip" || (on_bad == "default" && o.follow);
    try {
        check_name(o.run, "--run");
        check_json_depth(vm["config"].as<std::string>(), "--config");
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(e.what());
    }
    if (!o.follow && o.on_halt.how != "none") throw std::runtime_error("--on-halt needs --follow");
    o.config = nlohmann::json::parse(vm["config"].as<std::string>(), nullptr, false);
    if (o.config.is_discarded() || !o.config.is_object()) throw std::runtime_error("--config is not a JSON object");
    RunRecord probe;
    probe.config = o.config.dump();
    session::detectors_of(probe);  // a bad detectors section is an error before anything is written
    return o;
}

}  // namespace

int ingest_command(int argc, char** argv) {
    po::options_description opts("hlat ingest options");
    opts.add_options()
        ("help,h", "print this help")
        ("store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store (created if missing)")
        ("run", po::value<std::string>()->default_value(""), "run name (required); a TensorBoard log directory "
         "gives one run per folder, NAME/FOLDER")
        ("file", po::value<std::string>()->default_value(""), "the log: a file, or a TensorBoard log directory")
        ("format", po::value<std::string>()->default_value("auto"),
         "auto (from the content, then the extension), jsonl, csv, llmc, tensorboard, steploss, torchtitan, megatron "
         "or pattern")
        ("pattern", po::value<std::string>()->default_value(""),
         "for console logs: e.g. \"step: {step} loss: {loss} grad_norm: {grad_norm}\" (implies --format pattern)")
        ("map", po::value<std::string>()->default_value(""), "rename keys: LOG_NAME=HLAT_NAME,... e.g. train_loss=loss")
        ("meta", po::value<std::vector<std::string>>()->composing(),
         "what the log does not say, repeatable: --meta seed=1 --meta precision=bf16,bytes_per_param=10 (seed "
         "pairs the run with other settings' runs of that seed in hlat compare)")
        ("config", po::value<std::string>()->default_value("{}"),
         "JSON to record as the run's config; its \"detectors\" section sets the detectors")
        ("resume", "add to an existing run of that name")
        ("follow", "keep reading as the file grows, until SIGINT/SIGTERM, --idle-exit, a halt, or a record "
         "{\"step\": N, \"event\": \"end\", \"detail\": \"crashed: why\"} that ends the run with its status "
         "(finished, stopped, halted, crashed)")
        ("idle-exit", po::value<double>()->default_value(0.0),
         "with --follow: stop after this many seconds without new lines; 0 never")
        ("on-bad-line", po::value<std::string>()->default_value("default"),
         "stop: at a bad line, keep every line before it and stop (exit 1; the default for an import); skip: record "
         "it as an ingest_error event and go on (the default with --follow). Either way the message names FILE:LINE "
         "and quotes at most 200 bytes of the line")
        ("on-halt", po::value<std::string>()->default_value("none"),
         "with --follow, when a detector with the halt policy fires or the page asks for a halt: exit (with code 3) "
         "or signal:PID[:SIGNAL] (default SIGTERM, then exit 3 once PID is gone). With signal:PID, following "
         "also waits for a path PID has not made yet, and ends (the run \"stopped\") once PID is gone unhalted");
    po::positional_options_description positional;
    positional.add("file", 1);
    auto parsed = parse_options(argc, argv, opts,
                                "usage: hlat ingest --run NAME [--store FILE] [--format F] [--follow] LOG\n\n"
                                "Imports another trainer's log through the run's detectors (alerts are stored, sent "
                                "to the\nwebhook and counted as for hlat train). JSONL: {\"step\": 10, \"loss\": 2.31, "
                                "\"time\": 1700000000.5},\nbare NaN/Infinity allowed, null is a missing value. CSV: a "
                                "header with a step column. llm.c's\nmain.log, TensorBoard event files (a file or a log "
                                "directory), torchtitan's and Megatron's console\noutput and \"<step> <loss>\" files "
                                "(read by content), other console lines with --pattern.\nNo good line is lost: at a bad line an import "
                                "keeps every line before it and stops (exit 1),\n--follow records it and goes on (see "
                                "--on-bad-line); a partial last line waits under --follow.\nA step below the last one "
                                "read (a resumed trainer logging steps again) is skipped and counted.\nLimits: run names "
                                "and keys 1 to 200 bytes of UTF-8, JSON nested at most 64 deep.\nExit codes: 0 done, 1 "
                                "error or stopped at a bad line, 3 halted (with --follow --on-halt).",
                                "", &positional);
    if (!parsed) return 0;
    Options o = parse_ingest_options(*parsed);
    if (o.follow && !std::filesystem::exists(o.file) && !wait_for_path(o))
        throw std::runtime_error(fmt::format("{} never appeared ({}); nothing is stored", o.file,
                                             g_ingest_stop ? "stopped by a signal" : trainer_gone(o) ? "the trainer is gone"
                                                                                                    : "--idle-exit"));
    if (o.auto_format && (std::filesystem::is_directory(o.file) || o.file.find("tfevents") != std::string::npos))
        o.format = LogFormat::TensorBoard, o.auto_format = false;
    if (o.format == LogFormat::TensorBoard) {
        return o.follow ? follow_tensorboard(o) : import_tensorboard(o);
    }
    std::ifstream in(o.file, std::ios::binary);
    if (!in) throw std::runtime_error(fmt::format("cannot open {}", o.file));
    if (o.auto_format) {
        o.format = format_of(o, in);
        if (o.format == LogFormat::TensorBoard) return o.follow ? follow_tensorboard(o) : import_tensorboard(o);
    }
    LineParser parser(o.file, o.format, o.pattern, o.rename);
    return o.follow ? follow_until_deleted(o, parser, in) : import_lines(o, parser, in);
}

}  // namespace hlat::cli
