/* The span path's per-span arithmetic in C: the compiled twin of two pure-Python functions.
 *
 * read_counters(states, now_ns) is the common case of EnergyMeter.snapshot's loop over its
 * channel states (otel_joules/meter/meter.py, _read_counters_py): a healthy counter file read
 * with pread and parsed here, a forward move within the power bound's slack added here.
 * Every other case (a device read off the span path, a channel backing off, a wrap, a restart,
 * a jump, an odd reading) calls the very same Python methods the pure-Python loop calls
 * (read_joules, advance, read_uj, failed_read), so the read policy has one implementation.
 * It runs under the meter's lock, which the caller holds, as the Python loop does.
 *
 * snapshot(meter) is EnergyMeter.snapshot's common case around that loop (_fastsnap_snapshot.c), and
 * open_interval and close_interval the interval's two ends around it (_fastsnap_interval.c).
 *
 * span_attributes(spec, start, end, attribution) is MeterAttributes.span_attributes
 * (otel_joules/tracing/attributes.py) for two snapshots without stale, missing or jumped
 * domains: the same keys in the same order and the same floats, computed in the same order.
 * For anything else it returns NotImplemented and the Python code answers.
 *
 * The Python code is the reference; tests/meter/test_fast_path.py checks the two agree.
 */
#include "_fastsnap.h"
#include <errno.h>
#include <limits.h>
#include <unistd.h>

static PyObject *s_fresh_until_ns, *s_read_joules, *s_read_uj, *s_failed_read, *s_advance;

/* 2**53: integers up to this convert to a double exactly, so a comparison with a float gives
 * Python's (exact) answer. */
#define EXACT_DOUBLE_INT 9007199254740992LL

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
static PyObject *joules_of(PyObject *total)
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

