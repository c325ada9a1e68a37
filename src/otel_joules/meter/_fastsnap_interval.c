/* open_interval and close_interval's common case in C: the compiled twins of the Python functions in
 * otel_joules/meter/interval.py, which stay the reference.
 *
 * A meter on the compiled path has these bound as its ``open_interval`` and ``close_interval``
 * (EnergyMeter.__init__). open_interval does everything the Python function does (the two clocks,
 * the wall clock's offset and an explicit start, the caller's synchronisation, the snapshot); a
 * stated start beyond 64 bits takes the Python function. close_interval does the interval that
 * started and ends at its snapshots (no stated time, no caller's measurement); every other takes the
 * Python function, before anything is read. The wall clock's offset is settled by WALL_CLOCK.settle
 * itself, as in the reference. tests/meter/test_interval.py runs on both.
 */
#include "_fastsnap.h"
#include <time.h>

static PyObject *wall_clock, *opening_type, *interval_type, *s_offset_ns, *s_settle, *s_snapshot,
    *s_open_interval, *s_close_interval;
static long long tolerance_ns = -1;

int interval_names(void)
{
    if ((s_offset_ns = PyUnicode_InternFromString("offset_ns")) == NULL
        || (s_settle = PyUnicode_InternFromString("settle")) == NULL
        || (s_snapshot = PyUnicode_InternFromString("snapshot")) == NULL
        || (s_open_interval = PyUnicode_InternFromString("open_interval")) == NULL
        || (s_close_interval = PyUnicode_InternFromString("close_interval")) == NULL)
        return -1;
    return 0;
}

PyObject *bind_interval(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyLong_Check(args[1]) || !PyType_Check(args[2]) || !PyType_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "bind_interval(wall_clock, tolerance_ns: int, Opening, Interval)");
        return NULL;
    }
    long long tolerance = PyLong_AsLongLong(args[1]);
    if (tolerance == -1 && PyErr_Occurred())
        return NULL;
    Py_XSETREF(wall_clock, Py_NewRef(args[0]));
    Py_XSETREF(opening_type, Py_NewRef(args[2]));
    Py_XSETREF(interval_type, Py_NewRef(args[3]));
    tolerance_ns = tolerance;
    Py_RETURN_NONE;
}

static long long clock_ns(clockid_t clock)
{
    struct timespec ts; /* time.monotonic_ns() and time.time_ns() on Linux */
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

PyObject *reference(PyObject *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *function = PyObject_GetAttr((PyObject *)Py_TYPE(args[0]), name);
    if (function == NULL)
        return NULL;
    PyObject *result = PyObject_Vectorcall(function, args, nargs, kwnames);
    Py_DECREF(function);
    return result;
}

/* WALL_CLOCK.offset_ns, or with ``settle`` WALL_CLOCK.settle() (a reader saw the clocks move beyond the tolerance). */
static int wall_offset(int settle, long long *offset_ns)
{
    PyObject *v = settle ? PyObject_CallMethodNoArgs(wall_clock, s_settle) : PyObject_GetAttr(wall_clock, s_offset_ns);
    if (v == NULL)
        return -1;
    *offset_ns = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *offset_ns == -1 && PyErr_Occurred() ? -1 : 0;
}

static int within(long long value) { return -tolerance_ns <= value && value <= tolerance_ns; }

/* A new named tuple of ``type`` from ``count`` items (stolen references; NULL items fail it). */
static PyObject *new_named(PyObject *type_obj, PyObject **items, Py_ssize_t count)
{
    PyTypeObject *type = (PyTypeObject *)type_obj;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < count; i++)
        if (items[i] == NULL)
            goto fail;
    if ((result = type->tp_alloc(type, count)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++)
        PyTuple_SET_ITEM(result, i, items[i]);
    return result;
fail:
    for (Py_ssize_t i = 0; i < count; i++)
        Py_XDECREF(items[i]);
    return NULL;
}

/* open_interval(meter, stated_wall_ns=None, synchronize=None) -> Opening. */
PyObject *open_interval(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs < 1 || wall_clock == NULL) {
        PyErr_SetString(PyExc_TypeError, "open_interval(meter, stated_wall_ns=None, synchronize=None), after bind_interval");
        return NULL;
    }
    PyObject *stated = nargs > 1 ? args[1] : Py_None, *synchronize = nargs > 2 ? args[2] : Py_None;
    long long stated_ns = 0;
    int overflow = 0;
    if (stated != Py_None && PyLong_CheckExact(stated))
        stated_ns = PyLong_AsLongLongAndOverflow(stated, &overflow);
    /* A stated time far beyond any clock's (2**62 ns: 146 years) would overflow the arithmetic below. */
    if (nargs > 3 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || overflow
        || (stated != Py_None && !PyLong_CheckExact(stated)) || stated_ns > (1LL << 62) || stated_ns < -(1LL << 62))
        return reference(s_open_interval, args, nargs, kwnames);
    /* The clocks first, as close as possible to a caller's own stamp of the stated start. */
    long long mono_ns = clock_ns(CLOCK_MONOTONIC), wall_ns = clock_ns(CLOCK_REALTIME), previous_ns, offset_ns;
    if (wall_offset(0, &previous_ns) < 0)
        return NULL;
    offset_ns = previous_ns;
    if (!within(wall_ns - mono_ns - previous_ns) && wall_offset(1, &offset_ns) < 0)
        return NULL;
    PyObject *stated_start = Py_NewRef(Py_None);
    if (stated != Py_None && !within(stated_ns - wall_ns)) {
        if (within(stated_ns - previous_ns - mono_ns)) {
            offset_ns = previous_ns; /* stamped just before a step: not explicit, on the clock as it was then */
        } else {
            Py_SETREF(stated_start, PyLong_FromLongLong(stated_ns - offset_ns));
            if (stated_start == NULL)
                return NULL;
        }
    }
    if (synchronize != Py_None) {
        PyObject *done = PyObject_CallNoArgs(synchronize);
        if (done == NULL) {
            Py_DECREF(stated_start);
            return NULL;
        }
        Py_DECREF(done);
    }
    PyObject *items[3] = {PyObject_CallMethodNoArgs(args[0], s_snapshot), PyLong_FromLongLong(offset_ns), stated_start};
    return new_named(opening_type, items, 3);
}

