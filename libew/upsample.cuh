// UpsampleNearest2D on NCHW: a 2x fast path after OneFlow's kernel, and a general path
// that reproduces PyTorch's CUDA kernels bit for bit.
//
// Index rule (PyTorch's, "nearest" mode): with the float scale s = float(in) / float(out), output
// index d reads input min(floor(float(d) * s), in - 1). The backward gathers: input index i sums
// the outputs in [min(ceil(float(i) * t), out), min(ceil(float(i + 1) * t), out)) with
// t = float(out) / float(in), rows outer and columns inner, starting from 0 in the accumulation
// type (float for float32/16/bf16, double for float64). Each dx element is written by one thread:
// no atomics, so the result is deterministic. Equal input and output sizes are a plain copy, as in
// PyTorch (so -0 stays -0).
//
// 2x: output rows 2r and 2r + 1 of the flattened (N*C*H) input row r repeat it with every element
// doubled, so a thread that loads K input elements of one row stores 2K elements to each of the
// two output rows: paired stores for K = 1, one 16-byte store per row at the widest K. The
// backward loads the same two 2K-element runs and sums each 2x2 window in PyTorch's order.
//
// Indices are 64-bit unless every index the kernel forms fits in 32 bits.
#pragma once
#include <cmath>
#include "elementwise.cuh"

namespace ew {

// ---- 2x fast path --------------------------------------------------------------------------

template <int K, typename T, typename Index>
__global__ void __launch_bounds__(kBlock)
upsample2x_forward_kernel(Index n_packs, Index w, const T* __restrict__ x, T* __restrict__ y) {
  const Index stride = Index(gridDim.x) * kBlock;
  for (Index p = Index(blockIdx.x) * kBlock + threadIdx.x; p < n_packs; p += stride) {
    const Pack<T, K> in = load_pack<T, K>(x, p);
    const Index i = p * K;           // K divides w: the pack lies inside input row r
    const Index r = i / w;
    const Index top = 4 * r * w + 2 * (i - r * w);   // element offset in output row 2r
    Pack<T, 2 * K> o;
#pragma unroll
    for (int j = 0; j < K; ++j) o.v[2 * j] = o.v[2 * j + 1] = in.v[j];
    store_pack<T, 2 * K>(y, top / (2 * K), o);
    store_pack<T, 2 * K>(y, (top + 2 * w) / (2 * K), o);
  }
}

template <int K, typename T, typename Acc, typename Index>
__global__ void __launch_bounds__(kBlock)
upsample2x_backward_kernel(Index n_packs, Index w, const T* __restrict__ dy, T* __restrict__ dx) {
  const Index stride = Index(gridDim.x) * kBlock;
  for (Index p = Index(blockIdx.x) * kBlock + threadIdx.x; p < n_packs; p += stride) {
    const Index i = p * K;
    const Index r = i / w;
    const Index top = 4 * r * w + 2 * (i - r * w);
    const Pack<T, 2 * K> a = load_pack<T, 2 * K>(dy, top / (2 * K));
    const Pack<T, 2 * K> b = load_pack<T, 2 * K>(dy, (top + 2 * w) / (2 * K));
    Pack<T, K> o;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      Acc s = Acc(0);
      s += convert<Acc>(a.v[2 * j]);
      s += convert<Acc>(a.v[2 * j + 1]);
      s += convert<Acc>(b.v[2 * j]);
      s += convert<Acc>(b.v[2 * j + 1]);
      o.v[j] = convert<T>(s);
    }
    store_pack<T, K>(dx, p, o);
  }
}

// ---- general path (any output size) ---------------------------------------------------------

template <typename Index>
__device__ __forceinline__ Index nearest_src(Index d, float scale, Index in) {
  const Index s = static_cast<Index>(floorf(static_cast<float>(d) * scale));
  return s < in - 1 ? s : in - 1;
}

