// The names other trainers write, and the hlat keys they mean: the one table.
// Most apply to every source, at the run session's door (hlat ingest, the
// HTTP endpoint behind the Python client), after a user's --map, so that a
// torchtitan, Megatron, Hugging Face, nanoGPT or W&B-style log feeds the
// detectors and the page's panels without a --map. A few are one log
// format's own short names (llm.c's "norm", "eval"), which mean other things
// elsewhere: its line parser reads them. docs/external-trainers.md lists the
// table (tests/telemetry/test_aliases.cpp holds it to this one).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hlat::telemetry {

struct KeyAlias {
    KeyAlias(std::string name_, std::string key_, std::string only_in_ = "")
        : name(std::move(name_)), key(std::move(key_)), only_in(std::move(only_in_)) {}
    std::string name;     // as the other tool writes it
    std::string key;      // hlat's
    std::string only_in;  // "": any source; a log format ("llmc"): that format's logs only
};

// The hlat key that `name` is another trainer's name for, among the names of
// `format` ("": those of every source); nullopt for a name that is no alias
// (hlat's own keys included).
std::optional<std::string> alias_of(const std::string& name, const std::string& format = "");

// The whole table, in its documented order.
const std::vector<KeyAlias>& alias_table();

}  // namespace hlat::telemetry
