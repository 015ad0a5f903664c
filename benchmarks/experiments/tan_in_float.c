/* Every float32 input of a range through float32 tan in float, against double tan, on the CPU:
   gcc -O3 -march=native -ffp-contract=off -o tan_in_float tan_in_float.c -lm
   ./tan_in_float 0x00000000 0x47000000; ./tan_in_float 0x47000000 0x49800000   (bit patterns) */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
static inline float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static const float C[7] = {0.3333335518836975f, 0.13332439959049225f, 0.0540856271982193f, 0.02114769071340561f,
                           0.011188282631337643f, -0.0003613945737015456f, 0.004600397311151028f};
/* ew::np::tan_in_float (libew/ew_numpy.cuh) in the same IEEE float operations, the GPU's
   rcp.approx replaced by a correctly rounded reciprocal (the correction after it takes either) */
float tan_float(float x) {
  const float a = fabsf(x);
  const float kRound = 12582912.0f;
  const float shifted = fmaf(a, 0.636619772f, kRound);
  const int j = (int)(u_of(shifted) - 0x4B400000u);
  const float jf = shifted - kRound;
  const float P1 = 1.57079637f, P2 = -4.37113883e-08f, P3 = -1.71512451e-15f;
  const float r1 = fmaf(-jf, P1, a);                 /* exact */
  const float p2 = jf * P2, p2e = fmaf(jf, P2, -p2); /* jf P2 = p2 + p2e exactly */
  const float s = r1 - p2;                           /* two-sum of r1 and -p2 */
  const float bb = s - r1;
  const float se = (r1 - (s - bb)) + (-p2 - bb);
  const float lo = fmaf(-jf, P3, se - p2e);
  const float rh = s, rl = lo;                        /* r = rh + rl, not renormalised */
  const float z = rh * rh;
  float p = C[6];
  for (int i = 5; i >= 0; --i) p = fmaf(p, z, C[i]);
  const float v = rh * z;
  const float t0 = fmaf(v, p, rh);
  const float corr = fmaf(v, p, fmaf(rl, fmaf(t0, t0, 1.0f), 0.0f));  /* r^3 P + rl (1 + tan^2) */
  const float th = rh + corr, tl = corr - (th - rh);   /* tan r = th + tl */
  float t;
  if (j & 1) {
    const float q = 1.0f / th;
    float e = fmaf(-q, th, 1.0f);
    e = fmaf(-q, tl, e);
    t = -fmaf(q, e, q);
  } else {
    t = th;
  }
  return u_of(x) >> 31 ? -t : t;
}

int main(int argc, char** argv) {
  uint32_t lo = strtoul(argv[1], 0, 0), hi = strtoul(argv[2], 0, 0);
  double worst = 0; uint32_t at = 0; long long over1 = 0, over2 = 0;
  for (uint32_t u = lo; u < hi; ++u) {
    const float x = f_of(u);
    const float f = tan_float(x);
    const double ref = tan((double)x);
    const double ar = fabs(ref);
    int e; frexp(ar, &e);
    double ulp = ldexp(1.0, e - 24);
    if (ar < 1.1754943508222875e-38) ulp = ldexp(1.0, -149);
    const double err = fabs((double)f - ref) / ulp;
    if (err > 1) ++over1;
    if (err > 2) ++over2;
    if (err > worst || err != err) { worst = err; at = u; }
  }
  printf("%08x..%08x worst %.4f ulp at %08x (x=%.9g) over1 %lld over2 %lld\n", lo, hi, worst, at, f_of(at), over1, over2);
  return 0;
}
