#include "kernels/tests/ops_test_util.h"

#include <cmath>
#include <limits>
#include <random>

namespace dtrain::kernels::testing {

::testing::AssertionResult WithinBound(const std::vector<float>& got, const Vec& want,
                                       const Vec& magnitude, Tolerance tol) {
  if (got.size() != want.size() || want.size() != magnitude.size()) {
    return ::testing::AssertionFailure()
           << "got " << got.size() << " elements, want " << want.size() << " (magnitudes "
           << magnitude.size() << ")";
  }
  int64_t bad = 0, worst = -1;
  double worst_excess = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double{got[i]} - want[i]);
    const double allowed = tol.atol + tol.rtol * magnitude[i];
    if (!(err <= allowed)) {  // also catches NaN
      ++bad;
      const double excess =
          std::isnan(err) ? std::numeric_limits<double>::infinity() : err / allowed;
      if (worst < 0 || excess > worst_excess) {
        worst = i;
        worst_excess = excess;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements differ beyond atol " << tol.atol << " + rtol "
         << tol.rtol << " * magnitude; worst at [" << worst << "]: got " << got[worst] << ", want "
         << want[worst] << ", magnitude " << magnitude[worst];
}

::testing::AssertionResult AllNear(const std::vector<float>& got, const Vec& want, Tolerance tol) {
  return WithinBound(got, want, Abs(want), tol);
}

Vec Abs(Vec v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> RandomInts(int64_t n, uint32_t seed, int32_t limit) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

Vec ToDouble(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

Vec Plus(const Vec& a, const Vec& b) {
  Vec sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  return sum;
}

namespace {

double Dot(const Vec& a, const Vec& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

Vec NumericalGradient(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& weights,
                      double h) {
  Vec grad(x.size());
  Vec probe = x;
  for (size_t i = 0; i < x.size(); ++i) {
    probe[i] = x[i] + h;
    const double plus = Dot(f(probe), weights);
    probe[i] = x[i] - h;
    const double minus = Dot(f(probe), weights);
    probe[i] = x[i];
    grad[i] = (plus - minus) / (2.0 * h);
  }
  return grad;
}

DirectionalCheck DirectionalDerivative(const std::function<Vec(const Vec&)>& f, const Vec& x,
                                       const Vec& weights, const std::vector<float>& gradient,
                                       uint32_t seed, double h) {
  const Vec d = ToDouble(RandomFloats(x.size(), seed));
  Vec plus = x, minus = x;
  for (size_t i = 0; i < x.size(); ++i) {
    plus[i] += h * d[i];
    minus[i] -= h * d[i];
  }
  return {(Dot(f(plus), weights) - Dot(f(minus), weights)) / (2.0 * h), Dot(ToDouble(gradient), d)};
}

void Ops::SetUp() {
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend(GetParam().device, GetParam().cpu_threads, GetParam().precision);
  if (!backend.ok()) {
    GTEST_SKIP() << "device \"" << GetParam().device << "\" unavailable: " << backend.status();
  }
  backend_ = std::move(backend).value();
}

DeviceBuffer<float> Ops::Garbage(int64_t n) {
  return Filled(n, std::numeric_limits<float>::quiet_NaN());
}

}  // namespace dtrain::kernels::testing