template <typename Index>
__device__ __forceinline__ Index nearest_bw_bound(Index d, float scale, Index out) {
  const Index s = static_cast<Index>(ceilf(static_cast<float>(d) * scale));
  return s < out ? s : out;
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kBlock)
upsample_forward_kernel(Index n_out, Index h, Index w, Index oh, Index ow, float sh, float sw,
                        const T* __restrict__ x, T* __restrict__ y) {
  const Index stride = Index(gridDim.x) * kBlock;
  for (Index o = Index(blockIdx.x) * kBlock + threadIdx.x; o < n_out; o += stride) {
    const Index row = o / ow;             // output row over N*C*OH
    const Index ox = o - row * ow;
    const Index nc = row / oh;
    const Index oy = row - nc * oh;
    const Index sy = h == oh ? oy : nearest_src(oy, sh, h);
    const Index sx = w == ow ? ox : nearest_src(ox, sw, w);
    y[o] = x[(nc * h + sy) * w + sx];
  }
}

template <typename T, typename Acc, typename Index>
__global__ void __launch_bounds__(kBlock)
upsample_backward_kernel(Index n_in, Index h, Index w, Index oh, Index ow, float th, float tw,
                         const T* __restrict__ dy, T* __restrict__ dx) {
  const Index stride = Index(gridDim.x) * kBlock;
  for (Index i = Index(blockIdx.x) * kBlock + threadIdx.x; i < n_in; i += stride) {
    const Index row = i / w;              // input row over N*C*H
    const Index ix = i - row * w;
    const Index nc = row / h;
    const Index iy = row - nc * h;
    const Index y0 = nearest_bw_bound(iy, th, oh), y1 = nearest_bw_bound(iy + 1, th, oh);
    const Index x0 = nearest_bw_bound(ix, tw, ow), x1 = nearest_bw_bound(ix + 1, tw, ow);
    Acc s = Acc(0);
    for (Index yy = y0; yy < y1; ++yy) {
      const T* src = dy + (nc * oh + yy) * ow;
      for (Index xx = x0; xx < x1; ++xx) s += convert<Acc>(src[xx]);
    }
    dx[i] = convert<T>(s);
  }
}

// ---- entries --------------------------------------------------------------------------------

// 32-bit indices when every index a kernel forms (up to `largest` plus a grid stride) fits.
inline bool fits_i32(int64_t largest, int grid) {
  return largest + 2 * int64_t(grid) * kBlock < INT32_MAX;
}

struct UpsampleShape {
  int64_t nc, h, w, oh, ow;
  int64_t n_in() const { return nc * h * w; }
  int64_t n_out() const { return nc * oh * ow; }
};

// Shared checks; returns false with *rc set when there is nothing (more) to do.
inline bool upsample_prologue(const UpsampleShape& s, const Launch& l, void* dst, const void* src,
                              size_t bytes, cudaError_t* rc) {
  *rc = cudaSuccess;
  if (s.nc < 0 || s.h < 0 || s.w < 0 || s.oh < 0 || s.ow < 0) { *rc = cudaErrorInvalidValue; return false; }
  if (s.n_out() == 0 || s.n_in() == 0) {
    // nothing to read or write, unless an output would have to come from an empty input
    if (s.nc > 0 && (s.h == 0 || s.w == 0) != (s.oh == 0 || s.ow == 0)) *rc = cudaErrorInvalidValue;
    return false;
  }
  if (s.h == s.oh && s.w == s.ow) {   // same size: a copy, as in PyTorch
    *rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, l.stream);
    return false;
  }
  return true;
}

// Widest K (input elements per thread) of the 2x path: 16-byte output packs of 2K elements.
template <typename T>
inline constexpr int kUpsampleMaxK = 8 / int(sizeof(T)) > 0 ? 8 / int(sizeof(T)) : 1;

// The widest K that the row width and the actual addresses allow (K-element packs on the input
// side, 2K-element packs on the output side); 0 when even K = 1 would be misaligned (the general
// path then runs).
template <typename T>
inline int upsample2x_pack(int64_t w, const T* in_side, const T* out_side) {
  constexpr int kMax = kUpsampleMaxK<T>;
  int k = min_of(widest_pack<kMax>(in_side), widest_pack<2 * kMax>(out_side) / 2);
  while (k > 1 && w % k != 0) k /= 2;
  return k;
}

