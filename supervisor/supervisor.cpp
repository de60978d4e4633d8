#include "supervisor/supervisor.h"

#include "telemetry/reader.h"
#include "session/run_session.h"
#include "telemetry/writer.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config.h"
#include "trainer/run/run_recorder.h"
#include "trainer/run/train.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <set>
#include <thread>

namespace hlat {

namespace {

std::atomic<int> g_supervisor_signal{0};  // lock-free: set in a handler, on the signal thread
extern "C" void supervisor_stop(int sig) { g_supervisor_signal = sig; }

std::string self_path() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

// In a forked child, before exec: the mask survives exec, and `hlat` blocks
// the stop signals on all its threads but one (cli/signal_thread.h). A job
// that starts with them blocked could not be stopped.
void clear_signal_mask() {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
}

std::vector<char*> c_args(std::vector<std::string>& args) {
    std::vector<char*> out;
    for (std::string& a : args) out.push_back(a.data());
    out.push_back(nullptr);
    return out;
}

// Runs argv to its end and returns what it printed on stdout.
std::string capture(std::vector<std::string> argv) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = fork();
    if (pid == 0) {
        clear_signal_mask();
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        std::vector<char*> args = c_args(argv);
        execv(args[0], args.data());
        _exit(127);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error("the training options are not valid (hlat train --print-config failed; run it to see why)");
    return out;
}

// Starts the job in its own process group, so a hang can be killed whole
// (mpirun and every rank).
pid_t launch(std::vector<std::string> argv, int attempt) {
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        clear_signal_mask();
        setpgid(0, 0);
        setenv("HLAT_ATTEMPT", std::to_string(attempt).c_str(), 1);
        std::vector<char*> args = c_args(argv);
        execvp(args[0], args.data());
        fmt::print(stderr, "hlat run: cannot start {}\n", argv[0]);
        _exit(127);
    }
    setpgid(pid, pid);
    return pid;
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    return "unknown status";
}

double now() { return telemetry::now_seconds(); }

// The store as the supervisor sees it: the run's newest signs of life and
// its events; the run may not exist until the first launch registers it.
class RunWatch {
  public:
    RunWatch(std::string store, std::string name) : store_(std::move(store)), name_(std::move(name)) {}

    std::optional<int64_t> run() {
        if (store_.empty() || !std::filesystem::exists(store_)) return std::nullopt;
        try {
            if (!reader_) reader_ = std::make_unique<telemetry::Reader>(store_);
            if (auto r = reader_->find_run(name_)) return r->id;
        } catch (const std::exception& e) {
            spdlog::warn("supervisor: cannot read the store {}: {}", store_, e.what());
        }
        return std::nullopt;
    }
    telemetry::Reader::Activity activity(int64_t run) { return reader_->last_activity(run); }
    std::vector<telemetry::Event> events(int64_t run) { return reader_->events(run); }

    // What the supervisor says about the run (a crash ends it, downtime is
    // an event) goes through the run's session, beside the job's own: no
    // catch-up, nothing to halt.
    session::RunSession& session(int64_t run) {
        if (!session_ || session_->run_id() != run) {
            if (!writer_) writer_ = std::make_unique<telemetry::Writer>(store_);
            std::optional<telemetry::RunRecord> stored = reader_->find_run(name_);
            if (!stored || stored->id != run) throw std::runtime_error("the run changed in the store while being written");
            session::SessionOptions options;
            options.catch_up = false;
            options.halts = false;
            session_ = session::RunSession::attach(*writer_, *reader_, *stored, options);
        }
        return *session_;
    }
    void crash(int64_t run, int64_t step, const std::string& detail, double wall_time) {
        session(run).crashed(step, detail, wall_time);
    }
    void event(int64_t run, const std::string& kind, int64_t step, const std::string& detail, double wall_time) {
        session(run).event(kind, step, detail, wall_time);
        session(run).flush();
    }

  private:
    std::string store_, name_;
    std::unique_ptr<telemetry::Reader> reader_;
    std::unique_ptr<telemetry::Writer> writer_;
    std::unique_ptr<session::RunSession> session_;
};

// Sleeps up to `seconds`, waking early on a stop signal.
void interruptible_sleep(double seconds) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!g_supervisor_signal && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// How one launch of the job ended.
struct JobEnd {
    int status = 0;          // from waitpid
    bool forwarded = false;  // a stop signal was passed on to it
    bool hung = false;       // killed for want of a heartbeat
};

// One supervised job: its launches, what the store says of them, and the
// crashes and downtime the supervisor records there.
class Supervisor {
  public:
    Supervisor(const SupervisorOptions& o, std::string hlat, const TrainConfig& config)
        : o_(o), hlat_(std::move(hlat)), config_(config), watch_(config.run.store, run_name(config)) {}

