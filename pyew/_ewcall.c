/* pyew._ewcall: calls libew.so's entry points from Python without ctypes.

   A ctypes call converts each argument through its argtypes and goes through libffi; for a kernel
   launch that is most of the host time pyew adds. Every entry point of libew has a packed twin,
   `int <symbol>_packed(const ew_arg* args)`, generated from the same ABI table as the entry
   itself (generator/abi.py). bind() wraps one twin as a builtin function that converts its Python
   arguments into an ew_arg array by the entry's argument kinds and calls it, with the GIL released
   as ctypes would. Without this module (no Python headers at build time) pyew uses ctypes.

   It also reads other libraries' GPU arrays through DLPack's C exchange API (dlpack_view): the
   table of C functions a type offers as `__dlpack_c_exchange_api__` (PyTorch from 2.10) gives a
   tensor's pointer, dtype, shape and strides, and its library's current stream, without building
   a capsule or reading attributes one by one.

   And it replays a map op's planned calls (replayer, native): from a call's arguments to its
   launch in one C call, for the calls whose Python replay (pyew/call.py) it mirrors.

   Built against the stable ABI: one file serves every Python from 3.11 on. */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ew_api.h"

#define EWCALL_MAX_ARGS 32
#define EWCALL_CAPSULE "pyew._ewcall.bound"

typedef int (*packed_fn)(const ew_arg*);

/* One bound entry: owned by a capsule that is the builtin function's `self`, so it lives exactly
   as long as the function (the PyMethodDef included, which the function points into). */
typedef struct {
  PyMethodDef def;
  packed_fn fn;
  int nargs;
  char kinds[EWCALL_MAX_ARGS];
  char symbol[];
} bound;

static const char* kind_name(char k) {
  switch (k) {
    case 'p': return "an address (int)";
    case 'l': return "a 64-bit integer";
    case 'u': return "an unsigned 64-bit integer";
    case 'i': return "a 32-bit integer";
    case 'd': return "a float";
  }
  return "?";
}

/* Converts args[i] by its kind into a[i]; on failure sets an exception naming the symbol. */
static int convert(const bound* b, int i, PyObject* o, ew_arg* a) {
  const char k = b->kinds[i];
  switch (k) {
    case 'p':
      if (o == Py_None) {
        a->p = NULL;
        return 0;
      }
      if (!PyLong_Check(o)) break;
      a->p = PyLong_AsVoidPtr(o);
      if (a->p == NULL && PyErr_Occurred()) return -1;
      return 0;
    case 'l':
      a->i = PyLong_AsLongLong(o);
      if (a->i == -1 && PyErr_Occurred()) break;
      return 0;
    case 'u':
      if (!PyLong_Check(o)) break;
      a->u = PyLong_AsUnsignedLongLong(o);
      if (a->u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
      return 0;
    case 'i': {
      const long v = PyLong_AsLong(o);
      if (v == -1 && PyErr_Occurred()) break;
      if (v < INT_MIN || v > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s: argument %d is %ld, outside a 32-bit int", b->symbol, i, v);
        return -1;
      }
      a->i = v;
      return 0;
    }
    case 'd':
      a->f = PyFloat_AsDouble(o);
      if (a->f == -1.0 && PyErr_Occurred()) break;
      return 0;
  }
  /* overflow of a 64-bit integer keeps its own message; anything else is the wrong type */
  if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
  PyErr_Clear();
  PyErr_Format(PyExc_TypeError, "%s: argument %d must be %s", b->symbol, i, kind_name(k));
  return -1;
}

static PyObject* call_bound(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  const bound* b = (const bound*)PyCapsule_GetPointer(self, EWCALL_CAPSULE);
  if (b == NULL) return NULL;
  if (nargs != b->nargs) {
    PyErr_Format(PyExc_TypeError, "%s takes %d arguments (%zd given)", b->symbol, b->nargs, nargs);
    return NULL;
  }
  ew_arg a[EWCALL_MAX_ARGS];
  for (int i = 0; i < b->nargs; ++i)
    if (convert(b, i, args[i], &a[i]) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS  /* a launch can block while the GPU's queue is full */
  rc = b->fn(a);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(rc);
}

static void free_bound(PyObject* capsule) {
  free(PyCapsule_GetPointer(capsule, EWCALL_CAPSULE));
}

/* The builtin function of `def` whose self is `capsule` (which owns def's memory), or NULL where
   either is NULL; the function holds the only reference to the capsule. */
static PyObject* function_of(PyMethodDef* def, PyObject* capsule) {
  if (capsule == NULL) return NULL;
  PyObject* fn = PyCFunction_NewEx(def, capsule, NULL);
  Py_DECREF(capsule);
  return fn;
}

PyDoc_STRVAR(bind_doc,
"bind(address, kinds, symbol) -> function\n\n"
"The packed entry point at `address` as a function of len(kinds) arguments, each converted by its\n"
"kind: p an address (int or None), l int64, u uint64, i int32, d double. Returns the entry's int.");

static PyObject* bind(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "bind(address, kinds, symbol) takes 3 arguments");
    return NULL;
  }
  void* address = PyLong_AsVoidPtr(args[0]);
  if (address == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bind: the address is NULL");
    return NULL;
  }
  Py_ssize_t nk, ns;
  const char* kinds = PyUnicode_AsUTF8AndSize(args[1], &nk);
  if (kinds == NULL) return NULL;
  const char* symbol = PyUnicode_AsUTF8AndSize(args[2], &ns);
  if (symbol == NULL) return NULL;
  if (nk > EWCALL_MAX_ARGS) {
    PyErr_Format(PyExc_ValueError, "bind: %s has %zd arguments, at most %d are supported", symbol, nk,
                 EWCALL_MAX_ARGS);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < nk; ++i) {
    if (!strchr("pluid", kinds[i]) || kinds[i] == '\0') {
      PyErr_Format(PyExc_ValueError, "bind: %s: unknown argument kind %R (kinds are p, l, u, i, d)", symbol,
                   args[1]);
      return NULL;
    }
  }
  bound* b = (bound*)calloc(1, sizeof(bound) + (size_t)ns + 1);
  if (b == NULL) return PyErr_NoMemory();
  memcpy(b->kinds, kinds, (size_t)nk);
  memcpy(b->symbol, symbol, (size_t)ns + 1);
  b->nargs = (int)nk;
  b->fn = (packed_fn)address;
  b->def.ml_name = b->symbol;
  b->def.ml_meth = (PyCFunction)(void (*)(void))call_bound;
  b->def.ml_flags = METH_FASTCALL;
  b->def.ml_doc = NULL;
  PyObject* capsule = PyCapsule_New(b, EWCALL_CAPSULE, free_bound);
  if (capsule == NULL) free(b);
  return function_of(&b->def, capsule);
}

