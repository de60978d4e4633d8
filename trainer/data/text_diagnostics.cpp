#include "trainer/data/text_diagnostics.h"

#include <cmath>
#include <unordered_set>

namespace hlat {

double repeated_ngram_share(const std::vector<int32_t>& tokens, int n) {
    if ((int)tokens.size() <= n) return 0.0;
    std::unordered_set<uint64_t> seen;
    long repeated = 0, total = 0;
    for (size_t i = 0; i + n <= tokens.size(); i++) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (int k = 0; k < n; k++) h = (h ^ (uint32_t)tokens[i + k]) * 0x100000001b3ull;
        repeated += seen.insert(h).second ? 0 : 1;
        total++;
    }
    return (double)repeated / total;
}

double byte_entropy(std::string_view text) {
    if (text.empty()) return 0.0;
    long counts[256] = {};
    for (unsigned char c : text) counts[c]++;
    double h = 0.0;
    for (long c : counts)
        if (c > 0) {
            const double p = (double)c / text.size();
            h -= p * std::log2(p);
        }
    return h;
}

DuplicateIndex::DuplicateIndex(const std::vector<Document>& docs) : docs_(docs) {
    for (size_t i = 0; i < docs.size(); i++) first_.emplace(fnv1a64(docs[i].text), (long)i);
}

long DuplicateIndex::first_copy(long doc) const {
    if (doc < 0 || doc >= (long)docs_.size()) return -1;
    auto it = first_.find(fnv1a64(docs_[doc].text));
    // A hash match is checked on the text itself: a collision is no copy.
    if (it == first_.end() || it->second == doc || docs_[it->second].text != docs_[doc].text) return -1;
    return it->second;
}

}  // namespace hlat
