package llmsession

// The statuses of the storage foundation (LLS_ERR_LOCKED, LLS_ERR_CONFLICT, LLS_ERR_READ_ONLY),
// for the PostgreSQL store's wrappers (url.go) on the branch that adds them. errors.go defines
// them on main; at the merge, keep errors.go's and delete this file.

// Storage statuses.
const (
	StatusLocked   Status = 18
	StatusConflict Status = 19
	StatusReadOnly Status = 20
)

// Sentinel errors for errors.Is.
var (
	// ErrLocked: another writer holds the session's lock or lease.
	ErrLocked error = StatusLocked
	// ErrConflict: the store refused an append (another writer appended first).
	ErrConflict error = StatusConflict
	// ErrReadOnly: the session was opened read-only.
	ErrReadOnly error = StatusReadOnly
)

func init() {
	statusNames[StatusLocked] = "locked"
	statusNames[StatusConflict] = "conflict"
	statusNames[StatusReadOnly] = "read-only"
}
