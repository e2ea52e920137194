//go:build linux && amd64 && !llmsession_system

package llmsession

// Without a tag, on linux/amd64, the binding links the static library the released module
// version carries (internal/native/linux_amd64: libllmsession.a without debug info and
// llmsession.h, written by scripts/dist/go.sh; `go get` is all it takes, nothing else
// installed). The repository does not hold them: built from a checkout without
// -tags llmsession_system, the header found is internal/native/missing/llmsession.h, whose
// #error says so. The system libraries are the Makefile's NATIVE_STATIC_LIBS.

/*
#cgo CFLAGS: -I${SRCDIR}/internal/native/linux_amd64 -I${SRCDIR}/internal/native/missing
#cgo LDFLAGS: ${SRCDIR}/internal/native/linux_amd64/libllmsession.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
*/
import "C"
