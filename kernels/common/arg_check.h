// Argument checks shared by the CPU ops and the CUDA launchers, so both backends reject the same
// calls with the same text. Each op validates its arguments before touching memory and returns
// InvalidArgument naming the op and the argument:
//
//   ArgCheck check("LayerNormForward");
//   check.NotNull("out", out).Positive("C", C).NonNegative("N", N);
//   RETURN_IF_ERROR(check.status());
//
// The first failed check wins; later ones are skipped.
#ifndef DTRAIN_KERNELS_COMMON_ARG_CHECK_H_
#define DTRAIN_KERNELS_COMMON_ARG_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dtrain::kernels {

class ArgCheck {
 public:
  explicit ArgCheck(absl::string_view op) : op_(op) {}

  ArgCheck& NotNull(absl::string_view arg, const void* ptr) {
    if (ok() && ptr == nullptr) Fail(absl::StrCat(arg, " is null"));
    return *this;
  }
  ArgCheck& NonNegative(absl::string_view arg, int64_t value) {
    if (ok() && value < 0) Fail(absl::StrCat(arg, " must be >= 0, got ", value));
    return *this;
  }
  ArgCheck& Positive(absl::string_view arg, int64_t value) {
    if (ok() && value <= 0) Fail(absl::StrCat(arg, " must be > 0, got ", value));
    return *this;
  }
  ArgCheck& AtLeast(absl::string_view arg, int64_t value, int64_t min) {
    if (ok() && value < min) Fail(absl::StrCat(arg, " must be >= ", min, ", got ", value));
    return *this;
  }
  // Any other condition, with the message to give when it does not hold.
  ArgCheck& That(bool condition, absl::string_view message) {
    if (ok() && !condition) Fail(message);
    return *this;
  }
  // A launch of `blocks` blocks must fit a CUDA grid's x dimension.
  ArgCheck& GridFits(int64_t blocks) {
    if (ok() && blocks > 2147483647) {
      Fail(absl::StrCat("needs ", blocks, " blocks, more than a CUDA grid holds"));
    }
    return *this;
  }
  // A failure found by the caller (e.g. a bad value inside an array).
  ArgCheck& Fail(absl::string_view message) {
    // Update (not assignment): nvcc warns on the discarded Status& that operator= returns.
    if (ok()) status_.Update(absl::InvalidArgumentError(absl::StrCat(op_, ": ", message)));
    return *this;
  }

  bool ok() const { return status_.ok(); }
  absl::Status status() const { return status_; }

 private:
  absl::string_view op_;
  absl::Status status_;
};

}  // namespace dtrain::kernels

#endif  // DTRAIN_KERNELS_COMMON_ARG_CHECK_H_
