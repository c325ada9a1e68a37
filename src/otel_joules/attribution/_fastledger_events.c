/* The compiled twins of SpanLedger.open_span and SpanLedger.close_span, and the steps they share
 * (SpanLedger._advance, _credit_gpu_locked, _cap): see _fastledger.c for what they promise.
 */
#include "_fastledger.h"

/* ------------------------------------------------------------------------------------------------ */
/* SpanLedger._advance, _credit_gpu_locked and _cap.                                                 */

/* The thread's CPU seconds now (its last ones when the thread has exited). */
static int read_clock(Ledger *ledger, double *cpu_s)
{
    PyObject *now = PyObject_CallNoArgs(ledger->clock);
    if (now == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_OSError) && !PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear(); /* the thread has exited: it spends nothing more */
        *cpu_s = ledger->cpu_s;
        return 0;
    }
    *cpu_s = PyFloat_AsDouble(now);
    Py_DECREF(now);
    return *cpu_s == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* Credit the thread's CPU time since its last event to its leaf spans (ledger lock held). */
static int advance(PyObject *prices, Ledger *ledger, long long now_ns, PyObject *snapshot)
{
    double cpu_s;
    if (read_clock(ledger, &cpu_s) < 0)
        return -1;
    long long leaves = ledger->leaves;
    if (leaves) {
        double delta = cpu_s - ledger->cpu_s;
        if (delta > 0) {
            Rates rates;
            if (published_rates(prices, &rates) < 0)
                return -1;
            if (!rates.since_ns) {
                PyObject *forecast = PyObject_CallMethodOneArg(prices, s_first_forecast, snapshot);
                int rc = forecast == NULL ? -1 : read_rates(forecast, &rates);
                Py_XDECREF(forecast);
                if (rc < 0)
                    return -1;
            }
            double per_leaf = delta / (double)leaves, r_cpu = rates.f[1], r_memory = rates.f[2], r_dynamic = rates.f[4];
            if (ledger->t_ns < rates.since_ns) {
                PyObject *priced = PyObject_CallMethod(prices, "price", "LL", ledger->t_ns, now_ns);
                if (priced == NULL)
                    return -1;
                if (!PyTuple_Check(priced) || PyTuple_GET_SIZE(priced) != 3) {
                    Py_DECREF(priced);
                    PyErr_SetString(PyExc_TypeError, "PriceHistory.price did not return three prices");
                    return -1;
                }
                r_cpu = PyFloat_AsDouble(PyTuple_GET_ITEM(priced, 0));
                r_memory = PyFloat_AsDouble(PyTuple_GET_ITEM(priced, 1));
                r_dynamic = PyFloat_AsDouble(PyTuple_GET_ITEM(priced, 2));
                Py_DECREF(priced);
                if (PyErr_Occurred())
                    return -1;
            }
            ledger->acc_cpu_j += per_leaf * r_cpu;
            ledger->acc_memory_j += per_leaf * r_memory;
            ledger->acc_dynamic_j += per_leaf * r_dynamic;
        }
    }
    ledger->cpu_s = cpu_s;
    ledger->t_ns = now_ns;
    return 0;
}

/* Spread the process's GPU energy since the last event over the open leaf spans (GPU lock held). */
static int credit_gpu_locked(Core *self, long long now_ns)
{
    Rates rates;
    if (published_rates(self->prices, &rates) < 0)
        return -1;
    double dt_s = rates.since_ns ? (double)(now_ns - rates.since_ns) / 1e9 : 0.0;
    double gpu_j = rates.f[6] + rates.f[3] * dt_s, gpu_dynamic_j = rates.f[7] + rates.f[5] * dt_s;
    long long leaves = self->gpu_leaves;
    if (gpu_j > self->gpu_seen_j) {
        if (leaves)
            self->gpu_acc_j += (gpu_j - self->gpu_seen_j) / (double)leaves;
        self->gpu_seen_j = gpu_j;
    }
    if (gpu_dynamic_j > self->gpu_seen_dynamic_j) {
        if (leaves)
            self->gpu_dynamic_acc_j += (gpu_dynamic_j - self->gpu_seen_dynamic_j) / (double)leaves;
        self->gpu_seen_dynamic_j = gpu_dynamic_j;
    }
    return 0;
}