/* close_interval(meter, opening, stated_wall_ns=None, synchronize=None, given=None, read=True) -> Interval. */
PyObject *close_interval(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs < 2 || wall_clock == NULL) {
        PyErr_SetString(PyExc_TypeError, "close_interval(meter, opening, ...), after bind_interval");
        return NULL;
    }
    PyObject *meter = args[0], *opening = args[1];
    PyObject *stated = nargs > 2 ? args[2] : Py_None, *synchronize = nargs > 3 ? args[3] : Py_None,
             *given = nargs > 4 ? args[4] : Py_None, *read = nargs > 5 ? args[5] : Py_True;
    if (nargs > 6 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || stated != Py_None || given != Py_None
        || read != Py_True || !PyTuple_Check(opening) || PyTuple_GET_SIZE(opening) != 3
        || PyTuple_GET_ITEM(opening, 2) != Py_None || !PyLong_CheckExact(PyTuple_GET_ITEM(opening, 1)))
        return reference(s_close_interval, args, nargs, kwnames);
    if (synchronize != Py_None) {
        PyObject *done = PyObject_CallNoArgs(synchronize);
        if (done == NULL)
            return NULL;
        Py_DECREF(done);
    }
    PyObject *closed = PyObject_CallMethodNoArgs(meter, s_snapshot);
    if (closed == NULL)
        return NULL;
    /* Read just after the closing snapshot: a caller's end stamp read now is on the clock its offset says. */
    long long wall_ns = clock_ns(CLOCK_REALTIME), closed_ns, offset_ns, opened_offset_ns;
    if (!PyTuple_Check(closed) || PyTuple_GET_SIZE(closed) < 1) {
        PyErr_SetString(PyExc_TypeError, "the meter's snapshot is not an EnergySnapshot");
        Py_DECREF(closed);
        return NULL;
    }
    closed_ns = PyLong_AsLongLong(PyTuple_GET_ITEM(closed, 0));
    opened_offset_ns = PyLong_AsLongLong(PyTuple_GET_ITEM(opening, 1));
    if (PyErr_Occurred() || wall_offset(0, &offset_ns) < 0
        || (!within(wall_ns - closed_ns - offset_ns) && wall_offset(1, &offset_ns) < 0)) {
        Py_DECREF(closed);
        return NULL;
    }
    PyObject *opened = PyTuple_GET_ITEM(opening, 0);
    PyObject *items[10] = {
        Py_NewRef(meter), Py_NewRef(opened), Py_NewRef(closed), Py_NewRef(opened), closed,
        Py_NewRef(Py_None), Py_NewRef(Py_None), PyLong_FromLongLong(offset_ns - opened_offset_ns),
        PyLong_FromLongLong(wall_ns), Py_NewRef(Py_False),
    };
    return new_named(interval_type, items, 10);
}