/* ---- DLPack's C exchange API (dlpack.h, version 1): the layouts this module reads ---------------- */

#define DL_EXCHANGE_CAPSULE "dlpack_exchange_api"

typedef struct {
  int32_t device_type;
  int32_t device_id;
} dl_device;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} dl_dtype;

typedef struct {
  void* data;
  dl_device device;
  int32_t ndim;
  dl_dtype dtype;
  int64_t* shape;
  int64_t* strides; /* in elements; NULL: C-contiguous */
  uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
  uint32_t major, minor;
  void* manager_ctx;
  void (*deleter)(struct dl_managed*);
  uint64_t flags;
  dl_tensor tensor;
} dl_managed;

typedef struct dl_exchange_header {
  uint32_t major, minor;
  struct dl_exchange_header* prev_api;
} dl_exchange_header;

typedef struct {
  dl_exchange_header header;
  void* managed_tensor_allocator;
  int (*managed_tensor_from_py_object_no_sync)(void* obj, dl_managed** out);
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* obj, dl_tensor* out); /* may be NULL */
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** stream);
} dl_exchange_api;

enum { kDLCUDA = 2, kDLCUDAManaged = 13 };

static const dl_exchange_api* exchange_api(PyObject* capsule) {
  const dl_exchange_api* api = (const dl_exchange_api*)PyCapsule_GetPointer(capsule, DL_EXCHANGE_CAPSULE);
  if (api != NULL && api->header.major != 1) {
    PyErr_Format(PyExc_ValueError, "DLPack exchange API of major version %u; pyew reads version 1",
                 (unsigned)api->header.major);
    return NULL;
  }
  return api;
}

/* A producer that failed must have set an exception; one that did not gets one here. */
static PyObject* producer_failed(const char* what) {
  if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "DLPack exchange API: %s failed", what);
  return NULL;
}

PyDoc_STRVAR(dlpack_version_doc,
"dlpack_version(api) -> (major, minor)\n\n"
"The version of a DLPack exchange API capsule (a type's __dlpack_c_exchange_api__); ValueError for\n"
"a major version other than 1.");

static PyObject* dlpack_version(PyObject* module, PyObject* capsule) {
  (void)module;
  const dl_exchange_api* api = exchange_api(capsule);
  if (api == NULL) return NULL;
  /* dlpack.h requires all three; dlpack_view calls the managed-tensor one for every type but torch */
  if (api->current_work_stream == NULL || api->dltensor_from_py_object_no_sync == NULL ||
      api->managed_tensor_from_py_object_no_sync == NULL) {
    PyErr_SetString(PyExc_ValueError, "DLPack exchange API without its tensor exports or its current-stream function");
    return NULL;
  }
  return Py_BuildValue("(kk)", (unsigned long)api->header.major, (unsigned long)api->header.minor);
}

/* The tuple dlpack_view returns, from a tensor the producer filled in. */
static PyObject* view_of(const dl_exchange_api* api, const dl_tensor* t, int read_only) {
  const int nd = t->ndim;
  if (nd < 0 || (nd > 0 && t->shape == NULL)) {
    PyErr_Format(PyExc_ValueError, "DLPack exchange API: a tensor of %d dims without a shape", nd);
    return NULL;
  }
  int contiguous = 1;
  int64_t want = 1, size = 1;
  for (int i = nd - 1; i >= 0; --i) {
    const int64_t n = t->shape[i];
    if (t->strides != NULL && n != 1 && t->strides[i] != want) contiguous = 0;
    want *= n;
    size *= n;
  }
  if (size == 0) contiguous = 1; /* no element to misplace */
  void* stream = NULL;
  if (t->device.device_type == kDLCUDA || t->device.device_type == kDLCUDAManaged) {
    if (api->current_work_stream(t->device.device_type, t->device.device_id, &stream) != 0)
      return producer_failed("current_work_stream");
  }
  PyObject* shape = PyTuple_New(nd);
  if (shape == NULL) return NULL;
  for (int i = 0; i < nd; ++i) {
    PyObject* v = PyLong_FromLongLong(t->shape[i]);
    if (v == NULL) {
      Py_DECREF(shape);
      return NULL;
    }
    PyTuple_SetItem(shape, i, v);
  }
  const long dtype = (long)t->dtype.code | ((long)t->dtype.bits << 8) | ((long)t->dtype.lanes << 16);
  PyObject* items[8] = {
      PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)t->data + t->byte_offset),
      PyLong_FromLong(t->device.device_type),
      PyLong_FromLong(t->device.device_id),
      PyLong_FromLong(dtype),
      shape,
      PyBool_FromLong(contiguous),
      PyLong_FromVoidPtr(stream),
      PyBool_FromLong(read_only),
  };
  PyObject* out = PyTuple_New(8);
  for (int i = 0; i < 8; ++i) {
    if (out == NULL || items[i] == NULL) {
      for (int j = i; j < 8; ++j) Py_XDECREF(items[j]);
      Py_XDECREF(out);
      return NULL;
    }
    PyTuple_SetItem(out, i, items[i]);
  }
  return out;
}