/* The GPU-lock section of an event: credit the GPU energy so far at the old leaf count, then ``off``
 * (a share that stops being a leaf: its own GPU joules taken; NULL for none) and ``on`` (one that
 * becomes a leaf: its GPU origin set; NULL for none); ``leaves_change`` is added to the GPU leaf count. */
static int gpu_event(Core *self, long long now_ns, Share *off, Share *on, long long leaves_change)
{
    PyObject *gpu_lock = Py_NewRef(self->gpu_lock);
    if (acquire(gpu_lock) < 0) {
        Py_DECREF(gpu_lock);
        return -1;
    }
    int rc = credit_gpu_locked(self, now_ns);
    if (rc == 0) {
        if (off != NULL) {
            off->own_gpu += self->gpu_acc_j - off->gpu0;
            off->own_dynamic += self->gpu_dynamic_acc_j - off->gpu_dynamic0;
        }
        if (on != NULL) {
            on->gpu0 = self->gpu_acc_j;
            on->gpu_dynamic0 = self->gpu_dynamic_acc_j;
        }
        self->gpu_leaves += leaves_change;
    }
    rc = release(gpu_lock, rc);
    Py_DECREF(gpu_lock);
    return rc;
}

/* spent_joules(positions, start, end): the joules the domains at ``positions`` spent between two snapshots. */
static int spent_joules(PyObject *positions, PyObject *start, PyObject *end, double *out)
{
    if (positions == NULL) {
        PyErr_SetString(PyExc_TypeError, "the span ledger has no positions for its kinds");
        return -1;
    }
    PyObject *a_joules = PyTuple_GET_ITEM(start, 1), *b_joules = PyTuple_GET_ITEM(end, 1);
    double spent = 0.0;
    int rc = 0;
    if (!PyTuple_Check(positions) || !PyTuple_Check(a_joules) || !PyTuple_Check(b_joules)) {
        PyErr_SetString(PyExc_TypeError, "spent_joules needs a positions tuple and two EnergySnapshots");
        rc = -1;
    }
    for (Py_ssize_t k = 0; rc == 0 && k < PyTuple_GET_SIZE(positions); k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, k));
        if (i < 0 || i >= PyTuple_GET_SIZE(a_joules) || i >= PyTuple_GET_SIZE(b_joules)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "a domain position beyond the snapshot");
            rc = -1;
            break;
        }
        PyObject *a = PyTuple_GET_ITEM(a_joules, i), *b = PyTuple_GET_ITEM(b_joules, i);
        if (a != Py_None && b != Py_None) {
            double av = PyFloat_AsDouble(a), bv = PyFloat_AsDouble(b);
            rc = PyErr_Occurred() ? -1 : 0;
            spent += bv - av;
        }
    }
    *out = spent;
    return rc;
}

/* SpanLedger._cap: the share's own CPU-side (with the platform's uncovered energy) and memory joules at most
 * what the host spent of each during the span, its own dynamic joules at most its own joules. */
static int cap_share(Core *self, Share *share, PyObject *start, PyObject *end)
{
    if (!PyTuple_Check(start) || !PyTuple_Check(end) || PyTuple_GET_SIZE(start) < 2 || PyTuple_GET_SIZE(end) < 2) {
        PyErr_SetString(PyExc_TypeError, "close_span's start and end are EnergySnapshots");
        return -1;
    }
    double spent;
    if (spent_joules(self->cpu_indices, start, end, &spent) < 0)
        return -1;
    double cap = spent - share->child_cpu;
    if (self->uncovered != NULL && self->uncovered != Py_None) {
        /* The platform's reading lags its components: over one short span the uncovered part is bounded at
         * the recent periods' power. */
        double watts;
        if (get_double(self->prices, s_uncovered_watts, &watts) < 0)
            return -1;
        long long t0 = PyLong_AsLongLong(PyTuple_GET_ITEM(start, 0)), t1 = PyLong_AsLongLong(PyTuple_GET_ITEM(end, 0));
        if (PyErr_Occurred())
            return -1;
        cap += watts * (double)(t1 - t0 > 0 ? t1 - t0 : 0) / 1e9;
    }
    if (share->own_cpu > cap)
        share->own_cpu = cap > 0.0 ? cap : 0.0;
    if (spent_joules(self->memory_indices, start, end, &spent) < 0)
        return -1;
    cap = spent - share->child_memory;
    if (share->own_memory > cap)
        share->own_memory = cap > 0.0 ? cap : 0.0;
    double own = share->own_cpu + share->own_memory + share->own_gpu;
    if (share->own_dynamic > own)
        share->own_dynamic = own;
    return 0;
}

