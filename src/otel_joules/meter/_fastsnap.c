/* The span path's per-span arithmetic in C: the compiled twin of two pure-Python functions.
 *
 * read_counters(states, now_ns) is the common case of EnergyMeter.snapshot's loop over its
 * channel states (otel_joules/meter/meter.py, read_counters): a healthy counter file read
 * with pread and parsed here, or a value of a reading several channels share (the agent's, taken
 * once per loop), and a forward move within the power bound's slack added here. Every other
 * case (a device read off the span path, a channel backing off, a wrap, a restart, a jump, an
 * odd reading) calls the very same Python methods the pure-Python loop calls
 * (read_joules, advance, read_uj, failed_read), so the read policy has one implementation.
 * It runs under the meter's lock, which the caller holds, as the Python loop does.
 *
 * snapshot(meter) is EnergyMeter.snapshot's common case around that loop (_fastsnap_snapshot.c), and
 * open_interval and close_interval the interval's two ends around it (_fastsnap_interval.c).
 *
 * span_attributes(spec, start, end, attribution) is MeterAttributes.span_attributes
 * (otel_joules/tracing/attributes.py) for the common cases (_fastsnap_attributes.c).
 *
 * The Python code is the reference; tests/meter/test_fast_path.py checks the two agree.
 */
#include "_fastsnap.h"
#include <errno.h>
#include <limits.h>
#include <unistd.h>

static PyObject *s_fresh_until_ns, *s_read_joules, *s_read_uj, *s_failed_read, *s_advance, *s_current;

/* Parse a counter file's text: decimal digits with optional surrounding whitespace.
 * 0 on success; -1 for anything else (signs, underscores, too many digits), which the
 * caller hands to the channel's own read_uj, as the Python loop does for a ValueError. */
static int parse_uj(const char *buf, ssize_t n, long long *out)
{
    ssize_t i = 0;
    long long value = 0;
    int digits = 0;
    while (i < n && (buf[i] == ' ' || (buf[i] >= '\t' && buf[i] <= '\r')))
        i++;
    while (i < n && buf[i] >= '0' && buf[i] <= '9') {
        if (++digits > 18)
            return -1;
        value = value * 10 + (buf[i] - '0');
        i++;
    }
    while (i < n && (buf[i] == ' ' || (buf[i] >= '\t' && buf[i] <= '\r')))
        i++;
    if (digits == 0 || i != n)
        return -1;
    *out = value;
    return 0;
}

/* state.read_uj() called again after the inline read failed; on an exception,
 * state.failed_read(exc, now_ns). Returns a new reference to the value, or NULL with no
 * error set when the read failed (recorded), or NULL with an error set. */
static PyObject *read_again(PyObject *state, PyObject *now_ns)
{
    PyObject *raw = PyObject_CallMethodNoArgs(state, s_read_uj);
    if (raw != NULL)
        return raw;
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(value, traceback);
    PyObject *done = PyObject_CallMethodObjArgs(state, s_failed_read, value, now_ns, NULL);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (done == NULL)
        return NULL;
    Py_DECREF(done);
    return NULL;
}

/* total_uj / 1e6 as Python computes it: exact below 2**53 in C, else Python's own division. */
PyObject *joules_of(PyObject *total)
{
    if (PyLong_CheckExact(total)) {
        int overflow = 0;
        long long uj = PyLong_AsLongLongAndOverflow(total, &overflow);
        if (!overflow && uj >= -EXACT_DOUBLE_INT && uj <= EXACT_DOUBLE_INT)
            return PyFloat_FromDouble((double)uj / 1e6);
    }
    PyObject *million = PyFloat_FromDouble(1e6);
    if (million == NULL)
        return NULL;
    PyObject *joules = PyNumber_TrueDivide(total, million);
    Py_DECREF(million);
    return joules;
}

/* Append state.total_uj / 1e6 (a float, as the Python loop computes it). */
static int append_total(PyObject *values, ChannelFields *state)
{
    if (state->total_uj == NULL) {
        PyErr_SetString(PyExc_AttributeError, "total_uj");
        return -1;
    }
    PyObject *joules = joules_of(state->total_uj);
    if (joules == NULL)
        return -1;
    int result = PyList_Append(values, joules);
    Py_DECREF(joules);
    return result;
}

