package llmsession

/*
#include <llmsession.h>
*/
import "C"

import "encoding/json"

// ExplainOptions are the options of Explain and ExplainFile (all optional).
type ExplainOptions struct {
	// Tokenizer is a HuggingFace tokenizer.json to count tokens exactly (default: the
	// built-in estimate).
	Tokenizer string `json:"tokenizer,omitempty"`
	// Prices is a price table (JSON, per "provider" or "provider/model", per million tokens:
	// input, cachedInput, cacheWrite, output): the report then has the cost per request and
	// cause and the cost with no cache (docs/caching.md). Since ABI 2 minor 5.
	Prices json.RawMessage `json:"prices,omitempty"`
	// CacheRules overrides the providers' cache TTLs and minimum cacheable sizes (JSON, per
	// "provider" or "provider/model": ttlSeconds, minTokens). Since ABI 2 minor 5.
	CacheRules json.RawMessage `json:"cacheRules,omitempty"`
	// Tree explains the tree rooted at the session instead: its spawned children and forks,
	// per node and rolled up (docs/caching.md, "Explain across a tree"). For Explain, the
	// children spawned from the session in this process; for ExplainFile, path may be a store
	// URL and the tree is read from the store. Since ABI 2 minor 6.
	Tree bool `json:"tree,omitempty"`
}

// Explain explains every request of the session's log: the cacheable prefix it shares with
// the request the provider could have cached before it, where and why they part (component and
// event), the expected cacheable tokens beside the provider's cached tokens, and the prompt
// spend by cause, as JSON {"session","counter","requests":[...],"totals":{...}}
// (lls_session_explain, docs/caching.md). opts may be nil.
func (s *Session) Explain(opts *ExplainOptions) (json.RawMessage, error) {
	var o []byte
	if opts != nil {
		var err error
		if o, err = toJSON(opts); err != nil {
			return nil, err
		}
	}
	op, on := cbufOpt(o)
	return s.str(func(p *C.lls_session, out **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_session_explain(p, op, on, out, n, e)
	})
}

// ExplainFile explains a stored JSONL log without opening it as a session. opts may be nil.
func ExplainFile(path string, opts *ExplainOptions) (json.RawMessage, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var o []byte
	if opts != nil {
		var err error
		if o, err = toJSON(opts); err != nil {
			return nil, err
		}
	}
	pb := []byte(path)
	pp, pn := cbuf(pb)
	op, on := cbufOpt(o)
	return outString(nil, func(out **C.char, n *C.size_t, e **C.lls_error) C.lls_status {
		return C.lls_explain_file(pp, pn, op, on, out, n, e)
	})
}