/* share.own_* += the ledger's accounts since the share last became a leaf; it is a leaf no more. */
static void take_own(Share *share, Ledger *ledger)
{
    share->own_cpu += ledger->acc_cpu_j - share->cpu0;
    share->own_memory += ledger->acc_memory_j - share->memory0;
    share->own_dynamic += ledger->acc_dynamic_j - share->dynamic0;
    share->leaf = 0;
    ledger->leaves -= 1;
}

/* 0 when ``obj`` is a share this code can work on (its ledger a compiled one); else -1 with a TypeError. */
static int check_share(PyObject *obj, const char *what)
{
    if (PyObject_TypeCheck(obj, &ShareType) && ((Share *)obj)->ledger != NULL
        && PyObject_TypeCheck(((Share *)obj)->ledger, &LedgerType)
        && (((Share *)obj)->parent == NULL || ((Share *)obj)->parent == Py_None
            || PyObject_TypeCheck(((Share *)obj)->parent, &ShareType)))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s is not a SpanShare of the compiled span ledger", what);
    return -1;
}

/* ------------------------------------------------------------------------------------------------ */
/* open_span                                                                                         */

/* The locked part of open_span (ledger lock held): the new share, or NULL with the exception set. */
static PyObject *open_locked(Core *self, Ledger *ledger, PyObject *parent_obj, long long now_ns)
{
    Share *parent = parent_obj == Py_None ? NULL : (Share *)parent_obj;
    Share *off_parent = NULL; /* the parent this span stops being a leaf */
    if (ledger->leaves || parent != NULL) {
        if (advance(self->prices, ledger, now_ns, Py_None) < 0)
            return NULL;
        if (parent != NULL && parent->ledger == (PyObject *)ledger && !parent->ended) {
            if (parent->open_children == 0 && parent->leaf) {
                take_own(parent, ledger);
                off_parent = parent;
            }
            parent->open_children += 1;
        }
    } else {
        /* No span open on this thread: only the clock's new origin matters. */
        PyObject *cpu_s = PyObject_CallNoArgs(ledger->clock);
        if (cpu_s == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_OSError) && !PyErr_ExceptionMatches(PyExc_ValueError))
                return NULL;
            PyErr_Clear();
        } else {
            double value = PyFloat_AsDouble(cpu_s);
            Py_DECREF(cpu_s);
            if (value == -1.0 && PyErr_Occurred())
                return NULL;
            ledger->cpu_s = value;
        }
        ledger->t_ns = now_ns;
    }
    PyTypeObject *type = (PyTypeObject *)share_type;
    Share *share = (Share *)type->tp_alloc(type, 0);
    if (share == NULL)
        return NULL;
    share->ledger = Py_NewRef((PyObject *)ledger);
    share->parent = Py_NewRef(parent_obj);
    share->cpu0 = ledger->acc_cpu_j;
    share->memory0 = ledger->acc_memory_j;
    share->dynamic0 = ledger->acc_dynamic_j;
    share->leaf = 1;
    ledger->leaves += 1;
    if (self->has_gpu && gpu_event(self, now_ns, off_parent, share, off_parent == NULL ? 1 : 0) < 0) {
        Py_DECREF(share);
        return NULL;
    }
    return (PyObject *)share;
}

/* open_span(span_ledger, parent=None) -> SpanShare: SpanLedger.open_span. */
/* 0 when ``obj`` is a span ledger this code can work on (a SpanLedgerFields); else -1 with a TypeError. */
static int check_core(PyObject *obj)
{
    if (PyObject_TypeCheck(obj, &CoreType) && ((Core *)obj)->prices != NULL && ((Core *)obj)->local != NULL
        && ((Core *)obj)->gpu_lock != NULL)
        return 0;
    PyErr_SetString(PyExc_TypeError, "not a SpanLedger of the compiled span path");
    return -1;
}

