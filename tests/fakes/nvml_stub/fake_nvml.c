/*
 * A stand-in libnvidia-ml.so.1 for tests: the real `pynvml` binding loads it
 * through CDLL("libnvidia-ml.so.1") when LD_LIBRARY_PATH points at the folder
 * holding the compiled file, so every value our code sees has gone through the
 * same ctypes signatures, units (mJ, mW), return codes and struct layouts as
 * on a real machine.
 *
 * Configuration: the file named by FAKE_NVML_CONFIG, read at each fresh
 * nvmlInit (reference count 0 -> 1). One `key=value` per line; `[card]`
 * starts a card; `#` starts a comment. Global keys (before the first card):
 *   update_ms=100            energy counter refresh period (it is quantised)
 *   epoch_monotonic_s=F      CLOCK_MONOTONIC time at which the counters start
 *                            advancing (default: first library use). Python's
 *                            time.monotonic() reads the same clock on Linux.
 *   init_error=N             nvmlInit returns this NVML error code
 *   stats_path=/path         every init/shutdown appends "init|shutdown PID REFCOUNT"
 *   reads_path=/path         a file holding one native-endian uint64: the number of energy
 *                            reads (nvmlDeviceGetTotalEnergyConsumption) made so far, by
 *                            every process using this config (a shared mapping, added to
 *                            atomically), so a test can count reads without slowing them
 *   driver_version=550.54.15
 * Card keys:
 *   name, uuid, pci (bus id "00000000:3B:00.0")
 *   watts=F, watts_amplitude=F, watts_period_s=F
 *       power P(t) = watts + watts_amplitude * sin(2 pi t / watts_period_s)
 *       (t seconds since the epoch); energy is its exact integral.
 *   energy=0|1               total energy counter supported (else NOT_SUPPORTED)
 *   power=0|1                power sensor supported (else NOT_SUPPORTED)
 *   energy_start_mj=N        counter value at the epoch ("since driver load")
 *   lost_after_s=F           from this time on every call on the card: GPU_IS_LOST
 *   read_delay_ms=F          the energy and power reads, and the running-process lists,
 *                            take this long (a GPU falling off the bus stalls NVML for
 *                            seconds) ...
 *   slow_after_s=F           ... from this time on (default 0: always)
 *   read_delay_file=/path    the delay in ms read from this file at each read (missing
 *                            or empty: no delay), so a test can stall and unstall a GPU
 *   compute_pids=1,2,self    "self" is the calling process; graphics_pids likewise
 *   compute_pids_file=/path  pids read at each call (processes come and go)
 *   process_utilization=self:75,123:25
 *                            nvmlDeviceGetProcessUtilization: SM % per pid ("self" as
 *                            above); without it the call answers NOT_SUPPORTED
 *   process_utilization_file=/path  the same, read at each call
 *   cc=8.0, cores=N, sm_clock_mhz=N
 *   mig_uuids=MIG-a,MIG-b    MIG mode on, with these MIG devices
 *
 * After fork() the child's calls answer UNINITIALIZED until it calls nvmlInit
 * again, which starts a new generation: handles from before are then invalid
 * (INVALID_ARGUMENT), so a caller that does not re-acquire them fails loudly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_CARDS 16
#define MAX_MIG 7
#define MAX_PIDS 64
#define STR_LEN 96
#define HANDLE_MAGIC 0x4e564d4cu /* "NVML" */

typedef struct {
    char name[STR_LEN];
    char uuid[STR_LEN];
    char pci[32];
    double watts, watts_amplitude, watts_period_s;
    int energy_supported, power_supported;
    unsigned long long energy_start_mj;
    double lost_after_s; /* < 0: never */
    double read_delay_ms, slow_after_s;
    char read_delay_file[512];
    char compute_pids[512], graphics_pids[512], compute_pids_file[512];
    char process_utilization[512], process_utilization_file[512];
    int cc_major, cc_minor;
    unsigned cores, sm_clock_mhz;
    int n_mig;
    char mig_uuids[MAX_MIG][STR_LEN];
} card_t;

typedef struct {
    unsigned magic;
    unsigned generation;
    int card;
    int mig; /* -1: the physical GPU */
} handle_t;

