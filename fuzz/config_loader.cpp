// Fuzz target: the trainer's config loader on arbitrary text, as
// `hlat train --config FILE` reads it. A ConfigError is the expected answer
// to bad input; anything else escaping, or a message that is not UTF-8, is a crash.
#include "trainer/config/config.h"
#include "telemetry/untrusted_text.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = [] {
        std::string p = "/tmp/hlat_fuzz_config_" + std::to_string(getpid()) + ".json";
        std::atexit([] { std::remove(("/tmp/hlat_fuzz_config_" + std::to_string(getpid()) + ".json").c_str()); });
        return p;
    }();
    std::ofstream(path, std::ios::binary | std::ios::trunc).write((const char*)data, (std::streamsize)size);
    try {
        hlat::TrainConfig c = hlat::load_config(path);
        (void)hlat::config_to_json(c).dump();
    } catch (const hlat::ConfigError& e) {
        if (!hlat::telemetry::valid_utf8(e.what())) std::abort();
    }
    return 0;
}
