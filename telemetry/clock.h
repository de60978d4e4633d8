// When and where a record is made: the wall clock as the store records time,
// and this machine's name as a run records where it ran. Apart from the
// writer, so code that stamps a time or a host needs nothing of the store.
#pragma once

#include <string>

namespace hlat::telemetry {

// Seconds since the Unix epoch, as the store records time.
double now_seconds();

// This machine's host name, as a run records where it ran.
std::string host_name();

}  // namespace hlat::telemetry
