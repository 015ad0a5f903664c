// generated from ${op.source} by generator/ -- do not edit
// ${kernel.name}: ${op.doc}  [${T.name} -> ${Out.name}${', paired' if pair else ''}]
#include "ew.h"
#include "elementwise.cuh"
#include "naive.cuh"
#include "fn/${op.name}.cuh"

namespace {

struct Fn {
% for p in op.params:
  ${ptype(p)} ${p.name};
% endfor

  __device__ __forceinline__ ${Out.ctype} operator()(${', '.join(f'{T.ctype} {i}' for i in op.inputs)}) const {
    return ew::convert<${Out.ctype}>(ewf::${op.name}_fn<${Out.ctype}>{}(${call_args}));
  }
% if pair:

  // paired form (two elements per call), from the spec's 'pair' entry for ${T.name}
  __device__ __forceinline__ ${Out.pair} apply2(${', '.join(f'{T.pair} {i}' for i in op.inputs)}) const {
    return (${pair});
  }
% endif
};

}  // namespace

${abi.head(entry)} {
  const Fn f{${', '.join(f'static_cast<{ptype(p)}>({p.name})' for p in op.params)}};
  // tuning "${tuning}" (the spec's, or the generator's guess from the expression)
  return static_cast<int>(ew::launch_map<ew::${'ComputeBoundTuning' if tuning == 'compute' else 'MemoryBoundTuning'}>(
      ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, f, n,
      static_cast<${Out.ctype}*>(out)${''.join(f', static_cast<const {T.ctype}*>({i})' for i in op.inputs)}));
}
% for e in [e for e in entries if e.role == "naive"]:

// The seeds' naive one-element-per-thread kernel of the same Fn: the benchmark's baseline only.
${abi.head(e)} {
  (void)sms;
  (void)threads_per_sm;
  const Fn f{${', '.join(f'static_cast<{ptype(p)}>({p.name})' for p in op.params)}};
  return static_cast<int>(ew::launch_naive(static_cast<cudaStream_t>(stream), f, n,
      static_cast<${Out.ctype}*>(out)${''.join(f', static_cast<const {T.ctype}*>({i})' for i in op.inputs)}));
}
% endfor
