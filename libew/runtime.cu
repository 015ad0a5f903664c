// Runtime helpers exported next to the generated kernels: CUDA error names for pyew's exceptions,
// a fill kernel that broadcasts a scalar operand to a buffer, and blocking waits.
#include "ew_api.h"
#include "elementwise.cuh"

EW_API const char* ew_error_name(int code) {
  return cudaGetErrorName(static_cast<cudaError_t>(code));
}

namespace {
template <typename T>
struct Constant {
  T value;
  __device__ __forceinline__ T operator()() const { return value; }
};

template <typename T>
cudaError_t fill(const ew::Launch& l, void* out, int64_t n, uint64_t bits) {
  T v;
  memcpy(&v, &bits, sizeof(T));
  return ew::launch_map(l, Constant<T>{v}, n, static_cast<T*>(out));
}
}  // namespace

// Fill out[0..n) with the itemsize-byte pattern in the low bytes of `bits`.
EW_API int ew_fill(void* out, int64_t n, int itemsize, uint64_t bits, void* stream, int sms,
                   int threads_per_sm) {
  const ew::Launch l{static_cast<cudaStream_t>(stream), sms, threads_per_sm};
  switch (itemsize) {
    case 1: return fill<uint8_t>(l, out, n, bits);
    case 2: return fill<uint16_t>(l, out, n, bits);
    case 4: return fill<uint32_t>(l, out, n, bits);
    case 8: return fill<uint64_t>(l, out, n, bits);
    default: return cudaErrorInvalidValue;
  }
}

// Host waits for pyew's transfer workers. Called through ctypes, which lets go of Python's GIL for
// the call, so while one worker waits for its copies the others keep copying.
EW_API int ew_event_synchronize(void* event) {
  return cudaEventSynchronize(static_cast<cudaEvent_t>(event));
}

EW_API int ew_stream_synchronize(void* stream) {
  return cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
}
