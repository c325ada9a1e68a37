/*
 * A stand-in libamd_smi.so for tests: the real `amdsmi` package (7.0.2) loads it
 * through CDLL("$ROCM_PATH/lib/libamd_smi.so") when `import amdsmi` runs, so every
 * value our code sees has gone through the package's ctypes signatures, struct
 * layouts (_pack_ = 1, the 7.0.2 ones: they changed between 6.x and 7.x), status
 * codes and unit conventions (energy = accumulator x resolution in uJ, power in W).
 *
 * `import amdsmi` resolves all 184 functions of the library at once, so the build
 * (tests/fakes/amdsmi.py) adds a stub for every function this file does not define,
 * generated from the package's own bindings by gen_stubs.py: each returns
 * AMDSMI_STATUS_NOT_SUPPORTED.
 *
 * Configuration: the file named by FAKE_AMDSMI_CONFIG, read at amdsmi_init.
 * One `key=value` per line; `[card]` starts a GPU; `#` starts a comment.
 * Global keys (before the first card):
 *   update_ms=1              the energy accumulator's refresh period (quantised)
 *   epoch_monotonic_s=F      CLOCK_MONOTONIC time at which counters start (default: the first
 *                            init in this process or its parent: a re-init, after fork too, keeps
 *                            the counters running as a driver's do)
 *   init_error=N             amdsmi_init returns this status
 * Card keys:
 *   name (market name), uuid, bdf ("0000:0c:00.0")
 *   watts=F, watts_amplitude=F, watts_period_s=F
 *       P(t) = watts + watts_amplitude * sin(2 pi t / watts_period_s); energy is its integral
 *   energy=0|1               amdsmi_get_energy_count supported (else NOT_SUPPORTED)
 *   power=0|1                amdsmi_get_power_info supported (else NOT_SUPPORTED)
 *   power_field=current|average|socket  which field of amdsmi_power_info_t carries the
 *                            reading (W, rounded); the others read 0xFFFF ("N/A")
 *   resolution_uj=F          counter_resolution (float, uJ per count; default 15.3)
 *   energy_start_counts=N    accumulator at the epoch; uint64 arithmetic, so a start near
 *                            2^64 wraps the counter within a test
 *   pids=self,123            the process list ("self" is the calling process)
 *   pids_file=/path          the same, read at each call
 *   gfx_percent=self:75,123:25  engine_usage.gfx grows by this share of elapsed ns per pid
 *   compute_partition=CPX, memory_partition=NPS4  (absent: NOT_SUPPORTED)
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
    AMDSMI_STATUS_SUCCESS = 0,
    AMDSMI_STATUS_INVAL = 1,
    AMDSMI_STATUS_NOT_SUPPORTED = 2,
    AMDSMI_STATUS_NOT_INIT = 32,
    AMDSMI_STATUS_INSUFFICIENT_SIZE = 41,
};

#define MAX_CARDS 16
#define MAX_PIDS 32
#define NA16 0xFFFF

typedef struct __attribute__((packed)) {
    uint64_t socket_power;
    uint32_t current_socket_power;
    uint32_t average_socket_power;
    uint64_t gfx_voltage;
    uint64_t soc_voltage;
    uint64_t mem_voltage;
    uint32_t power_limit;
    uint8_t padding[4];
    uint64_t reserved[18];
} power_info_t;

typedef struct __attribute__((packed)) {
    char name[256];
    uint32_t pid;
    uint8_t padding[4];
    uint64_t mem;
    struct __attribute__((packed)) { uint64_t gfx; uint64_t enc; uint32_t reserved[12]; } engine_usage;
    struct __attribute__((packed)) { uint64_t gtt_mem; uint64_t cpu_mem; uint64_t vram_mem; uint32_t reserved[10]; } memory_usage;
    char container_name[256];
    uint32_t cu_occupancy;
    uint32_t reserved[11];
} proc_info_t;

typedef struct __attribute__((packed)) {
    char market_name[256];
    uint32_t vendor_id;
    char vendor_name[256];
    uint32_t subvendor_id;
    uint64_t device_id;
    uint32_t rev_id;
    char asic_serial[256];
    uint32_t oam_id;
    uint32_t num_of_compute_units;
    uint8_t padding[4];
    uint64_t target_graphics_version;
    uint32_t subsystem_id;
    uint32_t reserved[21];
} asic_info_t;

_Static_assert(sizeof(power_info_t) == 192, "amdsmi 7.0.2 amdsmi_power_info_t");
_Static_assert(sizeof(proc_info_t) == 704, "amdsmi 7.0.2 amdsmi_proc_info_t");
_Static_assert(sizeof(asic_info_t) == 896, "amdsmi 7.0.2 amdsmi_asic_info_t");

typedef struct {
    int socket_tag;     /* the socket handle points here */
    int processor_tag;  /* the processor handle points here */
    char name[256], uuid[64], bdf[32], power_field[16], compute_partition[32], memory_partition[32];
    char pids[512], pids_file[512], gfx_percent[512];
    double watts, watts_amplitude, watts_period_s, resolution_uj;
    int energy, power;
    uint64_t energy_start_counts;
} card_t;

