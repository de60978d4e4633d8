#include "telemetry/clock.h"

#include <unistd.h>

#include <chrono>

namespace hlat::telemetry {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    return host;
}

}  // namespace hlat::telemetry
