package llmsession

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// The typed forms of the calls that return JSON (docs/go.md, "Typed values"): each is the call
// of the same name without "Of", its result decoded into the types of types.go. The raw JSON
// stays available: from the call without "Of", and in the Raw field of the results that have
// one.

// decodeAs decodes raw into a new T (the error of the call, if any, comes back as it is).
func decodeAs[T any](raw json.RawMessage, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, &Error{Code: StatusInternal, Kind: StatusInternal.String(), Message: "cannot decode the library's JSON: " + err.Error()}
	}
	return v, nil
}

// ParseResponseOf is ParseResponse, decoded: the message (its ToolCalls), usage and finish
// reason. Agent.RecordResponse takes the *Response as it is.
func ParseResponseOf(renderer string, body []byte) (*Response, error) {
	return decodeAs[Response](ParseResponse(renderer, body))
}

// UsageFromProviderOf is UsageFromProvider, decoded.
func UsageFromProviderOf(provider string, usage []byte) (*Usage, error) {
	return decodeAs[Usage](UsageFromProvider(provider, usage))
}

// FinishOf is Finish, decoded.
func (s *Stream) FinishOf(partial bool) (*Response, error) {
	return decodeAs[Response](s.Finish(partial))
}

// ReadStreamOf is ReadStream with the response decoded (the rebuilt body stays JSON).
func ReadStreamOf(format string, r io.Reader, onDelta func(Delta)) (*Response, json.RawMessage, error) {
	resp, body, err := ReadStream(format, r, onDelta)
	parsed, err := decodeAs[Response](resp, err)
	if err != nil {
		return nil, nil, err
	}
	return parsed, body, nil
}

// VerifyOf is Verify, decoded.
func (s *Session) VerifyOf() (*VerifyReport, error) {
	raw, err := s.Verify()
	r, err := decodeAs[VerifyReport](raw, err)
	if r != nil {
		r.Raw = raw
	}
	return r, err
}

// VerifyFileOf is VerifyFile, decoded.
func VerifyFileOf(path string) (*VerifyReport, error) {
	raw, err := VerifyFile(path)
	r, err := decodeAs[VerifyReport](raw, err)
	if r != nil {
		r.Raw = raw
	}
	return r, err
}

// LoadReportOf is LoadReport, decoded.
func (s *Session) LoadReportOf() (*LoadReport, error) {
	raw, err := s.LoadReport()
	r, err := decodeAs[LoadReport](raw, err)
	if r != nil {
		r.Raw = raw
	}
	return r, err
}

// HistoryOf is History, decoded: the messages every request carries after the prefix.
func (s *Session) HistoryOf() ([]Message, error) {
	p, err := decodeAs[[]Message](s.History())
	if err != nil {
		return nil, err
	}
	return *p, nil
}

// EventsOf is Events, decoded (each Event keeps its JSON in Raw).
func (s *Session) EventsOf(from uint64, to int64) ([]Event, error) {
	raw, err := s.Events(from, to)
	if err != nil {
		return nil, err
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, &Error{Code: StatusInternal, Kind: StatusInternal.String(), Message: "cannot decode the library's JSON: " + err.Error()}
	}
	out := make([]Event, len(list))
	for i, r := range list {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, &Error{Code: StatusInternal, Kind: StatusInternal.String(), Message: "cannot decode the library's JSON: " + err.Error()}
		}
		out[i].Raw = r
	}
	return out, nil
}

// PrefixOf is Prefix, decoded: nil before the prefix was composed.
func (a *Agent) PrefixOf() ([]Message, error) {
	p, err := decodeAs[[]Message](a.Prefix())
	if err != nil {
		return nil, err
	}
	return *p, nil
}

