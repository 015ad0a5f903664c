<%
  inputs = ', '.join(f'{d.ctype} {i}' for i, d in zip(op.inputs, ins))
  init = ', '.join(f'static_cast<{ptype(p)}>({p.name})' for p in op.params)
  pointers = ''.join(f', static_cast<const {d.ctype}*>({i})' for i, d in zip(op.inputs, ins))
%>\
// generated from ${comment(op.source)} by generator/ -- do not edit
// ${kernel.name}: ${comment(op.doc)}  [${T.name} -> ${Out.name}${', paired' if pair else ''}]
#include "proto/${op.name}.h"
#include "elementwise.cuh"
#include "broadcast.cuh"
% if op.launch == "basic":
#include "map_basic.cuh"
% endif
% if any(e.role == "naive" for e in entries):
#include "naive.cuh"
% endif
#include "fn/${op.name}.cuh"

// The generated code names its own identifiers ew_...; spec names cannot start with that.
namespace {

struct ew_map_fn {
% for p in op.params:
  ${ptype(p)} ew_param_${p.name};
% endfor

  __device__ __forceinline__ ${Out.ctype} operator()(${inputs}) const {
    return ::ew::convert<${Out.ctype}>(::ewf::${op.name}_fn<${Out.ctype}>{}(${call_args}));
  }
% if pair and any(e.role != "naive" for e in entries):

  // paired form (two elements per call), from the spec's 'pair' entry for ${T.name}
  __device__ __forceinline__ ${Out.pair} apply2(${', '.join(f'{T.pair} {i}' for i in op.inputs)}) const {
%   for p in op.params:
    [[maybe_unused]] const ${ptype(p)} ${p.name} = ew_param_${p.name};
%   endfor
    return (${pair});  ${mark}
  }
% endif
};

}  // namespace
% for e in [e for e in entries if e.role == "forward"]:

${abi.head(e)} {
  const ew_map_fn ew_f{${init}};
  // tuning "${tuning}" (the spec's, or the generator's guess from the expression)
  return static_cast<int>(::ew::${launcher}<::ew::${'ComputeBoundTuning' if tuning == 'compute' else 'MemoryBoundTuning'}>(
      ::ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, ew_f, n,
      static_cast<${Out.ctype}*>(out)${pointers}));
}
% endfor
% for e in [e for e in entries if e.role == "strided"]:

// numpy broadcasting and strided inputs; layout: [ndim, shape..., each input's element strides...]
${abi.head(e)} {
  const ew_map_fn ew_f{${init}};
  return static_cast<int>(::ew::${strided_launcher}<::ew::${'ComputeBoundTuning' if tuning == 'compute' else 'MemoryBoundTuning'}>(
      ::ew::Launch{static_cast<cudaStream_t>(stream), sms, threads_per_sm}, ew_f, n, layout,
      static_cast<${Out.ctype}*>(out)${pointers}));
}
% endfor
% for e in [e for e in entries if e.role == "naive"]:

// The naive one-element-per-thread kernel of the same function, for the benchmark library only.
${abi.head(e)} {
  (void)sms;
  (void)threads_per_sm;
  const ew_map_fn ew_f{${init}};
  return static_cast<int>(::ew::launch_naive(static_cast<cudaStream_t>(stream), ew_f, n,
      static_cast<${Out.ctype}*>(out)${pointers}));
}
% endfor
