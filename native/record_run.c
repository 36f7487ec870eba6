/* native.record_run: Producer.send()'s per-record path, in C.
 *
 * Measured reason (perf/README.md, bench_ipc.py's "send()" cells): in Python one send() of a
 * plain bytes value cost ~514 ns on CPython 3.11 (the call ~57, its future ~140, the run's lock
 * ~100, the clock ~90), so value-by-value sending stayed near 1.5 M records/s however the
 * transport was built. Here the same steps cost one C call.
 *
 * What it holds:
 *   Run           the open run of one partition: plain values sent one by one that go out as one
 *                 batch (the values, their CreateTime stamps and cumulative lengths, the room
 *                 left). appliance/client/producer.py's slow path and sender thread own its
 *                 life cycle; only Send.send's fast path and Run.add append to it.
 *   RecordFuture  one record's future: a RunFuture and the record's index in it.
 *   Send          the base class of appliance.client.Producer: its send() method takes the fast
 *                 path and hands everything else to Producer._send_slow.
 *
 * Why no lock: the fast path runs under the GIL from its check to its append without running
 * Python code or allocating a garbage-collected object (the collector could run finalizers,
 * i.e. Python code, i.e. a switch of threads), so no Python thread sees it half done. The Python
 * code that changes a run under Producer._run_lock closes the fast path first (``cap`` to 0 or
 * -1, one attribute store) and uses Run.add to append, so the fast path never sees it half done
 * either.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <time.h>

/* producer.RECORD_OVERHEAD: estimated bytes per record beyond its value (kept equal by a test) */
#define RECORD_OVERHEAD 16

static int64_t now_ms(void) {
    /* time.time() reads the same clock; int(time.time() * 1000) truncates the same way */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ Run */

typedef struct {
    PyObject_HEAD
    PyObject *values;   /* list of bytes */
    int64_t *stamps;    /* CreateTime (ms) per value */
    int64_t *ends;      /* cumulative value lengths: value k is buf[ends[k-1]:ends[k]] */
    Py_ssize_t room;    /* entries allocated in stamps and ends */
    Py_ssize_t left;    /* estimated batch bytes still free */
    Py_ssize_t cap;     /* the fast path takes value i while i < cap; 0 or -1 closes it */
    Py_ssize_t reserved;
    char open;
    PyObject *future;   /* the run's RunFuture */
    PyObject *keys;     /* its entries in Producer._fast */
} RunObject;

static PyTypeObject RunType;

static int run_grow(RunObject *r, Py_ssize_t need) {
    /* PyMem_Realloc: not a garbage-collected allocation, so safe inside the fast path */
    if (need <= r->room)
        return 0;
    Py_ssize_t room = r->room ? r->room * 2 : 256;
    while (room < need)
        room *= 2;
    int64_t *s = PyMem_Realloc(r->stamps, room * sizeof(int64_t));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    r->stamps = s;
    int64_t *e = PyMem_Realloc(r->ends, room * sizeof(int64_t));
    if (e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    r->ends = e;
    r->room = room;
    return 0;
}

/* Append one value: the caller has checked room and cap. Returns its index, -1 on error. */
static Py_ssize_t run_append(RunObject *r, PyObject *value, Py_ssize_t size) {
    Py_ssize_t i = PyList_GET_SIZE(r->values);
    if (run_grow(r, i + 1) < 0 || PyList_Append(r->values, value) < 0)
        return -1;
    r->stamps[i] = now_ms();
    r->ends[i] = (i ? r->ends[i - 1] : 0) + PyBytes_GET_SIZE(value);
    r->left -= size;
    return i;
}

static PyObject *run_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"left", "future", NULL};
    Py_ssize_t left;
    PyObject *future;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "nO:Run", names, &left, &future))
        return NULL;
    RunObject *r = (RunObject *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    r->values = PyList_New(0);
    r->keys = PyList_New(0);
    if (r->values == NULL || r->keys == NULL) {
        Py_DECREF(r);
        return NULL;
    }
    Py_INCREF(future);
    r->future = future;
    r->left = left;
    r->open = 1;
    return (PyObject *)r;
}

static int run_traverse(RunObject *r, visitproc visit, void *arg) {
    Py_VISIT(r->values);
    Py_VISIT(r->future);
    Py_VISIT(r->keys);
    return 0;
}

static int run_clear(RunObject *r) {
    Py_CLEAR(r->values);
    Py_CLEAR(r->future);
    Py_CLEAR(r->keys);
    return 0;
}

