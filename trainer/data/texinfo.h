// The Python documentation's Info file (makeinfo output) as documents, one
// per node: footnote blocks and menus dropped, `*note LABEL: ID.` and
// `*note LABEL::` cross-references turned into LABEL, heading underlines
// dropped, nodes shorter than min_chars dropped.
#pragma once

#include "trainer/data/corpus.h"

#include <string>
#include <vector>

namespace hlat {

struct InfoStats {
    long nodes = 0;        // nodes seen
    long dropped_short = 0;
};

std::vector<Document> info_to_documents(const std::string& info_text, size_t min_chars, InfoStats* stats);

// Whole gzip file, decompressed (zlib). Errors name the file.
std::string read_gzip(const std::string& path);

}  // namespace hlat
