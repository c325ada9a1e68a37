/* EnergyMeter.snapshot's common case in C: the compiled twin of the Python method
 * (otel_joules/meter/meter.py), which stays the reference.
 *
 * A meter on the compiled path has this bound as its ``snapshot`` (EnergyMeter.__init__). It does
 * what the method does for a plain call: under the meter's lock, the clock, the cached snapshot
 * while it is young enough, the counter loop (read_counters), the agent's outages where the meter
 * has standby estimates, the stale, missing and jump flags, and the new EnergySnapshot kept as the
 * latest. Of the outages it does the common case, a snapshot that finds the agent there as the one
 * before did; a loss or a return takes Outages.update. A call with arguments (the sampler's
 * hold_devices), the first snapshot (which starts the sampler) and a closed meter take the Python
 * method itself. tests/meter/test_fast_path.py checks that the two give the same snapshots through
 * wraps, restarts, jumps and failed reads, tests/agent/test_compiled_path.py through the agent's outages.
 */
#include "_fastsnap.h"
#include <time.h>

static PyObject *s_start_sampling, *s_snapshot_spec, *s_lock, *s_closed, *s_last_snapshot, *s_jumps_seen,
    *s_jump_counts, *s_stale, *s_failures, *s_failed, *s_jumps, *s_acquire, *s_release, *s_snapshot, *s_away,
    *s_agent_totals_uj, *s_update, *s_last_present_ns, *s_present;

int snapshot_names(void)
{
    static const struct {
        PyObject **var;
        const char *text;
    } names[] = {
        {&s_start_sampling, "_start_sampling"}, {&s_snapshot_spec, "_snapshot_spec"}, {&s_lock, "_lock"},
        {&s_closed, "_closed"}, {&s_last_snapshot, "_last_snapshot"}, {&s_jumps_seen, "_jumps_seen"},
        {&s_jump_counts, "_jump_counts"}, {&s_stale, "stale"}, {&s_failures, "failures"}, {&s_failed, "failed"},
        {&s_jumps, "jumps"}, {&s_acquire, "acquire"}, {&s_release, "release"}, {&s_snapshot, "snapshot"},
        {&s_away, "away"}, {&s_agent_totals_uj, "agent_totals_uj"}, {&s_update, "update"},
        {&s_last_present_ns, "last_present_ns"}, {&s_present, "present"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].var = PyUnicode_InternFromString(names[i].text)) == NULL)
            return -1;
    return 0;
}

/* Whether obj.name is true: 1, 0, or -1 with the exception set. */
static int attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int truth = PyObject_IsTrue(v);
    Py_DECREF(v);
    return truth;
}

/* The positions (of ``states``, or of the (position, state) pairs ``pairs``) whose state passes ``test``. */
static PyObject *positions_where(PyObject *states, int pairs, PyObject *joules, int (*test)(PyObject *))
{
    PyObject *found = PyList_New(0);
    if (found == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(states); k++) {
        PyObject *item = PyTuple_GET_ITEM(states, k), *position = NULL, *state = item;
        if (pairs) {
            position = PyTuple_GET_ITEM(item, 0);
            state = PyTuple_GET_ITEM(item, 1);
        }
        int pass = test(state);
        if (pass > 0 && pairs) {
            /* A stale flag only where the domain has a value (the reference's ``joules[i] is not None``). */
            Py_ssize_t i = PyLong_AsSsize_t(position);
            if (i < 0 || i >= PyTuple_GET_SIZE(joules)) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_IndexError, "an off-path position beyond the snapshot");
                pass = -1;
            } else {
                pass = PyTuple_GET_ITEM(joules, i) != Py_None;
            }
        }
        PyObject *index = pass > 0 ? (pairs ? Py_NewRef(position) : PyLong_FromSsize_t(k)) : NULL;
        if (pass < 0 || (pass > 0 && (index == NULL || PyList_Append(found, index) < 0))) {
            Py_XDECREF(index);
            Py_DECREF(found);
            return NULL;
        }
        Py_XDECREF(index);
    }
    PyObject *result = PyList_AsTuple(found);
    Py_DECREF(found);
    return result;
}

static int is_stale(PyObject *state) { return attr_true(state, s_stale); }

/* Retried, not dropped: a dropped domain is no longer one the meter measures. */
static int is_missing(PyObject *state)
{
    int failures = attr_true(state, s_failures);
    if (failures <= 0)
        return failures;
    int failed = attr_true(state, s_failed);
    return failed < 0 ? -1 : !failed;
}

/* A snapshot that found the agent there, as the one before did: Outages.update's common case. The standby
 * estimates' frozen joules appended to ``values``, the latest snapshot that found the agent there moved to now;
 * the snapshot's Outage (a new reference), or NULL with the exception set. */