typedef struct {
    unsigned processId; /* nvmlProcessInfo_v2_t, same layout as _v3 in pynvml */
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId;
    unsigned computeInstanceId;
} process_info_t;

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_info_t;

/* All state of the stand-in in one place. */
static struct {
    pthread_mutex_t lock;
    int refcount;
    pid_t init_pid;
    unsigned generation;
    int n_cards;
    card_t cards[MAX_CARDS];
    handle_t *handles; /* n_cards * (1 + MAX_MIG), one array per generation */
    double update_s;
    double epoch_s;
    int epoch_set;
    int init_error;
    char stats_path[512];
    char reads_path[512];
    unsigned long long *reads; /* the shared counter of reads_path, mapped at init */
    char driver_version[80];
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void copy_str(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static void set_card_key(card_t *c, const char *key, const char *value) {
    if (!strcmp(key, "name")) copy_str(c->name, sizeof c->name, value);
    else if (!strcmp(key, "uuid")) copy_str(c->uuid, sizeof c->uuid, value);
    else if (!strcmp(key, "pci")) copy_str(c->pci, sizeof c->pci, value);
    else if (!strcmp(key, "watts")) c->watts = atof(value);
    else if (!strcmp(key, "watts_amplitude")) c->watts_amplitude = atof(value);
    else if (!strcmp(key, "watts_period_s")) c->watts_period_s = atof(value);
    else if (!strcmp(key, "process_utilization_file")) copy_str(c->process_utilization_file, sizeof c->process_utilization_file, value);
    else if (!strcmp(key, "process_utilization")) copy_str(c->process_utilization, sizeof c->process_utilization, value);
    else if (!strcmp(key, "energy")) c->energy_supported = atoi(value);
    else if (!strcmp(key, "power")) c->power_supported = atoi(value);
    else if (!strcmp(key, "energy_start_mj")) c->energy_start_mj = strtoull(value, NULL, 10);
    else if (!strcmp(key, "lost_after_s")) c->lost_after_s = atof(value);
    else if (!strcmp(key, "read_delay_ms")) c->read_delay_ms = atof(value);
    else if (!strcmp(key, "slow_after_s")) c->slow_after_s = atof(value);
    else if (!strcmp(key, "read_delay_file")) copy_str(c->read_delay_file, sizeof c->read_delay_file, value);
    else if (!strcmp(key, "compute_pids")) copy_str(c->compute_pids, sizeof c->compute_pids, value);
    else if (!strcmp(key, "graphics_pids")) copy_str(c->graphics_pids, sizeof c->graphics_pids, value);
    else if (!strcmp(key, "compute_pids_file")) copy_str(c->compute_pids_file, sizeof c->compute_pids_file, value);
    else if (!strcmp(key, "cc")) sscanf(value, "%d.%d", &c->cc_major, &c->cc_minor);
    else if (!strcmp(key, "cores")) c->cores = (unsigned)strtoul(value, NULL, 10);
    else if (!strcmp(key, "sm_clock_mhz")) c->sm_clock_mhz = (unsigned)strtoul(value, NULL, 10);
    else if (!strcmp(key, "mig_uuids")) {
        char buf[MAX_MIG * STR_LEN];
        copy_str(buf, sizeof buf, value);
        c->n_mig = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && c->n_mig < MAX_MIG;
             tok = strtok_r(NULL, ",", &save))
            copy_str(c->mig_uuids[c->n_mig++], STR_LEN, tok);
    } else fprintf(stderr, "fake_nvml: unknown card key %s\n", key);
}

static void set_global_key(const char *key, const char *value) {
    if (!strcmp(key, "update_ms")) S.update_s = atof(value) / 1000.0;
    else if (!strcmp(key, "epoch_monotonic_s")) { S.epoch_s = atof(value); S.epoch_set = 1; }
    else if (!strcmp(key, "init_error")) S.init_error = atoi(value);
    else if (!strcmp(key, "stats_path")) copy_str(S.stats_path, sizeof S.stats_path, value);
    else if (!strcmp(key, "reads_path")) copy_str(S.reads_path, sizeof S.reads_path, value);
    else if (!strcmp(key, "driver_version")) copy_str(S.driver_version, sizeof S.driver_version, value);
    else fprintf(stderr, "fake_nvml: unknown key %s\n", key);
}

static void card_defaults(card_t *c, int i) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "NVIDIA Fake GPU");
    snprintf(c->uuid, sizeof c->uuid, "GPU-00000000-0000-0000-0000-%012d", i);
    snprintf(c->pci, sizeof c->pci, "00000000:%02X:00.0", 0x10 + i);
    c->watts = 100.0;
    c->watts_period_s = 1.0;
    c->energy_supported = 1;
    c->power_supported = 1;
    c->lost_after_s = -1.0;
    c->cc_major = 8;
    c->cc_minor = 0;
}

