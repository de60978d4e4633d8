#include "trainer/run/stop_signals.h"

#include <atomic>
#include <csignal>

namespace hlat {
namespace {

// Set by a handler on the signal thread (cli/signal_thread.h), read by the
// main one: a lock-free atomic, safe in both.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
extern "C" void request_stop(int sig) { g_stop_signal = sig; }

}  // namespace

StopSignals::StopSignals() {
    g_stop_signal = 0;
    old_int_ = std::signal(SIGINT, request_stop);
    old_term_ = std::signal(SIGTERM, request_stop);
}

StopSignals::~StopSignals() {
    std::signal(SIGINT, old_int_);
    std::signal(SIGTERM, old_term_);
}

int StopSignals::received() { return g_stop_signal; }

}  // namespace hlat