PyObject *ledger_open_span(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2 || share_type == NULL) {
        PyErr_SetString(PyExc_TypeError, "open_span(span_ledger, parent=None), after bind()");
        return NULL;
    }
    PyObject *parent = nargs == 2 ? args[1] : Py_None;
    if (check_core(args[0]) < 0 || (parent != Py_None && check_share(parent, "the parent") < 0))
        return NULL;
    Core *self = (Core *)args[0];
    PyObject *ledger = PyObject_GetAttr(self->local, s_ledger);
    if (ledger == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        /* The thread's first span: the reference makes its ledger (once per thread). */
        PyObject *reference = PyObject_GetAttr((PyObject *)Py_TYPE(self), s_open_span);
        PyObject *share = reference == NULL ? NULL : PyObject_CallFunctionObjArgs(reference, self, parent, NULL);
        Py_XDECREF(reference);
        return share;
    }
    PyObject *share = NULL;
    if (!PyObject_TypeCheck(ledger, &LedgerType)) {
        PyErr_SetString(PyExc_TypeError, "the thread's ledger is not a compiled one");
        goto done;
    }
    Ledger *l = (Ledger *)ledger;
    long long now_ns = monotonic_ns();
    if (acquire(l->lock) < 0)
        goto done;
    share = open_locked(self, l, parent, now_ns);
    if (release(l->lock, share == NULL ? -1 : 0) < 0) {
        Py_CLEAR(share);
        goto done;
    }
    PyObject *pace = PyObject_GetAttr(self->prices, s_pace);
    int dozing = -1;
    if (pace != NULL && get_bool(pace, s_dozing, &dozing) == 0 && dozing)
        dozing = call_method0(pace, s_wake); /* after the leaf is counted, as in the reference */
    Py_XDECREF(pace);
    if (dozing < 0)
        Py_CLEAR(share);
done:
    Py_DECREF(ledger);
    return share;
}

/* ------------------------------------------------------------------------------------------------ */
/* close_span                                                                                        */

/* The locked part of close_span (ledger lock held): the share's inclusive joules per kind into ``closed``
 * (cpu, memory, gpu, own, dynamic, own_dynamic). */
static int close_locked(Core *self, Ledger *ledger, Share *share, PyObject *start, PyObject *end, long long now_ns,
                        double closed[6])
{
    if (advance(self->prices, ledger, now_ns, end) < 0)
        return -1;
    int was_leaf = share->leaf;
    if (was_leaf)
        take_own(share, ledger);
    share->ended = 1;
    if (end != Py_None && start != Py_None && cap_share(self, share, start, end) < 0)
        return -1;
    /* The parent, when open on this thread: it becomes a leaf again when this was its last open child. */
    Share *parent = share->parent == Py_None || share->parent == NULL ? NULL : (Share *)share->parent;
    Share *local = parent != NULL && parent->ledger == (PyObject *)ledger && !parent->ended ? parent : NULL;
    Share *on_parent = NULL;
    if (local != NULL) {
        local->open_children -= 1;
        if (local->open_children == 0) {
            local->cpu0 = ledger->acc_cpu_j;
            local->memory0 = ledger->acc_memory_j;
            local->dynamic0 = ledger->acc_dynamic_j;
            local->leaf = 1;
            ledger->leaves += 1;
            on_parent = local;
        }
    }
    if (self->has_gpu && gpu_event(self, now_ns, was_leaf ? share : NULL, on_parent, (on_parent != NULL) - was_leaf) < 0)
        return -1;
    closed[3] = share->own_cpu + share->own_memory + share->own_gpu;
    closed[5] = share->own_dynamic;
    closed[0] = share->own_cpu + share->child_cpu;
    closed[1] = share->own_memory + share->child_memory;
    closed[2] = share->own_gpu + share->child_gpu;
    closed[4] = closed[5] + share->child_dynamic;
    if (local != NULL) {
        local->child_cpu += closed[0];
        local->child_memory += closed[1];
        local->child_gpu += closed[2];
        local->child_dynamic += closed[4];
    }
    return 0;
}

