/* The span ledger in C: the fields of the span ledger, of a thread's ledger and of a span's share as C
 * structs, and the compiled twins of SpanLedger.open_span and SpanLedger.close_span
 * (otel_joules/attribution/spans.py; the twins are in _fastledger_events.c).
 *
 * LedgerFields, ShareFields and SpanLedgerFields hold the numbers the Python classes _Ledger, SpanShare
 * and SpanLedger (their subclasses) carry: the pure-Python methods read and write them as attributes,
 * this code as struct fields, so both work on the same objects; Mutex is the lock both take. open_span
 * and close_span are called as methods of a SpanLedger (bound to it by SpanLedger itself) and do what
 * the Python methods do, step for step:
 * the same locks around the same work (the thread's ledger lock, the GPU lock inside it, a parent on
 * another thread under its own ledger's lock after this one is released), the same floats added in
 * the same order, and the same Python methods called for the rare cases (a thread's first span,
 * prices before the first sample, a period that ended since the thread's last event, a dozing
 * sampler). The Python methods are the reference: tests/attribution/test_fast_ledger.py checks that
 * the two agree float for float.
 */
#include "_fastledger.h"

PyObject *share_type, *attribution_type;
PyObject *s_ledger, *s_acquire, *s_release, *s_view, *s_rates, *s_first_forecast, *s_pace, *s_dozing, *s_wake,
    *s_open_span, *s_uncovered_watts, *s_stat_checks, *s_fault, *s_attribution_label, *s_baseline_state;

/* ------------------------------------------------------------------------------------------------ */
/* The two field types.                                                                              */

static int ledger_traverse(Ledger *self, visitproc visit, void *arg)
{
    Py_VISIT(self->lock);
    Py_VISIT(self->clock);
    Py_VISIT(self->owner);
    return 0;
}

static int ledger_clear(Ledger *self)
{
    Py_CLEAR(self->lock);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->owner);
    return 0;
}

static void ledger_dealloc(Ledger *self)
{
    PyObject_GC_UnTrack(self);
    ledger_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef ledger_members[] = {
    {"lock", T_OBJECT_EX, offsetof(Ledger, lock), 0, "The ledger's lock: every event on it is taken under it."},
    {"clock", T_OBJECT_EX, offsetof(Ledger, clock), 0, "The thread's CPU clock (seconds)."},
    {"owner", T_OBJECT_EX, offsetof(Ledger, owner), 0, "The SpanLedger the ledger belongs to."},
    {"cpu_s", T_DOUBLE, offsetof(Ledger, cpu_s), 0, "The thread's CPU seconds at its last event."},
    {"t_ns", T_LONGLONG, offsetof(Ledger, t_ns), 0, "monotonic_ns of the last event."},
    {"acc_cpu_j", T_DOUBLE, offsetof(Ledger, acc_cpu_j), 0, "CPU-side joules accrued per leaf span so far."},
    {"acc_memory_j", T_DOUBLE, offsetof(Ledger, acc_memory_j), 0, "Memory joules accrued per leaf span so far."},
    {"acc_dynamic_j", T_DOUBLE, offsetof(Ledger, acc_dynamic_j), 0, "Dynamic joules accrued per leaf span so far."},
    {"leaves", T_LONGLONG, offsetof(Ledger, leaves), 0, "Open spans on the thread with no open child there."},
    {"generation", T_LONGLONG, offsetof(Ledger, generation), 0, "The owner's generation (forks) it was made in."},
    {NULL},
};

static int share_traverse(Share *self, visitproc visit, void *arg)
{
    Py_VISIT(self->ledger);
    Py_VISIT(self->parent);
    return 0;
}

static int share_clear(Share *self)
{
    Py_CLEAR(self->ledger);
    Py_CLEAR(self->parent);
    return 0;
}

static void share_dealloc(Share *self)
{
    PyObject_GC_UnTrack(self);
    share_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *share_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwargs))
{
    Share *self = (Share *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->leaf = 1; /* a new span is a leaf until a child opens on its thread */
    return (PyObject *)self;
}

#define SHARE_DOUBLE(name, doc) {#name, T_DOUBLE, offsetof(Share, name), 0, doc}
static PyMemberDef share_members[] = {
    {"ledger", T_OBJECT_EX, offsetof(Share, ledger), 0, "The ledger of the thread the span opened on."},
    {"parent", T_OBJECT, offsetof(Share, parent), 0, "The parent span's share (None: no local parent)."},
    SHARE_DOUBLE(cpu0, "The ledger's CPU-side account when the span last became a leaf."),
    SHARE_DOUBLE(memory0, "The ledger's memory account then."),
    SHARE_DOUBLE(dynamic0, "The ledger's dynamic account then."),
    SHARE_DOUBLE(gpu0, "The GPU account when the span last became a leaf."),
    SHARE_DOUBLE(gpu_dynamic0, "The dynamic GPU account then."),
    SHARE_DOUBLE(own_cpu, "CPU-side joules while a leaf."),
    SHARE_DOUBLE(own_memory, "Memory joules while a leaf."),
    SHARE_DOUBLE(own_gpu, "GPU joules while a leaf."),
    SHARE_DOUBLE(own_dynamic, "Dynamic joules while a leaf."),
    SHARE_DOUBLE(child_cpu, "CPU-side joules of children that ended."),
    SHARE_DOUBLE(child_memory, "Memory joules of children that ended."),
    SHARE_DOUBLE(child_gpu, "GPU joules of children that ended."),
    SHARE_DOUBLE(child_dynamic, "Dynamic joules of children that ended."),
    {"open_children", T_LONGLONG, offsetof(Share, open_children), 0, "Children open on the span's thread."},
    {"leaf", T_BOOL, offsetof(Share, leaf), 0, "Whether the span is a leaf of its thread's ledger."},
    {"ended", T_BOOL, offsetof(Share, ended), 0, "Whether the span's share was closed."},
    {NULL},
};

PyTypeObject LedgerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "otel_joules.attribution._fastledger.LedgerFields",
    .tp_doc = "The numbers of one thread's span ledger, as C fields (otel_joules.attribution._ledger._Ledger).",
    .tp_basicsize = sizeof(Ledger),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)ledger_traverse,
    .tp_clear = (inquiry)ledger_clear,
    .tp_dealloc = (destructor)ledger_dealloc,
    .tp_members = ledger_members,
};