static card_t cards[MAX_CARDS];
static int n_cards;
static int initialised;
static double update_ms = 1.0, epoch_s = -1.0, first_init_s = -1.0;
static int init_error;

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void copy_str(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static void card_defaults(card_t *c, int i) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "AMD Instinct MI300X");
    snprintf(c->uuid, sizeof c->uuid, "%08x-0000-1000-80fe-00000000%04x", 0x1000 + i, i);
    snprintf(c->bdf, sizeof c->bdf, "0000:%02x:00.0", 0x0c + i);
    copy_str(c->power_field, sizeof c->power_field, "current");
    c->watts = 100.0;
    c->watts_period_s = 1.0;
    c->resolution_uj = 15.3;
    c->energy = c->power = 1;
}

static void set_card_key(card_t *c, const char *key, const char *value) {
    if (!strcmp(key, "name")) copy_str(c->name, sizeof c->name, value);
    else if (!strcmp(key, "uuid")) copy_str(c->uuid, sizeof c->uuid, value);
    else if (!strcmp(key, "bdf")) copy_str(c->bdf, sizeof c->bdf, value);
    else if (!strcmp(key, "power_field")) copy_str(c->power_field, sizeof c->power_field, value);
    else if (!strcmp(key, "compute_partition")) copy_str(c->compute_partition, sizeof c->compute_partition, value);
    else if (!strcmp(key, "memory_partition")) copy_str(c->memory_partition, sizeof c->memory_partition, value);
    else if (!strcmp(key, "pids")) copy_str(c->pids, sizeof c->pids, value);
    else if (!strcmp(key, "pids_file")) copy_str(c->pids_file, sizeof c->pids_file, value);
    else if (!strcmp(key, "gfx_percent")) copy_str(c->gfx_percent, sizeof c->gfx_percent, value);
    else if (!strcmp(key, "watts")) c->watts = atof(value);
    else if (!strcmp(key, "watts_amplitude")) c->watts_amplitude = atof(value);
    else if (!strcmp(key, "watts_period_s")) c->watts_period_s = atof(value);
    else if (!strcmp(key, "resolution_uj")) c->resolution_uj = atof(value);
    else if (!strcmp(key, "energy")) c->energy = atoi(value);
    else if (!strcmp(key, "power")) c->power = atoi(value);
    else if (!strcmp(key, "energy_start_counts")) c->energy_start_counts = strtoull(value, NULL, 10);
}