static PyObject *still_there(PyObject *outages, PyObject *standby, PyObject *values, PyObject *now)
{
    if (PyObject_SetAttr(outages, s_last_present_ns, now) < 0)
        return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(standby); k++) {
        PyObject *state = PyTuple_GET_ITEM(standby, k);
        if (!PyObject_TypeCheck(state, &ChannelFieldsType) || ((ChannelFields *)state)->total_uj == NULL) {
            PyErr_SetString(PyExc_TypeError, "the standby estimates are not channel states (ChannelFields), set up");
            return NULL;
        }
        int failed = attr_true(state, s_failed);
        PyObject *value = failed ? Py_NewRef(Py_None) : joules_of(((ChannelFields *)state)->total_uj);
        if (failed < 0 || value == NULL || PyList_Append(values, value) < 0) {
            Py_XDECREF(value);
            return NULL;
        }
        Py_DECREF(value);
    }
    return PyObject_GetAttr(outages, s_present);
}

/* The counter loop and, where the meter has standby estimates, the agent's outages: the values (a new list), with
 * *failing and *outage (a new reference: None for a meter without standby estimates) set; or NULL with the
 * exception set. */
static PyObject *read_with_outages(PyObject *spec, PyObject *now, int *failing, PyObject **outage)
{
    PyObject *primary = PyTuple_GET_ITEM(spec, 0), *outages = PyTuple_GET_ITEM(spec, 6),
             *standby = PyTuple_GET_ITEM(spec, 7);
    PyObject *before_uj = Py_NewRef(Py_None);
    int was_away = outages == Py_None ? 0 : attr_true(outages, s_away);
    if (was_away > 0) {
        /* The agent's totals before a read that may bridge its outage. */
        Py_SETREF(before_uj, PyObject_CallMethodNoArgs(outages, s_agent_totals_uj));
    }
    PyObject *loop_args[2] = {primary, now};
    PyObject *read = was_away < 0 || before_uj == NULL ? NULL : read_counters(NULL, loop_args, 2);
    PyObject *values = NULL;
    if (read == NULL)
        goto done;
    values = Py_NewRef(PyTuple_GET_ITEM(read, 0));
    *failing = PyTuple_GET_ITEM(read, 1) == Py_True;
    if (outages == Py_None) {
        *outage = Py_NewRef(Py_None);
    } else if (!was_away && PyTuple_GET_ITEM(read, 2) == Py_False) {
        *outage = still_there(outages, standby, values, now);
    } else {
        /* A loss, a return, or the agent still away: the reference decides. */
        PyObject *updated = PyObject_CallMethodObjArgs(outages, s_update, values, PyTuple_GET_ITEM(read, 1),
                                                       PyTuple_GET_ITEM(read, 2), now, before_uj, NULL);
        if (updated != NULL && (!PyTuple_Check(updated) || PyTuple_GET_SIZE(updated) != 2)) {
            PyErr_SetString(PyExc_TypeError, "Outages.update did not return (failing, outage)");
            Py_CLEAR(updated);
        }
        int truth = updated == NULL ? -1 : PyObject_IsTrue(PyTuple_GET_ITEM(updated, 0));
        *failing = truth > 0;
        *outage = truth < 0 ? NULL : Py_NewRef(PyTuple_GET_ITEM(updated, 1));
        Py_XDECREF(updated);
    }
    if (*outage == NULL)
        Py_CLEAR(values);
done:
    Py_XDECREF(read);
    Py_XDECREF(before_uj);
    return values;
}

