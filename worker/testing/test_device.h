// The backend the parallel tests put their ranks on: DTRAIN_TEST_DEVICE, "cpu" when unset. The
// *_staging_test twins of worker/parallel's tests set it to "cpu-staging", whose device memory
// only the backend may touch (kernels/cpu/staging_backend.h).
#ifndef DTRAIN_WORKER_TESTING_TEST_DEVICE_H_
#define DTRAIN_WORKER_TESTING_TEST_DEVICE_H_

#include <cstdlib>
#include <string>

namespace dtrain::testing {

inline std::string TestDevice() {
  const char* device = std::getenv("DTRAIN_TEST_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}

}  // namespace dtrain::testing

#endif  // DTRAIN_WORKER_TESTING_TEST_DEVICE_H_
