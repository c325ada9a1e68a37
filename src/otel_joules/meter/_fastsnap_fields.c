/* ChannelFields: the numbers of a channel state that the meter's counter loop reads and moves, as C fields.
 *
 * otel_joules.meter._channels._ChannelState is its subclass where the extension is built: the pure-Python
 * read policy reads and writes them as attributes (as its __slots__ were), the compiled loop
 * (_fastsnap.c) as struct fields.
 */
#include "_fastsnap.h"
#include <structmember.h>

static int fields_traverse(ChannelFields *self, visitproc visit, void *arg)
{
    Py_VISIT(self->reader);
    Py_VISIT(self->failures);
    Py_VISIT(self->fd);
    Py_VISIT(self->shared);
    Py_VISIT(self->wrap_uj);
    Py_VISIT(self->last_raw_uj);
    Py_VISIT(self->last_ns);
    Py_VISIT(self->total_uj);
    return 0;
}

static int fields_clear(ChannelFields *self)
{
    Py_CLEAR(self->reader);
    Py_CLEAR(self->failures);
    Py_CLEAR(self->fd);
    Py_CLEAR(self->shared);
    Py_CLEAR(self->wrap_uj);
    Py_CLEAR(self->last_raw_uj);
    Py_CLEAR(self->last_ns);
    Py_CLEAR(self->total_uj);
    return 0;
}

static void fields_dealloc(ChannelFields *self)
{
    PyObject_GC_UnTrack(self);
    fields_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define FIELD(name, doc) {#name, T_OBJECT_EX, offsetof(ChannelFields, name), 0, doc}
static PyMemberDef fields_members[] = {
    FIELD(reader, "The device's reader thread (None: read on the span path)."),
    FIELD(failures, "Consecutive failed reads (0: healthy)."),
    FIELD(fd, "The counter file's descriptor, read inline (None: read through the channel)."),
    FIELD(shared, "The source of a reading several channels share, read once per snapshot (None: not shared)."),
    {"shared_index", T_PYSSIZET, offsetof(ChannelFields, shared_index), 0, "This channel's position in that reading."},
    FIELD(wrap_uj, "Where the counter wraps (None: it cannot)."),
    FIELD(last_raw_uj, "The last good reading (None before the first)."),
    FIELD(last_ns, "monotonic_ns of the last good reading."),
    FIELD(total_uj, "Microjoules since the meter started, wrap-corrected."),
    {"jump_free_uj", T_DOUBLE, offsetof(ChannelFields, jump_free_uj), 0,
     "A forward move up to this fits the power bound whatever the time between the reads."},
    {NULL},
};

PyTypeObject ChannelFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "otel_joules.meter._fastsnap.ChannelFields",
    .tp_doc = "The numbers of a channel state the counter loop reads and moves, as C fields "
              "(otel_joules.meter._channels._ChannelState).",
    .tp_basicsize = sizeof(ChannelFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)fields_traverse,
    .tp_clear = (inquiry)fields_clear,
    .tp_dealloc = (destructor)fields_dealloc,
    .tp_members = fields_members,
};
