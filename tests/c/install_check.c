/* Built by `make install-check` against an installed copy, with only
 * `pkg-config --cflags --libs llmsession`. */
#include <llmsession.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    if (lls_abi_version() != LLS_ABI_VERSION) {
        fprintf(stderr, "ABI mismatch: header %d, library %u\n", LLS_ABI_VERSION, lls_abi_version());
        return 1;
    }
    lls_cancel *cancel = NULL;
    lls_error *err = NULL;
    if (lls_cancel_new(&cancel, &err) != LLS_OK) {
        fprintf(stderr, "lls_cancel_new: %s\n", lls_error_message(err));
        lls_error_free(err);
        return 1;
    }
    lls_status st = lls_cancel_trip(NULL, &err);
    int ok = st == LLS_ERR_NULL_POINTER && strstr(lls_error_message(err), "`cancel`") != NULL;
    lls_error_free(err);
    lls_cancel_free(cancel);
    printf("installed llmsession %s (ABI %u): %s\n", lls_version(), lls_abi_version(),
           ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
