#include "trainer/data/dataset.h"

#include "trainer/files/sha256.h"

#include <fmt/format.h>

namespace hlat {

Dataset load_dataset(const DataConfig& data) {
    Dataset d;
    std::vector<Document> docs = read_corpus(data.corpus, data.text_field, &d.stats);
    if (data.dedup_paragraphs) d.stats.duplicate_paragraphs = dedup_paragraphs(docs);
    auto train = std::make_shared<std::vector<Document>>();
    auto heldout = std::make_shared<std::vector<Document>>();
    for (Document& doc : docs) (is_heldout(doc.id, data.heldout_percent) ? heldout : train)->push_back(std::move(doc));
    if (train->empty()) throw std::runtime_error("the corpus has no training documents");
    d.train = train;
    d.heldout = heldout;
    std::string identity = fmt::format("text_field={} heldout_percent={} dedup={}", data.text_field,
                                       data.heldout_percent, data.dedup_paragraphs);
    for (const std::string& f : data.corpus) identity += fmt::format(" {}", sha256_file(f));
    d.fingerprint = sha256_hex(identity);
    return d;
}

}  // namespace hlat
