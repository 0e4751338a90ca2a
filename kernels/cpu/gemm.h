// GEMM on the CPU, row-major: libxsmm's JIT kernels for the small shapes they are faster at,
// OpenBLAS cblas_sgemm for the rest (gemm.cc says which). DTRAIN_CPU_GEMM=openblas in the
// environment sends every product to OpenBLAS, so that benchmarks can compare the two.
//
// Threading: the CPU ops run OpenBLAS single-threaded and split work across OpenMP threads
// themselves (ParallelSgemm splits the output into row or column blocks; attention runs one
// sgemm per (b,h) inside an OpenMP loop). With one thread pool instead of two (OpenMP's and
// OpenBLAS's pthreads), the pools never spin against each other on the same cores, and each
// backend's thread count is its own rather than OpenBLAS's process-global setting.
// threading_benchmark.cc compares this with OpenBLAS's own threading.
#ifndef DTRAIN_KERNELS_CPU_GEMM_H_
#define DTRAIN_KERNELS_CPU_GEMM_H_

#include "absl/status/status.h"

namespace dtrain::kernels::cpu {

// Row-major: c (m,n) = alpha * op(a) (m,k) @ op(b) (k,n) + beta * c, op(x) = x or x^T.
// lda/ldb/ldc are the row strides of a, b, c as stored: a is (m,k), or (k,m) when trans_a;
// b is (k,n), or (n,k) when trans_b. beta = 0 overwrites c (NaNs in c do not propagate).
// m, n or k may be 0 (k = 0 gives c = beta * c).
// Errors: InvalidArgument for null pointers, negative sizes, a leading dimension smaller than
// the stored row width (or < 1), num_threads < 1.
absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                  int lda, const float* b, int ldb, float beta, float* c, int ldc, int num_threads);

// Gemm without argument checks, for ops that have checked their own arguments. Splits c into
// num_threads blocks of rows (or of columns when n > m) when the product is large enough.
void ParallelSgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc,
                   int num_threads);

// One single-threaded sgemm, for calls made from inside an OpenMP parallel region.
void SerialSgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc);

// Sets OpenBLAS to one thread (process-wide; see the threading note above). The ops above call
// it themselves, once per process.
void UseSingleThreadedBlas();

}  // namespace dtrain::kernels::cpu

#endif  // DTRAIN_KERNELS_CPU_GEMM_H_
