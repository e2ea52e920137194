//go:build llmsession_system

package llmsession

// With -tags llmsession_system the binding links the library pkg-config finds (llmsession.pc):
// an installed library (make install, a distribution's package) or the checkout's build
// (make go-pc writes build/pkgconfig/llmsession.pc). Every in-tree Go build uses this tag.

/*
#cgo pkg-config: llmsession
*/
import "C"