PyTypeObject ShareType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "otel_joules.attribution._fastledger.ShareFields",
    .tp_doc = "The numbers of one span's share, as C fields (otel_joules.attribution.spans.SpanShare).",
    .tp_basicsize = sizeof(Share),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = share_new,
    .tp_traverse = (traverseproc)share_traverse,
    .tp_clear = (inquiry)share_clear,
    .tp_dealloc = (destructor)share_dealloc,
    .tp_members = share_members,
};

static int core_traverse(Core *self, visitproc visit, void *arg)
{
    Py_VISIT(self->prices);
    Py_VISIT(self->local);
    Py_VISIT(self->gpu_lock);
    Py_VISIT(self->cpu_indices);
    Py_VISIT(self->memory_indices);
    Py_VISIT(self->uncovered);
    return 0;
}

static int core_clear(Core *self)
{
    Py_CLEAR(self->prices);
    Py_CLEAR(self->local);
    Py_CLEAR(self->gpu_lock);
    Py_CLEAR(self->cpu_indices);
    Py_CLEAR(self->memory_indices);
    Py_CLEAR(self->uncovered);
    return 0;
}

static void core_dealloc(Core *self)
{
    PyObject_GC_UnTrack(self);
    core_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef core_members[] = {
    {"prices", T_OBJECT_EX, offsetof(Core, prices), 0, "Where CPU time's prices and the process's GPU watts come from."},
    {"_local", T_OBJECT_EX, offsetof(Core, local), 0, "Each thread's ledger (threading.local)."},
    {"_gpu_lock", T_OBJECT_EX, offsetof(Core, gpu_lock), 0, "The GPU accounts' lock."},
    {"_cpu_indices", T_OBJECT, offsetof(Core, cpu_indices), 0, "The CPU-side domains' positions."},
    {"_memory_indices", T_OBJECT, offsetof(Core, memory_indices), 0, "The memory domains' positions."},
    {"_uncovered", T_OBJECT, offsetof(Core, uncovered), 0, "The platform's uncovered positions (None: none)."},
    {"_gpu_acc_j", T_DOUBLE, offsetof(Core, gpu_acc_j), 0, "GPU joules per leaf span so far."},
    {"_gpu_dynamic_acc_j", T_DOUBLE, offsetof(Core, gpu_dynamic_acc_j), 0, "Dynamic GPU joules per leaf span so far."},
    {"_gpu_seen_j", T_DOUBLE, offsetof(Core, gpu_seen_j), 0, "The process's GPU joules credited so far."},
    {"_gpu_seen_dynamic_j", T_DOUBLE, offsetof(Core, gpu_seen_dynamic_j), 0, "Its dynamic GPU joules credited so far."},
    {"_gpu_leaves", T_LONGLONG, offsetof(Core, gpu_leaves), 0, "Leaf spans on every thread (the GPU's share)."},
    {"_generation", T_LONGLONG, offsetof(Core, generation), 0, "Forks seen: ledgers of an earlier one are gone."},
    {"has_gpu", T_BOOL, offsetof(Core, has_gpu), 0, "Whether the meter measures a GPU in the total."},
    {NULL},
};

PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "otel_joules.attribution._fastledger.SpanLedgerFields",
    .tp_doc = "The span ledger's own numbers, as C fields (otel_joules.attribution.spans.SpanLedger).",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_members = core_members,
};

