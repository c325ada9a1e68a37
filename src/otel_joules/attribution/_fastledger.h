/* The compiled span ledger's shared declarations: the field structs of a thread's ledger and of a span's share,
 * their types, the interned attribute names and the helpers _fastledger.c defines for _fastledger_events.c.
 */
#ifndef OTEL_JOULES_FASTLEDGER_H
#define OTEL_JOULES_FASTLEDGER_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    PyObject *lock, *clock, *owner;
    double cpu_s, acc_cpu_j, acc_memory_j, acc_dynamic_j;
    long long t_ns, leaves, generation;
} Ledger;

typedef struct {
    PyObject_HEAD
    PyObject *ledger, *parent;
    double cpu0, memory0, dynamic0, gpu0, gpu_dynamic0, own_cpu, own_memory, own_gpu, own_dynamic, child_cpu,
        child_memory, child_gpu, child_dynamic;
    long long open_children;
    char leaf, ended;
} Share;

/* The span ledger's own numbers (SpanLedger's base where the extension is built): its prices, its threads'
 * ledgers, its generation (forks), the measured kinds' positions and the process's GPU accounts. */
typedef struct {
    PyObject_HEAD
    PyObject *prices, *local, *gpu_lock, *cpu_indices, *memory_indices, *uncovered;
    double gpu_acc_j, gpu_dynamic_acc_j, gpu_seen_j, gpu_seen_dynamic_j;
    long long gpu_leaves, generation;
    char has_gpu;
} Core;

/* A lock the compiled ledger takes without a Python call (Python code takes it with ``with``). */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    char locked;
} Mutex;

extern PyTypeObject LedgerType, ShareType, MutexType, CoreType;
/* SpanShare, SpanAttribution: set by bind(). */
extern PyObject *share_type, *attribution_type;

extern PyObject *s_ledger, *s_acquire, *s_release, *s_view, *s_rates, *s_first_forecast, *s_pace, *s_dozing, *s_wake,
    *s_open_span, *s_uncovered_watts, *s_stat_checks, *s_fault, *s_attribution_label, *s_baseline_state;

/* A _Rates tuple: since_ns, and fields 1..7 as doubles (cpu, memory, gpu_watts, dynamic,
 * gpu_dynamic_watts, gpu_j, gpu_dynamic_j). */
typedef struct {
    long long since_ns;
    double f[8];
} Rates;

/* Helpers (_fastledger.c): each int-returning one gives 0, or -1 with the exception set. */
int get_double(PyObject *obj, PyObject *name, double *out);
int get_bool(PyObject *obj, PyObject *name, int *out);
int call_method0(PyObject *obj, PyObject *name);
int acquire(PyObject *lock);
int release(PyObject *lock, int rc);
long long monotonic_ns(void);
int read_rates(PyObject *rates, Rates *out);
int published_rates(PyObject *prices, Rates *out);

/* SpanLedger.open_span and SpanLedger.close_span (_fastledger_events.c). */
PyObject *ledger_open_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *ledger_close_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