PyDoc_STRVAR(dlpack_view_doc,
"dlpack_view(api, obj, owned) -> (address, device_type, device_id, dtype, shape, contiguous, stream,\n"
"read_only)\n\n"
"What `obj` holds, through its type's DLPack exchange API capsule `api`, without a copy or a\n"
"stream sync: the data's address (byte offset included), its DLPack device, its dtype as\n"
"code | bits << 8 | lanes << 16, its shape, whether it is C-contiguous, the producer's current\n"
"stream on that device (0 off the GPU or for the default stream), and whether it is read-only.\n"
"owned: read it as a managed tensor, which carries the read-only flag (the plain tensor the API\n"
"also offers, where it does, is faster and has no flags: read_only is then False).");

static PyObject* dlpack_view(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "dlpack_view(api, obj, owned) takes 3 arguments");
    return NULL;
  }
  const dl_exchange_api* api = exchange_api(args[0]);
  if (api == NULL) return NULL;
  const int owned = PyObject_IsTrue(args[2]);
  if (owned < 0) return NULL;
  if (!owned && api->dltensor_from_py_object_no_sync != NULL) {
    dl_tensor t;
    memset(&t, 0, sizeof t);
    if (api->dltensor_from_py_object_no_sync(args[1], &t) != 0) return producer_failed("dltensor_from_py_object");
    return view_of(api, &t, 0);
  }
  if (api->managed_tensor_from_py_object_no_sync == NULL) {
    PyErr_SetString(PyExc_ValueError, "DLPack exchange API without managed_tensor_from_py_object_no_sync");
    return NULL;
  }
  dl_managed* m = NULL;
  if (api->managed_tensor_from_py_object_no_sync(args[1], &m) != 0 || m == NULL)
    return producer_failed("managed_tensor_from_py_object");
  PyObject* out = m->major == 1 ? view_of(api, &m->tensor, (int)(m->flags & 1))
                                : PyErr_Format(PyExc_ValueError, "DLPack tensor of major version %u", m->major);
  if (m->deleter != NULL) m->deleter(m);
  return out;
}

/* ---- plans replayed in C -----------------------------------------------------------------------

   A planned call (pyew/call.py's Plan) of the common kinds is replayed here, from the arguments to
   the launch, one C call instead of the Python frames of the key, the lookup, the replay and the
   launch. The plan is the same object the Python replay runs (its key is built the same way, so
   either finds a plan the other made); a plan carries `native`, made once by native(), which says
   where each argument of its entry comes from. Anything this code does not handle (keywords, an
   operand it cannot read here, a plan without `native`, a foreign array that needs a stream wait,
   a number the plan's numbers() refuses) makes it return None before anything is allocated or
   launched, and the Python path runs the call; so does an entry's declining return code (a
   formula's kernel still to compile), after the result was allocated but before any launch. */

#define EWCALL_NATIVE "pyew._ewcall.native"
#define EWCALL_REPLAYER "pyew._ewcall.replayer"

/* where a slot of the entry's arguments comes from */
enum { SRC_OUT = 'o', SRC_ARG = 'a', SRC_NUM = 'n', SRC_CONST = 'c', SRC_STREAM = 's', SRC_DIM = 'd', SRC_ARRAYS = 'A' };

/* One way of calling the entry: each argument's source, index, byte offset and constant. */
typedef struct {
  char src[EWCALL_MAX_ARGS];
  int idx[EWCALL_MAX_ARGS];
  int64_t off[EWCALL_MAX_ARGS]; /* bytes added to an address */
  ew_arg value[EWCALL_MAX_ARGS];
} native_form;

#define EWCALL_MAX_PARTS 2

typedef struct {
  PyObject* entry; /* the bound entry: a builtin whose self is the capsule of `b` */
  const bound* b;
  PyObject* shape; /* the result's shape, dtype row and element count, as DeviceArray.new takes them */
  PyObject* info;
  PyObject* size;
  int64_t n;
  int numbers; /* whether a slot takes a number (the plan's numbers() gives their addresses) */
  int declines; /* whether `decline_rc` from the entry means "not launched: leave the call to Python" */
  int decline_rc;
  int nparts;  /* launches that replace `whole` where every address in `aligned` is a multiple of 16 */
  uint32_t aligned;
  native_form whole, part[EWCALL_MAX_PARTS];
} native_plan;

static void release_native(native_plan* p) {
  if (p == NULL) return;
  Py_XDECREF(p->entry);
  Py_XDECREF(p->shape);
  Py_XDECREF(p->info);
  Py_XDECREF(p->size);
  free(p);
}

static void free_native(PyObject* capsule) {
  release_native((native_plan*)PyCapsule_GetPointer(capsule, EWCALL_NATIVE));
}

PyDoc_STRVAR(native_doc,
"native(entry, slots, shape, info, size, parts=(), aligned=(), declines=None) -> capsule\n\n"
"How a plan's entry is called in C: entry is a function bind() made; slots gives each of its\n"
"arguments as (source, value) or (source, value, byte_offset): ('o', 0) the result's address,\n"
"('a', i) the address of array argument i, ('n', j) the plan's j-th number, ('c', v) the\n"
"constant v (converted by the argument's kind), ('s', 0) the stream's handle, ('d', k) the\n"
"stream's k-th launch dimension, ('A', 0) the address of an array holding the addresses of the\n"
"call's array arguments in order (its numbers skipped). shape, info and size are the result's, as\n"
"DeviceArray.new takes them. parts: other slot lists, launched in turn instead of slots where every\n"
"address at the slot indices `aligned` is a multiple of 16 (a call split into whole 16-byte packs\n"
"and the rest). declines: a return code of the entry that means it launched nothing and the call\n"
"goes to Python (a kernel still to compile), where it is not parts' second launch.\n"
"TypeError for an entry bind() did not make; ValueError for slots that do not fit its arguments.");