static PyObject *mutex_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwargs))
{
    Mutex *self = (Mutex *)type->tp_alloc(type, 0);
    if (self != NULL && (self->lock = PyThread_allocate_lock()) == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void mutex_dealloc(Mutex *self)
{
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *mutex_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    acquire(self);
    Py_RETURN_TRUE;
}

/* acquire(blocking=True, timeout=-1) -> bool, as threading.Lock's (the wait with the GIL released). */
static PyObject *mutex_acquire(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pd:acquire", kwlist, &blocking, &timeout))
        return NULL;
    if (!blocking && timeout != -1.0) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1.0) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    Mutex *m = (Mutex *)self;
    PY_TIMEOUT_T wait_us = !blocking ? 0 : timeout == -1.0 ? -1 : (PY_TIMEOUT_T)(timeout * 1e6);
    PyLockStatus status = PyThread_acquire_lock_timed(m->lock, 0, 0);
    if (status != PY_LOCK_ACQUIRED && wait_us != 0) {
        Py_BEGIN_ALLOW_THREADS
        status = PyThread_acquire_lock_timed(m->lock, wait_us, 0);
        Py_END_ALLOW_THREADS
    }
    if (status != PY_LOCK_ACQUIRED)
        Py_RETURN_FALSE;
    m->locked = 1;
    Py_RETURN_TRUE;
}

static PyObject *mutex_release(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!((Mutex *)self)->locked) {
        PyErr_SetString(PyExc_RuntimeError, "release of an unlocked Mutex");
        return NULL;
    }
    release(self, 0);
    Py_RETURN_NONE;
}

static PyObject *mutex_exit(PyObject *self, PyObject *const *Py_UNUSED(args), Py_ssize_t Py_UNUSED(nargs))
{
    return mutex_release(self, NULL);
}

static PyObject *mutex_locked(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(((Mutex *)self)->locked);
}

static PyMethodDef mutex_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))mutex_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool: take the lock as threading.Lock does (the wait with the GIL "
     "released)."},
    {"release", mutex_release, METH_NOARGS, "Give the lock back."},
    {"locked", mutex_locked, METH_NOARGS, "Whether the lock is held."},
    {"__enter__", mutex_enter, METH_NOARGS, "acquire()"},
    {"__exit__", (PyCFunction)(void (*)(void))mutex_exit, METH_FASTCALL, "release()"},
    {NULL},
};

PyTypeObject MutexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "otel_joules.attribution._fastledger.Mutex",
    .tp_doc = "A lock the compiled span ledger takes without a Python call; Python code takes it with ``with``, as a "
              "threading.Lock (the ledgers' and the GPU accounts' locks where the extension is built).",
    .tp_basicsize = sizeof(Mutex),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = mutex_new,
    .tp_dealloc = (destructor)mutex_dealloc,
    .tp_methods = mutex_methods,
};

/* ------------------------------------------------------------------------------------------------ */
/* Helpers: each int-returning one gives 0, or -1 with the exception set.                            */

int get_double(PyObject *obj, PyObject *name, double *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}




int get_bool(PyObject *obj, PyObject *name, int *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    *out = PyObject_IsTrue(v);
    Py_DECREF(v);
    return *out < 0 ? -1 : 0;
}

