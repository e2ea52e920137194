package llmsession

/*
#include <stdlib.h>
#include <llmsession.h>
*/
import "C"

import "encoding/json"

// URLOptions are the options of OpenURL (all optional).
type URLOptions struct {
	// ID names the session: which one of a database to open, or the id a created session
	// gets. A writing open of a database without one (and without ?session= in the URL)
	// creates a session with a random id (Session.ID tells it).
	ID string
	// ReadOnly opens without the lock or lease: nothing is written, appends fail with
	// ErrReadOnly.
	ReadOnly bool
	// MustExist refuses to create a missing session (ErrInvalidInput).
	MustExist bool
	// Durability is "every-event", "turn-end" (the default) or "never".
	Durability string
	// Check is how an open checks the stored log: "bounded" (the default: from its last
	// checkpoint) or "full" (all of it). Since ABI 2 minor 6.
	Check string
	// Checkpoints: when the session writes checkpoints (nil: the defaults). Since ABI 2 minor 6.
	Checkpoints *Checkpoints
	// Mode and MaxBytes concern files only: the permission bits of a created log ("0600")
	// and the largest log read.
	Mode     string
	MaxBytes uint64
}

func (o *URLOptions) json() []byte {
	if o == nil {
		return nil
	}
	m := map[string]any{}
	if o.ID != "" {
		m["id"] = o.ID
	}
	if o.ReadOnly {
		m["readOnly"] = true
	}
	if o.MustExist {
		m["create"] = false
	}
	if o.Durability != "" {
		m["durability"] = o.Durability
	}
	if o.Check != "" {
		m["check"] = o.Check
	}
	if o.Checkpoints != nil {
		m["checkpoints"] = *o.Checkpoints
	}
	if o.Mode != "" {
		m["mode"] = o.Mode
	}
	if o.MaxBytes != 0 {
		m["maxBytes"] = o.MaxBytes
	}
	b, _ := json.Marshal(m)
	return b
}

// OpenURL opens (or, for a writer, creates) a session in the store a URL names: "file:PATH"
// (a JSONL log) or "postgres://user:password@host:port/dbname?session=ID" (a PostgreSQL
// database; the host may be %2F-encoded unix socket directory). A second writer gets an error
// matching ErrLocked; a broken database connection makes the session refuse writes (ErrStorage)
// until it is closed and opened again. See lls_session_open_url.
func OpenURL(url string, opts *URLOptions) (*Session, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	ub := []byte(url)
	up, un := cbuf(ub)
	op, on := cbufOpt(opts.json())
	var p *C.lls_session
	err := call(nil, func(e **C.lls_error) C.lls_status { return C.lls_session_open_url(up, un, op, on, &p, e) })
	if err != nil {
		return nil, err
	}
	return wrapSession(p), nil
}

// StoredSession is one session of a store, as ListSessions reports it.
type StoredSession struct {
	ID        string        `json:"id"`
	CreatedAt uint64        `json:"createdAt"` // Unix ms
	Parent    *StoredParent `json:"parent,omitempty"`
	Events    uint64        `json:"events"`
	ChainHead string        `json:"chainHead,omitempty"`
	UpdatedAt uint64        `json:"updatedAt"` // Unix ms
	InUse     bool          `json:"inUse"`     // a writer holds it now
}

// StoredParent is the parent of a forked or spawned session.
type StoredParent struct {
	ID         string `json:"id"`
	SeedLength uint64 `json:"seedLength"`
	Spawned    bool   `json:"spawned"`          // a child an agent spawned (else a fork)
	CallID     string `json:"callId,omitempty"` // the parent's call a child answers
}

// ListOptions page through ListSessions: sessions whose id sorts after After, at most Limit
// of them (0: no limit); with Parent, only that session's children and forks (for a file,
// those beside it named after it).
type ListOptions struct {
	After  string
	Limit  uint64
	Parent string
}

// ListSessions lists the sessions of the store a URL names, ordered by id (a file holds one or
// none). Nothing is written. See lls_store_list_sessions.
func ListSessions(url string, opts *ListOptions) ([]StoredSession, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var o []byte
	if opts != nil {
		m := map[string]any{}
		if opts.After != "" {
			m["after"] = opts.After
		}
		if opts.Limit != 0 {
			m["limit"] = opts.Limit
		}
		if opts.Parent != "" {
			m["parent"] = opts.Parent
		}
		o, _ = json.Marshal(m)
	}
	ub := []byte(url)
	up, un := cbuf(ub)
	op, on := cbufOpt(o)
	out, err := outString(nil, func(p **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_store_list_sessions(up, un, op, on, p, n, e)
	})
	if err != nil {
		return nil, err
	}
	var list []StoredSession
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// ForkURL forks the session into the store a URL names (for a database: a new session in it,
// under opts.ID or a random id). opts.Path must be empty.
func (s *Session) ForkURL(url string, opts *ForkOptions) (*Session, error) {
	m := map[string]any{"url": url}
	if opts != nil {
		b, _ := toJSON(opts)
		_ = json.Unmarshal(b, &m)
		m["url"] = url
	}
	b, _ := json.Marshal(m)
	op, on := cbuf(b)
	var out *C.lls_session
	if err := s.with(nil, func(p *C.lls_session, e **C.lls_error) C.lls_status {
		return C.lls_session_fork(p, op, on, &out, e)
	}); err != nil {
		return nil, err
	}
	return wrapSession(out), nil
}
