#include "trainer/run/stop_signals.h"

#include <csignal>

namespace hlat {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
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
