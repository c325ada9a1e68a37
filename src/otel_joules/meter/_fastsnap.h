/* What _fastsnap.c, _fastsnap_snapshot.c and _fastsnap_interval.c share: the counter loop, the meter's snapshot
 * and an interval's two ends. */
#ifndef OTEL_JOULES_FASTSNAP_H
#define OTEL_JOULES_FASTSNAP_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The numbers of a channel state the counter loop reads and moves (_ChannelState's base where the extension is
 * built, _fastsnap_fields.c): C fields, so the loop reads them without an attribute lookup. */
typedef struct {
    PyObject_HEAD
    PyObject *reader, *failures, *fd, *wrap_uj, *last_raw_uj, *last_ns, *total_uj;
    double jump_free_uj;
} ChannelFields;

extern PyTypeObject ChannelFieldsType;

/* read_counters(states, now_ns) -> (values, failing, away): the meter's counter loop (_fastsnap.c). */
PyObject *read_counters(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

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
