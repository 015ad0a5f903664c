// Host memory copies split over worker threads that wait spinning: pyew's staging copies between
// pageable numpy arrays and page-locked buffers (pyew/transfer.py).
//
// One thread copies slower than PCIe moves data both ways, so a staged array would take longer
// to copy than to send. Split over workers that sleep between calls, the copy got
// faster but whole calls slower (docs/tuning.md): waking a sleeping thread costs tens of
// microseconds, on every call. Here a worker that took part in a copy spins for a while after it
// (the trade OpenMP runtimes make with their spin counts) and only then sleeps, each on its own
// condition variable, so a copy wakes only the workers it asks for; and the parts are claimed, not
// assigned, so the caller starts copying at once and a worker still waking up takes whatever parts
// are left.
//
// A copy in order (ew_host_copy_begin with `ordered`) goes in small parts claimed from its start, and
// its caller asks how much of it is done from the start (ew_host_copy_ready) while the workers go
// on: a staging copy whose bytes are sent up as they are staged, so the copy up trails the staging
// by a part rather than following it.
//
// One copy at a time: a call that finds the workers busy (another thread's copy) copies alone.
// Workers are plain pthreads, detached and never destroyed: nothing runs at process exit, and a
// forked child, which has none of them, starts its own (pthread_atfork resets the pool there).
#include "ew_api.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>

