#include "cli/signal_thread.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <thread>

namespace hlat::cli {

void give_stop_signals_their_own_thread() {
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stops, nullptr);
    // Detached: it never ends, and it holds nothing that exit() must free.
    std::thread([stops] {
        pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
        for (;;) pause();  // the kernel picks the one thread that does not block them
    }).detach();
}

}  // namespace hlat::cli
