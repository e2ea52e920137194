#include "shim.h"
#include "_cgo_export.h"

/* The binding call running on this thread (a cgo.Handle of its Go state, 0 for none). The
 * library calls back only on the thread that made the call, so the trampoline reads it here and
 * hands it to the Go callback: no goroutine identity is needed. */
static _Thread_local uintptr_t goshim_op;

uintptr_t goshim_op_swap(uintptr_t op) {
    uintptr_t prev = goshim_op;
    goshim_op = op;
    return prev;
}

static int32_t goshim_callback(void *userdata, const char *in, size_t in_len, lls_reply *reply) {
    return llsGoCallback(userdata, (char *)in, in_len, reply, goshim_op);
}

static void goshim_free(void *userdata) { llsGoUserdataFree(userdata); }

lls_status goshim_agent_register(lls_agent *agent, int what, uintptr_t handle, lls_error **err) {
    void *ud = (void *)handle;
    switch (what) {
    case GOSHIM_PREFIX:
        return lls_agent_add_prefix_listener(agent, goshim_callback, ud, goshim_free, err);
    case GOSHIM_PRE_STEP:
        return lls_agent_add_pre_step_listener(agent, goshim_callback, ud, goshim_free, err);
    case GOSHIM_SUMMARISER:
        return lls_agent_set_summariser(agent, goshim_callback, ud, goshim_free, err);
    default:
        return lls_agent_set_token_counter(agent, goshim_callback, ud, goshim_free, err);
    }
}

lls_status goshim_open_store(uintptr_t handle, const char *opts, size_t opts_len, lls_session **out,
                             lls_error **err) {
    return lls_session_open_store(goshim_callback, (void *)handle, goshim_free, opts, opts_len, out, err);
}

lls_status goshim_store_conformance(uintptr_t handle, const char *opts, size_t opts_len, char **out,
                                    size_t *out_len, lls_error **err) {
    return lls_store_conformance(goshim_callback, (void *)handle, goshim_free, opts, opts_len, out, out_len,
                                 err);
}

lls_status goshim_callback_invoke(uintptr_t handle, const char *in, size_t in_len,
                                  const lls_cancel *cancel, char **out, size_t *out_len,
                                  lls_error **err) {
    return lls_callback_invoke(goshim_callback, (void *)handle, goshim_free, in, in_len, cancel, out,
                               out_len, err);
}