/* Returns 0, or -1 when the file cannot be read. */
static int load_config(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    S.n_cards = 0;
    S.update_s = 0.1;
    S.init_error = 0;
    S.stats_path[0] = 0;
    S.reads_path[0] = 0;
    copy_str(S.driver_version, sizeof S.driver_version, "550.54.15");
    if (!path) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[2048];
    card_t *card = NULL;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == '#' || line[0] == 0) continue;
        if (!strcmp(line, "[card]")) {
            if (S.n_cards == MAX_CARDS) break;
            card = &S.cards[S.n_cards];
            card_defaults(card, S.n_cards++);
            continue;
        }
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        if (card) set_card_key(card, line, eq + 1);
        else set_global_key(line, eq + 1);
    }
    fclose(f);
    return 0;
}

/* Maps reads_path's counter (once per process: the mapping outlives shutdown and re-init). */
static void map_reads(void) {
    if (!S.reads_path[0] || S.reads) return;
    int fd = open(S.reads_path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size < (off_t)sizeof *S.reads && ftruncate(fd, sizeof *S.reads) != 0) {
        close(fd);
        return;
    }
    void *p = mmap(NULL, sizeof *S.reads, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED) S.reads = p;
}

static void record(const char *what) {
    if (!S.stats_path[0]) return;
    int fd = open(S.stats_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    char buf[96];
    int n = snprintf(buf, sizeof buf, "%s %d %d\n", what, (int)getpid(), S.refcount);
    if (write(fd, buf, (size_t)n) < 0) { /* a test will notice the missing line */ }
    close(fd);
}

/* Seconds since the epoch; the epoch is fixed at first use unless configured. */
static double elapsed_s(void) {
    double now = monotonic_s();
    if (!S.epoch_set) { S.epoch_s = now; S.epoch_set = 1; }
    double t = now - S.epoch_s;
    return t < 0 ? 0 : t;
}

static double power_w(const card_t *c, double t) {
    return c->watts + c->watts_amplitude * sin(2 * M_PI * t / c->watts_period_s);
}

static double energy_j(const card_t *c, double t) {
    /* Exact integral of power_w from 0 to t. */
    double w = 2 * M_PI / c->watts_period_s;
    return c->watts * t + c->watts_amplitude * (1 - cos(w * t)) / w;
}

static int is_lost(const card_t *c) {
    return c->lost_after_s >= 0 && elapsed_s() >= c->lost_after_s;
}

/* A stalled read: sleeps (without holding the stand-in's lock) when the card is slow now. */
static void stall(const card_t *c) {
    double delay_ms = c->read_delay_ms;
    if (c->read_delay_file[0]) {
        delay_ms = 0;
        FILE *f = fopen(c->read_delay_file, "r");
        if (f) {
            if (fscanf(f, "%lf", &delay_ms) != 1) delay_ms = 0;
            fclose(f);
        }
    }
    if (delay_ms <= 0 || elapsed_s() < c->slow_after_s) return;
    struct timespec ts;
    ts.tv_sec = (time_t)(delay_ms / 1000.0);
    ts.tv_nsec = (long)((delay_ms - (double)ts.tv_sec * 1000.0) * 1e6);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int check_init(void) {
    if (S.refcount <= 0 || S.init_pid != getpid()) return NVML_ERROR_UNINITIALIZED;
    return NVML_SUCCESS;
}

/* Validates a handle; fills *card_out (and *mig_out) or returns the error. */
static int resolve(void *device, card_t **card_out, int *mig_out) {
    int rc = check_init();
    if (rc) return rc;
    handle_t *h = (handle_t *)device;
    if (!h || h->magic != HANDLE_MAGIC || h->generation != S.generation) return NVML_ERROR_INVALID_ARGUMENT;
    card_t *c = &S.cards[h->card];
    if (is_lost(c)) return NVML_ERROR_GPU_IS_LOST;
    *card_out = c;
    if (mig_out) *mig_out = h->mig;
    return NVML_SUCCESS;
}

static handle_t *handle_for(int card, int mig) {
    return &S.handles[card * (1 + MAX_MIG) + (mig + 1)];
}

/* ---- init / shutdown ---------------------------------------------------- */

static int do_init(void) {
    pthread_mutex_lock(&S.lock);
    if (S.init_pid != getpid()) {
        /* First init in this process, or in a forked child: the parent's state is not ours. */
        S.refcount = 0;
        S.init_pid = getpid();
    }
    int rc = NVML_SUCCESS;
    if (S.refcount == 0) {
        if (load_config() != 0) rc = NVML_ERROR_DRIVER_NOT_LOADED;
        else if (S.init_error) rc = S.init_error;
        if (rc == NVML_SUCCESS) {
            map_reads();
            S.generation++;
            /* Old arrays are left allocated on purpose: a stale handle must read
             * as a wrong generation, not as freed memory. */
            S.handles = calloc((size_t)(S.n_cards ? S.n_cards : 1) * (1 + MAX_MIG), sizeof(handle_t));
            for (int i = 0; i < S.n_cards; i++)
                for (int m = -1; m < MAX_MIG; m++)
                    *handle_for(i, m) = (handle_t){HANDLE_MAGIC, S.generation, i, m};
        }
    }
    if (rc == NVML_SUCCESS) {
        S.refcount++;
        record("init");
    }
    pthread_mutex_unlock(&S.lock);
    return rc;
}

EXPORT int nvmlInitWithFlags(unsigned flags) { (void)flags; return do_init(); }
EXPORT int nvmlInit_v2(void) { return do_init(); }
EXPORT int nvmlInit(void) { return do_init(); }

EXPORT int nvmlShutdown(void) {
    pthread_mutex_lock(&S.lock);
    int rc = check_init();
    if (rc == NVML_SUCCESS) {
        S.refcount--;
        record("shutdown");
    }
    pthread_mutex_unlock(&S.lock);
    return rc;
}

EXPORT const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

/* ---- system ------------------------------------------------------------ */

static int put_string(char *dst, unsigned length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

EXPORT int nvmlSystemGetDriverVersion(char *version, unsigned length) {
    int rc = check_init();
    return rc ? rc : put_string(version, length, S.driver_version);
}

EXPORT int nvmlSystemGetNVMLVersion(char *version, unsigned length) {
    int rc = check_init();
    return rc ? rc : put_string(version, length, "12.550.54.15");
}

/* ---- enumeration ------------------------------------------------------- */

EXPORT int nvmlDeviceGetCount_v2(unsigned *count) {
    int rc = check_init();
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)S.n_cards;
    return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetCount(unsigned *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
    int rc = check_init();
    if (rc) return rc;
    if (!device || index >= (unsigned)S.n_cards) return NVML_ERROR_INVALID_ARGUMENT;
    if (is_lost(&S.cards[index])) return NVML_ERROR_GPU_IS_LOST;
    *device = handle_for((int)index, -1);
    return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetHandleByIndex(unsigned index, void **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    int rc = check_init();
    if (rc) return rc;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < S.n_cards; i++) {
        card_t *c = &S.cards[i];
        int mig = -2;
        if (!strcmp(c->uuid, uuid)) mig = -1;
        for (int m = 0; m < c->n_mig && mig == -2; m++)
            if (!strcmp(c->mig_uuids[m], uuid)) mig = m;
        if (mig == -2) continue;
        if (is_lost(c)) return NVML_ERROR_GPU_IS_LOST;
        *device = handle_for(i, mig);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT int nvmlDeviceGetUUID(void *device, char *uuid, unsigned length) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    return put_string(uuid, length, mig < 0 ? c->uuid : c->mig_uuids[mig]);
}

EXPORT int nvmlDeviceGetName(void *device, char *name, unsigned length) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    char buf[STR_LEN + 16];
    if (mig < 0) copy_str(buf, sizeof buf, c->name);
    else snprintf(buf, sizeof buf, "%s MIG slice", c->name);
    return put_string(name, length, buf);
}

EXPORT int nvmlDeviceGetIndex(void *device, unsigned *index) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    if (mig >= 0) return NVML_ERROR_NOT_SUPPORTED;
    *index = (unsigned)(c - S.cards);
    return NVML_SUCCESS;
}

static int pci_info(void *device, pci_info_t *pci) {
    card_t *c;
    int rc = resolve(device, &c, NULL);
    if (rc) return rc;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    copy_str(pci->busId, sizeof pci->busId, c->pci);
    /* The legacy field holds the short form "0000:3B:00.0". */
    const char *colon = strchr(c->pci, ':');
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000%s", colon ? colon : "");
    sscanf(c->pci, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = 0x20b010de;
    return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetPciInfo_v3(void *device, pci_info_t *pci) { return pci_info(device, pci); }
EXPORT int nvmlDeviceGetPciInfo_v2(void *device, pci_info_t *pci) { return pci_info(device, pci); }
EXPORT int nvmlDeviceGetPciInfo(void *device, pci_info_t *pci) { return pci_info(device, pci); }

EXPORT int nvmlDeviceGetCudaComputeCapability(void *device, int *major, int *minor) {
    card_t *c;
    int rc = resolve(device, &c, NULL);
    if (rc) return rc;
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = c->cc_major;
    *minor = c->cc_minor;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetNumGpuCores(void *device, unsigned *cores) {
    card_t *c;
    int rc = resolve(device, &c, NULL);
    if (rc) return rc;
    if (!cores) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->cores) return NVML_ERROR_NOT_SUPPORTED;
    *cores = c->cores;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMaxClockInfo(void *device, int type, unsigned *clock_mhz) {
    card_t *c;
    int rc = resolve(device, &c, NULL);
    if (rc) return rc;
    if (!clock_mhz) return NVML_ERROR_INVALID_ARGUMENT;
    if (type != 1 /* NVML_CLOCK_SM */ || !c->sm_clock_mhz) return NVML_ERROR_NOT_SUPPORTED;
    *clock_mhz = c->sm_clock_mhz;
    return NVML_SUCCESS;
}

/* ---- energy and power -------------------------------------------------- */

EXPORT int nvmlDeviceGetTotalEnergyConsumption(void *device, unsigned long long *energy_mj) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!energy_mj) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->energy_supported || mig >= 0) return NVML_ERROR_NOT_SUPPORTED;
    stall(c);
    if (S.reads) __atomic_fetch_add(S.reads, 1ULL, __ATOMIC_RELAXED);
    double t = elapsed_s();
    /* The real counter refreshes periodically, not at every read. */
    double tq = S.update_s > 0 ? floor(t / S.update_s) * S.update_s : t;
    *energy_mj = c->energy_start_mj + (unsigned long long)(energy_j(c, tq) * 1000.0);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPowerUsage(void *device, unsigned *power_mw) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!power_mw) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->power_supported || mig >= 0) return NVML_ERROR_NOT_SUPPORTED;
    stall(c);
    double w = power_w(c, elapsed_s());
    *power_mw = w > 0 ? (unsigned)(w * 1000.0 + 0.5) : 0;
    return NVML_SUCCESS;
}