/* state.total_uj += the move: ``delta_obj`` (Python's arithmetic), or the C ``delta`` when it is NULL. */
static int add_to_total(ChannelFields *state, PyObject *delta_obj, long long delta)
{
    PyObject *total = state->total_uj;
    if (total == NULL) {
        PyErr_SetString(PyExc_AttributeError, "total_uj");
        return -1;
    }
    PyObject *sum;
    int overflow = 1; /* 1: not added in C */
    long long t = 0, added = 0;
    if (delta_obj == NULL && PyLong_CheckExact(total))
        t = PyLong_AsLongLongAndOverflow(total, &overflow);
    if (!overflow && !__builtin_add_overflow(t, delta, &added)) {
        sum = PyLong_FromLongLong(added);
    } else {
        PyObject *d = delta_obj != NULL ? Py_NewRef(delta_obj) : PyLong_FromLongLong(delta);
        sum = d == NULL ? NULL : PyNumber_Add(total, d);
        Py_XDECREF(d);
    }
    if (sum == NULL)
        return -1;
    Py_SETREF(state->total_uj, sum);
    return 0;
}

/* The forward-move step for one reading: add a move within the slack, else state.advance. */
static int advance(ChannelFields *state, PyObject *raw, PyObject *now_ns)
{
    if (state->last_raw_uj == NULL) {
        PyErr_SetString(PyExc_AttributeError, "last_raw_uj");
        return -1;
    }
    PyObject *last = Py_NewRef(state->last_raw_uj);
    int within = -2; /* -2: not decided in C */
    long long delta = 0;
    if (PyLong_CheckExact(raw) && PyLong_CheckExact(last)) {
        int o1 = 0, o2 = 0;
        long long r = PyLong_AsLongLongAndOverflow(raw, &o1);
        long long l = PyLong_AsLongLongAndOverflow(last, &o2);
        if (!o1 && !o2 && !__builtin_sub_overflow(r, l, &delta) && delta >= -EXACT_DOUBLE_INT
            && delta <= EXACT_DOUBLE_INT)
            within = delta >= 0 && (double)delta <= state->jump_free_uj;
    }
    if (within == -2) {
        /* Python's own arithmetic and comparisons (and its TypeError for a reading of None). */
        PyObject *d = PyNumber_Subtract(raw, last);
        if (d == NULL)
            goto fail;
        PyObject *zero = PyLong_FromLong(0);
        int ge = zero == NULL ? -1 : PyObject_RichCompareBool(d, zero, Py_GE);
        Py_XDECREF(zero);
        /* The bound as a float only here, off the common case. */
        PyObject *jump_free = ge == 1 ? PyFloat_FromDouble(state->jump_free_uj) : NULL;
        int le = ge == 1 ? (jump_free == NULL ? -1 : PyObject_RichCompareBool(d, jump_free, Py_LE)) : ge;
        Py_XDECREF(jump_free);
        if (le == 1) {
            int rc = add_to_total(state, d, 0);
            Py_DECREF(d);
            if (rc < 0)
                goto fail;
            goto set_last;
        }
        Py_DECREF(d);
        if (le < 0)
            goto fail;
    } else if (within == 1) {
        if (add_to_total(state, NULL, delta) < 0)
            goto fail;
        goto set_last;
    }
    Py_DECREF(last);
    {
        PyObject *done = PyObject_CallMethodObjArgs((PyObject *)state, s_advance, raw, now_ns, NULL);
        if (done == NULL)
            return -1;
        Py_DECREF(done);
    }
    return 0;
set_last:
    Py_DECREF(last);
    Py_XSETREF(state->last_raw_uj, Py_NewRef(raw));
    Py_XSETREF(state->last_ns, Py_NewRef(now_ns));
    return 0;
fail:
    Py_DECREF(last);
    return -1;
}

/* The shared reading taken in one loop (Channel.shared_reading) and its source: strong references, or NULL. */
typedef struct {
    PyObject *source, *reading;
} SharedReading;

/* A state's value in its shared reading, taken once per loop: a new reference to the raw value; Py_None when the
 * source is away; NULL with no error set for anything odd (read again through read_uj, as the Python loop does);
 * NULL with an error set for an error that is not an Exception. */