static int load_config(void) {
    const char *path = getenv("FAKE_AMDSMI_CONFIG");
    n_cards = 0;
    init_error = 0;
    update_ms = 1.0;
    epoch_s = -1.0;
    if (!path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    card_t *card = NULL;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n#")] = 0;
        if (!strncmp(line, "[card]", 6)) {
            if (n_cards == MAX_CARDS) break;
            card = &cards[n_cards];
            card_defaults(card, n_cards);
            n_cards++;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        if (card) set_card_key(card, line, eq + 1);
        else if (!strcmp(line, "update_ms")) update_ms = atof(eq + 1);
        else if (!strcmp(line, "epoch_monotonic_s")) epoch_s = atof(eq + 1);
        else if (!strcmp(line, "init_error")) init_error = atoi(eq + 1);
    }
    fclose(f);
    return 0;
}

static double elapsed_s(void) {
    double t = monotonic_s() - epoch_s;
    return t > 0 ? t : 0;
}

static double power_w(const card_t *c, double t) {
    return c->watts + c->watts_amplitude * sin(2 * M_PI * t / c->watts_period_s);
}

static double energy_j(const card_t *c, double t) {
    double omega = 2 * M_PI / c->watts_period_s;
    return c->watts * t + c->watts_amplitude * (1 - cos(omega * t)) / omega;
}

static card_t *card_of(void *handle) {
    if (!initialised || !handle) return NULL;
    for (int i = 0; i < n_cards; i++)
        if (handle == &cards[i].processor_tag) return &cards[i];
    return NULL;
}

EXPORT int amdsmi_init(uint64_t flags) {
    (void)flags;
    if (load_config() != 0) return AMDSMI_STATUS_INVAL;
    if (init_error) return init_error;
    if (first_init_s < 0) first_init_s = monotonic_s();
    if (epoch_s < 0) epoch_s = first_init_s;
    initialised = 1;
    return AMDSMI_STATUS_SUCCESS;
}

EXPORT int amdsmi_shut_down(void) {
    initialised = 0;
    return AMDSMI_STATUS_SUCCESS;
}

/* The two-call pattern: a NULL array asks for the count. */
EXPORT int amdsmi_get_socket_handles(uint32_t *count, void **handles) {
    if (!initialised) return AMDSMI_STATUS_NOT_INIT;
    if (!count) return AMDSMI_STATUS_INVAL;
    if (handles) {
        if (*count < (uint32_t)n_cards) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
        for (int i = 0; i < n_cards; i++) handles[i] = &cards[i].socket_tag;
    }
    *count = n_cards;
    return AMDSMI_STATUS_SUCCESS;
}

EXPORT int amdsmi_get_processor_handles(void *socket, uint32_t *count, void **handles) {
    if (!initialised) return AMDSMI_STATUS_NOT_INIT;
    if (!count) return AMDSMI_STATUS_INVAL;
    for (int i = 0; i < n_cards; i++) {
        if (socket != &cards[i].socket_tag) continue;
        if (handles) {
            if (*count < 1) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
            handles[0] = &cards[i].processor_tag;
        }
        *count = 1;
        return AMDSMI_STATUS_SUCCESS;
    }
    return AMDSMI_STATUS_INVAL;
}

EXPORT int amdsmi_get_gpu_device_uuid(void *handle, uint32_t *length, char *uuid) {
    card_t *c = card_of(handle);
    if (!c) return initialised ? AMDSMI_STATUS_INVAL : AMDSMI_STATUS_NOT_INIT;
    if (!length || !uuid) return AMDSMI_STATUS_INVAL;
    if (*length <= strlen(c->uuid)) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    copy_str(uuid, *length, c->uuid);
    *length = strlen(c->uuid);
    return AMDSMI_STATUS_SUCCESS;
}

EXPORT int amdsmi_get_gpu_device_bdf(void *handle, uint64_t *bdf) {
    card_t *c = card_of(handle);
    if (!c) return initialised ? AMDSMI_STATUS_INVAL : AMDSMI_STATUS_NOT_INIT;
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    sscanf(c->bdf, "%x:%x:%x.%x", &domain, &bus, &device, &function);
    /* amdsmi_bdf_t: function bits 0-2, device 3-7, bus 8-15, domain 16-63. */
    *bdf = (uint64_t)(function & 7) | ((uint64_t)(device & 31) << 3) | ((uint64_t)(bus & 255) << 8) | ((uint64_t)domain << 16);
    return AMDSMI_STATUS_SUCCESS;
}

EXPORT int amdsmi_get_gpu_asic_info(void *handle, asic_info_t *info) {
    card_t *c = card_of(handle);
    if (!c) return initialised ? AMDSMI_STATUS_INVAL : AMDSMI_STATUS_NOT_INIT;
    memset(info, 0, sizeof *info);
    copy_str(info->market_name, sizeof info->market_name, c->name);
    info->vendor_id = 0x1002;
    copy_str(info->vendor_name, sizeof info->vendor_name, "Advanced Micro Devices Inc. [AMD/ATI]");
    info->subvendor_id = 0x1002;
    info->device_id = 0x74a1;
    info->oam_id = 0xFFFFFFFF;
    info->num_of_compute_units = 304;
    info->target_graphics_version = 0x942;
    info->subsystem_id = 0x74a1;
    return AMDSMI_STATUS_SUCCESS;
}

EXPORT int amdsmi_get_energy_count(void *handle, uint64_t *accumulator, float *resolution, uint64_t *timestamp) {
    card_t *c = card_of(handle);
    if (!c) return initialised ? AMDSMI_STATUS_INVAL : AMDSMI_STATUS_NOT_INIT;
    if (!c->energy) return AMDSMI_STATUS_NOT_SUPPORTED;
    double step_s = update_ms / 1000.0;
    double t = floor(elapsed_s() / step_s) * step_s;
    float res = (float)c->resolution_uj;
    /* Unsigned 64-bit arithmetic: the accumulator wraps as the hardware's does. */
    *accumulator = c->energy_start_counts + (uint64_t)(energy_j(c, t) * 1e6 / (double)res);
    *resolution = res;
    *timestamp = (uint64_t)((t + epoch_s) * 1e9);
    return AMDSMI_STATUS_SUCCESS;
}

EXPORT int amdsmi_get_power_info(void *handle, power_info_t *info) {
    card_t *c = card_of(handle);
    if (!c) return initialised ? AMDSMI_STATUS_INVAL : AMDSMI_STATUS_NOT_INIT;
    if (!c->power) return AMDSMI_STATUS_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    uint32_t watts = (uint32_t)lround(power_w(c, elapsed_s()));
    info->socket_power = NA16;
    info->current_socket_power = NA16;
    info->average_socket_power = NA16;
    if (!strcmp(c->power_field, "socket")) info->socket_power = watts;
    else if (!strcmp(c->power_field, "average")) info->average_socket_power = watts;
    else info->current_socket_power = watts;
    info->gfx_voltage = info->soc_voltage = info->mem_voltage = NA16;
    info->power_limit = 750;
    return AMDSMI_STATUS_SUCCESS;
}

static int parse_pid(const char *text) {
    while (*text == ' ') text++;
    return strncmp(text, "self", 4) ? atoi(text) : (int)getpid();
}

static double gfx_share(const card_t *c, int pid) {
    char buf[512];
    copy_str(buf, sizeof buf, c->gfx_percent);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        if (colon && parse_pid(item) == pid) return atof(colon + 1) / 100.0;
    }
    return 0.0;
}