/* ---- processes --------------------------------------------------------- */

static int parse_pids(const char *text, unsigned *pids, int max) {
    char buf[512];
    int n = 0;
    copy_str(buf, sizeof buf, text);
    for (char *save = NULL, *tok = strtok_r(buf, ", \t\n", &save); tok && n < max;
         tok = strtok_r(NULL, ", \t\n", &save)) {
        if (!strcmp(tok, "self")) pids[n++] = (unsigned)getpid();
        else pids[n++] = (unsigned)strtoul(tok, NULL, 10);
    }
    return n;
}

static int running_processes(void *device, unsigned *count, process_info_t *infos, int graphics) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    stall(c);
    unsigned pids[MAX_PIDS];
    int n = parse_pids(graphics ? c->graphics_pids : c->compute_pids, pids, MAX_PIDS);
    if (!graphics && c->compute_pids_file[0]) {
        FILE *f = fopen(c->compute_pids_file, "r");
        if (f) {
            char buf[512];
            size_t len = fread(buf, 1, sizeof buf - 1, f);
            buf[len] = 0;
            fclose(f);
            n += parse_pids(buf, pids + n, MAX_PIDS - n);
        }
    }
    if (*count < (unsigned)n) {
        /* Like NVML: report how many there are; count 0 with none running is success. */
        *count = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = (unsigned)n;
    for (int i = 0; i < n; i++) {
        if (!infos) return NVML_ERROR_INVALID_ARGUMENT;
        infos[i] = (process_info_t){pids[i], 1ull << 30, 0xFFFFFFFFu, 0xFFFFFFFFu};
    }
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *n, process_info_t *p) {
    return running_processes(d, n, p, 0);
}
EXPORT int nvmlDeviceGetComputeRunningProcesses_v2(void *d, unsigned *n, process_info_t *p) {
    return running_processes(d, n, p, 0);
}
EXPORT int nvmlDeviceGetGraphicsRunningProcesses_v3(void *d, unsigned *n, process_info_t *p) {
    return running_processes(d, n, p, 1);
}
EXPORT int nvmlDeviceGetGraphicsRunningProcesses_v2(void *d, unsigned *n, process_info_t *p) {
    return running_processes(d, n, p, 1);
}