int call_method0(PyObject *obj, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Take ``lock``: a Mutex directly (waiting with the GIL released when another thread holds it), any other
 * lock through its acquire(). */
int acquire(PyObject *lock)
{
    if (Py_IS_TYPE(lock, &MutexType)) {
        Mutex *m = (Mutex *)lock;
        if (!PyThread_acquire_lock(m->lock, NOWAIT_LOCK)) {
            Py_BEGIN_ALLOW_THREADS
            PyThread_acquire_lock(m->lock, WAIT_LOCK);
            Py_END_ALLOW_THREADS
        }
        m->locked = 1;
        return 0;
    }
    return call_method0(lock, s_acquire);
}

/* Release ``lock`` after the work under it: ``rc`` is the work's (a pending exception is kept, as a
 * ``with`` block's exit keeps it). Returns -1 when the work or the release failed. */
int release(PyObject *lock, int rc)
{
    if (Py_IS_TYPE(lock, &MutexType)) {
        ((Mutex *)lock)->locked = 0;
        PyThread_release_lock(((Mutex *)lock)->lock);
        return rc < 0 ? -1 : 0;
    }
    if (rc == 0)
        return call_method0(lock, s_release);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (call_method0(lock, s_release) < 0)
        PyErr_Clear();
    PyErr_Restore(type, value, traceback);
    return -1;
}

long long monotonic_ns(void)
{
    struct timespec ts; /* time.monotonic_ns() on Linux */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}


int read_rates(PyObject *rates, Rates *out)
{
    if (!PyTuple_Check(rates) || PyTuple_GET_SIZE(rates) < 8) {
        PyErr_SetString(PyExc_TypeError, "the price history's rates are not a _Rates");
        return -1;
    }
    out->since_ns = PyLong_AsLongLong(PyTuple_GET_ITEM(rates, 0));
    for (int i = 1; i < 8; i++)
        out->f[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(rates, i));
    return PyErr_Occurred() ? -1 : 0;
}

/* prices.view.rates, read into ``out``. */
int published_rates(PyObject *prices, Rates *out)
{
    PyObject *view = PyObject_GetAttr(prices, s_view);
    PyObject *rates = view == NULL ? NULL : PyObject_GetAttr(view, s_rates);
    Py_XDECREF(view);
    if (rates == NULL)
        return -1;
    int rc = read_rates(rates, out);
    Py_DECREF(rates);
    return rc;
}

/* bind(share_type, attribution_type): the classes open_span and close_span make (SpanShare, SpanAttribution). */
static PyObject *bind(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &ShareType)
        || !PyType_Check(args[1]) || !PyType_IsSubtype((PyTypeObject *)args[1], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "bind(share_type: a ShareFields subclass, attribution_type: a tuple subclass)");
        return NULL;
    }
    Py_XSETREF(share_type, Py_NewRef(args[0]));
    Py_XSETREF(attribution_type, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"open_span", (PyCFunction)(void (*)(void))ledger_open_span, METH_FASTCALL,
     "open_span(span_ledger, parent=None) -> SpanShare: SpanLedger.open_span."},
    {"close_span", (PyCFunction)(void (*)(void))ledger_close_span, METH_FASTCALL,
     "close_span(span_ledger, share, start=None, end=None) -> SpanAttribution | None: SpanLedger.close_span."},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(share_type, attribution_type): the classes the two methods make."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fastledger",
    "The span ledger's fields and its open_span and close_span in C (otel_joules.attribution.spans is the reference).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastledger(void)
{
    static const struct {
        PyObject **var;
        const char *text;
    } names[] = {
        {&s_ledger, "ledger"}, {&s_acquire, "acquire"}, {&s_release, "release"}, {&s_view, "view"},
        {&s_rates, "rates"}, {&s_first_forecast, "first_forecast"}, {&s_pace, "pace"}, {&s_dozing, "dozing"},
        {&s_wake, "wake"}, {&s_open_span, "open_span"}, {&s_uncovered_watts, "uncovered_watts"},
        {&s_stat_checks, "stat_checks"}, {&s_fault, "fault"}, {&s_attribution_label, "attribution_label"},
        {&s_baseline_state, "baseline_state"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].var = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    if (PyType_Ready(&LedgerType) < 0 || PyType_Ready(&ShareType) < 0 || PyType_Ready(&MutexType) < 0
        || PyType_Ready(&CoreType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "LedgerFields", (PyObject *)&LedgerType) < 0
        || PyModule_AddObjectRef(module, "ShareFields", (PyObject *)&ShareType) < 0
        || PyModule_AddObjectRef(module, "Mutex", (PyObject *)&MutexType) < 0
        || PyModule_AddObjectRef(module, "SpanLedgerFields", (PyObject *)&CoreType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
