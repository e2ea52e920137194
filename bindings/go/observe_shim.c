/* The C side of the Go binding's observer (observe.go): the library calls goshim_observe with a
 * cgo.Handle as userdata (passed as uintptr_t, as in shim.c). */
#include <stdint.h>
#include <llmsession.h>
#include "_cgo_export.h"

static void goshim_observe(void *userdata, int32_t level, const char *json, size_t len) {
    llsGoObserve(userdata, level, (char *)json, len);
}

static void goshim_observer_free(void *userdata) { llsGoObserverFree(userdata); }

lls_status goshim_set_observer(uintptr_t handle, int32_t min_level, lls_error **err) {
    if (handle == 0) {
        return lls_set_observer(NULL, NULL, NULL, min_level, err);
    }
    return lls_set_observer(goshim_observe, (void *)handle, goshim_observer_free, min_level, err);
}
