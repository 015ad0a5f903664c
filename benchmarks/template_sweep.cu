// Launch-shape sweep of the map kernel (libew/elementwise.cuh) on the current GPU.
//
//   make sweep [SWEEP_ARGS="log2 n ..."]      (builds build/template_sweep and runs it)
//
// Instantiates map_kernel under several Tunings (block, packs per trip, grid cap, layout, cache
// hint) and times each on copy-like ops (relu float32/float16, add float32) and on the library's
// compute-heavy ones (gelu float32 and float16, gelu_tanh float32, elu float16, sigmoid and silu
// float32: their device
// functions from build/gen/fn, so `make all` first), next to cudaMemcpyAsync device-to-device, all
// in one process. Each round runs every
// variant once, in order, and a variant's figure is the median over rounds, so clock or thermal
// drift hits all variants alike. Buffers are 16-byte aligned and larger than L2 at the default
// sizes; inputs are uniform in [-6, 6). Every variant's output is checked against the default
// tuning's output before it is timed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "elementwise.cuh"
#include "fn/elu.cuh"
#include "fn/gelu.cuh"
#include "fn/gelu_tanh.cuh"
#include "fn/sigmoid.cuh"
#include "fn/silu.cuh"

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

namespace {

struct Relu {
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    const float v = ew::convert<float>(x);
    return ew::convert<T>(v < 0.f ? 0.f : v);
  }
};
// A spec op's device function, with R = the storage type as the generated kernels bind it.
template <template <typename> class Op>
struct Unary {
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    return ew::convert<T>(Op<T>{}(ew::convert<float>(x)));
  }
};
struct Elu {
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const {
    return ew::convert<T>(ewf::elu_fn<T>{}(ew::convert<float>(x), 1.0f));
  }
};
struct Add {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return ew::convert<T>(ew::convert<float>(a) + ew::convert<float>(b));
  }
};

// Uniform values in [-6, 6), as the library's tests and pyew's benchmark use: the heavy ops'
// cost depends on the data (tails, branches), so random bit patterns would mislead.
template <typename T>
__global__ void fill_uniform(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    p[i] = ew::convert<T>(12.f * (float(h >> 8) * (1.f / 16777216.f)) - 6.f);
  }
}

__global__ void count_diff(const uint32_t* a, const uint32_t* b, int64_t words, unsigned long long* bad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += int64_t(gridDim.x) * blockDim.x)
    if (a[i] != b[i]) atomicAdd(bad, 1ull);
}

struct Case {
  const char* op;
  const char* dtype;
  int elem_bytes;
  int inputs;
};

struct Variant {
  std::string name;
  // launches the variant on case c: out, in0, in1 (in1 unused for unary)
  cudaError_t (*run)(const ew::Launch&, int c, int64_t n, void* out, const void* a, const void* b);
};

template <class Tn, typename T, typename F>
cudaError_t run_unary(const ew::Launch& l, F f, int64_t n, void* out, const void* a) {
  return ew::launch_pack<Tn, 16 / sizeof(T)>(l, f, n, static_cast<T*>(out), static_cast<const T*>(a));
}

// Buffers are 256-byte aligned, so every case runs with 16-byte packs.
template <class Tn>
cudaError_t run_variant(const ew::Launch& l, int c, int64_t n, void* out, const void* a, const void* b) {
  switch (c) {
    case 0: return run_unary<Tn, float>(l, Relu{}, n, out, a);
    case 1: return run_unary<Tn, __half>(l, Relu{}, n, out, a);
    case 2: return ew::launch_pack<Tn, 4>(l, Add{}, n, static_cast<float*>(out), static_cast<const float*>(a),
                                          static_cast<const float*>(b));
    case 3: return run_unary<Tn, float>(l, Unary<ewf::gelu_fn>{}, n, out, a);
    case 4: return run_unary<Tn, __half>(l, Unary<ewf::gelu_fn>{}, n, out, a);
    case 5: return run_unary<Tn, float>(l, Unary<ewf::gelu_tanh_fn>{}, n, out, a);
    case 6: return run_unary<Tn, __half>(l, Elu{}, n, out, a);
    case 7: return run_unary<Tn, float>(l, Unary<ewf::sigmoid_fn>{}, n, out, a);
    default: return run_unary<Tn, float>(l, Unary<ewf::silu_fn>{}, n, out, a);
  }
}