template <int K, typename T>
cudaError_t launch_upsample2x_forward(const Launch& l, const UpsampleShape& s, T* y, const T* x) {
  const int64_t n_packs = s.n_in() / K;
  const int grid = grid_size(n_packs, 1, l);
  if (fits_i32(s.n_out(), grid))
    upsample2x_forward_kernel<K, T, int32_t><<<grid, kBlock, 0, l.stream>>>(int32_t(n_packs), int32_t(s.w), x, y);
  else
    upsample2x_forward_kernel<K, T, int64_t><<<grid, kBlock, 0, l.stream>>>(n_packs, s.w, x, y);
  return cudaGetLastError();
}

template <int K, typename T, typename Acc>
cudaError_t launch_upsample2x_backward(const Launch& l, const UpsampleShape& s, T* dx, const T* dy) {
  const int64_t n_packs = s.n_in() / K;
  const int grid = grid_size(n_packs, 1, l);
  if (fits_i32(s.n_out(), grid))
    upsample2x_backward_kernel<K, T, Acc, int32_t><<<grid, kBlock, 0, l.stream>>>(int32_t(n_packs), int32_t(s.w), dy, dx);
  else
    upsample2x_backward_kernel<K, T, Acc, int64_t><<<grid, kBlock, 0, l.stream>>>(n_packs, s.w, dy, dx);
  return cudaGetLastError();
}

template <typename T, typename Acc>
cudaError_t launch_upsample_forward(const Launch& l, T* y, const T* x, int64_t nc, int64_t h, int64_t w,
                                    int64_t oh, int64_t ow) {
  const UpsampleShape s{nc, h, w, oh, ow};
  cudaError_t rc;
  if (!upsample_prologue(s, l, y, x, size_t(s.n_out()) * sizeof(T), &rc)) return rc;
  if (oh == 2 * h && ow == 2 * w) {
    const int k = upsample2x_pack<T>(w, x, y);
    if (k > 0)
      return dispatch_pack<kUpsampleMaxK<T>>(
          k, [&](auto kc) { return launch_upsample2x_forward<kc.value>(l, s, y, x); });
  }
  // PyTorch's scales: float(in) / float(out), a float division of the converted sizes
  const float sh = static_cast<float>(h) / static_cast<float>(oh);
  const float sw = static_cast<float>(w) / static_cast<float>(ow);
  const int grid = grid_size(s.n_out(), 1, l);
  if (fits_i32(max_of(s.n_out(), s.n_in()), grid))
    upsample_forward_kernel<T, int32_t><<<grid, kBlock, 0, l.stream>>>(
        int32_t(s.n_out()), int32_t(h), int32_t(w), int32_t(oh), int32_t(ow), sh, sw, x, y);
  else
    upsample_forward_kernel<T, int64_t><<<grid, kBlock, 0, l.stream>>>(s.n_out(), h, w, oh, ow, sh, sw, x, y);
  return cudaGetLastError();
}

template <typename T, typename Acc>
cudaError_t launch_upsample_backward(const Launch& l, T* dx, const T* dy, int64_t nc, int64_t h, int64_t w,
                                     int64_t oh, int64_t ow) {
  const UpsampleShape s{nc, h, w, oh, ow};
  cudaError_t rc;
  if (!upsample_prologue(s, l, dx, dy, size_t(s.n_in()) * sizeof(T), &rc)) return rc;
  if (oh == 2 * h && ow == 2 * w) {
    const int k = upsample2x_pack<T>(w, dx, dy);
    if (k > 0)
      return dispatch_pack<kUpsampleMaxK<T>>(
          k, [&](auto kc) { return launch_upsample2x_backward<kc.value, T, Acc>(l, s, dx, dy); });
  }
  // PyTorch's backward scales: float(out) / float(in)
  const float th = static_cast<float>(oh) / static_cast<float>(h);
  const float tw = static_cast<float>(ow) / static_cast<float>(w);
  const int grid = grid_size(s.n_in(), 1, l);
  if (fits_i32(max_of(s.n_out(), s.n_in()), grid))
    upsample_backward_kernel<T, Acc, int32_t><<<grid, kBlock, 0, l.stream>>>(
        int32_t(s.n_in()), int32_t(h), int32_t(w), int32_t(oh), int32_t(ow), th, tw, dy, dx);
  else
    upsample_backward_kernel<T, Acc, int64_t><<<grid, kBlock, 0, l.stream>>>(s.n_in(), h, w, oh, ow, th, tw, dy, dx);
  return cudaGetLastError();
}

}  // namespace ew
