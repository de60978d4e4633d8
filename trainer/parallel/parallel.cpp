#include "trainer/parallel/parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace hlat {

namespace {

void finalize_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

}  // namespace

bool Parallel::launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

void Parallel::abort_job(int code) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    int size = 1;
    if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

Parallel::Parallel(int dp, int tp) : dp_(dp), tp_(tp) {
    if (dp < 1 || tp < 1) throw std::runtime_error(fmt::format("--dp {} --tp {}: both must be >= 1", dp, tp));
    int world = 1;
    if (launched_by_mpirun()) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (!initialized) {
            MPI_Init(nullptr, nullptr);
            std::atexit(finalize_at_exit);
        }
        mpi_ = true;
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
    }
    if (dp * tp != world)
        throw std::runtime_error(fmt::format(
            "--dp {} x --tp {} = {} processes, but the job has {}{}", dp, tp, dp * tp, world,
            world == 1 ? " (start it with mpirun -np N, N = dp x tp)" : " (mpirun -np must equal dp x tp)"));
    if (mpi_) {
        // Same dp_rank: one TP group; same tp_rank: one DP group (the replicas).
        MPI_Comm_split(MPI_COMM_WORLD, dp_rank(), tp_rank(), &tp_comm_);
        MPI_Comm_split(MPI_COMM_WORLD, tp_rank(), dp_rank(), &dp_comm_);
    }
}

Parallel::~Parallel() {
    if (tp_comm_ != MPI_COMM_NULL) MPI_Comm_free(&tp_comm_);
    if (dp_comm_ != MPI_COMM_NULL) MPI_Comm_free(&dp_comm_);
}

std::string Parallel::describe() const {
    return fmt::format("rank {} of {} = data-parallel rank {} of {} x tensor-parallel rank {} of {}", world_rank_,
                       world_size(), dp_rank(), dp_, tp_rank(), tp_);
}

MPI_Comm Parallel::comm(Group g) const {
    switch (g) {
        case Group::Data: return dp_comm_;
        case Group::Tensor: return tp_comm_;
        default: return MPI_COMM_WORLD;
    }
}

static int group_size(const Parallel& p, Group g) {
    return g == Group::Data ? p.dp_size() : g == Group::Tensor ? p.tp_size() : p.world_size();
}

static int group_rank(const Parallel& p, Group g) {
    return g == Group::Data ? p.dp_rank() : g == Group::Tensor ? p.tp_rank() : p.world_rank();
}

void Parallel::allreduce(void* x, long n, MPI_Datatype type, MPI_Op op, Group g) {
    if (group_size(*this, g) == 1 || n == 0) return;
    MPI_Allreduce(MPI_IN_PLACE, x, (int)n, type, op, comm(g));
}

void Parallel::timed_tensor_allreduce(float* x, long n, MPI_Op op) {
    double t0 = MPI_Wtime();
    allreduce(x, n, MPI_FLOAT, op, Group::Tensor);
    tensor_comm_seconds_ += MPI_Wtime() - t0;
    tensor_comm_bus_bytes_ += 4.0 * n * 2.0 * (tp_ - 1) / tp_;
}

void Parallel::reduce_scatter_sum(const float* full, float* chunk, long n) {
    double t0 = MPI_Wtime();
    if (tp_ == 1) std::copy(full, full + n, chunk);
    else MPI_Reduce_scatter_block(full, chunk, (int)n, MPI_FLOAT, MPI_SUM, tp_comm_);
    tensor_comm_seconds_ += MPI_Wtime() - t0;
    tensor_comm_bus_bytes_ += 4.0 * n * (tp_ - 1);  // (n-1)/n of the tp * n floats
}

void Parallel::timed_tensor_allgather(const void* chunk, void* full, long n, MPI_Datatype type) {
    double t0 = MPI_Wtime();
    int bytes = 0;
    MPI_Type_size(type, &bytes);
    const char* own_slot = static_cast<const char*>(full) + (long)tp_rank() * n * bytes;
    if (tp_ == 1) {
        if (chunk != full) std::memcpy(full, chunk, (size_t)n * bytes);
    } else {
        const void* send = chunk == own_slot ? MPI_IN_PLACE : chunk;
        MPI_Allgather(send, (int)n, type, full, (int)n, type, tp_comm_);
    }
    tensor_comm_seconds_ += MPI_Wtime() - t0;
    tensor_comm_bus_bytes_ += (double)bytes * n * (tp_ - 1);
}

void Parallel::allgather(const float* chunk, float* full, long n) { timed_tensor_allgather(chunk, full, n, MPI_FLOAT); }

void Parallel::allgather(const bf16* chunk, bf16* full, long n) {
    timed_tensor_allgather(chunk, full, n, MPI_UINT16_T);
}

double Parallel::take_tensor_comm_bus_bytes() { return std::exchange(tensor_comm_bus_bytes_, 0.0); }

double Parallel::take_tensor_comm_seconds() {
    double s = tensor_comm_seconds_;
    tensor_comm_seconds_ = 0.0;
    return s;
}

double Parallel::sum(double x, Group g) {
    allreduce(&x, 1, MPI_DOUBLE, MPI_SUM, g);
    return x;
}

int Parallel::max(int x, Group g) {
    allreduce(&x, 1, MPI_INT, MPI_MAX, g);
    return x;
}

void Parallel::broadcast(void* x, long bytes, Group g, int root) {
    if (group_size(*this, g) == 1 || bytes == 0) return;
    MPI_Bcast(x, (int)bytes, MPI_BYTE, root, comm(g));
}

std::vector<uint64_t> Parallel::allgather(const std::vector<uint64_t>& x, Group g) {
    int n = group_size(*this, g);
    if (n == 1) return x;
    std::vector<uint64_t> out(x.size() * n);
    MPI_Allgather(x.data(), (int)x.size(), MPI_UINT64_T, out.data(), (int)x.size(), MPI_UINT64_T, comm(g));
    return out;
}

std::vector<double> Parallel::gather(const std::vector<double>& x, Group g) {
    int n = group_size(*this, g);
    if (n == 1) return x;
    std::vector<double> out(group_rank(*this, g) == 0 ? x.size() * n : 0);
    MPI_Gather(x.data(), (int)x.size(), MPI_DOUBLE, out.data(), (int)x.size(), MPI_DOUBLE, 0, comm(g));
    return out;
}

std::vector<std::string> Parallel::gather(const std::string& s, Group g) {
    int n = group_size(*this, g);
    if (n == 1) return {s};
    int len = (int)s.size();
    std::vector<int> lens(n), displs(n);
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm(g));
    std::string all;
    if (group_rank(*this, g) == 0) {
        int total = 0;
        for (int i = 0; i < n; i++) displs[i] = total, total += lens[i];
        all.resize(total);
    }
    MPI_Gatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, comm(g));
    std::vector<std::string> out;
    if (group_rank(*this, g) == 0)
        for (int i = 0; i < n; i++) out.push_back(all.substr(displs[i], lens[i]));
    return out;
}

}  // namespace hlat