/* Reads one slot list into f; -1 with an exception where it does not fit the entry. */
static int read_form(const bound* b, PyObject* given, native_form* f, int* numbers) {
  PyObject* slots = PySequence_Tuple(given);
  if (slots == NULL) return -1;
  const Py_ssize_t ns = PyTuple_Size(slots);
  if (ns != b->nargs) {
    PyErr_Format(PyExc_ValueError, "native: %s takes %d arguments, %zd slots given", b->symbol, b->nargs, ns);
    goto fail;
  }
  for (Py_ssize_t i = 0; i < ns; ++i) {
    PyObject* slot = PyTuple_GetItem(slots, i);
    const Py_ssize_t len = slot != NULL && PyTuple_Check(slot) ? PyTuple_Size(slot) : 0;
    if (len != 2 && len != 3) {
      PyErr_Format(PyExc_ValueError, "native: %s: slot %zd is not a (source, value[, offset]) tuple", b->symbol, i);
      goto fail;
    }
    PyObject* kind = PyTuple_GetItem(slot, 0);
    PyObject* value = PyTuple_GetItem(slot, 1);
    Py_ssize_t klen;
    const char* k = PyUnicode_Check(kind) ? PyUnicode_AsUTF8AndSize(kind, &klen) : NULL;
    if (k == NULL || klen != 1 || !strchr("oancsdA", k[0])) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "native: %s: slot %zd has an unknown source %R", b->symbol, i, kind);
      goto fail;
    }
    f->src[i] = k[0];
    if (k[0] == SRC_CONST) {
      if (convert(b, (int)i, value, &f->value[i]) < 0) goto fail;
      continue;
    }
    const long v = PyLong_AsLong(value);
    if (v == -1 && PyErr_Occurred()) goto fail;
    /* an address goes where the entry takes one; a launch dimension where it takes an int */
    const char want = k[0] == SRC_DIM ? 'i' : 'p';
    if (b->kinds[i] != want || v < 0 || v >= EWCALL_MAX_ARGS || (k[0] == SRC_DIM && v > 1) ||
        (k[0] == SRC_ARRAYS && v != 0)) {
      PyErr_Format(PyExc_ValueError, "native: %s: slot %zd (%s, %ld) does not fit argument kind %c", b->symbol, i,
                   k, v, b->kinds[i]);
      goto fail;
    }
    f->idx[i] = (int)v;
    if (len == 3) {
      f->off[i] = PyLong_AsLongLong(PyTuple_GetItem(slot, 2));
      if (f->off[i] == -1 && PyErr_Occurred()) goto fail;
    }
    if (k[0] == SRC_NUM) *numbers = 1;
  }
  Py_DECREF(slots);
  return 0;
fail:
  Py_DECREF(slots);
  return -1;
}

static PyObject* native(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 5 && nargs != 7 && nargs != 8) {
    PyErr_SetString(PyExc_TypeError, "native(entry, slots, shape, info, size, parts=(), aligned=(), declines=None) "
                                     "takes 5, 7 or 8 arguments");
    return NULL;
  }
  PyObject* self = PyCFunction_Check(args[0]) ? PyCFunction_GetSelf(args[0]) : NULL;
  if (self == NULL || !PyCapsule_IsValid(self, EWCALL_CAPSULE)) {
    PyErr_SetString(PyExc_TypeError, "native: the entry is not a function bind() made");
    return NULL;
  }
  const bound* b = (const bound*)PyCapsule_GetPointer(self, EWCALL_CAPSULE);
  const int64_t n = PyLong_AsLongLong(args[4]);
  if (n == -1 && PyErr_Occurred()) return NULL;
  PyObject *parts = NULL, *aligned = NULL;
  native_plan* p = (native_plan*)calloc(1, sizeof(native_plan));
  if (p == NULL) return PyErr_NoMemory();
  if (read_form(b, args[1], &p->whole, &p->numbers) < 0) goto fail;
  if (nargs == 8 && args[7] != Py_None) {
    const long rc = PyLong_AsLong(args[7]);
    if (rc == -1 && PyErr_Occurred()) goto fail;
    if (rc == 0 || rc < INT_MIN || rc > INT_MAX) {
      PyErr_Format(PyExc_ValueError, "native: %s: declines=%ld is not a failure code", b->symbol, rc);
      goto fail;
    }
    p->declines = 1;
    p->decline_rc = (int)rc;
  }
  if (nargs >= 7) {
    if ((parts = PySequence_Tuple(args[5])) == NULL || (aligned = PySequence_Tuple(args[6])) == NULL) goto fail;
    if (PyTuple_Size(parts) > EWCALL_MAX_PARTS) {
      PyErr_Format(PyExc_ValueError, "native: at most %d parts", EWCALL_MAX_PARTS);
      goto fail;
    }
    p->nparts = (int)PyTuple_Size(parts);
    for (int i = 0; i < p->nparts; ++i)
      if (read_form(b, PyTuple_GetItem(parts, i), &p->part[i], &p->numbers) < 0) goto fail;
    for (Py_ssize_t i = 0; i < PyTuple_Size(aligned); ++i) {
      const long at = PyLong_AsLong(PyTuple_GetItem(aligned, i));
      if (at == -1 && PyErr_Occurred()) goto fail;
      if (at < 0 || at >= b->nargs || b->kinds[at] != 'p') {
        PyErr_Format(PyExc_ValueError, "native: %s: aligned slot %ld is not an address", b->symbol, at);
        goto fail;
      }
      p->aligned |= 1u << at;
    }
  }
  Py_XDECREF(parts);
  Py_XDECREF(aligned);
  p->b = b;
  p->n = n;
  p->entry = Py_NewRef(args[0]);
  p->shape = Py_NewRef(args[2]);
  p->info = Py_NewRef(args[3]);
  p->size = Py_NewRef(args[4]);
  PyObject* capsule = PyCapsule_New(p, EWCALL_NATIVE, free_native);
  if (capsule == NULL) release_native(p);
  return capsule;