typedef struct {
    unsigned pid; /* nvmlProcessUtilizationSample_t */
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} process_utilization_t;

EXPORT int nvmlDeviceGetProcessUtilization(void *device, process_utilization_t *samples, unsigned *count,
                                           unsigned long long last_seen_us) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if ((!c->process_utilization[0] && !c->process_utilization_file[0]) || mig >= 0) return NVML_ERROR_NOT_SUPPORTED;
    char buf[512];
    unsigned pids[MAX_PIDS], utils[MAX_PIDS];
    int n = 0;
    copy_str(buf, sizeof buf, c->process_utilization);
    if (c->process_utilization_file[0]) {
        FILE *f = fopen(c->process_utilization_file, "r");
        size_t len = 0;
        if (f) {
            len = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
        }
        buf[len] = 0;
    }
    for (char *save = NULL, *tok = strtok_r(buf, ", \t\n", &save); tok && n < MAX_PIDS;
         tok = strtok_r(NULL, ", \t\n", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon) continue;
        *colon = 0;
        pids[n] = !strcmp(tok, "self") ? (unsigned)getpid() : (unsigned)strtoul(tok, NULL, 10);
        utils[n++] = (unsigned)strtoul(colon + 1, NULL, 10);
    }
    unsigned long long now_us = (unsigned long long)(monotonic_s() * 1e6);
    if (now_us <= last_seen_us) {
        *count = 0;
        return NVML_ERROR_NOT_FOUND; /* like NVML: no sample newer than the time stamp given */
    }
    if (!samples || *count < (unsigned)n) {
        *count = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = (unsigned)n;
    for (int i = 0; i < n; i++) samples[i] = (process_utilization_t){pids[i], now_us, utils[i], 0, 0, 0};
    return NVML_SUCCESS;
}

/* ---- MIG ---------------------------------------------------------------- */

EXPORT int nvmlDeviceGetMigMode(void *device, unsigned *current, unsigned *pending) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (mig >= 0 || c->cc_major < 8) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = c->n_mig > 0;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMaxMigDeviceCount(void *device, unsigned *count) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = c->n_mig > 0 && mig < 0 ? MAX_MIG : 0;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMigDeviceHandleByIndex(void *device, unsigned index, void **mig_device) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!mig_device || mig >= 0 || index >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    /* Empty slots answer NOT_FOUND, as on a GPU with fewer instances than the maximum. */
    if (index >= (unsigned)c->n_mig) return NVML_ERROR_NOT_FOUND;
    *mig_device = handle_for((int)(c - S.cards), (int)index);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *mig_device, void **device) {
    card_t *c;
    int mig;
    int rc = resolve(mig_device, &c, &mig);
    if (rc) return rc;
    if (!device || mig < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *device = handle_for((int)(c - S.cards), -1);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceIsMigDeviceHandle(void *device, unsigned *is_mig) {
    card_t *c;
    int mig;
    int rc = resolve(device, &c, &mig);
    if (rc) return rc;
    if (!is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = mig >= 0;
    return NVML_SUCCESS;
}
