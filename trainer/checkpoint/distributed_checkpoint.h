// Checkpoints of a distributed run, in the single-process format (checkpoint.h):
// world rank 0 gathers the whole model and optimizer state from the tensor-
// parallel shards and ZeRO-1 ranges and writes it; on load every rank reads
// the files and keeps its own part. A checkpoint therefore loads at any data-
// and tensor-parallel layout, and a single process reads it like any other.
#pragma once

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/parallel/parallel.h"
#include "trainer/trainer.h"

#include <string>

namespace hlat {

// Every rank calls it (one process too). state.loaders holds every
// data-parallel rank's loader state on rank 0. Returns the folder on rank 0,
// "" elsewhere.
std::string save_distributed_checkpoint(Parallel& parallel, Trainer& trainer, const CheckpointState& state,
                                        const std::string& run_dir, const std::string& tokenizer_path, int keep);

// Every rank calls it (one process too): loads its shard of the weights and
// its range of the optimizer state from a checkpoint of the whole model.
void load_distributed_checkpoint(const std::string& dir, Trainer& trainer);

}  // namespace hlat