/* One state of the loop. Returns 0, or -1 with an error set; sets *failing / *away as the loop does. */
static int read_one(PyObject *values, PyObject *state_obj, PyObject *now_ns, int *failing, int *away)
{
    ChannelFields *state = (ChannelFields *)state_obj;
    if (!PyObject_TypeCheck(state_obj, &ChannelFieldsType) || state->reader == NULL || state->failures == NULL
        || state->fd == NULL || state->wrap_uj == NULL) {
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
        raw = PyObject_CallMethodNoArgs(state_obj, s_read_uj);
        if (raw == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return -1;
            PyErr_Clear();
            raw = read_again(state_obj, now_ns);
            if (raw == NULL) {
                if (PyErr_Occurred())
                    return -1;
                *failing = 1;
                return PyList_Append(values, Py_None);
            }
        } else if (raw == Py_None) {
            /* Its source is away for now (Channel.may_be_away): no value, not a failure. */
            Py_DECREF(raw);
            *away = 1;
            return PyList_Append(values, Py_None);
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
    for (Py_ssize_t i = 0; i < count; i++) {
        if (read_one(values, PyTuple_GET_ITEM(states, i), now_ns, &failing, &away) < 0) {
            Py_DECREF(values);
            return NULL;
        }
    }
    return Py_BuildValue("(NOO)", values, failing ? Py_True : Py_False, away ? Py_True : Py_False);
}

/* spec: (rows, joules_keys, row_items, domain_kinds, kind_positions, sources, keys), built by
 * MeterAttributes: rows[i] = (in_total, is_measurement, update_period_s); joules_keys[i];
 * row_items[i] = ((key, value), ...), set with the domain's joules; kind_positions = ((key, position), ...);
 * sources = (measured, estimate, mixed); keys = (joules, watts, source, domain_kinds,
 * below_resolution, attributed, attributed_self, dynamic, dynamic_self, attribution, baseline). */
static PyObject *span_attributes(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 7 || !PyTuple_Check(args[1])
        || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "span_attributes(spec: tuple, start: tuple, end: tuple, attribution)");
        return NULL;
    }
    PyObject *spec = args[0], *start = args[1], *end = args[2], *attribution = args[3];
    if (PyTuple_GET_SIZE(start) < 5 || PyTuple_GET_SIZE(end) < 5)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *rows = PyTuple_GET_ITEM(spec, 0), *joules_keys = PyTuple_GET_ITEM(spec, 1),
             *row_items = PyTuple_GET_ITEM(spec, 2), *domain_kinds = PyTuple_GET_ITEM(spec, 3),
             *kind_positions = PyTuple_GET_ITEM(spec, 4), *sources = PyTuple_GET_ITEM(spec, 5),
             *keys = PyTuple_GET_ITEM(spec, 6);
    PyObject *a_joules = PyTuple_GET_ITEM(start, 1), *b_joules = PyTuple_GET_ITEM(end, 1);
    /* Stale, missing or jumped domains: the Python code's flags. */
    PyObject *a_jumps = PyTuple_GET_ITEM(start, 4), *b_jumps = PyTuple_GET_ITEM(end, 4);
    if (!PyTuple_Check(PyTuple_GET_ITEM(start, 2)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(start, 2))
        || !PyTuple_Check(PyTuple_GET_ITEM(end, 2)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(end, 2))
        || !PyTuple_Check(PyTuple_GET_ITEM(start, 3)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(start, 3))
        || !PyTuple_Check(PyTuple_GET_ITEM(end, 3)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(end, 3)))
        Py_RETURN_NOTIMPLEMENTED;
    if (a_jumps != b_jumps) {
        int same = PyObject_RichCompareBool(a_jumps, b_jumps, Py_EQ);
        if (same < 0)
            return NULL;
        if (!same)
            Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(rows);
    if (!PyTuple_Check(a_joules) || !PyTuple_Check(b_joules) || PyTuple_GET_SIZE(a_joules) < count
        || PyTuple_GET_SIZE(b_joules) < count || PyTuple_GET_SIZE(joules_keys) != count
        || PyTuple_GET_SIZE(row_items) != count || !PyTuple_Check(keys) || PyTuple_GET_SIZE(keys) != 11
        || !PyLong_CheckExact(PyTuple_GET_ITEM(start, 0)) || !PyLong_CheckExact(PyTuple_GET_ITEM(end, 0)))
        Py_RETURN_NOTIMPLEMENTED;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *a = PyTuple_GET_ITEM(a_joules, i), *b = PyTuple_GET_ITEM(b_joules, i);
        if ((a != Py_None && !PyFloat_CheckExact(a)) || (b != Py_None && !PyFloat_CheckExact(b)))
            Py_RETURN_NOTIMPLEMENTED;
        PyObject *items = PyTuple_GET_ITEM(row_items, i);
        if (!PyTuple_Check(items))
            Py_RETURN_NOTIMPLEMENTED;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(items); k++)
            if (!PyTuple_Check(PyTuple_GET_ITEM(items, k)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(items, k)) != 2)
                Py_RETURN_NOTIMPLEMENTED;
    }
    int o1 = 0, o2 = 0;
    long long t0 = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(start, 0), &o1);
    long long t1 = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(end, 0), &o2);
    long long elapsed;
    if (o1 || o2 || __builtin_sub_overflow(t1, t0, &elapsed))
        Py_RETURN_NOTIMPLEMENTED;
    if (elapsed < 0)
        elapsed = 0;
    if (elapsed > EXACT_DOUBLE_INT)
        Py_RETURN_NOTIMPLEMENTED;
    double duration_s = (double)elapsed / 1e9;
    double total = 0.0, slowest_update_s = 0.0;
    int measured = 0, estimated = 0, present = 0;
    double spent[64];
    if (count > 64)
        Py_RETURN_NOTIMPLEMENTED;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *a = PyTuple_GET_ITEM(a_joules, i), *b = PyTuple_GET_ITEM(b_joules, i);
        if (a == Py_None || b == Py_None)
            continue;
        PyObject *row = PyTuple_GET_ITEM(rows, i);
        double s = PyFloat_AS_DOUBLE(b) - PyFloat_AS_DOUBLE(a);
        spent[i] = s;
        present = 1;
        int in_total = PyObject_IsTrue(PyTuple_GET_ITEM(row, 0));
        if (in_total < 0)
            return NULL;
        if (in_total) {
            total += s;
            int is_measurement = PyObject_IsTrue(PyTuple_GET_ITEM(row, 1));
            if (is_measurement < 0)
                return NULL;
            if (is_measurement)
                measured = 1;
            else
                estimated = 1;
        }
        double update_s = PyFloat_AsDouble(PyTuple_GET_ITEM(row, 2));
        if (update_s == -1.0 && PyErr_Occurred())
            return NULL;
        if (update_s > slowest_update_s)
            slowest_update_s = update_s;
    }
    PyObject *attributes = NULL, *v = NULL;
    if (present) {
        PyObject *source = PyTuple_GET_ITEM(sources, measured && estimated ? 2 : estimated ? 1 : 0);
        attributes = PyDict_New();
        if (attributes == NULL)
            return NULL;
        v = PyFloat_FromDouble(total);
        if (v == NULL || PyDict_SetItem(attributes, PyTuple_GET_ITEM(keys, 0), v) < 0)
            goto fail_value;
        Py_DECREF(v);
        v = PyFloat_FromDouble(duration_s > 0 ? total / duration_s : 0.0);
        if (v == NULL || PyDict_SetItem(attributes, PyTuple_GET_ITEM(keys, 1), v) < 0)
            goto fail_value;
        Py_DECREF(v);
        if (PyDict_SetItem(attributes, PyTuple_GET_ITEM(keys, 2), source) < 0
            || PyDict_SetItem(attributes, PyTuple_GET_ITEM(keys, 3), domain_kinds) < 0)
            goto fail;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (PyTuple_GET_ITEM(a_joules, i) == Py_None || PyTuple_GET_ITEM(b_joules, i) == Py_None)
                continue;
            v = PyFloat_FromDouble(spent[i]);
            if (v == NULL || PyDict_SetItem(attributes, PyTuple_GET_ITEM(joules_keys, i), v) < 0)
                goto fail_value;
            Py_DECREF(v);
            PyObject *items = PyTuple_GET_ITEM(row_items, i);
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(items); k++) {
                PyObject *item = PyTuple_GET_ITEM(items, k);
                if (PyDict_SetItem(attributes, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1)) < 0)
                    goto fail;
            }
        }
        if (duration_s < slowest_update_s && PyDict_SetItem(attributes, PyTuple_GET_ITEM(keys, 4), Py_True) < 0)
            goto fail;
    }
    if (attribution == Py_None) {
        if (attributes == NULL)
            Py_RETURN_NONE;
        return attributes;
    }
    if (!PyTuple_Check(attribution) || PyTuple_GET_SIZE(attribution) < 8) {
        Py_XDECREF(attributes);
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (attributes == NULL && (attributes = PyDict_New()) == NULL)
        return NULL;
    {
        PyObject *partial = PyNumber_Add(PyTuple_GET_ITEM(attribution, 0), PyTuple_GET_ITEM(attribution, 1));
        PyObject *sum = partial == NULL ? NULL : PyNumber_Add(partial, PyTuple_GET_ITEM(attribution, 2));
        Py_XDECREF(partial);
        if (sum == NULL || PyDict_SetItem(attributes, PyTuple_GET_ITEM(keys, 5), sum) < 0) {
            Py_XDECREF(sum);
            goto fail;
        }
        Py_DECREF(sum);
        for (Py_ssize_t k = 0; k < 5; k++) {
            if (PyDict_SetItem(attributes, PyTuple_GET_ITEM(keys, 6 + k), PyTuple_GET_ITEM(attribution, 3 + k)) < 0)
                goto fail;
        }
        Py_ssize_t kinds = PyTuple_GET_SIZE(kind_positions);
        for (Py_ssize_t k = 0; k < kinds; k++) {
            PyObject *pair = PyTuple_GET_ITEM(kind_positions, k);
            Py_ssize_t position = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 1));
            if (position < 0 || position >= PyTuple_GET_SIZE(attribution)) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_IndexError, "attribution position out of range");
                goto fail;
            }
            if (PyDict_SetItem(attributes, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(attribution, position)) < 0)
                goto fail;
        }
    }
    return attributes;
fail_value:
    Py_XDECREF(v);
fail:
    Py_XDECREF(attributes);
    return NULL;
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
#undef INTERN
    if (snapshot_names() < 0 || interval_names() < 0 || PyType_Ready(&ChannelFieldsType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddObjectRef(module, "ChannelFields", (PyObject *)&ChannelFieldsType) < 0)
        Py_CLEAR(module);
    return module;
}