fail:
  Py_XDECREF(parts);
  Py_XDECREF(aligned);
  free(p);
  return NULL;
}

/* One op's replayer: what it needs of pyew to read a call and make its result. */
typedef struct {
  PyMethodDef def;
  PyObject* target;     /* the op (plans must name it) */
  PyObject* target_id;  /* id(target): the head of its plans' keys */
  Py_ssize_t arity;
  PyObject* plans;      /* dict: key -> Plan */
  PyObject* stream_of;  /* stream_of() -> the call's stream, or None where this path must not run */
  PyObject* new_array;  /* new_array(shape, info, stream, size) -> DeviceArray */
  PyObject* array_type; /* DeviceArray */
  PyObject* exchange;   /* dict: type -> how it is read (read_foreign) */
  PyObject* dl_dtypes;  /* dict: DLPack dtype code -> dtype row, or None */
  PyObject* check;      /* check(rc, symbol) raises for a failed launch */
  PyObject* owner;      /* replays run while owner.launch is `launch`: calls go where launches go */
  PyObject* launch;
  PyObject* numbers;    /* frozenset of the number types a plan takes (call.NUMBERS) */
} replayer;

static PyObject *s_info, *s_shape, *s_ptr, *s_buf, *s_last, *s_read_on, *s_handle, *s_dims, *s_ordinal,
    *s_native, *s_target, *s_numbers, *s_requires_grad, *s_launch;

static void release_replayer(replayer* r) {
  if (r == NULL) return;
  PyObject** refs[] = {&r->target, &r->target_id, &r->plans, &r->stream_of, &r->new_array, &r->array_type,
                       &r->exchange, &r->dl_dtypes, &r->check, &r->owner, &r->launch, &r->numbers};
  for (size_t i = 0; i < sizeof refs / sizeof refs[0]; ++i) Py_XDECREF(*refs[i]);
  free(r);
}

static void free_replayer(PyObject* capsule) {
  release_replayer((replayer*)PyCapsule_GetPointer(capsule, EWCALL_REPLAYER));
}

enum { ARG_ARRAY = 1, ARG_NUMBER, ARG_FOREIGN };

/* A foreign tensor the producer described: its address and key parts, or 0 (decline: the
   Python path reads it and says what is wrong, or waits for its producer's stream), or -1 with an
   exception. */
/* The producer's current stream, asked once a call for each API and device type (one GPU). */
struct producer_seen {
  const dl_exchange_api* api;
  int32_t device_type;
  void* stream;
};

static int read_tensor(const replayer* r, const dl_exchange_api* api, const dl_tensor* t, long ordinal, void* handle,
                       struct producer_seen* seen, uintptr_t* ptr, PyObject** info, PyObject** shape) {
  if ((t->device.device_type != kDLCUDA && t->device.device_type != kDLCUDAManaged) ||
      t->device.device_id != ordinal || t->ndim < 0 || (t->ndim > 0 && t->shape == NULL))
    return 0;
  int empty = 0; /* an empty array has no layout to check */
  for (int i = 0; i < t->ndim; ++i) empty |= t->shape[i] == 0;
  if (!empty && t->strides != NULL) {
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != want) return 0;
      want *= t->shape[i];
    }
  }
  /* an address between two elements (a byte view reinterpreted) is left to Python, which refuses it */
  const uintptr_t at = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  const unsigned unit = (unsigned)t->dtype.bits * t->dtype.lanes / 8u;
  if (unit > 1 && at % unit != 0) return 0;
  if (seen->api != api || seen->device_type != t->device.device_type) {
    void* producer = NULL;
    if (api->current_work_stream(t->device.device_type, t->device.device_id, &producer) != 0) {
      PyErr_Clear();
      return 0;
    }
    seen->api = api;
    seen->device_type = t->device.device_type;
    seen->stream = producer;
  }
  if (seen->stream != handle) return 0; /* the call's stream must wait for the producer's: Python does that */
  const long code = (long)t->dtype.code | ((long)t->dtype.bits << 8) | ((long)t->dtype.lanes << 16);
  PyObject* key = PyLong_FromLong(code);
  if (key == NULL) return -1;
  PyObject* row = PyDict_GetItemWithError(r->dl_dtypes, key);
  Py_DECREF(key);
  if (row == NULL || row == Py_None) return PyErr_Occurred() ? -1 : 0;
  PyObject* sh = PyTuple_New(t->ndim);
  if (sh == NULL) return -1;
  for (int i = 0; i < t->ndim; ++i) {
    PyObject* v = PyLong_FromLongLong(t->shape[i]);
    if (v == NULL) {
      Py_DECREF(sh);
      return -1;
    }
    PyTuple_SetItem(sh, i, v);
  }
  *ptr = at;
  *info = Py_NewRef(row);
  *shape = sh;
  return 1;
}

/* A foreign GPU array: `how` is the type's own reader, how(a, stream) -> (address, dtype row,
   shape) or None, or (API capsule, plain) for a type read through its DLPack exchange API: plain
   for types read as the plain tensor the API offers (torch's: a tensor that requires grad is left
   to Python, which refuses it), else as a managed tensor, released at once (the array the call
   holds keeps its memory). Returns as read_tensor does. */
