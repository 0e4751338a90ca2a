// The backend-generic op test fixture: TEST_P(Ops, ...) runs once per device ("cpu", "cpu with 3
// threads" for uneven work splits, and "cuda" when this build and machine have one), against the
// double-precision reference (reference.h) and finite differences of it. Fixtures derived from
// Ops may instantiate other parameters (matmul_precision_test.cc: the CUDA backend's TF32 and
// bf16 GEMMs).
#ifndef DTRAIN_KERNELS_TESTS_OPS_TEST_UTIL_H_
#define DTRAIN_KERNELS_TESTS_OPS_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"

namespace dtrain::kernels::testing {

using Vec = std::vector<double>;

struct DeviceParam {
  std::string test_name;  // gtest's name for the instance
  std::string device;     // CreateBackend's device string
  int cpu_threads = 0;
  MatmulPrecision precision = MatmulPrecision::kFp32;  // CreateBackend's GEMM precision
};

// gtest prints the instance by name rather than as bytes.
inline void PrintTo(const DeviceParam& param, std::ostream* os) { *os << param.test_name; }

// |got - want| <= atol + rtol * |want|, element-wise.
struct Tolerance {
  double atol;
  double rtol;
};

// Float forward vs the double reference: a few float roundings per output.
constexpr Tolerance kForwardTol = {1e-5, 1e-4};
// Float backward vs double central differences (exact to ~1e-9 at these sizes): the error is the
// float backward's own rounding.
constexpr Tolerance kGradientTol = {1e-4, 1e-3};

::testing::AssertionResult AllNear(const std::vector<float>& got, const Vec& want, Tolerance tol);
// |got - want| <= atol + rtol * magnitude, element-wise: for results that may cancel to near zero,
// bounded by the size of what was summed (matmul_precision_test.cc).
::testing::AssertionResult WithinBound(const std::vector<float>& got, const Vec& want,
                                       const Vec& magnitude, Tolerance tol);
// |v|, element-wise.
Vec Abs(Vec v);

// Deterministic random inputs; seed-dependent so tensors of one test differ.
std::vector<float> RandomFloats(int64_t n, uint32_t seed, float scale = 1.0f);
std::vector<int32_t> RandomInts(int64_t n, uint32_t seed, int32_t limit);  // in [0, limit)
Vec ToDouble(const std::vector<float>& v);
// a + b, element-wise.
Vec Plus(const Vec& a, const Vec& b);

// Central differences, in double, of loss(x) = sum_i f(x)[i] * weights[i] at x: the gradient a
// backward pass given dout = weights must produce.
Vec NumericalGradient(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& weights,
                      double h = 1e-5);

// For inputs too large for one difference per element: (loss(x + h d) - loss(x - h d)) / 2h for a
// random direction d, and the same directional derivative from an analytic gradient, <grad, d>.
struct DirectionalCheck {
  double numerical;
  double analytic;
};
DirectionalCheck DirectionalDerivative(const std::function<Vec(const Vec&)>& f, const Vec& x,
                                       const Vec& weights, const std::vector<float>& gradient,
                                       uint32_t seed, double h = 1e-4);

// Helpers are public so test files can share them in free functions taking an Ops&.
class Ops : public ::testing::TestWithParam<DeviceParam> {
 public:
  void SetUp() override;

  Backend* backend() { return backend_.get(); }
  bool IsCpu() const { return GetParam().device == "cpu"; }

  // Device copies of host vectors, and host copies of device buffers. Failures are reported as
  // test failures (and give empty buffers, which the ops then reject).
  template <typename T>
  DeviceBuffer<T> Upload(const std::vector<T>& host) {
    absl::StatusOr<DeviceBuffer<T>> buffer = DeviceBuffer<T>::Create(backend(), host.size());
    if (!buffer.ok()) {
      ADD_FAILURE() << buffer.status();
      return DeviceBuffer<T>();
    }
    absl::Status copied = buffer->CopyFrom(host);
    if (!copied.ok()) ADD_FAILURE() << copied;
    return std::move(buffer).value();
  }
  template <typename T>
  DeviceBuffer<T> Filled(int64_t n, T value) {
    return Upload(std::vector<T>(n, value));
  }
  // NaN-filled: for outputs that must be overwritten, never read.
  DeviceBuffer<float> Garbage(int64_t n);
  template <typename T>
  std::vector<T> Download(const DeviceBuffer<T>& buffer) {
    absl::Status synced = backend_->Synchronize();
    if (!synced.ok()) ADD_FAILURE() << synced;
    absl::StatusOr<std::vector<T>> host = buffer.ToHost();
    if (!host.ok()) {
      ADD_FAILURE() << host.status();
      return {};
    }
    return std::move(host).value();
  }

 private:
  std::unique_ptr<Backend> backend_;
};

}  // namespace dtrain::kernels::testing

#endif  // DTRAIN_KERNELS_TESTS_OPS_TEST_UTIL_H_
