// The corpus a config names, read, deduplicated and split into training and
// held-out documents, with a fingerprint that checkpoints record.
#pragma once

#include "trainer/config/config.h"
#include "trainer/data/corpus.h"

#include <memory>
#include <string>
#include <vector>

namespace hlat {

struct Dataset {
    std::shared_ptr<const std::vector<Document>> train, heldout;
    CorpusStats stats;
    // sha256 over the files' sha256 and the settings that shape the split.
    std::string fingerprint;
};

Dataset load_dataset(const DataConfig& data);

}  // namespace hlat