    int run() {
        const bool has_resume = std::find(o_.train_args.begin(), o_.train_args.end(), "--resume") != o_.train_args.end();
        for (int attempt = 0;; attempt++) {
            std::vector<std::string> argv = o_.launcher;
            argv.push_back(hlat_);
            argv.push_back("train");
            argv.insert(argv.end(), o_.train_args.begin(), o_.train_args.end());
            if (attempt > 0 && !has_resume && rewind_args_.empty()) argv.push_back("--resume");
            argv.insert(argv.end(), rewind_args_.begin(), rewind_args_.end());
            if (o_.preflight && !preflight_passes(attempt)) return kPreflightFailed;
            const double launched = now();
            pid_t pid = launch(argv, attempt);
            spdlog::info("supervisor: launch {} (pid {}): {}", attempt + 1, pid, fmt::join(argv, " "));
            JobEnd end = wait_for(pid, launched);
            rewind_args_.clear();
            if (!end.hung && !end.forwarded && exit_code(end) == kExitRewind) {
                if (std::optional<int> code = plan_rewind()) return *code;
                continue;  // no backoff: nothing is broken, the data was
            }
            if (std::optional<int> code = final_code(end, launched)) return *code;
            restarts_++;
            double wait = std::min(o_.backoff_max_seconds, o_.backoff_seconds * std::pow(2.0, restarts_ - 1));
            spdlog::warn("supervisor: the job {}; restart {} of at most {} in {:.1f} s from the latest good checkpoint",
                         how(end), restarts_, o_.max_restarts, wait);
            interruptible_sleep(wait);
            if (g_supervisor_signal) return exit_code(end);
        }
    }

  private:
    static constexpr int kPreflightFailed = 3;

