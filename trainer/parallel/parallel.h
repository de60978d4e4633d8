// Where this process sits in a data- and tensor-parallel job, and the MPI
// collectives the trainer needs over its groups.
//
// Layout (Megatron's): world rank r = dp_rank * tp + tp_rank. A tensor-parallel
// group is tp consecutive ranks, which mpirun's default by-slot mapping puts
// on one host, so the per-layer TP all-reduces stay in shared memory and only
// the per-step DP reductions cross hosts.
//
// A process not started by mpirun is a job of one and never touches MPI: every
// collective is then the identity.
#pragma once

#include "trainer/model/model.h"

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hlat {

enum class Group { World, Data, Tensor };

class Parallel : public TensorParallelGroup {
  public:
    // Joins the job (MPI_Init the first time, when launched by mpirun) and
    // splits it into dp x tp. Throws when dp * tp is not the number of
    // processes. dp = tp = 1 outside mpirun.
    Parallel(int dp, int tp);
    ~Parallel() override;

    // True when this process was started by mpirun (OMPI_COMM_WORLD_SIZE set).
    static bool launched_by_mpirun();
    // Tears the whole job down after a fatal error on one rank, so the others
    // do not wait forever in a collective. A no-op outside MPI.
    static void abort_job(int code);

    int world_rank() const { return world_rank_; }
    int world_size() const { return dp_ * tp_; }
    int dp_rank() const { return world_rank_ / tp_; }
    int dp_size() const { return dp_; }
    int tp_rank() const { return world_rank_ % tp_; }
    int tp_size() const { return tp_; }
    bool is_root() const { return world_rank_ == 0; }
    bool distributed() const { return world_size() > 1; }
    // "rank 3 = dp 1 x tp 1 of 2 x 2", for the start of the log.
    std::string describe() const;

    // TensorParallelGroup, over the TP group.
    int rank() const override { return tp_rank(); }
    int size() const override { return tp_; }
    // Timed: the tensor-parallel all-reduces sit inside forward and backward,
    // and their share of the step is what TP costs.
    void allreduce_sum(float* x, long n) override { timed_tensor_allreduce(x, n, MPI_SUM); }
    void allreduce_max(float* x, long n) override { timed_tensor_allreduce(x, n, MPI_MAX); }
    void reduce_scatter_sum(const float* full, float* chunk, long n) override;
    void allgather(const float* chunk, float* full, long n) override;
    void allgather(const bf16* chunk, bf16* full, long n) override;
    // Seconds spent in tensor-parallel collectives since the last call, and
    // their bus bytes as nccl-tests counts them (an all-reduce of B bytes
    // moves 2(n-1)/n B, an all-gather or reduce-scatter of B in all (n-1)/n B):
    // bus bytes / seconds is the achieved bus bandwidth, comparable with
    // `hlat preflight`'s.
    double take_tensor_comm_seconds();
    double take_tensor_comm_bus_bytes();

    void allreduce(void* x, long n, MPI_Datatype type, MPI_Op op, Group g);
    double sum(double x, Group g);
    int max(int x, Group g);
    void broadcast(void* x, long bytes, Group g, int root = 0);
    // Every rank's vector (all the same length), concatenated in group rank order.
    std::vector<uint64_t> allgather(const std::vector<uint64_t>& x, Group g);
    std::vector<double> gather(const std::vector<double>& x, Group g);  // at group rank 0; empty elsewhere
    std::vector<std::string> gather(const std::string& s, Group g);     // at group rank 0; empty elsewhere
    MPI_Comm comm(Group g) const;

  private:
    void timed_tensor_allreduce(float* x, long n, MPI_Op op);
    void timed_tensor_allgather(const void* chunk, void* full, long n, MPI_Datatype type);

    int dp_ = 1, tp_ = 1, world_rank_ = 0;
    double tensor_comm_seconds_ = 0.0, tensor_comm_bus_bytes_ = 0.0;
    bool mpi_ = false;
    MPI_Comm dp_comm_ = MPI_COMM_NULL, tp_comm_ = MPI_COMM_NULL;
};

}  // namespace hlat
