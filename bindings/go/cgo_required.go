//go:build !cgo

package llmsession

// The binding is cgo over the C library: with CGO_ENABLED=0 (or no C compiler) this identifier
// is the first error the build reports.
var _ = llmsession_needs_cgo__build_with_CGO_ENABLED_1_and_a_C_compiler_see_docs_go_md
