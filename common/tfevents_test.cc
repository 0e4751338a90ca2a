#include "common/tfevents.h"

#include <cstring>

#include "gtest/gtest.h"
#include "proto/tensorboard.pb.h"

namespace dtrain {
namespace {

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) B.4 check value, and its 32 zero bytes vector.
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(TfRecord, LengthCrcDataCrc) {
  const std::string record = TfRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  uint64_t length;
  std::memcpy(&length, record.data(), 8);
  EXPECT_EQ(length, 3u);
  uint32_t length_crc, data_crc;
  std::memcpy(&length_crc, record.data() + 8, 4);
  std::memcpy(&data_crc, record.data() + 15, 4);
  EXPECT_EQ(length_crc, MaskedCrc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(data_crc, MaskedCrc32c("abc"));
}

TEST(TfEvents, ScalarsRecordHoldsAnEventWithOneValuePerTag) {
  const std::string record = TfEventsScalars(7, 1.5, {{"loss", 2.25}, {"lr", 0.5}});
  tensorboard::Event event;
  ASSERT_TRUE(event.ParseFromString(record.substr(12, record.size() - 16)));
  EXPECT_EQ(event.step(), 7);
  EXPECT_EQ(event.wall_time(), 1.5);
  ASSERT_EQ(event.summary().value_size(), 2);
  EXPECT_EQ(event.summary().value(0).tag(), "loss");
  EXPECT_EQ(event.summary().value(0).simple_value(), 2.25f);
  EXPECT_EQ(event.summary().value(1).tag(), "lr");
}

TEST(TfEvents, ValLossIsAScalarOfTheStepsWithAnEvaluation) {
  StepMetrics step;
  step.set_loss(2.5);
  EXPECT_EQ(TrainingScalars(step).size(), 4u);
  step.set_val_loss(2.75);
  const std::vector<std::pair<std::string, double>> scalars = TrainingScalars(step);
  ASSERT_EQ(scalars.size(), 5u);
  EXPECT_EQ(scalars.back(), (std::pair<std::string, double>("val_loss", 2.75)));
}

TEST(TfEvents, AFileStartsWithItsVersion) {
  StepMetrics step;
  step.set_step(1);
  step.set_loss(5.5);
  step.set_time_unix_ms(2000);
  const std::string file = TfEventsFileOf({step});
  tensorboard::Event first;
  uint64_t length;
  std::memcpy(&length, file.data(), 8);
  ASSERT_TRUE(first.ParseFromString(file.substr(12, length)));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_EQ(first.wall_time(), 2.0);
}

TEST(TfEventsWriter, AppendsWholeRecords) {
  absl::StatusOr<TfEventsWriter> writer = TfEventsWriter::Create(getenv("TEST_TMPDIR"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  StepMetrics step;
  step.set_step(3);
  ASSERT_TRUE(writer->Append(step).ok());
  EXPECT_NE(writer->path().find("/events.out.tfevents."), std::string::npos);
  EXPECT_EQ(TfEventsWriter::Create("/nonexistent/dir").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dtrain