static void run_dealloc(RunObject *r) {
    PyObject_GC_UnTrack(r);
    run_clear(r);
    PyMem_Free(r->stamps);
    PyMem_Free(r->ends);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *run_add(RunObject *r, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "Run.add(value: bytes, size: int)");
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t i = run_append(r, args[0], size);
    return i < 0 ? NULL : PyLong_FromSsize_t(i);
}

static PyObject *run_take(RunObject *r, PyObject *unused) {
    /* The run's values, their value-end offsets (int64, a leading 0) and their stamps (int64
     * ms) as bytes; the run keeps none of them (its futures keep the run, not its values). */
    Py_ssize_t n = PyList_GET_SIZE(r->values);
    PyObject *ends = PyBytes_FromStringAndSize(NULL, (n + 1) * sizeof(int64_t));
    PyObject *stamps = PyBytes_FromStringAndSize(NULL, n * sizeof(int64_t));
    PyObject *fresh = PyList_New(0);
    if (ends == NULL || stamps == NULL || fresh == NULL) {
        Py_XDECREF(ends);
        Py_XDECREF(stamps);
        Py_XDECREF(fresh);
        return NULL;
    }
    int64_t *e = (int64_t *)PyBytes_AS_STRING(ends);
    e[0] = 0;
    if (n) {
        memcpy(e + 1, r->ends, n * sizeof(int64_t));
        memcpy(PyBytes_AS_STRING(stamps), r->stamps, n * sizeof(int64_t));
    }
    PyObject *values = r->values;
    r->values = fresh;
    PyObject *out = PyTuple_Pack(3, values, ends, stamps);
    Py_DECREF(values);
    Py_DECREF(ends);
    Py_DECREF(stamps);
    return out;
}

static PyMethodDef run_methods[] = {
    {"add", (PyCFunction)(void (*)(void))run_add, METH_FASTCALL,
     "add(value, size) -> index: append a value stamped now, ``size`` (its estimated bytes) off "
     "``left``. The slow path's append, under the producer's run lock."},
    {"take", (PyCFunction)run_take, METH_NOARGS,
     "take() -> (values, ends, stamps): empty the run; ends and stamps are int64 bytes."},
    {NULL},
};

static PyMemberDef run_members[] = {
    {"values", T_OBJECT_EX, offsetof(RunObject, values), READONLY, "the values (list of bytes)"},
    {"left", T_PYSSIZET, offsetof(RunObject, left), 0, "estimated batch bytes still free"},
    {"cap", T_PYSSIZET, offsetof(RunObject, cap), 0,
     "the fast path takes value i while i < cap (the slots reserved); 0 or -1 closes it"},
    {"reserved", T_PYSSIZET, offsetof(RunObject, reserved), 0,
     "records counted in Producer._queued for this run (used or not)"},
    {"open", T_BOOL, offsetof(RunObject, open), 0, "more records may join"},
    {"future", T_OBJECT_EX, offsetof(RunObject, future), READONLY, "the run's RunFuture"},
    {"keys", T_OBJECT_EX, offsetof(RunObject, keys), READONLY, "its entries in Producer._fast"},
    {NULL},
};

static PyTypeObject RunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "native.record_run.Run",
    .tp_basicsize = sizeof(RunObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Run(left, future): the open run of one partition (see the module docstring).",
    .tp_new = run_new,
    .tp_traverse = (traverseproc)run_traverse,
    .tp_clear = (inquiry)run_clear,
    .tp_dealloc = (destructor)run_dealloc,
    .tp_methods = run_methods,
    .tp_members = run_members,
};

/* ------------------------------------------------------------------ RecordFuture */

/* Not tracked by the cycle collector, so that a caller keeping millions of them does not make
 * the collector walk them all (measured: kept futures halved send()'s rate). It holds one
 * RunFuture; the only cycle through it, a callback that keeps its future, ends when the run
 * completes, which drops its callbacks (successfully, with an error, or at close). */
typedef struct {
    PyObject_HEAD
    PyObject *run;  /* RunFuture */
    Py_ssize_t i;
} RecordFutureObject;

static PyTypeObject RecordFutureType;

static PyObject *record_future_make(PyObject *run, Py_ssize_t i) {
    RecordFutureObject *f = PyObject_New(RecordFutureObject, &RecordFutureType);
    if (f == NULL)
        return NULL;
    Py_INCREF(run);
    f->run = run;
    f->i = i;
    return (PyObject *)f;
}