static PyObject *shared_value(ChannelFields *state, SharedReading *taken)
{
    if (taken->source != state->shared) {
        PyObject *reading = PyObject_CallMethodNoArgs(state->shared, s_current);
        if (reading == NULL) {
            if (PyErr_ExceptionMatches(PyExc_Exception))
                PyErr_Clear();
            return NULL;
        }
        Py_XSETREF(taken->reading, reading);
        Py_XSETREF(taken->source, Py_NewRef(state->shared));
    }
    if (taken->reading == Py_None)
        return Py_NewRef(Py_None);
    if (!PyTuple_Check(taken->reading) || state->shared_index < 0 || state->shared_index >= PyTuple_GET_SIZE(taken->reading))
        return NULL;
    PyObject *raw = PyTuple_GET_ITEM(taken->reading, state->shared_index);
    if (!PyLong_CheckExact(raw) || !PyLong_CheckExact(state->wrap_uj))
        return NULL;
    int o1 = 0, o2 = 0;
    long long uj = PyLong_AsLongLongAndOverflow(raw, &o1), wrap = PyLong_AsLongLongAndOverflow(state->wrap_uj, &o2);
    if (o1 || o2 || uj < 0 || uj > wrap) {
        PyErr_Clear();
        return NULL;
    }
    return Py_NewRef(raw);
}

/* One state of the loop. Returns 0, or -1 with an error set; sets *failing / *away as the loop does. */
static int read_one(PyObject *values, PyObject *state_obj, PyObject *now_ns, int *failing, int *away, SharedReading *taken)
{
    ChannelFields *state = (ChannelFields *)state_obj;
    if (!PyObject_TypeCheck(state_obj, &ChannelFieldsType) || state->reader == NULL || state->failures == NULL
        || state->fd == NULL || state->shared == NULL || state->wrap_uj == NULL) {
        PyErr_SetString(PyExc_TypeError, "read_counters reads channel states (ChannelFields), set up");
        return -1;
    }
    PyObject *reader = Py_NewRef(state->reader);
    int failures = PyObject_IsTrue(state->failures);
    if (failures < 0) {
        Py_DECREF(reader);
        return -1;
    }
    if (reader != Py_None && !failures) {
        PyObject *fresh = PyObject_GetAttr(reader, s_fresh_until_ns);
        if (fresh == NULL) {
            Py_DECREF(reader);
            return -1;
        }
        int fresh_now = PyObject_RichCompareBool(now_ns, fresh, Py_LT);
        Py_DECREF(fresh);
        if (fresh_now < 0) {
            Py_DECREF(reader);
            return -1;
        }
        if (fresh_now) {
            /* A device read under DEVICE_FRESH_S old, already handed over: its value stands. */
            Py_DECREF(reader);
            return append_total(values, state);
        }
    }
    int off_path = reader != Py_None;
    Py_DECREF(reader);
    if (failures || off_path) {
        PyObject *value = PyObject_CallMethodOneArg(state_obj, s_read_joules, now_ns);
        if (value == NULL)
            return -1;
        if (value == Py_None)
            *failing = 1;
        int rc = PyList_Append(values, value);
        Py_DECREF(value);
        return rc;
    }
    PyObject *fd_obj = Py_NewRef(state->fd);
    PyObject *raw = NULL;
    if (fd_obj == Py_None) {
        Py_DECREF(fd_obj);
        if (state->shared != Py_None) {
            /* Channel.shared_reading: one reading for every channel that shares it, taken once per loop. */
            raw = shared_value(state, taken);
            if (raw == NULL && PyErr_Occurred())
                return -1;
        } else {
            raw = PyObject_CallMethodNoArgs(state_obj, s_read_uj);
            if (raw == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_Exception))
                    return -1;
                PyErr_Clear();
            }
        }
        if (raw == NULL) {
            /* Anything odd is read again by read_uj, which names the problem. */
            raw = read_again(state_obj, now_ns);
            if (raw == NULL) {
                if (PyErr_Occurred())
                    return -1;
                *failing = 1;
                return PyList_Append(values, Py_None);
            }
        }
    } else {
        long fd = PyLong_AsLong(fd_obj);
        Py_DECREF(fd_obj);
        int odd = 1;
        long long uj = 0;
        if (!(fd == -1 && PyErr_Occurred()) && fd >= 0 && fd <= INT_MAX) {
            char buf[32];
            /* The GIL is released around the read as os.pread does, so other threads (the device
             * reader, the samplers) get it when they did before. Holding it measured no faster. */
            ssize_t n;
            Py_BEGIN_ALLOW_THREADS
            n = pread((int)fd, buf, sizeof buf, 0);
            Py_END_ALLOW_THREADS
            if (n >= 0 && parse_uj(buf, n, &uj) == 0 && PyLong_CheckExact(state->wrap_uj)) {
                int o = 0;
                long long w = PyLong_AsLongLongAndOverflow(state->wrap_uj, &o);
                odd = !(o > 0 || (!o && uj <= w));
            }
        }
        PyErr_Clear();
        if (odd) {
            /* Anything odd is read again by read_uj, which names the problem. */
            raw = read_again(state_obj, now_ns);
            if (raw == NULL) {
                if (PyErr_Occurred())
                    return -1;
                *failing = 1;
                return PyList_Append(values, Py_None);
            }
        } else {
            raw = PyLong_FromLongLong(uj);
            if (raw == NULL)
                return -1;
        }
    }
    if (raw == Py_None) {
        /* Its source is away for now (Channel.may_be_away): no value, not a failure. */
        Py_DECREF(raw);
        *away = 1;
        return PyList_Append(values, Py_None);
    }
    int rc = advance(state, raw, now_ns);
    Py_DECREF(raw);
    if (rc < 0)
        return -1;
    return append_total(values, state);
}

