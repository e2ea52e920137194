//go:build !(linux && amd64) && !llmsession_system

package llmsession

// The released module carries a static library for linux/amd64 only. Elsewhere the binding
// needs the library installed (its llmsession.pc on PKG_CONFIG_PATH) and -tags
// llmsession_system; without the tag, the header found is internal/native/unsupported/
// llmsession.h, whose #error says so.

/*
#cgo CFLAGS: -I${SRCDIR}/internal/native/unsupported
*/
import "C"