static int read_foreign(const replayer* r, PyObject* how, PyObject* a, PyObject* stream, long ordinal, void* handle,
                        struct producer_seen* seen, uintptr_t* ptr, PyObject** info, PyObject** shape) {
  if (PyCallable_Check(how)) { /* the type's own reader (CuPy's): (address, dtype row, shape) or None */
    PyObject* got = PyObject_CallFunctionObjArgs(how, a, stream, NULL);
    if (got == NULL) return -1;
    int ok = 0;
    if (PyTuple_Check(got) && PyTuple_Size(got) == 3 && PyTuple_Check(PyTuple_GetItem(got, 2))) {
      *ptr = (uintptr_t)PyLong_AsVoidPtr(PyTuple_GetItem(got, 0));
      if (PyErr_Occurred()) {
        Py_DECREF(got);
        return -1;
      }
      *info = Py_NewRef(PyTuple_GetItem(got, 1));
      *shape = Py_NewRef(PyTuple_GetItem(got, 2));
      ok = 1;
    }
    Py_DECREF(got);
    return ok;
  }
  if (!PyTuple_Check(how) || PyTuple_Size(how) != 2) return 0;
  const dl_exchange_api* api =
      (const dl_exchange_api*)PyCapsule_GetPointer(PyTuple_GetItem(how, 0), DL_EXCHANGE_CAPSULE);
  const int plain = PyObject_IsTrue(PyTuple_GetItem(how, 1));
  if (api == NULL || plain < 0) {
    PyErr_Clear();
    return 0;
  }
  if (plain) {
    if (api->dltensor_from_py_object_no_sync == NULL) return 0;
    PyObject* grad = PyObject_GetAttr(a, s_requires_grad);
    const int needs_grad = grad == NULL ? -1 : PyObject_IsTrue(grad);
    Py_XDECREF(grad);
    if (needs_grad != 0) {
      PyErr_Clear();
      return 0;
    }
    dl_tensor t;
    memset(&t, 0, sizeof t);
    if (api->dltensor_from_py_object_no_sync(a, &t) != 0) {
      PyErr_Clear();
      return 0;
    }
    return read_tensor(r, api, &t, ordinal, handle, seen, ptr, info, shape);
  }
  dl_managed* m = NULL;
  if (api->managed_tensor_from_py_object_no_sync == NULL || api->managed_tensor_from_py_object_no_sync(a, &m) != 0 ||
      m == NULL) {
    PyErr_Clear();
    return 0;
  }
  const int got = m->major == 1 ? read_tensor(r, api, &m->tensor, ordinal, handle, seen, ptr, info, shape) : 0;
  if (m->deleter != NULL) m->deleter(m);
  return got;
}

/* The address an int object holds (a pointer attribute), or 0 with an exception on failure. */
static int address_of(PyObject* o, PyObject* name, uintptr_t* out) {
  PyObject* v = PyObject_GetAttr(o, name);
  if (v == NULL) return -1;
  *out = (uintptr_t)PyLong_AsVoidPtr(v);
  Py_DECREF(v);
  return PyErr_Occurred() ? -1 : 0;
}

/* What one call gives its plan's slots. */
struct call_facts {
  uintptr_t out;
  const uintptr_t* ptrs;
  const char* kind;
  Py_ssize_t nargs;
  const void* const* arrays; /* the array arguments' addresses, in order */
  PyObject* got; /* the plan's numbers' addresses, or NULL */
  void* handle;
  PyObject* dims;
};

/* One form's arguments for this call: 0, or 1 where the form does not fit the call (a plan made
   for another key: not expected), or -1 with an exception. */
static int fill(const native_form* f, int nslots, const struct call_facts* c, ew_arg* slot) {
  for (int i = 0; i < nslots; ++i) {
    const int j = f->idx[i];
    switch (f->src[i]) {
      case SRC_OUT: slot[i].p = (const void*)(c->out + (uintptr_t)f->off[i]); break;
      case SRC_ARG:
        if (j >= c->nargs || c->kind[j] == ARG_NUMBER) return 1;
        slot[i].p = (const void*)(c->ptrs[j] + (uintptr_t)f->off[i]);
        break;
      case SRC_NUM: {
        PyObject* v = c->got != NULL && j < PyTuple_Size(c->got) ? PyTuple_GetItem(c->got, j) : NULL;
        if (v == NULL) return 1;
        slot[i].p = (const void*)((uintptr_t)PyLong_AsVoidPtr(v) + (uintptr_t)f->off[i]);
        if (PyErr_Occurred()) return -1;
        break;
      }
      case SRC_CONST: slot[i] = f->value[i]; break;
      case SRC_STREAM: slot[i].p = c->handle; break;
      case SRC_ARRAYS: slot[i].p = (const void*)c->arrays; break;
      case SRC_DIM: {
        PyObject* v = PyTuple_Check(c->dims) && j < PyTuple_Size(c->dims) ? PyTuple_GetItem(c->dims, j) : NULL;
        if (v == NULL) return 1;
        slot[i].i = PyLong_AsLong(v);
        if (PyErr_Occurred()) return -1;
        break;
      }
    }
  }
  return 0;
}