    // `hlat preflight` on the job's ranks, stored beside the run; the model
    // checksummed is the job's own (its --config).
    bool preflight_passes(int attempt) {
        std::vector<std::string> argv = o_.launcher;
        argv.insert(argv.end(), {hlat_, "preflight", "--store", config_.run.store.empty() ? "none" : config_.run.store,
                                 "--name", fmt::format("{}-preflight-{}", run_name(config_), attempt + 1)});
        auto config = std::find(o_.train_args.begin(), o_.train_args.end(), "--config");
        if (config != o_.train_args.end() && config + 1 != o_.train_args.end())
            argv.insert(argv.end(), {"--config", *(config + 1)});
        argv.insert(argv.end(), o_.preflight_args.begin(), o_.preflight_args.end());
        spdlog::info("supervisor: pre-flight before launch {}: {}", attempt + 1, fmt::join(argv, " "));
        int status = 0;
        waitpid(launch(argv, attempt), &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
        spdlog::error("supervisor: the pre-flight failed ({}); the job is not launched", describe_status(status));
        return false;
    }

    // rewind_skip stopped the job: the next launch resumes from the newest
    // good checkpoint at or before the plan's step and skips every batch any
    // rewind of the run listed. Returns an exit code when it cannot rewind.
    std::optional<int> plan_rewind() {
        auto run = watch_.run();
        nlohmann::json plan;
        std::set<long> skip;
        for (const telemetry::Event& e : run ? watch_.events(*run) : std::vector<telemetry::Event>{}) {
            if (e.kind != "rewind") continue;
            plan = nlohmann::json::parse(e.detail, nullptr, false);
            if (plan.is_object() && plan.contains("skip_batches"))
                for (const auto& b : plan["skip_batches"]) skip.insert(b.get<long>());
        }
        if (!plan.is_object()) {
            spdlog::error("supervisor: the job stopped for rewind_skip but the store has no rewind plan: not restarting");
            return kExitHalted;
        }
        if (++rewinds_ > plan.value("max_rewinds", 5)) {
            spdlog::error("supervisor: {} rewinds done, the limit (detectors.rewind.max_rewinds): halting", rewinds_ - 1);
            return kExitHalted;
        }
        const int at_most = plan.value("restart_at_or_before", 0);
        std::vector<std::string> skipped;
        std::optional<std::string> dir = latest_good_checkpoint(config_.run.out_dir, &skipped, at_most);
        rewind_args_ = {"--resume-from", dir ? *dir : "scratch", "--skip-batches", fmt::format("{}", fmt::join(skip, ","))};
        spdlog::warn("supervisor: rewind {} after {} at step {}: restarting from {} (at most step {}), skipping "
                     "batches {}",
                     rewinds_, plan.value("kind", "an alert"), plan.value("alert_step", -1),
                     dir ? *dir : "the start", at_most, fmt::join(skip, ","));
        return std::nullopt;
    }

    // Waits for the job to end: passes a stop signal on, kills a job that hangs.
    JobEnd wait_for(pid_t pid, double launched) {
        JobEnd end;
        while (waitpid(pid, &end.status, WNOHANG) == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            if (g_supervisor_signal && !end.forwarded) {
                spdlog::warn("supervisor: signal {}: stopping the job (it checkpoints first); no restart",
                             (int)g_supervisor_signal);
                kill(-pid, SIGTERM);
                end.forwarded = true;
            }
            auto run = watch_.run();
            if (!run) continue;
            note_downtime(*run);
            if (o_.hang_timeout_seconds > 0 && !end.hung && !end.forwarded) {
                double last = std::max(launched, watch_.activity(*run).wall_time);
                if (now() - last > o_.hang_timeout_seconds) {
                    spdlog::error("supervisor: no heartbeat for {:.0f} s: the job hangs; killing it", now() - last);
                    kill(-pid, SIGKILL);
                    end.hung = true;
                }
            }
        }
        if (auto run = watch_.run()) note_downtime(*run);
        return end;
    }

    // The supervisor's exit code when this end is final (finished, halted,
    // stopped, failed before training, out of restarts); none to restart.
    std::optional<int> final_code(const JobEnd& end, double launched) {
        int code = exit_code(end);
        if (!end.hung && code == 0) {
            spdlog::info("supervisor: the job finished after {} restart(s) and {} rewind(s)", restarts_, rewinds_);
            return 0;
        }
        if (!end.hung && code == kExitHalted) {
            spdlog::error("supervisor: a detector halted the job: not restarting");
            return kExitHalted;
        }
        if (end.forwarded || g_supervisor_signal) {
            spdlog::warn("supervisor: the job stopped ({}) after the stop request", how(end));
            return code;
        }
        // A job that died before it registered its run never trained: a bad
        // option, a missing file, a corrupt store. Relaunching cannot fix that.
        if (!end.hung && !config_.run.store.empty() && !registered_since(launched)) {
            spdlog::error("supervisor: the job failed before training started ({}); not restarting: see its "
                          "output above",
                          how(end));
            return code ? code : 1;
        }
        record_crash(launched, how(end));
        if (restarts_ >= o_.max_restarts) {
            spdlog::error("supervisor: the job {}; {} restarts done, the limit: giving up", how(end), restarts_);
            return 1;
        }
        return std::nullopt;
    }

    std::string how(const JobEnd& end) const {
        return end.hung ? fmt::format("hung (no heartbeat for {:.0f} s), killed", o_.hang_timeout_seconds)
                        : describe_status(end.status);
    }

    static int exit_code(const JobEnd& end) {
        return WIFEXITED(end.status) ? WEXITSTATUS(end.status) : 128 + (WIFSIGNALED(end.status) ? WTERMSIG(end.status) : 0);
    }

    bool registered_since(double launched) {
        bool registered = false;
        if (auto run = watch_.run())
            for (const telemetry::Event& e : watch_.events(*run))
                registered |= (e.kind == "start" || e.kind == "restart") && e.wall_time >= launched;
        return registered;
    }

    // A crash: said in the store unless the trainer already did. The job
    // stopped training at its last sign of life, not when the supervisor
    // noticed: the crash is dated then, so uptime does not count a hang.
    void record_crash(double launched, const std::string& how) {
        crash_time_ = now();
        auto run = watch_.run();
        if (!run) return;
        std::vector<telemetry::Event> ev = watch_.events(*run);
        bool recorded = !ev.empty() && ev.back().kind == "crash" && ev.back().wall_time >= launched;
        telemetry::Reader::Activity last = watch_.activity(*run);
        if (!recorded)
            watch_.crash(*run, last.step, fmt::format("hlat run: the job {}", how), std::max(launched, last.wall_time));
        crash_time_ = std::max(launched, last.wall_time);
    }

    // Once the relaunched job has registered its restart, the downtime is
    // over: recorded at that restart, whether the job is still running or
    // has already ended when the supervisor looks.
    void note_downtime(int64_t run) {
        if (crash_time_ <= 0) return;
        for (const telemetry::Event& e : watch_.events(run))
            if (e.kind == "restart" && e.wall_time > crash_time_) {
                double down = e.wall_time - crash_time_;
                watch_.event(run, "downtime", e.step, nlohmann::json{{"seconds", down}}.dump(), e.wall_time);
                spdlog::info("supervisor: the job was down {:.1f} s", down);
                crash_time_ = -1.0;
                return;
            }
    }

    const SupervisorOptions& o_;
    std::string hlat_;
    TrainConfig config_;
    RunWatch watch_;
    int restarts_ = 0, rewinds_ = 0;
    std::vector<std::string> rewind_args_;  // for the next launch, after a rewind_skip halt
    double crash_time_ = -1.0;  // of the crash a relaunch is recovering from
};

}  // namespace

int supervise(const SupervisorOptions& o) {
    const std::string hlat = self_path();
    std::vector<std::string> print = {hlat, "train"};
    print.insert(print.end(), o.train_args.begin(), o.train_args.end());
    print.push_back("--print-config");
    TrainConfig config = config_from_json(nlohmann::json::parse(capture(print)));
    if (config.run.store.empty())
        spdlog::warn("supervisor: the run has no store: crashes are restarted but hangs cannot be seen");

    g_supervisor_signal = 0;
    auto old_int = std::signal(SIGINT, supervisor_stop);
    auto old_term = std::signal(SIGTERM, supervisor_stop);
    struct Restore {
        void (*i)(int), (*t)(int);
        ~Restore() {
            std::signal(SIGINT, i);
            std::signal(SIGTERM, t);
        }
    } restore{old_int, old_term};
    return Supervisor(o, hlat, config).run();
}

}  // namespace hlat
