// Batch provenance (docs/provenance.md): after every step, which documents
// each sequence of each micro-batch of each data-parallel rank held, with the
// sequence's loss and its logits' gradient norm, gathered to rank 0 and
// stored as the step's batch record (documents by number, each document's
// id, file and byte offset stored once). When an alert fires, the hook adds
// to it the sequences with the highest loss and gradient, their documents, a
// text preview and data diagnostics (data.attribution.batch): what the page
// shows beside the tensor that moved first.
#pragma once

#include "trainer/data/text_diagnostics.h"
#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

#include <deque>
#include <map>
#include <memory>
#include <set>

namespace hlat {

// One sequence of a step, as stored.
struct SequenceRecord {
    int rank, micro, row;
    long batch;
    float loss, grad_norm;
    std::vector<Segment> docs;
};

class ProvenanceHook : public StepHook {
  public:
    explicit ProvenanceHook(RunContext& run);
    ~ProvenanceHook() override;
    const char* name() const override { return "provenance"; }
    void on_start() override;
    void after_step(StepResult& result) override;

  private:
    std::vector<SequenceRecord> gather(const StepStats& s);
    void store(int64_t step, const std::vector<SequenceRecord>& sequences);
    telemetry::DocumentRecord describe(long ref) const;
    void annotate(telemetry::Alert& alert);
    nlohmann::json sequence_json(const SequenceRecord& r);
    std::vector<int32_t> tokens_of(const SequenceRecord& r);
    const std::vector<int32_t>& document_tokens(long ref);

    RunContext& run_;
    std::vector<PlantedBatch> planted_;
    std::set<long> documents_stored_;
    std::deque<std::pair<int64_t, std::vector<SequenceRecord>>> recent_;  // the last steps, for attribution
    std::map<long, std::vector<int32_t>> token_cache_;
    std::unique_ptr<DuplicateIndex> duplicates_;
};

}  // namespace hlat
