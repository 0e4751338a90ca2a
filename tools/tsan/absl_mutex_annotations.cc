// Tells ThreadSanitizer about absl::Mutex and absl::CondVar, for `bazel test --config=tsan`.
//
// Debian's libabsl is not built with -fsanitize=thread, so its Mutex (atomics and futexes inside
// the library) creates no happens-before edges TSan can see, and every field guarded by an
// absl::Mutex would be reported as a data race. This file defines the Mutex and CondVar entry
// points in the test binary itself (the tsan config links it statically, and the executable's
// definitions come before the shared library's for every caller, gRPC included); each one tells
// TSan what it does (__tsan_mutex_pre_lock / post_lock / pre_unlock / post_unlock, as an
// instrumented Abseil would) and calls the library's own function (dlsym RTLD_NEXT).
// Not covered: absl::Notification, BlockingCounter and Barrier's own fast paths (atomics in the
// library), and the internals of gRPC and protobuf (suppressed below).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"

namespace {

#define DTRAIN_STRINGIFY2(x) #x
#define DTRAIN_STRINGIFY(x) DTRAIN_STRINGIFY2(x)

// The library's own function `name` (mangled, after "_ZN4absl<namespace>"), as a function
// taking the object first (the Itanium ABI of a member function).
template <typename Fn>
Fn Real(const char* name) {
  const char* ns = DTRAIN_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string symbol = "_ZN4absl" + std::to_string(std::strlen(ns)) + ns + name;
  void* f = dlsym(RTLD_NEXT, symbol.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "absl_mutex_annotations: %s not found in libabsl\n", symbol.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

#define REAL(type, name)                     \
  static const auto real = Real<type>(name); \
  (void)0

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Time;

constexpr unsigned kRead = __tsan_mutex_read_lock;

// A condition evaluated by the library holding `mu` (by the waiting thread, or by the one
// unlocking), which TSan may see as not holding it: it takes what the last release of `mu`
// published and publishes its own reads, so they are ordered with the guarded fields' writes
// on both sides, as if it held `mu`.
struct Annotated {
  Annotated(const Condition& cond, Mutex* mu)
      : cond(&cond), mu(mu), condition(&Annotated::Eval, this) {}
  static bool Eval(Annotated* self) {
    __tsan_acquire(self->mu);
    const bool result = self->cond->Eval();
    __tsan_release(self->mu);
    return result;
  }
  const Condition* cond;
  Mutex* mu;
  Condition condition;
};

// Calls of these functions the library makes itself (AwaitWithTimeout calls AwaitWithDeadline)
// are annotated once, by the outermost.
thread_local int depth = 0;
struct Nested {
  Nested() { ++depth; }
  ~Nested() { --depth; }
};

// The mutex is released and taken again around `wait` (Await, CondVar::Wait).
template <typename F>
auto Reacquiring(Mutex* mu, F wait) {
  if (depth > 0) return wait();
  Nested nested;
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  auto result = wait();
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return result;
}

template <typename F>
auto Locking(Mutex* mu, unsigned flags, F lock) {
  if (depth > 0) return lock();
  Nested nested;
  __tsan_mutex_pre_lock(mu, flags);
  auto result = lock();
  __tsan_mutex_post_lock(mu, flags, 0);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  REAL(void (*)(Mutex*), "5Mutex4LockEv");
  Locking(this, 0, [&] { return (real(this), 0); });
}

void Mutex::ReaderLock() {
  REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  Locking(this, kRead, [&] { return (real(this), 0); });
}

bool Mutex::TryLock() {
  REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  if (depth > 0) return real(this);
  Nested nested;
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed),
                         0);
  return locked;
}

bool Mutex::ReaderTryLock() {
  REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  if (depth > 0) return real(this);
  Nested nested;
  const unsigned flags = kRead | __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(this, flags);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, flags | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

void Mutex::Unlock() {
  REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  if (depth > 0) return real(this);
  Nested nested;
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

void Mutex::ReaderUnlock() {
  REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  if (depth > 0) return real(this);
  Nested nested;
  __tsan_mutex_pre_unlock(this, kRead);
  real(this);
  __tsan_mutex_post_unlock(this, kRead);
}

void Mutex::LockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex8LockWhenERKNS0_9ConditionE");
  Locking(this, 0, [&] { return (real(this, Annotated(cond, this).condition), 0); });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Locking(this, kRead, [&] { return (real(this, Annotated(cond, this).condition), 0); });
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, Duration),
       "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Locking(this, 0, [&] { return real(this, Annotated(cond, this).condition, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, Time),
       "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Locking(this, 0, [&] { return real(this, Annotated(cond, this).condition, deadline); });
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, Duration),
       "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Locking(this, kRead, [&] { return real(this, Annotated(cond, this).condition, timeout); });
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, Time),
       "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Locking(this, kRead,
                 [&] { return real(this, Annotated(cond, this).condition, deadline); });
}

void Mutex::Await(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "5Mutex5AwaitERKNS0_9ConditionE");
  Reacquiring(this, [&] { return (real(this, Annotated(cond, this).condition), 0); });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, Duration),
       "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Reacquiring(this, [&] { return real(this, Annotated(cond, this).condition, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, Time),
       "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Reacquiring(this, [&] { return real(this, Annotated(cond, this).condition, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  Reacquiring(mu, [&] { return (real(this, mu), 0); });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  REAL(bool (*)(CondVar*, Mutex*, Duration),
       "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return Reacquiring(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  REAL(bool (*)(CondVar*, Mutex*, Time), "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return Reacquiring(mu, [&] { return real(this, mu, deadline); });
}

ABSL_NAMESPACE_END
}  // namespace absl

// Races inside the system's uninstrumented libraries only (their own synchronization: atomics,
// lock-free queues, the event engine's file descriptors, is invisible to TSan); a report with
// dtrain code on top is never suppressed. TSan reads this hook at start.
extern "C" const char* __tsan_default_suppressions() {
  return "race_top:libgrpc.so\n"
         "race_top:grpc::\n"  // gRPC's inline templates, compiled into the test but ordered by
         "race_top:grpc_\n"   // its uninstrumented completion queues
         "race_top:libgrpc++.so\n"
         "race_top:libgpr.so\n"
         "race_top:libabsl_\n"
         "race_top:libprotobuf.so\n"
         // e.g. a Status's shared payload (an atomic refcount inside the library)
         "called_from_lib:libabsl_status.so\n"
         "called_from_lib:libabsl_statusor.so\n"
         "called_from_lib:libabsl_cord.so\n"
         "called_from_lib:libabsl_synchronization.so\n"
         "called_from_lib:libabsl_graphcycles_internal.so\n"  // Mutex's deadlock graph
         "called_from_lib:libgrpc.so\n"
         "called_from_lib:libgpr.so\n";
}
