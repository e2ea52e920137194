/* C helpers of the Go binding: register the exported Go trampolines with a cgo.Handle as
 * userdata (passed as uintptr_t so that no Go code converts an integer to a pointer). */
#ifndef LLMSESSION_GO_SHIM_H
#define LLMSESSION_GO_SHIM_H
#include <stdint.h>
#include <llmsession.h>

/* Sets the binding call running on this thread (see shim.c) and returns the previous one; the
 * caller keeps its goroutine locked to the thread from the swap to the swap back. */
uintptr_t goshim_op_swap(uintptr_t op);

enum { GOSHIM_PREFIX = 0, GOSHIM_PRE_STEP = 1, GOSHIM_SUMMARISER = 2, GOSHIM_TOKEN_COUNTER = 3 };

lls_status goshim_agent_register(lls_agent *agent, int what, uintptr_t handle, lls_error **err);
lls_status goshim_open_store(uintptr_t handle, const char *opts, size_t opts_len, lls_session **out,
                             lls_error **err);
lls_status goshim_store_conformance(uintptr_t handle, const char *opts, size_t opts_len, char **out,
                                    size_t *out_len, lls_error **err);
lls_status goshim_callback_invoke(uintptr_t handle, const char *in, size_t in_len,
                                  const lls_cancel *cancel, char **out, size_t *out_len,
                                  lls_error **err);
#endif