/* The snapshot under the meter's lock (held): a new reference, or NULL with the exception set. */
static PyObject *snapshot_locked(PyObject *meter, PyObject *spec, long long now_ns)
{
    PyObject *off_path = PyTuple_GET_ITEM(spec, 1), *states = PyTuple_GET_ITEM(spec, 2),
             *jump_events = PyTuple_GET_ITEM(spec, 3), *max_age = PyTuple_GET_ITEM(spec, 4),
             *snapshot_type = PyTuple_GET_ITEM(spec, 5);
    PyObject *cached = PyObject_GetAttr(meter, s_last_snapshot);
    if (cached == NULL)
        return NULL;
    if (cached != Py_None && PyTuple_Check(cached) && PyTuple_GET_SIZE(cached) > 0) {
        long long taken_ns = PyLong_AsLongLong(PyTuple_GET_ITEM(cached, 0));
        long long max_age_ns = PyLong_AsLongLong(max_age);
        if (PyErr_Occurred()) {
            Py_DECREF(cached);
            return NULL;
        }
        if (now_ns - taken_ns < max_age_ns)
            return cached;
    }
    Py_DECREF(cached);
    PyObject *now = PyLong_FromLongLong(now_ns);
    if (now == NULL)
        return NULL;
    int failing = 0;
    PyObject *outage = NULL;
    PyObject *values = read_with_outages(spec, now, &failing, &outage);
    if (values == NULL) {
        Py_DECREF(now);
        return NULL;
    }
    PyObject *joules = PyList_AsTuple(values);
    Py_DECREF(values);
    PyObject *stale = joules == NULL ? NULL : positions_where(off_path, 1, joules, is_stale);
    PyObject *missing = stale == NULL ? NULL : failing ? positions_where(states, 0, NULL, is_missing) : PyTuple_New(0);
    PyObject *snapshot = NULL, *jump_counts = NULL;
    if (missing == NULL)
        goto done;
    /* The jump counts are renewed only when a channel rejected a jump since the last snapshot. */
    PyObject *events = PyList_Check(jump_events) && PyList_GET_SIZE(jump_events) ? PyList_GET_ITEM(jump_events, 0) : NULL;
    PyObject *seen = events == NULL ? NULL : PyObject_GetAttr(meter, s_jumps_seen);
    if (seen == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "the meter's jump events are not a one-item list");
        goto done;
    }
    int same = PyObject_RichCompareBool(events, seen, Py_EQ);
    Py_DECREF(seen);
    if (same < 0)
        goto done;
    if (!same) {
        PyObject *counts = PyTuple_New(PyTuple_GET_SIZE(states));
        if (counts == NULL || PyObject_SetAttr(meter, s_jumps_seen, events) < 0) {
            Py_XDECREF(counts);
            goto done;
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(states); k++) {
            PyObject *jumps = PyObject_GetAttr(PyTuple_GET_ITEM(states, k), s_jumps);
            if (jumps == NULL) {
                Py_DECREF(counts);
                goto done;
            }
            PyTuple_SET_ITEM(counts, k, jumps);
        }
        int rc = PyObject_SetAttr(meter, s_jump_counts, counts);
        Py_DECREF(counts);
        if (rc < 0)
            goto done;
    }
    if ((jump_counts = PyObject_GetAttr(meter, s_jump_counts)) == NULL)
        goto done;
    /* tuple.__new__ as the reference: no Python-level __new__ of the named tuple. */
    PyTypeObject *type = (PyTypeObject *)snapshot_type;
    snapshot = type->tp_alloc(type, 6);
    if (snapshot == NULL)
        goto done;
    PyObject *items[6] = {now, joules, stale, missing, jump_counts, outage};
    for (int i = 0; i < 6; i++)
        PyTuple_SET_ITEM(snapshot, i, Py_NewRef(items[i]));
    if (PyObject_SetAttr(meter, s_last_snapshot, snapshot) < 0)
        Py_CLEAR(snapshot);
done:
    Py_XDECREF(jump_counts);
    Py_XDECREF(missing);
    Py_XDECREF(stale);
    Py_XDECREF(joules);
    Py_DECREF(outage);
    Py_DECREF(now);
    return snapshot;
}

PyObject *meter_snapshot(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "snapshot(meter, *, hold_devices=False)");
        return NULL;
    }
    PyObject *meter = args[0];
    if (nargs > 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)))
        return reference(s_snapshot, args, nargs, kwnames);
    int starting = attr_true(meter, s_start_sampling);
    if (starting != 0)
        return starting < 0 ? NULL : reference(s_snapshot, args, nargs, kwnames);
    PyObject *spec = PyObject_GetAttr(meter, s_snapshot_spec);
    if (spec == NULL)
        return NULL;
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 8 || !PyTuple_Check(PyTuple_GET_ITEM(spec, 0))
        || !PyTuple_Check(PyTuple_GET_ITEM(spec, 1)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, 2))
        || !PyType_Check(PyTuple_GET_ITEM(spec, 5)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, 7))) {
        Py_DECREF(spec);
        PyErr_SetString(PyExc_TypeError, "the meter's _snapshot_spec is not (primary, off_path, states, jump_events, "
                                         "max_age_ns, EnergySnapshot, outages, standby)");
        return NULL;
    }
    PyObject *lock = PyObject_GetAttr(meter, s_lock);
    PyObject *taken = lock == NULL ? NULL : PyObject_CallMethodNoArgs(lock, s_acquire);
    if (taken == NULL) {
        Py_XDECREF(lock);
        Py_DECREF(spec);
        return NULL;
    }
    Py_DECREF(taken);
    struct timespec ts; /* time.monotonic_ns() on Linux */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now_ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    PyObject *snapshot = NULL;
    int closed = attr_true(meter, s_closed);
    if (closed == 0)
        snapshot = snapshot_locked(meter, spec, now_ns);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *released = PyObject_CallMethodNoArgs(lock, s_release);
    if (released == NULL && type == NULL) {
        Py_CLEAR(snapshot);
    } else {
        if (released == NULL)
            PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    Py_XDECREF(released);
    Py_DECREF(lock);
    Py_DECREF(spec);
    if (closed > 0 && !PyErr_Occurred())
        return reference(s_snapshot, args, nargs, kwnames); /* every snapshot from now on reads nothing: the method says how */
    return snapshot;
}
