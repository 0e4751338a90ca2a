#include "plan/memory.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/device_scratch.h"
#include "plan/ranks.h"
#include "plan/spec_enums.h"

namespace dtrain::plan {
namespace {

constexpr double kFloatBytes = 4;

// Doubles, so a hostile (but capped) spec cannot overflow; clamped on the way out.
int64_t Saturate(double bytes) {
  constexpr double kMax = static_cast<double>(std::numeric_limits<int64_t>::max());
  return bytes >= kMax ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bytes);
}

// The head's own copy of the tied wte (V*C) on a chunk that has the head but not the
// embedding: held and trained, never stored in a checkpoint (the embedding's rank stores wte).
int64_t TiedHeadCopy(const ModelConfig& model, bool has_embedding, bool has_head) {
  return has_head && !has_embedding ? int64_t{model.vocab_size()} * model.n_embd() : 0;
}

}  // namespace

int64_t ChunkParameters(const ModelConfig& model, int tp, int num_layers, bool has_embedding,
                        bool has_head) {
  const int64_t C = model.n_embd(), Cl = C / std::max(1, tp), V = model.vocab_size();
  // Replicated ln_1, ln_2 (2C each) and the two c_proj biases (6C); the sharded qkv and fc
  // biases (7Cl); the weights C*3Cl + Cl*C + C*4Cl + 4Cl*C.
  const int64_t per_layer = 6 * C + 7 * Cl + 12 * C * Cl;
  int64_t n = int64_t{num_layers} * per_layer;
  if (has_embedding) n += V * C + int64_t{model.context()} * C;
  if (has_head) n += 2 * C;
  return n + TiedHeadCopy(model, has_embedding, has_head);
}

int64_t ChunkActivations(const ModelConfig& model, int tp, int num_layers, bool has_head,
                         int64_t rows, int64_t seq_len) {
  const int64_t C = model.n_embd(), Cl = C / std::max(1, tp), V = model.vocab_size();
  const int64_t NHl = model.n_head() / std::max(1, tp), T = seq_len, N = rows * T;
  const int64_t att = rows * NHl * T * T;
  // tokens, targets, input; per layer ln1, res2, ln2, out, dres2 (5NC), the LayerNorm
  // statistics (4N), qkv, atty, fch, fch_gelu, dfch, dqkv (19 N Cl), att; dres (L+1 of NC).
  int64_t n = 2 * N + N * C;
  n += int64_t{num_layers} * (5 * N * C + 4 * N + 19 * N * Cl + att);
  n += int64_t{num_layers + 1} * N * C;
  if (has_head) n += 2 * N * C + 3 * N + 2 * N * V;       // lnf, dlnf, stats, losses, logits, probs
  if (num_layers > 0) n += 2 * N * C + 5 * N * Cl + att;  // proj, dln, dwide, datty, datt
  return n;
}

namespace {

// What the CUDA backend's scratch must hold for one chunk's step, per buffer (memory.h,
// EstimateRankMemory): bytes of partial column sums, elements of the largest left and right
// GEMM operands. Doubles, as the rest: a hostile (capped) spec cannot overflow them.
struct CudaScratch {
  double column_sums = 0, left = 0, right = 0;
};

CudaScratch CudaScratchOfChunk(const ModelConfig& model, int tp, int num_layers, bool has_head,
                               double rows, double seq_len) {
  const double C = model.n_embd(), Cl = C / std::max(1, tp), V = model.vocab_size();
  const double N = rows * seq_len;
  // Column sums: LayerNorm's dweight and dbias (2 x C columns), the biases of qkv (3Cl), the
  // projections (C) and fc (4Cl); the head chunk's ln_f alone when it has no layers.
  double widest = 0;
  CudaScratch s;
  if (num_layers > 0) {
    widest = std::max(2 * C, 4 * Cl);
    // Every layer GEMM's left operand is an (N, C), (N, Cl), (N, 3Cl) or (N, 4Cl) input or
    // output gradient; its right one a weight, at most (C, 4Cl), or one of those (the weight
    // gradients' dout).
    s.left = N * std::max(C, 4 * Cl);
    s.right = std::max(C * 4 * Cl, N * std::max(C, 4 * Cl));
  }
  if (has_head) {
    widest = std::max(widest, 2 * C);  // ln_f
    // logits = lnf (N,C) @ wte^T; dlnf = dlogits (N,V) @ wte (V,C); dwte += dlogits^T @ lnf.
    s.left = std::max(s.left, N * V);
    s.right = std::max({s.right, V * C, N * C});
  }
  s.column_sums = kFloatBytes * std::ceil(N / kColumnSumChunkRows) * widest;
  return s;
}

}  // namespace