static PyObject* replay_call(PyObject* self, PyObject* args) {
  const replayer* r = (const replayer*)PyCapsule_GetPointer(self, EWCALL_REPLAYER);
  if (r == NULL) return NULL;
  if (!PyTuple_Check(args) || PyTuple_Size(args) != r->arity || r->arity > EWCALL_MAX_ARGS) Py_RETURN_NONE;
  const Py_ssize_t nargs = r->arity;
  PyObject* parts[1 + 2 * EWCALL_MAX_ARGS];
  int nparts = 0;
  char kind[EWCALL_MAX_ARGS];
  uintptr_t ptrs[EWCALL_MAX_ARGS];
  PyObject *result = NULL, *key = NULL, *plan = NULL, *cap = NULL, *got = NULL, *res = NULL, *dims = NULL;
  PyObject* launch = PyObject_GetAttr(r->owner, s_launch);
  if (launch == NULL) return NULL;
  Py_DECREF(launch);
  if (launch != r->launch) Py_RETURN_NONE; /* launches go elsewhere (the CPU tests' stand-ins) */
  PyObject* stream = PyObject_CallNoArgs(r->stream_of);
  if (stream == NULL) return NULL;
  if (stream == Py_None) goto decline;
  void* handle;
  {
    PyObject* h = PyObject_GetAttr(stream, s_handle);
    if (h == NULL) goto done;
    handle = PyLong_AsVoidPtr(h);
    Py_DECREF(h);
    if (PyErr_Occurred()) goto done;
  }
  long ordinal = -1;
  struct producer_seen seen = {NULL, 0, NULL};
  parts[nparts++] = Py_NewRef(r->target_id);
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    PyObject* a = PyTuple_GetItem(args, i);
    PyTypeObject* t = Py_TYPE(a);
    int known = 0; /* whether t is in r->numbers (-1: an error) */
    if ((PyObject*)t == r->array_type) {
      kind[i] = ARG_ARRAY;
      if ((parts[nparts++] = PyObject_GetAttr(a, s_info)) == NULL) goto done;
      if ((parts[nparts++] = PyObject_GetAttr(a, s_shape)) == NULL) goto done;
      if (address_of(a, s_ptr, &ptrs[i]) < 0) goto done;
    } else if (t == &PyFloat_Type || t == &PyLong_Type || t == &PyBool_Type ||
               (known = PySet_Contains(r->numbers, (PyObject*)t)) == 1) {
      kind[i] = ARG_NUMBER;
      parts[nparts++] = Py_NewRef((PyObject*)t);
    } else {
      if (known < 0) goto done; /* a type that cannot be hashed: its error, as the lookups below would */
      PyObject* api = PyDict_GetItemWithError(r->exchange, (PyObject*)t);
      if (api == NULL) {
        if (PyErr_Occurred()) goto done;
        goto decline;
      }
      if (ordinal < 0) {
        PyObject* o = PyObject_GetAttr(stream, s_ordinal);
        if (o == NULL) goto done;
        ordinal = PyLong_AsLong(o);
        Py_DECREF(o);
        if (ordinal == -1 && PyErr_Occurred()) goto done;
      }
      kind[i] = ARG_FOREIGN;
      Py_INCREF(api); /* the reader runs Python: another thread may replace the dict's entry meanwhile */
      const int ok =
          read_foreign(r, api, a, stream, ordinal, handle, &seen, &ptrs[i], &parts[nparts], &parts[nparts + 1]);
      Py_DECREF(api);
      if (ok < 0) goto done;
      if (ok == 0) goto decline;
      nparts += 2;
    }
  }
  key = PyTuple_New(nparts);
  if (key == NULL) goto done;
  for (int i = 0; i < nparts; ++i) PyTuple_SetItem(key, i, parts[i]);
  nparts = 0; /* the key holds them now */
  plan = PyDict_GetItemWithError(r->plans, key);
  if (plan == NULL) {
    if (PyErr_Occurred()) goto done;
    goto decline;
  }
  Py_INCREF(plan); /* the Python calls below may let another thread drop it from the dict */
  {
    PyObject* target = PyObject_GetAttr(plan, s_target);
    if (target == NULL) goto done;
    Py_DECREF(target);
    if (target != r->target) goto decline;
  }
  cap = PyObject_GetAttr(plan, s_native);
  if (cap == NULL) goto done;
  if (!PyCapsule_IsValid(cap, EWCALL_NATIVE)) goto decline;
  const native_plan* p = (const native_plan*)PyCapsule_GetPointer(cap, EWCALL_NATIVE);
  if (p->numbers) {
    PyObject* numbers = PyObject_GetAttr(plan, s_numbers);
    if (numbers == NULL) goto done;
    got = PyObject_CallFunctionObjArgs(numbers, args, stream, NULL);
    Py_DECREF(numbers);
    if (got == NULL) goto done;
    if (got == Py_None) goto decline; /* a number its dtype cannot hold: the Python path says so */
    if (!PyTuple_Check(got)) {
      PyObject* t = PySequence_Tuple(got);
      Py_DECREF(got);
      got = t;
      if (got == NULL) goto done;
    }
  }
  res = PyObject_CallFunctionObjArgs(r->new_array, p->shape, p->info, stream, p->size, NULL);
  if (res == NULL) goto done;
  uintptr_t out;
  if (address_of(res, s_ptr, &out) < 0) goto done;
  /* each pyew array is read on this stream: one last used on another waits for that (read_on) */
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (kind[i] != ARG_ARRAY) continue;
    PyObject* a = PyTuple_GetItem(args, i);
    PyObject* buf = PyObject_GetAttr(a, s_buf);
    if (buf == NULL) goto done;
    PyObject* last = PyObject_GetAttr(buf, s_last);
    Py_DECREF(buf);
    if (last == NULL) goto done;
    Py_DECREF(last);
    if (last != stream) {
      PyObject* ok = PyObject_CallMethodObjArgs(a, s_read_on, stream, NULL);
      if (ok == NULL) goto done;
      Py_DECREF(ok);
    }
  }
  if (p->n > 0) {
    dims = PyObject_GetAttr(stream, s_dims);
    if (dims == NULL) goto done;
    ew_arg slot[EWCALL_MAX_ARGS];
    const void* arrays[EWCALL_MAX_ARGS];
    for (Py_ssize_t i = 0, k = 0; i < nargs; ++i)
      if (kind[i] != ARG_NUMBER) arrays[k++] = (const void*)ptrs[i];
    const struct call_facts c = {out, ptrs, kind, nargs, arrays, got, handle, dims};
    int rc = fill(&p->whole, p->b->nargs, &c, slot);
    if (rc != 0) goto filled;
    int nsplit = 0;
    if (p->nparts) { /* split where every address the packs read is 16-byte aligned */
      nsplit = p->nparts;
      for (int i = 0; i < p->b->nargs; ++i)
        if ((p->aligned >> i & 1u) && (uintptr_t)slot[i].p % 16 != 0) nsplit = 0;
    }
    for (int k = 0; k < (nsplit ? nsplit : 1); ++k) {
      if (nsplit && (rc = fill(&p->part[k], p->b->nargs, &c, slot)) != 0) goto filled;
      Py_BEGIN_ALLOW_THREADS
      rc = p->b->fn(slot);
      Py_END_ALLOW_THREADS
      if (rc != 0 && p->declines && rc == p->decline_rc && k == 0) goto decline;
      if (rc != 0) {
        PyObject* raised = PyObject_CallFunction(r->check, "is", rc, p->b->symbol);
        Py_XDECREF(raised);
        if (raised != NULL) PyErr_Format(PyExc_RuntimeError, "%s failed with %d", p->b->symbol, rc);
        goto done;
      }
    }
  filled:
    if (rc < 0) goto done;
    if (rc > 0) goto decline_late;
  }
  result = res;
  res = NULL;
  goto done;