EXPORT int amdsmi_get_gpu_process_list(void *handle, uint32_t *max_processes, proc_info_t *list) {
    card_t *c = card_of(handle);
    if (!c) return initialised ? AMDSMI_STATUS_INVAL : AMDSMI_STATUS_NOT_INIT;
    if (!max_processes) return AMDSMI_STATUS_INVAL;
    char buf[512];
    copy_str(buf, sizeof buf, c->pids);
    if (c->pids_file[0]) {
        FILE *f = fopen(c->pids_file, "r");
        buf[0] = 0;
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = 0;
            fclose(f);
        }
    }
    uint32_t n = 0;
    double now_ns = elapsed_s() * 1e9;
    for (char *save = NULL, *item = strtok_r(buf, ",\n", &save); item; item = strtok_r(NULL, ",\n", &save)) {
        int pid = parse_pid(item);
        if (pid <= 0) continue;
        if (list && n < *max_processes) {
            proc_info_t *p = &list[n];
            memset(p, 0, sizeof *p);
            snprintf(p->name, sizeof p->name, "proc%d", pid);
            p->pid = (uint32_t)pid;
            p->mem = 1u << 20;
            p->engine_usage.gfx = (uint64_t)(gfx_share(c, pid) * now_ns);
            p->memory_usage.vram_mem = 1u << 20;
            p->cu_occupancy = 0xFFFFFFFF;
        }
        n++;
    }
    if (list && n > *max_processes) {
        *max_processes = n;
        return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    }
    *max_processes = n;
    return AMDSMI_STATUS_SUCCESS;
}

static int partition(void *handle, char *out, uint32_t length, int memory) {
    card_t *c = card_of(handle);
    if (!c) return initialised ? AMDSMI_STATUS_INVAL : AMDSMI_STATUS_NOT_INIT;
    const char *value = memory ? c->memory_partition : c->compute_partition;
    if (!value[0]) return AMDSMI_STATUS_NOT_SUPPORTED;
    if (!out || length <= strlen(value)) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    copy_str(out, length, value);
    return AMDSMI_STATUS_SUCCESS;
}

EXPORT int amdsmi_get_gpu_compute_partition(void *handle, char *out, uint32_t length) {
    return partition(handle, out, length, 0);
}

EXPORT int amdsmi_get_gpu_memory_partition(void *handle, char *out, uint32_t length) {
    return partition(handle, out, length, 1);
}
