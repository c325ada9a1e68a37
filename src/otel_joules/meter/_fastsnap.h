/* What _fastsnap.c and _fastsnap_snapshot.c share: the counter loop and the meter's snapshot. */
#ifndef OTEL_JOULES_FASTSNAP_H
#define OTEL_JOULES_FASTSNAP_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* read_counters(states, now_ns) -> (values, failing, away): the meter's counter loop (_fastsnap.c). */
PyObject *read_counters(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* snapshot(meter, *args, **kwargs) -> EnergySnapshot: EnergyMeter.snapshot (_fastsnap_snapshot.c). */
PyObject *meter_snapshot(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* Interns the names meter_snapshot reads: 0, or -1 with the exception set. */
int snapshot_names(void);

#endif