static PyObject *rf_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"run", "i", NULL};
    PyObject *run;
    Py_ssize_t i;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On:RecordFuture", names, &run, &i))
        return NULL;
    return record_future_make(run, i);
}

static void rf_dealloc(RecordFutureObject *f) {
    Py_XDECREF(f->run);
    PyObject_Free(f);
}

static PyObject *str_done, *str_record_result, *str_exception, *str_add_record_callback;
static PyObject *str_partition, *str_timeout, *str_send_slow;

static PyObject *rf_done(RecordFutureObject *f, PyObject *unused) {
    return PyObject_CallMethodNoArgs(f->run, str_done);
}

static PyObject *rf_result(RecordFutureObject *f, PyObject *args, PyObject *kw) {
    static char *names[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:result", names, &timeout))
        return NULL;
    PyObject *i = PyLong_FromSsize_t(f->i);
    if (i == NULL)
        return NULL;
    PyObject *out = PyObject_CallMethodObjArgs(f->run, str_record_result, i, timeout, NULL);
    Py_DECREF(i);
    return out;
}

static PyObject *rf_exception(RecordFutureObject *f, PyObject *args, PyObject *kw) {
    static char *names[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:exception", names, &timeout))
        return NULL;
    return PyObject_CallMethodOneArg(f->run, str_exception, timeout);
}

static PyObject *rf_add_callback(RecordFutureObject *f, PyObject *fn) {
    PyObject *i = PyLong_FromSsize_t(f->i);
    if (i == NULL)
        return NULL;
    PyObject *out = PyObject_CallMethodObjArgs(f->run, str_add_record_callback, i, fn, NULL);
    Py_DECREF(i);
    return out;
}

static PyMethodDef rf_methods[] = {
    {"done", (PyCFunction)rf_done, METH_NOARGS, "done() -> bool: acknowledged or failed"},
    {"result", (PyCFunction)(void (*)(void))rf_result, METH_VARARGS | METH_KEYWORDS,
     "result(timeout=None) -> RecordMetadata; raises the delivery error, or "
     "KafkaConnectionError if not done within ``timeout`` s"},
    {"exception", (PyCFunction)(void (*)(void))rf_exception, METH_VARARGS | METH_KEYWORDS,
     "exception(timeout=None) -> the delivery error or None"},
    {"add_callback", (PyCFunction)rf_add_callback, METH_O,
     "add_callback(fn): fn(metadata, error) once done (at once if it already is); runs in the "
     "completing thread"},
    {NULL},
};

static PyMemberDef rf_members[] = {
    {"_run", T_OBJECT_EX, offsetof(RecordFutureObject, run), READONLY, "the run's RunFuture"},
    {"_i", T_PYSSIZET, offsetof(RecordFutureObject, i), READONLY, "the record's index in its run"},
    {NULL},
};

static PyTypeObject RecordFutureType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "native.record_run.RecordFuture",
    .tp_basicsize = sizeof(RecordFutureObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RecordFuture(run, i): record i of a RunFuture; the ProducerFuture interface "
              "(done, result, exception, add_callback), nothing to complete per record.",
    .tp_new = rf_new,
    .tp_dealloc = (destructor)rf_dealloc,
    .tp_methods = rf_methods,
    .tp_members = rf_members,
};

/* ------------------------------------------------------------------ Send */

typedef struct {
    PyObject_HEAD
    PyObject *fast;  /* Producer._fast: (topic, partition as given) -> open Run */
} SendObject;

static int send_traverse(SendObject *s, visitproc visit, void *arg) {
    Py_VISIT(s->fast);
    return 0;
}

static int send_clear(SendObject *s) {
    Py_CLEAR(s->fast);
    return 0;
}

static void send_dealloc(SendObject *s) {
    PyObject_GC_UnTrack(s);
    send_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *send_slow(SendObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    /* self._send_slow(*args, **kw), the arguments passed on as they came */
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    /* stack[0] is scratch: PY_VECTORCALL_ARGUMENTS_OFFSET lets the callee use args[-1] */
    PyObject *stack[9];
    if (nargs + nkw + 1 > 8) {
        PyObject *meth = PyObject_GetAttr((PyObject *)self, str_send_slow);
        if (meth == NULL)
            return NULL;
        PyObject *out = PyObject_Vectorcall(meth, args, nargs, kwnames);
        Py_DECREF(meth);
        return out;
    }
    stack[1] = (PyObject *)self;
    for (Py_ssize_t k = 0; k < nargs + nkw; k++)
        stack[k + 2] = args[k];
    return PyObject_VectorcallMethod(str_send_slow, stack + 1,
                                     (nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
}

static PyObject *send_send(SendObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *partition = Py_None;
    if (nargs != 2 || self->fast == NULL || !PyDict_CheckExact(self->fast)
        || PyDict_GET_SIZE(self->fast) == 0)
        return send_slow(self, args, nargs, kwnames);
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nkw; k++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, k);
            if (name == str_partition)
                partition = args[nargs + k];
            else if (name != str_timeout)  /* timeout matters to sync producers only: no runs */
                return send_slow(self, args, nargs, kwnames);
        }
    }
    PyObject *topic = args[0], *record = args[1];
    /* exact types only: a subclass's __hash__ or __eq__ would be Python code in the dict look-up */
    if (!PyBytes_CheckExact(record) || !PyUnicode_CheckExact(topic)
        || !(partition == Py_None || PyLong_CheckExact(partition)))
        return send_slow(self, args, nargs, kwnames);
    /* Allocations that may run the collector come first, before the check and the append. */
    PyObject *key = PyTuple_Pack(2, topic, partition);
    if (key == NULL)
        return NULL;
    PyObject *found = PyDict_GetItemWithError(self->fast, key);
    Py_DECREF(key);
    if (found == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return send_slow(self, args, nargs, kwnames);
    }
    if (!Py_IS_TYPE(found, &RunType))
        return send_slow(self, args, nargs, kwnames);
    RunObject *run = (RunObject *)found;
    Py_INCREF(run);
    PyObject *fut = record_future_make(run->future, 0);  /* not collected: cannot run the collector */
    if (fut == NULL) {
        Py_DECREF(run);
        return NULL;
    }
    /* From here to the append: no Python code, no collected allocation. */
    Py_ssize_t size = RECORD_OVERHEAD + PyBytes_GET_SIZE(record);
    Py_ssize_t i = PyList_GET_SIZE(run->values);
    if (run->left - size >= 0 && i < run->cap) {
        i = run_append(run, record, size);
        Py_DECREF(run);
        if (i < 0) {
            Py_DECREF(fut);
            return NULL;
        }
        ((RecordFutureObject *)fut)->i = i;
        return fut;
    }
    Py_DECREF(fut);
    Py_DECREF(run);
    return send_slow(self, args, nargs, kwnames);
}

static PyMethodDef send_methods[] = {
    {"send", (PyCFunction)(void (*)(void))send_send, METH_FASTCALL | METH_KEYWORDS,
     "send(topic, record, *, partition=None, timeout=None): see Producer._send_slow, which "
     "takes every call this fast path (a bytes value joining an open run) does not."},
    {NULL},
};

static PyMemberDef send_members[] = {
    {"_fast", T_OBJECT, offsetof(SendObject, fast), 0,
     "send()'s look-up: (topic, partition as given) -> the open Run its records join"},
    {NULL},
};

static PyTypeObject SendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "native.record_run.Send",
    .tp_basicsize = sizeof(SendObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Producer's base: send()'s fast path (see the module docstring).",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)send_traverse,
    .tp_clear = (inquiry)send_clear,
    .tp_dealloc = (destructor)send_dealloc,
    .tp_methods = send_methods,
    .tp_members = send_members,
};

/* ------------------------------------------------------------------ module */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "native.record_run",
    .m_doc = "Producer.send()'s per-record path in C: Run, RecordFuture, Send.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit_record_run(void) {
    if (!(str_done = PyUnicode_InternFromString("done"))
        || !(str_record_result = PyUnicode_InternFromString("record_result"))
        || !(str_exception = PyUnicode_InternFromString("exception"))
        || !(str_add_record_callback = PyUnicode_InternFromString("add_record_callback"))
        || !(str_partition = PyUnicode_InternFromString("partition"))
        || !(str_timeout = PyUnicode_InternFromString("timeout"))
        || !(str_send_slow = PyUnicode_InternFromString("_send_slow")))
        return NULL;
    if (PyType_Ready(&RunType) < 0 || PyType_Ready(&RecordFutureType) < 0 || PyType_Ready(&SendType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Run", (PyObject *)&RunType) < 0
        || PyModule_AddObjectRef(m, "RecordFuture", (PyObject *)&RecordFutureType) < 0
        || PyModule_AddObjectRef(m, "Send", (PyObject *)&SendType) < 0
        || PyModule_AddIntConstant(m, "RECORD_OVERHEAD", RECORD_OVERHEAD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
