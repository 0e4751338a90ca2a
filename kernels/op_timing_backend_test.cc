// OpTimingBackend over the CPU backend: results are the wrapped backend's, rows by op and shape.
#include "kernels/op_timing_backend.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_buffer.h"

namespace dtrain::kernels {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

// inp (N,C) @ weight (C,OC) + bias on `backend`, copied back to the host.
std::vector<float> Forward(Backend& backend, int N, int C, int OC) {
  std::vector<float> inp(N * C), weight(C * OC), bias(OC), out(N * OC);
  for (size_t i = 0; i < inp.size(); ++i) inp[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.125f * static_cast<float>(i % 5);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i);
  auto d_inp = backend.Allocate(inp.size() * sizeof(float)).value();
  auto d_weight = backend.Allocate(weight.size() * sizeof(float)).value();
  auto d_bias = backend.Allocate(bias.size() * sizeof(float)).value();
  auto d_out = backend.Allocate(out.size() * sizeof(float)).value();
  EXPECT_TRUE(backend.CopyToDevice(d_inp, inp.data(), inp.size() * sizeof(float)).ok());
  EXPECT_TRUE(backend.CopyToDevice(d_weight, weight.data(), weight.size() * sizeof(float)).ok());
  EXPECT_TRUE(backend.CopyToDevice(d_bias, bias.data(), bias.size() * sizeof(float)).ok());
  EXPECT_TRUE(backend
                  .MatmulForward(static_cast<float*>(d_out), static_cast<float*>(d_inp),
                                 static_cast<float*>(d_weight), static_cast<float*>(d_bias), N, C,
                                 OC)
                  .ok());
  EXPECT_TRUE(backend.CopyToHost(out.data(), d_out, out.size() * sizeof(float)).ok());
  for (void* p : {d_inp, d_weight, d_bias, d_out}) backend.Free(p);
  return out;
}

TEST(OpTimingBackend, ResultsAreTheWrappedBackendsAndRowsAreOpAndShape) {
  std::unique_ptr<Backend> plain = CreateBackend("cpu", 1).value();
  OpTimingBackend timed(CreateBackend("cpu", 1).value());
  EXPECT_EQ(timed.info().name, plain->info().name);
  EXPECT_EQ(Forward(timed, 4, 3, 5), Forward(*plain, 4, 3, 5));
  Forward(timed, 4, 3, 5);
  Forward(timed, 2, 3, 5);

  std::vector<OpTime> times = timed.Times();
  std::vector<std::string> ops;
  for (const OpTime& t : times) {
    ops.push_back(t.op);
    EXPECT_GT(t.total, absl::ZeroDuration()) << t.op;
  }
  EXPECT_THAT(ops, ::testing::UnorderedElementsAre("MatmulForward N=4 C=3 OC=5",
                                                   "MatmulForward N=2 C=3 OC=5", "CopyToDevice",
                                                   "CopyToHost"));
  for (size_t i = 1; i < times.size(); ++i) EXPECT_GE(times[i - 1].total, times[i].total);
  auto calls_of = [&](const std::string& op) {
    for (const OpTime& t : times) {
      if (t.op == op) return t.calls;
    }
    return int64_t{-1};
  };
  EXPECT_EQ(calls_of("MatmulForward N=4 C=3 OC=5"), 2);
  EXPECT_EQ(calls_of("MatmulForward N=2 C=3 OC=5"), 1);
  EXPECT_EQ(calls_of("CopyToDevice"), 9);

  timed.Reset();
  EXPECT_TRUE(timed.Times().empty());
}

TEST(OpTimingBackend, AnOpsErrorIsReturnedAsIs) {
  OpTimingBackend timed(CreateBackend("cpu", 1).value());
  float x = 0;
  const absl::Status s = timed.MatmulForward(&x, &x, &x, nullptr, -1, 1, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("N"));
  const absl::StatusOr<double> norm = timed.SquaredNorm(&x, 1);
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(*norm, 0.0);
  EXPECT_THAT(timed.Times(), ::testing::Contains(Field(&OpTime::op, "SquaredNorm")));
}

TEST(OpTimingBackend, TableGivesMillisecondsAndSharePerStep) {
  const std::vector<OpTime> times = {{"Gemm m=2 n=2 k=2", 8, absl::Milliseconds(30)},
                                     {"GeluForward n=4", 4, absl::Milliseconds(10)}};
  EXPECT_EQ(OpProfileTable(times, 2),
            "  ms/step  share calls/step  op\n"
            "   15.000  75.0%        4.0  Gemm m=2 n=2 k=2\n"
            "    5.000  25.0%        2.0  GeluForward n=4\n"
            "   20.000 100.0%             (every op)\n");
}

}  // namespace
}  // namespace dtrain::kernels
