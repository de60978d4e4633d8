// The names hlat reads as its own keys (telemetry/key_aliases.cpp) and the table
// docs/external-trainers.md shows users: the same names, key for key, so the
// page a user reads is the code that runs.
#include "telemetry/key_aliases.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

namespace hlat::telemetry {
namespace {

// Each "| `key` | `name` (who writes it), `name`, ... |" row of the table
// headed "| hlat key | read from |": key -> the names in backticks.
std::map<std::string, std::set<std::string>> documented_aliases() {
    std::ifstream in(std::string(HLAT_SOURCE_DIR) + "/docs/external-trainers.md");
    std::map<std::string, std::set<std::string>> out;
    bool in_table = false;
    const std::regex quoted("`([^`]+)`");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("| hlat key | read from |", 0) == 0) in_table = true;
        else if (in_table && line.rfind("|", 0) != 0) break;
        if (!in_table || line.rfind("| `", 0) != 0) continue;
        const size_t split = line.find(" | ", 2);
        const std::string key = line.substr(3, line.find('`', 3) - 3);
        const std::string names = line.substr(split + 3);
        for (auto it = std::sregex_iterator(names.begin(), names.end(), quoted); it != std::sregex_iterator(); ++it)
            out[key].insert((*it)[1]);
    }
    return out;
}

TEST(Aliases, TheDocumentedTableIsTheCodes) {
    std::map<std::string, std::set<std::string>> code;
    for (const KeyAlias& a : alias_table()) code[a.key].insert(a.name);
    const auto docs = documented_aliases();
    ASSERT_FALSE(docs.empty()) << "docs/external-trainers.md has no \"| hlat key | read from |\" table";
    EXPECT_EQ(docs, code);
}

TEST(Aliases, EachNameReadsAsItsKey) {
    EXPECT_EQ(alias_of("lr/AdamW"), "lr");              // torchtitan
    EXPECT_EQ(alias_of("loss_metrics/global_avg_loss"), "loss");
    EXPECT_EQ(alias_of("lm loss"), "loss");             // Megatron-LM
    EXPECT_EQ(alias_of("loss"), std::nullopt);          // hlat's own key is no alias
    EXPECT_EQ(alias_of("lr/AdamW/1"), std::nullopt);    // a second param group's rate is not the run's
    EXPECT_EQ(alias_of("norm"), std::nullopt);          // llm.c's short names mean other things elsewhere...
    EXPECT_EQ(alias_of("norm", "llmc"), "grad_norm");   // ...and hlat's keys in its logs
    EXPECT_EQ(alias_of("train/loss", "llmc"), std::nullopt) << "every source's names are the session's to read";
}

}  // namespace
}  // namespace hlat::telemetry
