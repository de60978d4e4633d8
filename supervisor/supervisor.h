// `hlat run`: launches a training job, watches it, and relaunches it from its
// latest good checkpoint when it crashes (the paper's automatic fault
// recovery, which raised uptime from 77.8% to 98.8%).
//
// What it watches: the job's exit status, and its heartbeats in the store (the
// newest step row or event of the run). A job silent for longer than the hang
// timeout is killed, process group and all, and treated as a crash.
// What it restarts differently: a job a rewind_skip alert stopped (exit 4)
// resumes from the newest checkpoint at or before the step the store's
// "rewind" event names, skipping the batches every rewind listed.
// What it never restarts: a job a detector halted (exit 3), a job stopped by a
// signal the supervisor itself forwarded (Ctrl-C), a job that finished, and a
// job that failed before it registered its run in the store (bad input:
// relaunching cannot help).
// What it records: a "crash" event when the job died without saying so (the
// trainer records its own exceptions), and a "downtime" event with the seconds
// from the crash to the relaunched job's "restart"; uptime is computed from
// these (telemetry::Reader::uptime) and shown on the run's page.
#pragma once

#include <string>
#include <vector>

namespace hlat {

struct SupervisorOptions {
    std::vector<std::string> train_args;  // given to `hlat train`; --resume is added on relaunches
    std::vector<std::string> launcher;    // e.g. {"mpirun", "-np", "2"}; empty: run hlat directly
    int max_restarts = 10;                // then give up (exit 1)
    double backoff_seconds = 1.0;         // wait before relaunch n: backoff * 2^(n-1), capped
    double backoff_max_seconds = 60.0;
    double hang_timeout_seconds = 300.0;  // 0: never treat silence as a hang
    // `hlat preflight` under the same launcher before every launch; a failed
    // one stops the supervisor (exit 3) instead of starting a job on a bad rank.
    bool preflight = false;
    std::vector<std::string> preflight_args;  // added to hlat preflight's own
};

// Runs the job to its end and returns the exit code to report: the job's own
// (0 finished, 3 halted, 128+N stopped by signal N), 3 when a pre-flight
// failed, or 1 after too many restarts. Throws with a message when the job's config cannot be read.
int supervise(const SupervisorOptions& options);

}  // namespace hlat