namespace {

constexpr int kMaxWorkers = 63;
constexpr int64_t kMinPart = int64_t(256) << 10;     // smaller parts cost more to hand off than they save
constexpr int64_t kOrderedPart = int64_t(64) << 10;  // a copy in order: its prefix grows in small steps
constexpr int kMaxParts = 1024;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether copies store past the caches (ew_host_copy_streaming).
std::atomic<bool> streaming{true};

// memcpy, with non-temporal stores where the CPU has them. A staging copy's destination is read
// next by the GPU's DMA, not by a CPU: written through the caches, its lines sit modified in the
// private caches of the threads that copied them, and the copy up, fetching each from there, ran
// far slower than from memory (docs/tuning.md). Stores past the caches also skip reading
// the destination's lines first. The sfence orders the stores before the part is marked done.
void copy_bytes(char* dst, const char* src, size_t n) {
#if defined(__x86_64__)
  if (streaming.load(std::memory_order_relaxed) && n >= 4096) {
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    const size_t body = n & ~size_t(63);
    for (size_t i = 0; i < body; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + body, src + body, n - body);
    _mm_sfence();
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// A token of the calling thread (the address of a thread-local).
uintptr_t me() {
  static thread_local char token;
  return reinterpret_cast<uintptr_t>(&token);
}

struct alignas(64) Sleeper {
  std::condition_variable wake;
  bool asleep = false;                 // under Pool::sleep_mutex
};

// The copy in progress: its parts are claimed one at a time, from the first, by the caller and by
// whichever workers are awake, so a worker that is slow to wake (or is preempted) delays the copy
// by at most the part it holds. `claim` packs the copy's generation (high 32 bits) and how many of
// its parts are still unclaimed (low 32 bits; the next part claimed is `parts` less that count): a
// claim is a compare-and-swap of the whole word, so a thread holding a stale generation fails it
// and never reads the fields of a copy it has no part of, and the caller rewrites the fields only
// once every part of the previous copy is done. A part done stores the copy's serial (64 bits, so
// it never comes round again) in its `finished` entry, so the caller sees which run from the start
// is done without clearing them. The thread that began a copy owns it until it has seen all of it
// done (ew_host_copy_ready); no other thread's call touches it.
struct Pool {
  alignas(64) std::atomic<uint64_t> claim{0};
  char* dst = nullptr;
  const char* src = nullptr;
  int64_t bytes = 0, per = 0, parts = 0;
  uint64_t serial = 0;                 // copies begun with workers, in this process
  int64_t prefix = 0;                  // the owner's: parts done from the first, as last seen
  std::atomic<uintptr_t> owner{0};     // the thread that began the copy in progress (its token)
  bool redo = false;                   // a forked child's copy in progress: its parts may be lost
  std::atomic<int> helpers{0};         // workers 0..helpers-1 take part in this copy
  alignas(64) std::atomic<int64_t> spin_ns{200000};   // docs/tuning.md: longer spins slowed other threaded code
  std::atomic<int64_t> by_workers{0};  // parts the workers copied, in this process (ew_host_copy_stats)
  std::atomic<int> started{0};         // workers running in this process
  std::atomic<bool> busy{false};       // a copy is in progress (begun, not yet seen done by its caller)
  std::atomic<uint32_t> nudge{0};      // ew_host_copy_wake's calls: workers 0..nudged-1 spin again
  std::atomic<int> nudged{0};
  std::atomic<int64_t> woken{0};       // workers a nudge woke, in this process (ew_host_copy_stats)
  std::mutex sleep_mutex;
  Sleeper sleepers[kMaxWorkers];
  std::atomic<uint64_t> finished[kMaxParts];
};

// The pool once made; the fork handler reads it here, not through pool(), whose initialization a
// fork from another thread may have interrupted.
std::atomic<Pool*> made{nullptr};

// In a forked child only the forking thread exists: no workers, no copy in progress, and mutexes
// that may have been held by threads the child does not have.
void reset_in_child() {
  Pool* q = made.load();
  if (q == nullptr) return;
  Pool& p = *q;
  // A copy the forking thread began stays its own, to finish alone (the workers' parts are lost);
  // another thread's is gone with it.
  p.redo = p.busy.load() && p.owner.load() == me();
  if (!p.redo) {
    p.owner.store(0);
    p.busy.store(false);
  }
  new (&p.sleep_mutex) std::mutex();
  for (Sleeper& s : p.sleepers) new (&s) Sleeper();
  p.started.store(0);
  p.by_workers.store(0);
  p.woken.store(0);
}

Pool* pool() {
  static Pool* p = [] {
    Pool* q = new Pool();              // never destroyed: workers may still reference it at exit
    made.store(q);
    pthread_atfork(nullptr, nullptr, reset_in_child);
    return q;
  }();
  return p;
}

uint32_t generation(uint64_t claim) { return uint32_t(claim >> 32); }

// Claim and copy one part of copy `gen`; false if none is left. A worker's parts are counted
// (ew_host_copy_stats) before they are marked done.
bool copy_one(Pool& p, uint32_t gen, bool worker) {
  uint64_t c = p.claim.load(std::memory_order_acquire);
  while (generation(c) == gen && uint32_t(c) > 0) {
    if (!p.claim.compare_exchange_weak(c, c - 1, std::memory_order_acq_rel)) continue;
    const int64_t i = p.parts - int64_t(uint32_t(c));
    const uint64_t serial = p.serial;
    const int64_t at = i * p.per;
    const int64_t n = p.bytes - at < p.per ? p.bytes - at : p.per;
    copy_bytes(p.dst + at, p.src + at, size_t(n));
    if (worker) p.by_workers.fetch_add(1, std::memory_order_relaxed);
    p.finished[i].store(serial, std::memory_order_release);
    return true;
  }
  return false;
}

// A copy worker takes part in copy `gen` if its index is below the copy's helpers.
bool asked(Pool& p, int index) { return index < p.helpers.load(std::memory_order_relaxed); }

void* worker(void* arg) {
  Pool& p = *pool();
  const int index = int(reinterpret_cast<intptr_t>(arg));
  Sleeper& me = p.sleepers[index];
  uint32_t seen = generation(p.claim.load());      // copies started before this worker are not its own
  uint32_t nudge_seen = p.nudge.load();
  int64_t idle_since = now_ns();
  for (unsigned spins = 0;; ++spins) {
    const uint32_t nudge = p.nudge.load(std::memory_order_relaxed);
    if (nudge != nudge_seen) {         // a copy is coming: its spin starts again
      nudge_seen = nudge;
      if (index < p.nudged.load(std::memory_order_relaxed)) idle_since = now_ns();
    }
    const uint32_t gen = generation(p.claim.load(std::memory_order_acquire));
    if (gen != seen) {
      seen = gen;
      if (asked(p, index)) {           // a copy it is not asked for does not restart its spin
        while (copy_one(p, gen, true)) {
        }
        idle_since = now_ns();
      }
      spins = 0;
      continue;
    }
    if ((spins & 255) != 255 || now_ns() - idle_since < p.spin_ns.load(std::memory_order_relaxed)) {
      cpu_relax();
      continue;
    }
    // Asleep until a copy asks for it or a nudge says one is coming: the caller sets nothing but
    // the claim (or the nudge) before it looks at `asleep`, under the same mutex, so a copy posted
    // while this goes to sleep is seen below.
    std::unique_lock<std::mutex> lock(p.sleep_mutex);
    me.asleep = true;
    for (;;) {
      const uint32_t g = generation(p.claim.load());
      if (g != seen && asked(p, index)) break;
      seen = g;
      const uint32_t n = p.nudge.load();
      if (n != nudge_seen) {
        nudge_seen = n;
        if (index < p.nudged.load()) {
          p.woken.fetch_add(1, std::memory_order_relaxed);
          break;
        }
      }
      me.wake.wait(lock);
    }
    me.asleep = false;
    idle_since = now_ns();
  }
  return nullptr;
}

// Workers 0..n-1 running; false if none could be started.
bool ensure_workers(Pool& p, int n) {
  if (p.started.load() >= n) return true;
  // workers take no asynchronous signals (a profiler's, a terminal's): those go to the threads that
  // expect them; a fault in a worker's copy still reaches the process's handlers
  sigset_t all, old;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigdelset(&all, sig);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  while (p.started.load() < n) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const size_t stack = size_t(256) << 10;
    pthread_attr_setstacksize(&attr, stack > size_t(PTHREAD_STACK_MIN) ? stack : size_t(PTHREAD_STACK_MIN));
    pthread_t t;
    const int rc = pthread_create(&t, &attr, worker, reinterpret_cast<void*>(intptr_t(p.started.load())));
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    p.started.fetch_add(1);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return p.started.load() > 0;
}

// The bytes of the copy in progress done from its start, once at least `want` are (or all are),
// the caller (its owner) copying parts meanwhile; the copy ends (the pool is free) once all are.
int64_t ready(Pool& p, int64_t want) {
  const uint32_t gen = generation(p.claim.load(std::memory_order_relaxed));
  if (p.redo) {                        // in a forked child: copy it all again, alone
    copy_bytes(p.dst, p.src, size_t(p.bytes));
    p.redo = false;
    p.prefix = p.parts;
  }
  const int64_t since = now_ns();
  for (unsigned spins = 0;; ++spins) {
    while (p.prefix < p.parts && p.finished[p.prefix].load(std::memory_order_acquire) == p.serial) ++p.prefix;
    const int64_t got = p.prefix * p.per < p.bytes ? p.prefix * p.per : p.bytes;
    if (got >= want || p.prefix == p.parts) {
      if (p.prefix == p.parts) {
        p.owner.store(0, std::memory_order_relaxed);
        p.busy.store(false, std::memory_order_release);
      }
      return got;
    }
    if (copy_one(p, gen, false)) continue;
    // the parts still in flight; after 50 µs a worker preempted in the middle of one gets the core back
    if ((spins & 63) == 63 && now_ns() - since > 50000) sched_yield();
    else cpu_relax();
  }
}

}  // namespace

// Start copying `bytes` from src to dst (not overlapping) with up to `threads` threads, the caller
// and threads - 1 workers: in parts of at least 256 KiB (four a thread at most), or with `ordered`
// in parts of 64 KiB or more (at most 1024) claimed from the start. Returns 1 if the copy goes on
// (the caller then calls ew_host_copy_ready until it returns `bytes`), 0 if it is done: nothing to
// copy, or copied alone (one thread, no worker to be had, or the workers busy with another copy).
EW_API int ew_host_copy_begin(void* dst, const void* src, int64_t bytes, int threads, int ordered) {
  if (bytes <= 0) return 0;
  Pool& p = *pool();
  const int64_t t = threads < 1 ? 1 : threads > kMaxWorkers + 1 ? kMaxWorkers + 1 : threads;
  int64_t parts = ordered ? (bytes + kOrderedPart - 1) / kOrderedPart
                          : (bytes / kMinPart < 4 * t ? bytes / kMinPart : 4 * t);
  if (parts > kMaxParts) parts = kMaxParts;
  int helpers = int(t < parts ? t : parts) - 1;
  bool idle = false;
  if (helpers < 1 || !p.busy.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
    copy_bytes(static_cast<char*>(dst), static_cast<const char*>(src), size_t(bytes));
    return 0;
  }
  if (!ensure_workers(p, helpers)) {
    p.busy.store(false, std::memory_order_release);
    copy_bytes(static_cast<char*>(dst), static_cast<const char*>(src), size_t(bytes));
    return 0;
  }
  if (helpers > p.started.load()) helpers = p.started.load();
  // equal parts, each starting on a 4 KiB boundary of the copy
  p.per = ((bytes + parts - 1) / parts + 4095) / 4096 * 4096;
  p.parts = parts = (bytes + p.per - 1) / p.per;
  p.prefix = 0;
  ++p.serial;
  p.owner.store(me(), std::memory_order_relaxed);
  p.dst = static_cast<char*>(dst);
  p.src = static_cast<const char*>(src);
  p.bytes = bytes;
  p.helpers.store(helpers, std::memory_order_relaxed);
  const uint32_t gen = generation(p.claim.load()) + 1;
  p.claim.store(uint64_t(gen) << 32 | uint64_t(parts));     // publishes the fields above
  std::lock_guard<std::mutex> g(p.sleep_mutex);
  for (int i = 0; i < helpers; ++i)
    if (p.sleepers[i].asleep) p.sleepers[i].wake.notify_one();
  return 1;
}

// The bytes of the copy this thread began (ew_host_copy_begin) done from its start: at least
// `want` of them, or all; the caller copies parts while it waits. -1 if this thread has no copy in
// progress (it never began one, or saw it all done already).
EW_API int64_t ew_host_copy_ready(int64_t want) {
  Pool& p = *pool();
  if (p.owner.load(std::memory_order_acquire) != me()) return -1;
  return ready(p, want);
}

// Finish the copy this thread began and has not seen all done, if any (a caller that stops
// early, on an exception: the workers then write nothing more). Returns its bytes, or 0.
EW_API int64_t ew_host_copy_finish() {
  Pool& p = *pool();
  if (p.owner.load(std::memory_order_acquire) != me()) return 0;
  return ready(p, p.bytes);
}

// Copy `bytes` from src to dst (not overlapping) with up to `threads` threads (ew_host_copy_begin).
// Returns the number of parts.
EW_API int ew_host_copy(void* dst, const void* src, int64_t bytes, int threads) {
  if (bytes <= 0) return 0;
  if (!ew_host_copy_begin(dst, src, bytes, threads, 0)) return 1;
  Pool& p = *pool();
  const int parts = int(p.parts);
  ready(p, bytes);
  return parts;
}

// Say that a copy with up to `threads` threads is coming: workers it would ask for that sleep are
// woken and spin (ew_host_copy_spin_us) from now, so a caller that has work to do before the copy
// (pyew's one-shot calls) does not wait for them to wake. Starts none. Returns how many it woke.
EW_API int ew_host_copy_wake(int threads) {
  if (threads < 2) return 0;
  Pool& p = *pool();
  int helpers = (threads > kMaxWorkers + 1 ? kMaxWorkers + 1 : threads) - 1;
  const int started = p.started.load();
  if (helpers > started) helpers = started;
  if (helpers < 1) return 0;
  p.nudged.store(helpers, std::memory_order_relaxed);
  p.nudge.fetch_add(1, std::memory_order_release);
  int woke = 0;
  std::lock_guard<std::mutex> g(p.sleep_mutex);
  for (int i = 0; i < helpers; ++i)
    if (p.sleepers[i].asleep) {
      p.sleepers[i].wake.notify_one();
      ++woke;
    }
  return woke;
}

// How long a worker spins after its last part before it sleeps (0: sleep at once). Returns the
// previous value.
EW_API int64_t ew_host_copy_spin_us(int64_t us) {
  Pool& p = *pool();
  const int64_t old = p.spin_ns.load() / 1000;
  if (us >= 0) p.spin_ns.store(us * 1000);
  return old;
}

// Whether copies use non-temporal stores (on x86-64; elsewhere they never do): 1 on, 0 off, -1
// leaves it. Returns the previous setting.
EW_API int ew_host_copy_streaming(int on) {
  const bool old = streaming.load();
  if (on >= 0) streaming.store(on != 0);
  return old;
}

// What the copies have done in this process: out[0] the workers started, out[1] the parts they
// copied (the callers copied the rest).
EW_API int ew_host_copy_stats(int64_t* out) {
  Pool& p = *pool();
  out[0] = p.started.load();
  out[1] = p.by_workers.load();
  return 0;
}

// The workers ew_host_copy_wake woke from their sleep, in this process.
EW_API int64_t ew_host_copy_woken() { return pool()->woken.load(); }