// RecordBodyOf is RecordBody, and gives the response as the log recorded it: read back from
// the assistant/message event, so a host finds the tool calls to run (Recorded.ToolCalls)
// without parsing the provider body itself, with the response's finish reason
// (Recorded.FinishReason: FinishPauseTurn means the turn is not over), which the log does not
// keep.
func (a *Agent) RecordBodyOf(body []byte) (*Recorded, error) {
	r, err := a.recordBody(body)
	if err != nil {
		return nil, err
	}
	return a.recorded(r.seq, r.finishReason)
}

// RecordStreamOf is RecordStream, and gives the response as the log recorded it, with the
// stream's finish reason (see RecordBodyOf; FinishIncomplete for a cut stream recorded with
// partial).
func (a *Agent) RecordStreamOf(s *Stream, partial bool) (*Recorded, error) {
	r, err := a.recordStream(s, partial)
	if err != nil {
		return nil, err
	}
	return a.recorded(r.seq, r.finishReason)
}

// RecordResponseOf is RecordResponse, and gives the response as the log recorded it (see
// RecordBodyOf), with the finish reason resp carries when it is a Response or *Response.
func (a *Agent) RecordResponseOf(resp any) (*Recorded, error) {
	seq, err := a.RecordResponse(resp)
	if err != nil {
		return nil, err
	}
	finish := ""
	switch r := resp.(type) {
	case *Response:
		if r != nil {
			finish = r.FinishReason
		}
	case Response:
		finish = r.FinishReason
	}
	return a.recorded(seq, finish)
}

// recorded reads the assistant/message event at seq.
func (a *Agent) recorded(seq uint64, finishReason string) (*Recorded, error) {
	evs, err := a.session.EventsOf(seq, int64(seq+1))
	if err != nil {
		return nil, err
	}
	if len(evs) != 1 || evs[0].Type != "assistant/message" {
		return nil, &Error{Code: StatusInternal, Kind: StatusInternal.String(), Message: "the recorded response's event was not found in the log"}
	}
	m, err := evs[0].Message()
	if err != nil || m == nil {
		return nil, &Error{Code: StatusInternal, Kind: StatusInternal.String(), Message: "the recorded response's event carries no message"}
	}
	u, err := evs[0].Usage()
	if err != nil {
		return nil, err
	}
	return &Recorded{Seq: seq, Message: *m, Usage: u, FinishReason: finishReason}, nil
}

// CompactOf is Compact, decoded. A compaction that ran and was rejected is an error whose
// detail's "outcome" holds the outcome (see Compact).
func (a *Agent) CompactOf(ctx context.Context, opts any) (*CompactionOutcome, error) {
	raw, err := a.Compact(ctx, opts)
	r, err := decodeAs[CompactionOutcome](raw, err)
	if r != nil {
		r.Raw = raw
	}
	return r, err
}

// PrefixMessages is Prefix decoded: the session prefix the request will carry.
func (in PreStepInput) PrefixMessages() ([]Message, error) {
	out := make([]Message, len(in.Prefix))
	for i, m := range in.Prefix {
		if err := json.Unmarshal(m, &out[i]); err != nil {
			return nil, fmt.Errorf("llmsession: pre-step input prefix[%d]: %w", i, err)
		}
	}
	return out, nil
}

// ToolList is Tools decoded (nil when the request has none).
func (in PreStepInput) ToolList() ([]Tool, error) {
	if len(in.Tools) == 0 || string(in.Tools) == "null" {
		return nil, nil
	}
	var out []Tool
	if err := json.Unmarshal(in.Tools, &out); err != nil {
		return nil, fmt.Errorf("llmsession: pre-step input tools: %w", err)
	}
	return out, nil
}

// ResponseOf is Response decoded (nil when the answer is not a response).
func (a ReplayAnswer) ResponseOf() (*Response, error) {
	if len(a.Response) == 0 {
		return nil, nil
	}
	var r Response
	if err := json.Unmarshal(a.Response, &r); err != nil {
		return nil, fmt.Errorf("llmsession: replay answer %s: %w", a.ID, err)
	}
	return &r, nil
}
