// What one rank of a job holds on its device, estimated from the plan before launch, so the
// coordinator never places a rank on a worker it cannot fit. fp32 everywhere (4 bytes).
// What the process itself holds (its code, OpenBLAS's and gRPC's buffers) is not counted.
//
// Counted from what the trainers allocate (worker/model/parameter_layout.cc,
// GptStage::NewActivations, AdamW, worker/parallel/gradient_sync.h), with C = n_embd,
// Cl = C / tp, NH = n_head, NHl = NH / tp, V = vocab_size, Tc = context, N = b * T tokens of a
// micro-batch (b = micro_batch_size, or batch_size on one worker, whose trainer runs the whole
// batch at once), per chunk of L layers:
//   parameters  L * (6*C + 7*Cl + 12*C*Cl)  + V*C + Tc*C (the first chunk: wte, wpe)
//               + 2*C (+ V*C when the chunk has no embedding: its tied head's copy of wte)
//   gradients   the parameters again; AdamW m and v: twice the parameters (zero1: their 1/dp
//               ring segment)
//   activations per live micro-batch: L * (5*N*C + 4*N + 19*N*Cl + b*NHl*T^2) + 2*N + N*C
//               + (L+1)*N*C (+ 2*N*C + 5*N*Cl + b*NHl*T^2 scratch when L > 0)
//               (+ 2*N*C + 3*N + 2*N*V on the last chunk: ln_f, logits, probabilities)
//               times the most micro-batches the schedule keeps alive in that chunk at once
//   communication  a received activation and gradient (N*C each) per live micro-batch of a
//               chunk with a pipeline neighbour, and two gradient buckets when dp > 1
//   device scratch  on a rank that may run on CUDA (device cuda or auto; none with cpu), what
//               the CUDA backend's scratch buffers grow to (kernels/cuda/cuda_backend.cc,
//               Scratch), each to the largest request of the rank's chunks: partial column sums
//               of bias and LayerNorm gradients (4 bytes x ceil(N / kColumnSumChunkRows) x the
//               widest set of columns), and with matmul_precision bf16 the bf16 copies of a GEMM's
//               left and right operands (2 bytes x the largest of each; the head's (N, V) logits
//               gradient is the largest left one). Checked against the GEMMs of a real step in
//               worker/memory_estimate_test.cc
//   checkpoint snapshot  host memory: the rank's shard files from the snapshot at a checkpoint
//               step until the background writer has written them (SnapshotShard copies the
//               device state into them once): the parameters it stores (not the head's tied
//               copy of wte) and their AdamW m and v (zero1: the optimizer's 1/dp share), as
//               held by dp rank 0 / tp rank 0, which store the most. In the total where the rank
//               may run on a CPU (device cpu or auto), whose device memory is host memory.
//               Checked against SnapshotShard's files in parallel/sharded_checkpoint_test.cc
// The test against the measured peak is worker/parallel/memory_estimate_test.cc.
#ifndef DTRAIN_PLAN_MEMORY_H_
#define DTRAIN_PLAN_MEMORY_H_

#include <cstdint>
#include <vector>

#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace dtrain::plan {

// Parameters (floats) of one chunk of `num_layers` layers on one tp rank.
int64_t ChunkParameters(const ModelConfig& model, int tp, int num_layers, bool has_embedding,
                        bool has_head);

// Activation floats of one micro-batch of `rows` sequences of `seq_len` tokens through one
// chunk on one tp rank (GptStage::NewActivations).
int64_t ChunkActivations(const ModelConfig& model, int tp, int num_layers, bool has_head,
                         int64_t rows, int64_t seq_len);

// The memory of each rank of pipeline stage `stage` of a validated, defaulted spec whose stage
// holds `chunks` (in virtual-stage order) and keeps at most `peak_live[j]` micro-batches alive
// in chunk j. Saturates at INT64_MAX rather than overflowing.
RankMemory EstimateRankMemory(const JobSpec& spec, int stage, const std::vector<LayerRange>& chunks,
                              const std::vector<int>& peak_live);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_MEMORY_H_