RankMemory EstimateRankMemory(const JobSpec& spec, int stage, const std::vector<LayerRange>& chunks,
                              const std::vector<int>& peak_live) {
  const ParallelLayout& layout = spec.parallel();
  const int pp = std::max(1, layout.pp()), tp = std::max(1, layout.tp());
  const int dp = std::max(1, layout.dp());
  const bool one_worker = WorkersNeeded(layout) == 1;
  const int64_t rows = one_worker ? spec.batch_size() : spec.micro_batch_size();
  const double boundary =
      kFloatBytes * static_cast<double>(rows) * spec.seq_len() * spec.model().n_embd();
  const int v = static_cast<int>(chunks.size());
  // The scratch buffers belong to the rank's backend, which all its chunks share: the largest.
  const JobDevice device = PlannedDevice(spec);
  const bool bf16 = PlannedMatmulPrecision(spec) == MATMUL_BF16;
  double params = 0, acts = 0, comm = 0;
  double stored = 0;    // the parameters its checkpoint files hold: not the head's tied wte copy
  CudaScratch scratch;  // each buffer grows to the largest request of any chunk
  for (int j = 0; j < v; ++j) {
    const bool first = stage == 0 && j == 0, last = stage == pp - 1 && j == v - 1;
    const double chunk_params =
        static_cast<double>(ChunkParameters(spec.model(), tp, chunks[j].num_layers(), first, last));
    params += chunk_params;
    stored += chunk_params - static_cast<double>(TiedHeadCopy(spec.model(), first, last));
    const int live = one_worker ? 1 : std::max(1, peak_live[j]);
    acts += kFloatBytes * live *
            static_cast<double>(ChunkActivations(spec.model(), tp, chunks[j].num_layers(), last,
                                                 rows, spec.seq_len()));
    if (pp > 1) comm += 2 * boundary * live;
    if (device != DEVICE_CPU) {
      const CudaScratch c = CudaScratchOfChunk(spec.model(), tp, chunks[j].num_layers(), last,
                                               static_cast<double>(rows), spec.seq_len());
      scratch.column_sums = std::max(scratch.column_sums, c.column_sums);
      scratch.left = std::max(scratch.left, c.left);
      scratch.right = std::max(scratch.right, c.right);
    }
  }
  if (dp > 1 && !layout.zero1()) comm += 2.0 * layout.bucket_bytes();
  RankMemory m;
  m.set_parameters(Saturate(kFloatBytes * params));
  m.set_gradients(m.parameters());
  const double moments = 2 * kFloatBytes * params;
  m.set_optimizer(Saturate(layout.zero1() ? moments / dp : moments));
  m.set_activations(Saturate(acts));
  m.set_communication(Saturate(comm));
  const double scratch_bytes =
      scratch.column_sums + (bf16 ? kBf16OperandBytes * (scratch.left + scratch.right) : 0);
  m.set_device_scratch(Saturate(scratch_bytes));
  // A checkpoint's snapshot (parallel/sharded_checkpoint.h SnapshotShard): the files of the rank
  // that stores the most (dp rank 0 and tp rank 0: the model files and, without zero1, every
  // moment; with zero1 each rank's 1/dp segment of the moments, tied copy included, a bound).
  const double snapshot =
      kFloatBytes * stored + (layout.zero1() ? moments / dp : 2 * kFloatBytes * stored);
  m.set_checkpoint_snapshot(Saturate(snapshot));
  // On a CPU the snapshot's host memory is the rank's device memory (and "auto" may be a CPU).
  const double host_snapshot = device == DEVICE_CUDA ? 0 : snapshot;
  m.set_total(Saturate(2 * kFloatBytes * params + (layout.zero1() ? moments / dp : moments) + acts +
                       comm + scratch_bytes + host_snapshot));
  return m;
}

}  // namespace dtrain::plan