template <int Block, int Unroll, int Waves, bool Tile, int Hint>
Variant variant() {
  char name[96];
  std::snprintf(name, sizeof name, "%s b%d u%d %s%s", Tile ? "tile" : "stride", Block, Unroll,
                Waves ? ("w" + std::to_string(Waves)).c_str() : "uncapped",
                Hint == 0 ? "" : Hint == 1 ? " st.cs" : " ld.cs+st.cs");
  return {name, &run_variant<ew::Tuning<Block, Unroll, Waves, Tile, Hint>>};
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.f : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> log2s;
  for (int i = 1; i < argc; ++i) log2s.push_back(std::atoi(argv[i]));
  if (log2s.empty()) log2s = {28, 25};
  const int rounds = 25, warmup = 3;

  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  const ew::Launch l{nullptr, prop.multiProcessorCount, prop.maxThreadsPerMultiProcessor};
  std::printf("# %s, %d SMs, L2 %d MiB; median of %d rounds after %d warm-up\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, rounds, warmup);

  // The first variant is MemoryBoundTuning and the other variants are checked against it; the
  // generator's other choice, ComputeBoundTuning, is in the list too (named on the first line).
  static_assert(std::is_same_v<ew::MemoryBoundTuning, ew::Tuning<256, 1, 0, true, 0>>);
  using C = ew::ComputeBoundTuning;
  std::printf("# ComputeBoundTuning: %s b%d u%d %s\n", C::kTile ? "tile" : "stride", C::kBlock, C::kUnroll,
              C::kWaves ? ("w" + std::to_string(C::kWaves)).c_str() : "uncapped");
  const std::vector<Variant> variants = {
      variant<256, 1, 0, true, 0>(),
      variant<128, 1, 0, true, 0>(),
      variant<256, 2, 32, false, 0>(),
      variant<256, 1, 32, false, 0>(),
      variant<256, 4, 32, false, 0>(),
      variant<256, 2, 128, false, 0>(),
      variant<256, 2, 0, false, 0>(),
      variant<128, 2, 0, true, 0>(),
      variant<256, 2, 0, true, 0>(),
      variant<128, 2, 32, true, 0>(),
      variant<128, 2, 16, true, 0>(),
      variant<128, 2, 64, true, 0>(),
      variant<128, 2, 128, true, 0>(),
      variant<128, 4, 0, true, 0>(),
      variant<256, 2, 32, false, 1>(),
  };
  const Case cases[] = {{"relu", "float32", 4, 1}, {"relu", "float16", 2, 1}, {"add", "float32", 4, 2},
                        {"gelu", "float32", 4, 1},  {"gelu", "float16", 2, 1}, {"gelu_tanh", "float32", 4, 1},
                        {"elu", "float16", 2, 1},  {"sigmoid", "float32", 4, 1}, {"silu", "float32", 4, 1}};

  for (int lg : log2s) {
    const int64_t n = int64_t(1) << lg;
    const size_t bytes = size_t(n) * 4;
    void *a, *b, *h, *out, *ref;   // a, b: float32 inputs; h: float16 input
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&h, bytes / 2));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&out, bytes));
    CHECK(cudaMalloc(&ref, bytes));
    unsigned long long* bad;
    CHECK(cudaMalloc(&bad, sizeof *bad));
    fill_uniform<<<1024, 256>>>(static_cast<float*>(a), n, 12345u);
    fill_uniform<<<1024, 256>>>(static_cast<float*>(b), n, 777u);
    fill_uniform<<<1024, 256>>>(static_cast<__half*>(h), n, 4242u);
    CHECK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));

    // copy ceiling: device-to-device copy of the float32 buffer
    std::vector<float> copy_ms;
    for (int r = 0; r < warmup + rounds; ++r) {
      CHECK(cudaEventRecord(e0));
      CHECK(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToDevice));
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= warmup) copy_ms.push_back(ms);
    }
    const double copy_gbs = 2.0 * bytes / (median(copy_ms) * 1e-3) / 1e9;
    std::printf("\n## n = 2^%d: copy ceiling (cudaMemcpyAsync D2D) %.0f GB/s\n\n", lg, copy_gbs);
    std::printf("%% of the copy ceiling; min = the worst case of the row\n\n| variant |");
    for (const Case& c : cases) std::printf(" %s %s |", c.op, c.dtype);
    std::printf(" min |\n|---|");
    for (size_t i = 0; i <= std::size(cases); ++i) std::printf("---|");
    std::printf("\n");

    std::vector<std::vector<std::vector<float>>> ms(std::size(cases),
        std::vector<std::vector<float>>(variants.size()));
    const auto in_of = [&](int c) { return std::string(cases[c].dtype) == "float16" ? h : a; };
    // Warm-up: 400 launches of the heaviest case first, so the SM clock has settled before
    // anything is timed (right after start-up, compute-heavy cases measured up to 15 points low).
    for (int r = 0; r < 400; ++r) CHECK(variants[0].run(l, 5, n, out, a, b));
    CHECK(cudaDeviceSynchronize());
    for (int c = 0; c < int(std::size(cases)); ++c) {
      const int64_t words = n * cases[c].elem_bytes / 4;
      CHECK(variants[0].run(l, c, n, ref, in_of(c), b));
      for (size_t v = 0; v < variants.size(); ++v) {
        CHECK(cudaMemset(out, 0xff, bytes));
        CHECK(variants[v].run(l, c, n, out, in_of(c), b));
        CHECK(cudaMemset(bad, 0, sizeof *bad));
        count_diff<<<1024, 256>>>(static_cast<uint32_t*>(out), static_cast<uint32_t*>(ref), words, bad);
        unsigned long long nbad = 0;
        CHECK(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
        if (nbad) {
          std::fprintf(stderr, "variant %s differs from the default on %s %s: %llu words\n",
                       variants[v].name.c_str(), cases[c].op, cases[c].dtype, nbad);
          return 1;
        }
      }
      for (int r = 0; r < warmup + rounds; ++r) {
        for (size_t v = 0; v < variants.size(); ++v) {
          CHECK(cudaEventRecord(e0));
          CHECK(variants[v].run(l, c, n, out, in_of(c), b));
          CHECK(cudaEventRecord(e1));
          CHECK(cudaEventSynchronize(e1));
          float t;
          CHECK(cudaEventElapsedTime(&t, e0, e1));
          if (r >= warmup) ms[c][v].push_back(t);
        }
      }
    }
    for (size_t v = 0; v < variants.size(); ++v) {
      std::printf("| %s |", variants[v].name.c_str());
      double worst = 1e9;
      for (int c = 0; c < int(std::size(cases)); ++c) {
        const double moved = double(n) * cases[c].elem_bytes * (cases[c].inputs + 1);
        const double pct = 100.0 * moved / (median(ms[c][v]) * 1e-3) / 1e9 / copy_gbs;
        worst = std::min(worst, pct);
        std::printf(" %.1f |", pct);
      }
      std::printf(" %.1f |\n", worst);
    }
    std::fflush(stdout);
    CHECK(cudaFree(a));
    CHECK(cudaFree(h));
    CHECK(cudaFree(b));
    CHECK(cudaFree(out));
    CHECK(cudaFree(ref));
    CHECK(cudaFree(bad));
  }
  return 0;
}
