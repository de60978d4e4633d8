// SIGINT and SIGTERM ask a training run to stop after its current step; the
// run then checkpoints and the store drains before the process exits.
// The handler must not run on a thread inside oneDNN's sgemm: `hlat` gives the
// stop signals a thread of their own (cli/signal_thread.h).
#pragma once

namespace hlat {

// Installs the handlers for its lifetime (and restores the previous ones).
class StopSignals {
  public:
    StopSignals();
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;
    // The signal received since construction, 0 when none.
    static int received();

  private:
    void (*old_int_)(int);
    void (*old_term_)(int);
};

}  // namespace hlat
