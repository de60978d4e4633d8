// The stop signals (SIGINT, SIGTERM) run their handlers on one thread of
// their own, never on a thread that computes.
//
// oneDNN's JIT sgemm kernels (2.6, Debian 12's libdnnl2) point rsp into the
// heap while they run (oneDNN issue 4845, fixed in 3.11.1). A handler run on a
// thread inside one writes its signal frame over the heap: a Ctrl-C'd
// `hlat train` then aborted in free() ("corrupted size vs. prev_size"), 4
// bursts of signals in 4, one Ctrl-C in about 3. Every thread but one blocks
// the stop signals, so the kernel delivers them to that one.
#pragma once

namespace hlat::cli {

// Call first in main(), before any thread starts: threads inherit the block
// from the thread that creates them. Handlers installed later with
// std::signal run on the signal thread; the default action still ends the
// process. Children should clear the block before exec (supervisor does).
void give_stop_signals_their_own_thread();

}  // namespace hlat::cli
