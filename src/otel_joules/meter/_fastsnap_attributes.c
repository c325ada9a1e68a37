/* MeterAttributes.span_attributes in C (otel_joules/tracing/attributes.py, the reference): a span's energy
 * attributes between two snapshots without stale, missing or jumped domains, and for a meter reading through the
 * agent, two snapshots that both found it there: the same keys in the same order and the same floats, computed
 * in the same order. For anything else it returns NotImplemented and the Python code answers.
 * tests/meter/test_fast_path.py and tests/agent/test_compiled_path.py check the two agree.
 */
#include "_fastsnap.h"

/* Mark the standby estimates' positions in ``left_out`` where both snapshots found the agent there (energy_between
 * leaves them out: the agent's counters measured the interval). 0, 1 for a case left to the reference (the agent
 * away at either end, or a snapshot without its Outage), or -1 with an exception set. */
static int leave_out_standby(PyObject *agent, PyObject *start, PyObject *end, Py_ssize_t count, char *left_out)
{
    PyObject *standby = PyTuple_GET_ITEM(agent, 0);
    if (!PyTuple_Check(standby) || PyTuple_GET_SIZE(standby) == 0)
        return PyTuple_Check(standby) ? 0 : 1;
    if (PyTuple_GET_SIZE(start) < 6 || PyTuple_GET_SIZE(end) < 6)
        return 1;
    PyObject *ends[2] = {PyTuple_GET_ITEM(start, 5), PyTuple_GET_ITEM(end, 5)};
    for (int k = 0; k < 2; k++) {
        /* Outage.away first: false at both ends, or the reference decides. */
        if (!PyTuple_Check(ends[k]) || PyTuple_GET_SIZE(ends[k]) < 1 || PyTuple_GET_ITEM(ends[k], 0) != Py_False)
            return 1;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(standby); k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(standby, k));
        if (i == -1 && PyErr_Occurred())
            return -1;
        if (i < 0 || i >= count)
            return 1;
        left_out[i] = 1;
    }
    return 0;
}

/* energy.agent.domains: the ids of the agent's domains with joules, in the order of ``pairs`` ((position, id),
 * sorted by id); set in ``attributes`` under ``key`` when there is one. 0, or -1 with an exception set. */
static int set_agent_domains(PyObject *attributes, PyObject *agent, PyObject *a_joules, PyObject *b_joules,
                             const char *left_out, Py_ssize_t count)
{
    PyObject *pairs = PyTuple_GET_ITEM(agent, 1), *key = PyTuple_GET_ITEM(agent, 2);
    if (!PyTuple_Check(pairs)) {
        PyErr_SetString(PyExc_TypeError, "the agent's domains are not a tuple of (position, id)");
        return -1;
    }
    PyObject *ids = PyList_New(0);
    if (ids == NULL)
        return -1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(pairs); k++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, k);
        Py_ssize_t i = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 ? PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0)) : -1;
        if (i < 0 || i >= count) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "an agent's domain position beyond the snapshot");
            Py_DECREF(ids);
            return -1;
        }
        if (left_out[i] || PyTuple_GET_ITEM(a_joules, i) == Py_None || PyTuple_GET_ITEM(b_joules, i) == Py_None)
            continue;
        if (PyList_Append(ids, PyTuple_GET_ITEM(pair, 1)) < 0) {
            Py_DECREF(ids);
            return -1;
        }
    }
    int rc = 0;
    if (PyList_GET_SIZE(ids)) {
        PyObject *through_agent = PyList_AsTuple(ids);
        rc = through_agent == NULL ? -1 : PyDict_SetItem(attributes, key, through_agent);
        Py_XDECREF(through_agent);
    }
    Py_DECREF(ids);
    return rc;
}

/* spec: (rows, joules_keys, row_items, domain_kinds, kind_positions, sources, keys, agent), built by
 * MeterAttributes: rows[i] = (in_total, is_measurement, update_period_s); joules_keys[i];
 * row_items[i] = ((key, value), ...), set with the domain's joules; kind_positions = ((key, position), ...);
 * sources = (measured, estimate, mixed); keys = (joules, watts, source, domain_kinds,
 * below_resolution, attributed, attributed_self, dynamic, dynamic_self, attribution, baseline);
 * agent = (standby positions, ((position, id), ...) of the agent's domains sorted by id, energy.agent.domains). */
PyObject *span_attributes(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 8 || !PyTuple_Check(args[1])
        || !PyTuple_Check(args[2]) || !PyTuple_Check(PyTuple_GET_ITEM(args[0], 7))
        || PyTuple_GET_SIZE(PyTuple_GET_ITEM(args[0], 7)) != 3) {
        PyErr_SetString(PyExc_TypeError, "span_attributes(spec: tuple, start: tuple, end: tuple, attribution)");
        return NULL;
    }
    PyObject *spec = args[0], *start = args[1], *end = args[2], *attribution = args[3];
    if (PyTuple_GET_SIZE(start) < 5 || PyTuple_GET_SIZE(end) < 5)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *rows = PyTuple_GET_ITEM(spec, 0), *joules_keys = PyTuple_GET_ITEM(spec, 1),
             *row_items = PyTuple_GET_ITEM(spec, 2), *domain_kinds = PyTuple_GET_ITEM(spec, 3),
             *kind_positions = PyTuple_GET_ITEM(spec, 4), *sources = PyTuple_GET_ITEM(spec, 5),
             *keys = PyTuple_GET_ITEM(spec, 6), *agent = PyTuple_GET_ITEM(spec, 7);
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
    char left_out[64] = {0};
    if (count > 64)
        Py_RETURN_NOTIMPLEMENTED;
    int agent_case = leave_out_standby(agent, start, end, count, left_out);
    if (agent_case != 0) {
        if (agent_case < 0)
            return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *a = PyTuple_GET_ITEM(a_joules, i), *b = PyTuple_GET_ITEM(b_joules, i);
        if (left_out[i] || a == Py_None || b == Py_None)
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
            if (left_out[i] || PyTuple_GET_ITEM(a_joules, i) == Py_None || PyTuple_GET_ITEM(b_joules, i) == Py_None)
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
        if (set_agent_domains(attributes, agent, a_joules, b_joules, left_out, count) < 0)
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
