#include "trainer/supervisor.h"

#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "trainer/config.h"
#include "trainer/run_telemetry.h"
#include "trainer/training_run.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

namespace hlat {

namespace {

volatile std::sig_atomic_t g_supervisor_signal = 0;
extern "C" void supervisor_stop(int sig) { g_supervisor_signal = sig; }

std::string self_path() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

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

    void write_event(int64_t run, const std::string& kind, int64_t step, const std::string& detail,
                     const std::string& status = "", double wall_time = 0.0) {
        if (!writer_) writer_ = std::make_unique<telemetry::Writer>(store_);
        writer_->event(run, {kind, step, wall_time > 0 ? wall_time : now(), detail});
        if (!status.empty()) writer_->set_status(run, status, now());
        writer_->flush();
    }

  private:
    std::string store_, name_;
    std::unique_ptr<telemetry::Reader> reader_;
    std::unique_ptr<telemetry::Writer> writer_;
};

// Sleeps up to `seconds`, waking early on a stop signal.
void interruptible_sleep(double seconds) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!g_supervisor_signal && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

}  // namespace

int supervise(const SupervisorOptions& o) {
    const std::string hlat = self_path();
    std::vector<std::string> print = {hlat, "train"};
    print.insert(print.end(), o.train_args.begin(), o.train_args.end());
    print.push_back("--print-config");
    TrainConfig config = config_from_json(nlohmann::json::parse(capture(print)));
    RunWatch watch(config.run.store, run_name(config));
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

    const bool has_resume = std::find(o.train_args.begin(), o.train_args.end(), "--resume") != o.train_args.end();
    int restarts = 0;
    double crash_time = -1.0;  // of the crash a relaunch is recovering from
    for (int attempt = 0;; attempt++) {
        std::vector<std::string> argv = o.launcher;
        argv.push_back(hlat);
        argv.push_back("train");
        argv.insert(argv.end(), o.train_args.begin(), o.train_args.end());
        if (attempt > 0 && !has_resume) argv.push_back("--resume");
        const double launched = now();
        pid_t pid = launch(argv, attempt);
        spdlog::info("supervisor: launch {} (pid {}): {}", attempt + 1, pid, fmt::join(argv, " "));

        // Once the relaunched job has registered its restart, the downtime is
        // over: recorded at that restart, whether the job is still running or
        // has already ended when the supervisor looks.
        auto note_downtime = [&](int64_t run) {
            if (crash_time <= 0) return;
            for (const telemetry::Event& e : watch.events(run))
                if (e.kind == "restart" && e.wall_time > crash_time) {
                    double down = e.wall_time - crash_time;
                    watch.write_event(run, "downtime", e.step, nlohmann::json{{"seconds", down}}.dump(), "",
                                      e.wall_time);
                    spdlog::info("supervisor: the job was down {:.1f} s", down);
                    crash_time = -1.0;
                    return;
                }
        };
        int status = 0;
        bool forwarded = false, hung = false;
        while (waitpid(pid, &status, WNOHANG) == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            if (g_supervisor_signal && !forwarded) {
                spdlog::warn("supervisor: signal {}: stopping the job (it checkpoints first); no restart",
                             (int)g_supervisor_signal);
                kill(-pid, SIGTERM);
                forwarded = true;
            }
            auto run = watch.run();
            if (!run) continue;
            note_downtime(*run);
            if (o.hang_timeout_seconds > 0 && !hung && !forwarded) {
                double last = std::max(launched, watch.activity(*run).wall_time);
                if (now() - last > o.hang_timeout_seconds) {
                    spdlog::error("supervisor: no heartbeat for {:.0f} s: the job hangs; killing it",
                                  now() - last);
                    kill(-pid, SIGKILL);
                    hung = true;
                }
            }
        }
        if (auto run = watch.run()) note_downtime(*run);
        std::string how = hung ? fmt::format("hung (no heartbeat for {:.0f} s), killed", o.hang_timeout_seconds)
                               : describe_status(status);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (!hung && code == 0) {
            spdlog::info("supervisor: the job finished after {} restart(s)", restarts);
            return 0;
        }
        if (!hung && code == kExitHalted) {
            spdlog::error("supervisor: a detector halted the job: not restarting");
            return kExitHalted;
        }
        if (forwarded || g_supervisor_signal) {
            spdlog::warn("supervisor: the job stopped ({}) after the stop request", how);
            return code;
        }
        // A job that died before it registered its run never trained: a bad
        // option, a missing file, a corrupt store. Relaunching cannot fix that.
        if (!hung && !config.run.store.empty()) {
            bool registered = false;
            if (auto run = watch.run())
                for (const telemetry::Event& e : watch.events(*run))
                    registered |= (e.kind == "start" || e.kind == "restart") && e.wall_time >= launched;
            if (!registered) {
                spdlog::error("supervisor: the job failed before training started ({}); not restarting: see its "
                              "output above",
                              how);
                return code ? code : 1;
            }
        }
        // A crash: say so in the store unless the trainer already did. The job
        // stopped training at its last sign of life, not when the supervisor
        // noticed: the crash is dated then, so uptime does not count a hang.
        crash_time = now();
        if (auto run = watch.run()) {
            std::vector<telemetry::Event> ev = watch.events(*run);
            bool recorded = !ev.empty() && ev.back().kind == "crash" && ev.back().wall_time >= launched;
            telemetry::Reader::Activity last = watch.activity(*run);
            if (!recorded)
                watch.write_event(*run, "crash", last.step, fmt::format("hlat run: the job {}", how), "crashed",
                                  std::max(launched, last.wall_time));
            crash_time = std::max(launched, last.wall_time);
        }
        if (restarts >= o.max_restarts) {
            spdlog::error("supervisor: the job {}; {} restarts done, the limit: giving up", how, restarts);
            return 1;
        }
        restarts++;
        double wait = std::min(o.backoff_max_seconds, o.backoff_seconds * std::pow(2.0, restarts - 1));
        spdlog::warn("supervisor: the job {}; restart {} of at most {} in {:.1f} s from the latest good checkpoint",
                     how, restarts, o.max_restarts, wait);
        interruptible_sleep(wait);
        if (g_supervisor_signal) return code;
    }
}

}  // namespace hlat
