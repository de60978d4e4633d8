// Where training batches come from: a token file now, the online loader later.
#pragma once

#include <cstdint>

namespace hlat {

struct BatchProvenance;  // loader.h

class BatchSource {
  public:
    virtual ~BatchSource() = default;
    // Fills inputs (B, T) and targets (B, T), the inputs shifted by one token.
    virtual void next_batch(int32_t* inputs, int32_t* targets, int B, int T) = 0;
    // Which documents the last batch held, row by row; null when the source
    // does not know (a token file).
    virtual const BatchProvenance* last_provenance() const { return nullptr; }
};

}  // namespace hlat
