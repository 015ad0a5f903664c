// Host memory copies split over worker threads that wait spinning: pyew's staging copies between
// pageable numpy arrays and page-locked buffers (pyew/transfer.py).
//
// One thread copies about 11 GB/s on the hosts measured, so staging a 4 MiB array takes longer
// than moving it over PCIe both ways. Split over workers that sleep between calls, the copy got
// faster but whole calls slower (docs/tuning.md): waking a sleeping thread costs tens of
// microseconds, on every call. Here a worker spins for a while after its last part (the trade
// OpenMP runtimes make with their spin counts) and only then sleeps on a condition variable; and
// the parts are claimed, not assigned, so the caller starts copying at once and a worker still
// waking up takes whatever parts are left.
//
// One copy at a time: a call that finds the workers busy (another thread's copy) copies alone.
// Workers are plain pthreads, detached and never destroyed: nothing runs at process exit, and a
// forked child, which has none of them, starts its own.
#include "ew_api.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <condition_variable>

namespace {

constexpr int kMaxWorkers = 63;
constexpr int64_t kMinPart = int64_t(256) << 10;     // smaller parts cost more to hand off than they save

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// The copy in progress: its parts are claimed one at a time by the caller and by whichever
// workers are awake, so a worker that is slow to wake (or is preempted) delays the copy by at most
// the part it holds. `claim` packs the copy's generation (high 32 bits) and how many of its parts
// are still unclaimed (low 32 bits; the next part claimed is that count less one): a claim is a
// compare-and-swap of the whole word, so a thread holding a stale generation fails it and never
// reads the fields of a copy it has no part of, and the caller rewrites the fields only once every
// part of the previous copy is done.
struct Pool {
  alignas(64) std::atomic<uint64_t> claim{0};
  char* dst = nullptr;
  const char* src = nullptr;
  int64_t bytes = 0, per = 0;
  std::atomic<int> helpers{0};         // workers 0..helpers-1 take part in this copy
  alignas(64) std::atomic<uint32_t> done{0};
  alignas(64) std::atomic<int64_t> spin_ns{200000};   // docs/tuning.md: longer spins slowed other threaded code
  std::atomic<int> sleeping{0};
  int started = 0;                     // workers running in this process
  std::mutex sleep_mutex;
  std::condition_variable wake;
  std::mutex busy;                     // held by the copy in progress
  pid_t owner = 0;                     // the process the workers run in
};

Pool* pool() {
  static Pool* p = new Pool();         // never destroyed: workers may still reference it at exit
  return p;
}

uint32_t generation(uint64_t claim) { return uint32_t(claim >> 32); }

// Claim and copy parts of copy `gen` until none is left; returns how many this thread copied.
uint32_t copy_parts(Pool& p, uint32_t gen) {
  uint32_t mine = 0;
  uint64_t c = p.claim.load(std::memory_order_acquire);
  while (generation(c) == gen && uint32_t(c) > 0) {
    if (!p.claim.compare_exchange_weak(c, c - 1, std::memory_order_acq_rel)) continue;
    const int64_t at = int64_t(uint32_t(c) - 1) * p.per;
    const int64_t n = p.bytes - at < p.per ? p.bytes - at : p.per;
    std::memcpy(p.dst + at, p.src + at, size_t(n));
    p.done.fetch_add(1, std::memory_order_acq_rel);
    ++mine;
    c = p.claim.load(std::memory_order_acquire);
  }
  return mine;
}

void* worker(void* arg) {
  Pool& p = *pool();
  const int index = int(reinterpret_cast<intptr_t>(arg));
  uint32_t seen = generation(p.claim.load());      // copies started before this worker are not its own
  int64_t idle_since = now_ns();
  for (unsigned spins = 0;; ++spins) {
    const uint32_t gen = generation(p.claim.load(std::memory_order_acquire));
    if (gen != seen) {
      seen = gen;
      if (index < p.helpers.load(std::memory_order_relaxed)) copy_parts(p, gen);
      idle_since = now_ns();
      spins = 0;
      continue;
    }
    if ((spins & 255) != 255 || now_ns() - idle_since < p.spin_ns.load(std::memory_order_relaxed)) {
      cpu_relax();
      continue;
    }
    std::unique_lock<std::mutex> lock(p.sleep_mutex);
    p.sleeping.fetch_add(1);
    while (generation(p.claim.load()) == seen) p.wake.wait(lock);
    p.sleeping.fetch_sub(1);
    idle_since = now_ns();
  }
  return nullptr;
}

// Workers 0..n-1 running in this process; false if none could be started.
bool ensure_workers(Pool& p, int n) {
  const pid_t pid = getpid();
  if (p.owner != pid) {                // first use, or a forked child: the parent's workers are not here
    p.owner = pid;
    p.started = 0;
    p.sleeping.store(0);
    new (&p.sleep_mutex) std::mutex();
    new (&p.wake) std::condition_variable();
  }
  while (p.started < n) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 << 10);
    pthread_t t;
    const int rc = pthread_create(&t, &attr, worker, reinterpret_cast<void*>(intptr_t(p.started)));
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    ++p.started;
  }
  return p.started > 0;
}

}  // namespace

// Copy `bytes` from src to dst (not overlapping) with up to `threads` threads, the caller and
// threads - 1 workers, taking parts of at least 256 KiB (four a thread at most). Returns the number
// of parts.
EW_API int ew_host_copy(void* dst, const void* src, int64_t bytes, int threads) {
  if (bytes <= 0) return 0;
  Pool& p = *pool();
  const int64_t t = threads < 1 ? 1 : threads > kMaxWorkers + 1 ? kMaxWorkers + 1 : threads;
  int64_t parts = bytes / kMinPart < 4 * t ? bytes / kMinPart : 4 * t;
  std::unique_lock<std::mutex> lock(p.busy, std::try_to_lock);
  const int helpers = int(t < parts ? t : parts) - 1;
  if (helpers < 1 || !lock.owns_lock() || !ensure_workers(p, helpers)) {
    std::memcpy(dst, src, size_t(bytes));
    return 1;
  }
  // equal parts, each starting on a 4 KiB boundary of the copy
  p.per = ((bytes + parts - 1) / parts + 4095) / 4096 * 4096;
  parts = (bytes + p.per - 1) / p.per;
  p.dst = static_cast<char*>(dst);
  p.src = static_cast<const char*>(src);
  p.bytes = bytes;
  p.helpers.store(helpers < p.started ? helpers : p.started, std::memory_order_relaxed);
  p.done.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation(p.claim.load()) + 1;
  p.claim.store(uint64_t(gen) << 32 | uint64_t(parts));     // publishes the fields above
  if (p.sleeping.load() > 0) {
    std::lock_guard<std::mutex> g(p.sleep_mutex);
    p.wake.notify_all();
  }
  copy_parts(p, gen);
  while (p.done.load(std::memory_order_acquire) < uint32_t(parts)) cpu_relax();
  return int(parts);
}

// How long a worker spins after its last part before it sleeps (0: sleep at once). Returns the
// previous value.
EW_API int64_t ew_host_copy_spin_us(int64_t us) {
  Pool& p = *pool();
  const int64_t old = p.spin_ns.load() / 1000;
  if (us >= 0) p.spin_ns.store(us * 1000);
  return old;
}
