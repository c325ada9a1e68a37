/* What the _fastsnap*.c files share: the counter loop, the meter's snapshot, an interval's two ends and a span's
 * attributes. */
#ifndef OTEL_JOULES_FASTSNAP_H
#define OTEL_JOULES_FASTSNAP_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The numbers of a channel state the counter loop reads and moves (_ChannelState's base where the extension is
 * built, _fastsnap_fields.c): C fields, so the loop reads them without an attribute lookup. */
typedef struct {
    PyObject_HEAD
    PyObject *reader, *failures, *fd, *shared, *wrap_uj, *last_raw_uj, *last_ns, *total_uj;
    Py_ssize_t shared_index;
    double jump_free_uj;
} ChannelFields;

/* 2**53: integers up to this convert to a double exactly, so a comparison with a float gives
 * Python's (exact) answer. */
#define EXACT_DOUBLE_INT 9007199254740992LL

extern PyTypeObject ChannelFieldsType;

/* total_uj / 1e6 as Python computes it (_fastsnap.c): a new reference, or NULL with the exception set. */
PyObject *joules_of(PyObject *total);

/* read_counters(states, now_ns) -> (values, failing, away): the meter's counter loop (_fastsnap.c). */
PyObject *read_counters(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* span_attributes(spec, start, end, attribution) -> dict | None | NotImplemented: MeterAttributes.span_attributes
 * (_fastsnap_attributes.c). */
PyObject *span_attributes(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* snapshot(meter, *args, **kwargs) -> EnergySnapshot: EnergyMeter.snapshot (_fastsnap_snapshot.c). */
PyObject *meter_snapshot(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* The Python method itself, for a case the compiled twin leaves to it: type(meter).<name>(meter, *args, **kwargs)
 * (_fastsnap_interval.c). */
PyObject *reference(PyObject *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* Interns the names meter_snapshot reads: 0, or -1 with the exception set. */
int snapshot_names(void);

/* The interval's two ends (_fastsnap_interval.c): EnergyMeter.open_interval and close_interval, the classes
 * and clock they use (bind_interval), and the names they read. */
PyObject *open_interval(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *close_interval(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *bind_interval(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
int interval_names(void);

#endif
