/* pyew._ewcall: calls libew.so's entry points from Python without ctypes.

   A ctypes call converts each argument through its argtypes and goes through libffi; for a kernel
   launch that is most of the host time pyew adds. Every entry point of libew has a packed twin,
   `int <symbol>_packed(const ew_arg* args)`, generated from the same ABI table as the entry
   itself (generator/abi.py). bind() wraps one twin as a builtin function that converts its Python
   arguments into an ew_arg array by the entry's argument kinds and calls it, with the GIL released
   as ctypes would. Without this module (no Python headers at build time) pyew uses ctypes.

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

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pyew._ewcall", "libew entry points called without ctypes.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ewcall(void) { return PyModule_Create(&module); }