decline_late: /* a plan whose slots do not match its key: not expected; the Python path runs it */
  PyErr_Clear();
decline:
  result = Py_NewRef(Py_None);
done:
  for (int i = 0; i < nparts; ++i) Py_XDECREF(parts[i]);
  Py_XDECREF(key);
  Py_XDECREF(plan);
  Py_XDECREF(cap);
  Py_XDECREF(got);
  Py_XDECREF(res);
  Py_XDECREF(dims);
  Py_DECREF(stream);
  return result;
}

PyDoc_STRVAR(replayer_doc,
"replayer(target, arity, plans, stream_of, new_array, array_type, exchange, dl_dtypes, check, owner,\n"
"launch, numbers)\n"
"-> function\n\n"
"A function of one argument, a call's positional arguments (a tuple), that replays the call's\n"
"plan in C where the plan has a native() form and every argument is an array_type, a number (of\n"
"a type in the frozenset `numbers`, Python's always), or a GPU array of a type in `exchange` on the\n"
"call's stream and GPU; it returns the\n"
"result, or None where the Python path must run the call (nothing was launched).\n"
"exchange maps a type to a reader, reader(x, stream) -> (address, dtype row, shape) or None, or\n"
"to (its DLPack exchange API capsule, whether it is read as a plain tensor or a managed one).\n"
"Keys are built as call.plan_key builds them: (id(target), then each array's dtype row and shape\n"
"and each number's type). stream_of() gives the call's stream, or None to leave every call to\n"
"Python; calls are replayed only while owner.launch is `launch` (the launches pyew makes go\n"
"through it: a stand-in there must see them).");

static PyObject* replayer_new(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 12) {
    PyErr_SetString(PyExc_TypeError, "replayer() takes 12 arguments");
    return NULL;
  }
  const Py_ssize_t arity = PyLong_AsSsize_t(args[1]);
  if (arity == -1 && PyErr_Occurred()) return NULL;
  if (!PyDict_Check(args[2]) || !PyDict_Check(args[6]) || !PyDict_Check(args[7]) || !PyType_Check(args[5]) ||
      !PyFrozenSet_Check(args[11])) {
    PyErr_SetString(PyExc_TypeError,
                    "replayer: plans, exchange and dl_dtypes must be dicts, array_type a type, numbers a frozenset");
    return NULL;
  }
  replayer* r = (replayer*)calloc(1, sizeof(replayer));
  if (r == NULL) return PyErr_NoMemory();
  r->target_id = PyLong_FromVoidPtr(args[0]);
  if (r->target_id == NULL) {
    free(r);
    return NULL;
  }
  r->target = Py_NewRef(args[0]);
  r->arity = arity;
  r->plans = Py_NewRef(args[2]);
  r->stream_of = Py_NewRef(args[3]);
  r->new_array = Py_NewRef(args[4]);
  r->array_type = Py_NewRef(args[5]);
  r->exchange = Py_NewRef(args[6]);
  r->dl_dtypes = Py_NewRef(args[7]);
  r->check = Py_NewRef(args[8]);
  r->owner = Py_NewRef(args[9]);
  r->launch = Py_NewRef(args[10]);
  r->numbers = Py_NewRef(args[11]);
  r->def.ml_name = "replay";
  r->def.ml_meth = (PyCFunction)replay_call;
  r->def.ml_flags = METH_O;
  r->def.ml_doc = NULL;
  PyObject* capsule = PyCapsule_New(r, EWCALL_REPLAYER, free_replayer);
  if (capsule == NULL) release_replayer(r);
  return function_of(&r->def, capsule);
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_doc},
    {"native", (PyCFunction)(void (*)(void))native, METH_FASTCALL, native_doc},
    {"replayer", (PyCFunction)(void (*)(void))replayer_new, METH_FASTCALL, replayer_doc},
    {"dlpack_version", (PyCFunction)dlpack_version, METH_O, dlpack_version_doc},
    {"dlpack_view", (PyCFunction)(void (*)(void))dlpack_view, METH_FASTCALL, dlpack_view_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pyew._ewcall", "libew entry points called without ctypes; DLPack's C exchange API read.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ewcall(void) {
  struct {
    PyObject** at;
    const char* name;
  } names[] = {{&s_info, "info"},       {&s_shape, "shape"},       {&s_ptr, "ptr"},
               {&s_buf, "buffer"},        {&s_last, "last"},         {&s_read_on, "read_on"},
               {&s_handle, "handle"},   {&s_dims, "dims"},         {&s_ordinal, "ordinal"},
               {&s_native, "native"},   {&s_target, "target"},     {&s_numbers, "numbers"},
               {&s_requires_grad, "requires_grad"}, {&s_launch, "launch"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    if (*names[i].at == NULL && (*names[i].at = PyUnicode_InternFromString(names[i].name)) == NULL) return NULL;
  }
  return PyModule_Create(&module);
}
