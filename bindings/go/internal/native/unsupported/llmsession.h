/* Found on every platform but linux/amd64 built without -tags llmsession_system (bindings/go/link_other.go). */
#error "llmsession: the released Go module carries a static library for linux/amd64 only. On this platform install libllmsession (its llmsession.pc on PKG_CONFIG_PATH) and build with -tags llmsession_system (docs/go.md)."
