// The Exposer in a process whose static TLS is larger than civetweb's 100 KiB thread stacks, as
// the worker's is (cuBLAS, OpenBLAS): it starts and serves, because http_exporter.cc raises
// civetweb's stack requests. The first test shows the TLS here is large enough to matter.
#include <dlfcn.h>
#include <pthread.h>

#include <cerrno>

#include "common/metrics/http_exporter.h"
#include "common/metrics/testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// 512 KiB of static TLS in the executable: every thread's stack must hold it.
thread_local char tls_ballast[512 << 10];

namespace dtrain::metrics {
namespace {

void* Touch(void*) {
  tls_ballast[0] = 1;
  return nullptr;
}

// libc's own pthread_attr_setstacksize, past the interposer (in the executable or, when Bazel
// links a test dynamically, in a library loaded before libc).
int LibcSetStackSize(pthread_attr_t* attr, size_t size) {
  using SetStackSize = int (*)(pthread_attr_t*, size_t);
  static const SetStackSize f = reinterpret_cast<SetStackSize>(
      dlsym(dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD), "pthread_attr_setstacksize"));
  return f(attr, size);
}

TEST(ExposerTls, A100KiBThreadStackCannotHoldThisProcesssTls) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(LibcSetStackSize(&attr, 102400), 0);  // civetweb's USE_STACK_SIZE in Debian
  pthread_t thread;
  const int created = pthread_create(&thread, &attr, &Touch, nullptr);
  if (created == 0) pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(created, EINVAL);
}

TEST(ExposerTls, ServesMetricsAndHealthzDespiteTheLargeTls) {
  Touch(nullptr);
  Registry registry;
  auto gauge = registry.AddGauge("dtrain_test_level", "Level.");
  ASSERT_TRUE(gauge.ok());
  (*gauge)->Add({}).Set(7);
  auto server = MetricsServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  auto metrics = testing::HttpRequest((*server)->port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->code, 200);
  EXPECT_THAT(metrics->body, ::testing::HasSubstr("dtrain_test_level 7\n"));
  auto health = testing::HttpRequest((*server)->port(), "/healthz");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->code, 200);
}

}  // namespace
}  // namespace dtrain::metrics
