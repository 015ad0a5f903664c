/* One-off experiment (2026-11-28): ew::np::arccosh_in_float (libew/ew_numpy.cuh) in the same IEEE
   float operations on the CPU, rsqrt.approx and rcp.approx as correctly rounded values moved by PERT
   ulp, over every float32 input of a range (bit patterns) against double acosh:
     gcc -O2 -march=native -ffp-contract=off -fopenmp -o acosh arccosh_in_float.c -lm
     ./acosh 0x3f800000 0x7f800001 [PERT]
   The log1p polynomial comes from fit_float32_forms.py (degree 7; its degree-6 fit gave 1.40 ulp). */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
static inline float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static int PERT = 0;   /* ulps added to the approximate rsqrt and rcp */
static inline float nudge(float v) { return f_of(u_of(v) + PERT); }
static inline float rsqrt_approx(float v) { return nudge((float)(1.0 / sqrt((double)v))); }
static inline float rcp_approx(float v) { return nudge((float)(1.0 / (double)v)); }

float acosh_f(float x) {
  if (!(x >= 1.0f)) return NAN;
  const int big = x >= 4096.0f;
  const float p = x * x, pe = fmaf(x, x, -p);
  const float qh = p - 1.0f;                                  /* exact below 2^12 */
  const float r0 = rsqrt_approx(qh);
  const float s = qh * r0;
  const float res = fmaf(-s, s, qh) + pe;
  const float sl = res * (0.5f * r0);
  float yh = x + s;
  float yl = ((x - yh) + s) + sl;
  if (big) { yh = x; yl = 0.0f; }
  const float corr = yl * (big ? 0.0f : (x - s) - sl);
  const int iy = (int)u_of(yh);
  const int e = (iy - 0x3f2aaaab) & (int)0xff800000;
  const float m = f_of((uint32_t)(iy - e));
  const float kf = f_of((uint32_t)((e >> 23) + 0x4B400000)) - 12582912.0f + (big ? 1.0f : 0.0f);
  const float f = m - 1.0f;
  const float z = f * f;
  float P = -0.13191736f;
  P = fmaf(P, f, 0.1401382f);
  P = fmaf(P, f, -0.12116163f);
  P = fmaf(P, f, 0.13999087f);
  P = fmaf(P, f, -0.16685282f);
  P = fmaf(P, f, 0.20010896f);
  P = fmaf(P, f, -0.24999696f);
  P = fmaf(P, f, 0.33333206f);
  const float kl = kf * 0.693145751953125f;                  /* exact */
  const float h = kl + f, herr = (kl - h) + f;
  const float tail = fmaf(f * z, P, fmaf(-0.5f, z, corr)) + fmaf(kf, 1.42860682e-06f, herr);
  const float r = h + tail;
  return x == INFINITY ? x : (x == 1.0f ? 0.0f : r);
}

int main(int argc, char** argv) {
  uint32_t lo = strtoul(argv[1], 0, 0), hi = strtoul(argv[2], 0, 0);
  if (argc > 3) PERT = atoi(argv[3]);
  double worst = 0; uint32_t at = 0; long long over1 = 0, over15 = 0, bad = 0;
  #pragma omp parallel
  {
    double w = 0; uint32_t a = 0; long long o1 = 0, o15 = 0, b = 0;
    #pragma omp for schedule(static, 65536)
    for (int64_t i = lo; i < (int64_t)hi; ++i) {
      const uint32_t u = (uint32_t)i;
      const float x = f_of(u);
      const float f = acosh_f(x);
      const double ref = acosh((double)x);
      if (ref != ref || isinf(ref)) { if (!(f != f && ref != ref) && !(isinf(f) && isinf(ref))) ++b; continue; }
      const double ar = fabs(ref);
      int ex; frexp(ar, &ex);
      double ulp = ldexp(1.0, ex - 24);
      if (ar < 1.1754943508222875e-38) ulp = ldexp(1.0, -149);
      const double err = fabs((double)f - ref) / ulp;
      if (err > 1) ++o1;
      if (err > 1.5) ++o15;
      if (err != err) { ++b; continue; }
      if (err > w) { w = err; a = u; }
    }
    #pragma omp critical
    { over1 += o1; over15 += o15; bad += b; if (w > worst) { worst = w; at = a; } }
  }
  printf("%08x..%08x pert %d worst %.4f ulp at %08x (x=%.9g) over1 %lld over1.5 %lld special-bad %lld\n", lo, hi, PERT, worst, at, f_of(at), over1, over15, bad);
  return 0;
}
