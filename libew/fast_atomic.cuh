// FastAtomicAdd, after PyTorch's fastAtomicAdd (ATen/native/cuda/KernelUtils.cuh): a
// float16/bfloat16 atomic add done as a 32-bit paired atomic (half2 / bfloat162) on the aligned
// pair that holds the element. A 16-bit atomic add is much slower than the paired one on the GPUs
// this targets, so the lone value is added together with a neutral value for its neighbour in the
// pair.
//  * The neighbour gets -0, where PyTorch's gets +0: x + (-0) == x for every x, signed zeros
//    included, whereas (-0) + (+0) == +0 would flip a neighbour's -0 to +0 that no one asked to
//    change.
//  * As in PyTorch's, the neighbour is used only when it lies inside the destination: `length` is
//    the number of elements of the destination starting at `base`, so the first element (offset 0,
//    at an odd address) and the last one (at an even address) fall back to the 16-bit atomic and
//    never touch memory outside the buffer, which may belong to someone else or not exist at all.
// float and double go straight to the hardware atomic.
#pragma once
#include "ew_types.cuh"

namespace ew {

template <typename T>
__device__ __forceinline__ void fast_atomic_add(T* base, int64_t offset, int64_t length, T value) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    using P = pair_t<T>;
    T* target = base + offset;
    const T neutral = convert<T>(-0.0f);
    if (aligned_to(target, sizeof(P)) && offset + 1 < length) {
      P v;
      v.x = value;      // target is the low half of its pair; its upper neighbour is in bounds
      v.y = neutral;
      atomicAdd(reinterpret_cast<P*>(target), v);
    } else if (!aligned_to(target, sizeof(P)) && offset > 0) {
      P v;
      v.x = neutral;    // target is the high half; its lower neighbour is in bounds
      v.y = value;
      atomicAdd(reinterpret_cast<P*>(target - 1), v);
    } else {
      atomicAdd(target, value);   // the pair would reach outside the destination
    }
  } else {
    atomicAdd(base + offset, value);
  }
}

}  // namespace ew
