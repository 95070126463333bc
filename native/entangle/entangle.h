// The entangle FFI handler: a variadic no-op whose outputs alias its payload
// operands. All of its meaning lives in the data dependencies it creates in the
// XLA graph; at run time there is nothing to do.
#ifndef ENTANGLE_JAX_NATIVE_ENTANGLE_H_
#define ENTANGLE_JAX_NATIVE_ENTANGLE_H_

#include "xla/ffi/api/c_api.h"

extern "C" XLA_FFI_Error* EntangleJaxEntangle(XLA_FFI_CallFrame* call_frame);

#endif  // ENTANGLE_JAX_NATIVE_ENTANGLE_H_
