// The names other trainers write, and the hlat keys they mean. Applied at the
// run session's door for every source (hlat ingest, the HTTP endpoint behind
// the Python client), after a user's --map, so that a torchtitan, Megatron,
// Hugging Face, nanoGPT or W&B-style log feeds the detectors and the page's
// panels without a --map. docs/external-trainers.md lists the table.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hlat::session {

// The hlat key that `name` is another trainer's name for; nullopt for a name
// that is no alias (hlat's own keys included).
std::optional<std::string> alias_of(const std::string& name);

// The whole table as (alias, hlat key), in its documented order.
const std::vector<std::pair<std::string, std::string>>& alias_table();

}  // namespace hlat::session
