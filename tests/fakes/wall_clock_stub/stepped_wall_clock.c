/* A wall clock that tests can step: LD_PRELOAD this into a child process.
 *
 * CLOCK_REALTIME (and its coarse variant), gettimeofday() and time() read the real clock plus
 * an offset in nanoseconds: a native int64 at the start of the file named by
 * STEPPED_WALL_CLOCK_FILE, mapped shared, so a pwrite() of a new offset by anyone is seen at
 * once, without a system call per read. Every other clock (CLOCK_MONOTONIC, CLOCK_BOOTTIME,
 * the CPU-time clocks) is untouched: as after `date -s`, an NTP step or a VM resume, only the
 * wall clock moves. Sleeps and timed waits are untouched too (Python measures them on
 * CLOCK_MONOTONIC), unlike libfaketime 0.9.10's, which break time.sleep on Python 3.11+.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static const volatile int64_t *offset_ns;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    const char *path = getenv("STEPPED_WALL_CLOCK_FILE");
    if (path == NULL) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void *mapped = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped != MAP_FAILED) offset_ns = (const volatile int64_t *)mapped;
}

static int64_t current_offset_ns(void) {
    return offset_ns == NULL ? 0 : __atomic_load_n(offset_ns, __ATOMIC_RELAXED);
}

static void shift(struct timespec *ts, int64_t by_ns) {
    int64_t ns = (int64_t)ts->tv_sec * NS_PER_S + ts->tv_nsec + by_ns;
    int64_t sec = ns / NS_PER_S, rem = ns % NS_PER_S;
    if (rem < 0) {
        rem += NS_PER_S;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)rem;
}

__attribute__((visibility("default"))) int clock_gettime(clockid_t clock, struct timespec *ts) {
    pthread_once(&once, init);
    int rc = real_clock_gettime(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) shift(ts, current_offset_ns());
    return rc;
}

__attribute__((visibility("default"))) int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) { /* tv: glibc declares it non-null */
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

__attribute__((visibility("default"))) time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