PyObject *read_counters(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read_counters(states: tuple, now_ns: int)");
        return NULL;
    }
    PyObject *states = args[0], *now_ns = args[1];
    Py_ssize_t count = PyTuple_GET_SIZE(states);
    PyObject *values = PyList_New(0);
    if (values == NULL)
        return NULL;
    int failing = 0, away = 0;
    SharedReading taken = {NULL, NULL};
    for (Py_ssize_t i = 0; i < count; i++) {
        if (read_one(values, PyTuple_GET_ITEM(states, i), now_ns, &failing, &away, &taken) < 0) {
            Py_DECREF(values);
            values = NULL;
            break;
        }
    }
    Py_XDECREF(taken.source);
    Py_XDECREF(taken.reading);
    if (values == NULL)
        return NULL;
    return Py_BuildValue("(NOO)", values, failing ? Py_True : Py_False, away ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"read_counters", (PyCFunction)(void (*)(void))read_counters, METH_FASTCALL,
     "read_counters(states, now_ns) -> (values, failing, away): EnergyMeter.snapshot's loop over its channel states."},
    {"snapshot", (PyCFunction)(void (*)(void))meter_snapshot, METH_FASTCALL | METH_KEYWORDS,
     "snapshot(meter, *, hold_devices=False) -> EnergySnapshot: EnergyMeter.snapshot."},
    {"open_interval", (PyCFunction)(void (*)(void))open_interval, METH_FASTCALL | METH_KEYWORDS,
     "open_interval(meter, stated_wall_ns=None, synchronize=None) -> Opening: EnergyMeter.open_interval."},
    {"close_interval", (PyCFunction)(void (*)(void))close_interval, METH_FASTCALL | METH_KEYWORDS,
     "close_interval(meter, opening, stated_wall_ns=None, synchronize=None, given=None, read=True) -> Interval."},
    {"bind_interval", (PyCFunction)(void (*)(void))bind_interval, METH_FASTCALL,
     "bind_interval(wall_clock, tolerance_ns, Opening, Interval): what the interval's ends use."},
    {"span_attributes", (PyCFunction)(void (*)(void))span_attributes, METH_FASTCALL,
     "span_attributes(spec, start, end, attribution) -> dict | None | NotImplemented: MeterAttributes.span_attributes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fastsnap",
    "The span path's per-span arithmetic in C (the pure-Python code in otel_joules.meter.meter and "
    "otel_joules.tracing.attributes is the reference).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastsnap(void)
{
#define INTERN(var, text)                                                                                           \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                                                           \
        return NULL;
    INTERN(s_fresh_until_ns, "fresh_until_ns")
    INTERN(s_read_joules, "read_joules")
    INTERN(s_read_uj, "read_uj")
    INTERN(s_failed_read, "failed_read")
    INTERN(s_advance, "advance")
    INTERN(s_current, "current")
#undef INTERN
    if (snapshot_names() < 0 || interval_names() < 0 || PyType_Ready(&ChannelFieldsType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddObjectRef(module, "ChannelFields", (PyObject *)&ChannelFieldsType) < 0)
        Py_CLEAR(module);
    return module;
}
