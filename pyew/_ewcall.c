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
  if (capsule == NULL) {
    free(b);
    return NULL;
  }
  PyObject* fn = PyCFunction_NewEx(&b->def, capsule, NULL);
  Py_DECREF(capsule);
  return fn;
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

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_doc},
    {"dlpack_version", (PyCFunction)dlpack_version, METH_O, dlpack_version_doc},
    {"dlpack_view", (PyCFunction)(void (*)(void))dlpack_view, METH_FASTCALL, dlpack_view_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pyew._ewcall", "libew entry points called without ctypes; DLPack's C exchange API read.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ewcall(void) { return PyModule_Create(&module); }