/* Credit a parent open on another thread's ledger with a child's joules, under that ledger's lock. */
static int credit_parent_elsewhere(long long generation, Share *parent, const double closed[6])
{
    Ledger *ledger = (Ledger *)parent->ledger;
    if (ledger->generation != generation)
        return 0;
    PyObject *lock = Py_NewRef(ledger->lock);
    if (acquire(lock) < 0) {
        Py_DECREF(lock);
        return -1;
    }
    if (!parent->ended) {
        parent->child_cpu += closed[0];
        parent->child_memory += closed[1];
        parent->child_gpu += closed[2];
        parent->child_dynamic += closed[4];
    }
    int rc = release(lock, 0);
    Py_DECREF(lock);
    return rc;
}

/* A SpanAttribution built as tuple.__new__ builds it (no Python-level __new__). */
static PyObject *new_attribution(const double closed[6], PyObject *prices)
{
    PyObject *label = PyObject_GetAttr(prices, s_attribution_label);
    PyObject *baseline = label == NULL ? NULL : PyObject_GetAttr(prices, s_baseline_state);
    PyTypeObject *type = (PyTypeObject *)attribution_type;
    PyObject *result = baseline == NULL ? NULL : type->tp_alloc(type, 8);
    if (result == NULL)
        goto done;
    for (int i = 0; i < 6; i++) {
        PyObject *v = PyFloat_FromDouble(closed[i]);
        if (v == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, i, v);
    }
    PyTuple_SET_ITEM(result, 6, Py_NewRef(label));
    PyTuple_SET_ITEM(result, 7, Py_NewRef(baseline));
done:
    Py_XDECREF(label);
    Py_XDECREF(baseline);
    return result;
}

/* close_span(span_ledger, share, start=None, end=None) -> SpanAttribution | None: SpanLedger.close_span. */
PyObject *ledger_close_span(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 4 || attribution_type == NULL) {
        PyErr_SetString(PyExc_TypeError, "close_span(span_ledger, share, start=None, end=None), after bind()");
        return NULL;
    }
    PyObject *start = nargs > 2 ? args[2] : Py_None, *end = nargs > 3 ? args[3] : Py_None;
    if (check_core(args[0]) < 0 || check_share(args[1], "the share") < 0
        || (((Share *)args[1])->parent != NULL && ((Share *)args[1])->parent != Py_None
            && check_share(((Share *)args[1])->parent, "the share's parent") < 0))
        return NULL;
    Core *self = (Core *)args[0];
    Share *share = (Share *)args[1];
    Ledger *ledger = (Ledger *)share->ledger;
    long long generation = self->generation;
    if (share->ended || ledger->generation != generation)
        Py_RETURN_NONE; /* closed before, or opened before a fork: its thread does not exist here */
    PyObject *prices = Py_NewRef(self->prices);
    long long now_ns = monotonic_ns();
    PyObject *result = NULL;
    /* Held for the call: the share's references may change under the lock, not the objects. */
    Py_INCREF(share);
    Py_INCREF(ledger);
    PyObject *lock = Py_NewRef(ledger->lock), *parent = Py_NewRef(share->parent == NULL ? Py_None : share->parent);
    double closed[6] = {0};
    int ended = 1, rc = -1;
    if (acquire(lock) < 0)
        goto done;
    ended = share->ended;
    rc = ended ? 0 : close_locked(self, ledger, share, start, end, now_ns, closed);
    if (release(lock, rc) < 0 || ended) {
        if (ended && !PyErr_Occurred())
            result = Py_NewRef(Py_None);
        goto done;
    }
    /* A parent on this thread was credited above; one on another thread is credited now, under its lock. */
    if (parent != Py_None && ((Share *)parent)->ledger != (PyObject *)ledger
        && credit_parent_elsewhere(generation, (Share *)parent, closed) < 0)
        goto done;
    PyObject *stat_checks = PyObject_GetAttr(prices, s_stat_checks);
    int fault = -1;
    if (stat_checks != NULL)
        get_bool(stat_checks, s_fault, &fault);
    Py_XDECREF(stat_checks);
    if (fault == 0)
        result = new_attribution(closed, prices);
    else if (fault == 1)
        result = Py_NewRef(Py_None);
done:
    Py_DECREF(parent);
    Py_DECREF(lock);
    Py_DECREF(ledger);
    Py_DECREF(share);
    Py_DECREF(prices);
    return result;
}

