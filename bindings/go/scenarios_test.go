package llmsession

// The shared scenario files (tests/scenarios/*.json, docs/scenarios.md) run through the Go
// binding, with the declarative listeners and summarisers implemented as Go funcs.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

type lstate struct {
	index int // its position among the listeners (or pre-step listeners)
	spec  map[string]any
	mu    sync.Mutex
	calls int
	held  []json.RawMessage
}

func (l *lstate) kind(def string) string {
	if k, ok := l.spec["kind"].(string); ok {
		return k
	}
	return def
}

// next counts a call and reports whether it behaves as its kind says (within "times").
func (l *lstate) next() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.calls
	l.calls++
	if t, ok := l.spec["times"].(float64); ok {
		return float64(n) < t
	}
	return true
}

func (l *lstate) heldCopy() []json.RawMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]json.RawMessage(nil), l.held...)
}

type summaryRec struct {
	json   []byte
	shared int
}

type world struct {
	t            *testing.T
	session      *Session
	agent        *Agent
	options      map[string]any
	listeners    []*lstate
	preSteps     []*lstate
	mu           sync.Mutex
	preStepSeen  []any
	summaries    []summaryRec
	summariser   any
	policy       any
	requests     []map[string]any
	requestRaw   [][]json.RawMessage
	requestMarks []int
	lastRequest  map[string]any
	lastMsgs     []json.RawMessage
	cur          *Cancel // the running operation's token
	closers      []func()
	counter      any    // the host token counter's spec (counter, setCounter), or nil
	disposed     bool   // a callback disposed the instance during the running op
	dir          string // where load writes the logs it opens
	loads        int
	calls        []any          // what the fakes received during the running op, in call order
	counterCalls int            // items the host token counter counted during the running op
	out          map[string]any // the running op's transcript entry
}

// record sets the running op's outcome: "ok", or "error" with the error.
func (w *world) record(err error) {
	if err == nil {
		w.out["outcome"] = "ok"
		return
	}
	w.out["outcome"] = "error"
	w.out["error"] = errorValue(err)
}

// journal notes a fake's call for the transcript.
func (w *world) journal(call map[string]any) {
	w.mu.Lock()
	w.calls = append(w.calls, call)
	w.mu.Unlock()
}

func rawList(v any) []json.RawMessage {
	a, _ := v.([]any)
	out := make([]json.RawMessage, 0, len(a))
	for _, m := range a {
		b, _ := json.Marshal(m)
		out = append(out, b)
	}
	return out
}

func mkState(i int, v any) *lstate {
	m, _ := v.(map[string]any)
	return &lstate{index: i, spec: m, held: rawList(m["messages"])}
}

func (w *world) setListeners(listeners, pre any) {
	if a, ok := listeners.([]any); ok {
		w.listeners = nil
		for i, v := range a {
			w.listeners = append(w.listeners, mkState(i, v))
		}
	}
	if a, ok := pre.([]any); ok {
		w.preSteps = nil
		for i, v := range a {
			w.preSteps = append(w.preSteps, mkState(i, v))
		}
	}
}

func (w *world) trip() {
	w.mu.Lock()
	c := w.cur
	w.mu.Unlock()
	if c != nil {
		_ = c.Trip()
	}
}

func joinMsgs(a, b []json.RawMessage) json.RawMessage {
	all := append(append([]json.RawMessage{}, a...), b...)
	out, _ := json.Marshal(all)
	return out
}

func (w *world) prefixListener(l *lstate, agent *Agent, session *Session) func(context.Context, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
		w.journal(map[string]any{"callback": "prefix", "listener": l.index, "input": decode(raw)})
		var in PrefixInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, err
		}
		active := l.next()
		held := l.heldCopy()
		switch k := l.kind("delegate"); {
		case k == "prepend":
			return joinMsgs(held, in.Rest), nil
		case k == "append":
			return joinMsgs(in.Rest, held), nil
		case k == "delegate":
			return joinMsgs(nil, in.Rest), nil
		case k == "fail" && active:
			msg, ok := l.spec["message"].(string)
			if !ok {
				msg = "listener failed"
			}
			return nil, errors.New(msg)
		case k == "invalid" && active:
			return json.Marshal(l.spec["output"])
		case k == "cancel" && active:
			w.trip()
			return joinMsgs(held, in.Rest), nil
		case k == "dispose" && active:
			w.noteDisposed()
			if err := agent.Dispose(); err != nil {
				return nil, err
			}
			return joinMsgs(nil, in.Rest), nil
		case k == "append-event":
			if active {
				for _, m := range rawList(l.spec["events"]) {
					if _, err := session.AppendContext(m); err != nil {
						return nil, err
					}
				}
			}
			return joinMsgs(held, in.Rest), nil
		default:
			return joinMsgs(held, in.Rest), nil
		}
	}
}

func (w *world) noteDisposed() {
	w.mu.Lock()
	w.disposed = true
	w.mu.Unlock()
}

func (w *world) preStep(l *lstate, agent *Agent, session *Session) PreStepListener {
	return func(ctx context.Context, in PreStepInput) error {
		active := l.next()
		var v any
		_ = json.Unmarshal(in.Raw, &v)
		w.mu.Lock()
		w.preStepSeen = append(w.preStepSeen, v)
		w.mu.Unlock()
		w.journal(map[string]any{"callback": "preStep", "listener": l.index, "input": v})
		switch k := l.kind("record"); {
		case k == "inject" && active:
			for _, m := range rawList(l.spec["messages"]) {
				if _, err := session.AppendContext(m); err != nil {
					return err
				}
			}
		case k == "fail" && active:
			return errors.New("pre-step failed")
		case k == "cancel" && active:
			w.trip()
		case k == "dispose" && active:
			w.noteDisposed()
			return agent.Dispose()
		}
		return nil
	}
}

func (w *world) makeSummariser(spec any, agent *Agent, session *Session) Summariser {
	m, _ := spec.(map[string]any)
	st := &lstate{spec: m}
	return func(ctx context.Context, in SummaryInput) (SummaryOutput, error) {
		w.mu.Lock()
		w.summaries = append(w.summaries, summaryRec{json: append([]byte(nil), in.Request...), shared: in.SharedMessages})
		w.mu.Unlock()
		var count any
		if m := splitMessages(in.Request); m != nil {
			count = len(m)
		}
		w.journal(map[string]any{"callback": "summariser", "input": map[string]any{
			"digest": in.Digest, "provider": in.Provider, "model": in.Model, "maxTokens": in.MaxTokens,
			"sharedMessages": in.SharedMessages, "prefixLen": in.PrefixLen, "bytes": len(in.Request), "messageCount": count}})
		active := st.next()
		text, ok := m["text"].(string)
		if !ok {
			text = "Summary of the work so far."
		}
		out := SummaryOutput{Text: text}
		if u, ok := m["usage"]; ok {
			out.Usage, _ = json.Marshal(u)
		}
		switch k := st.kind("fixed"); {
		case k == "fail" && active:
			return out, errors.New("summariser unavailable")
		case k == "empty" && active:
			out.Text = "   "
		case k == "truncated" && active:
			out.Truncated = true
		case k == "long" && active:
			out.Text = strings.Repeat("very long summary ", 20000)
		case k == "cancel" && active:
			w.trip()
			return out, errors.New("cancelled")
		case k == "append-during" && active:
			if err := appendHost(session, m["messages"]); err != nil {
				return out, err
			}
		case k == "dispose" && active:
			w.noteDisposed()
			if err := agent.Dispose(); err != nil {
				return out, err
			}
		}
		return out, nil
	}
}

// appendHost appends each message to the session as host context (a user/message event with
// source "host").
func appendHost(session *Session, messages any) error {
	for _, msg := range rawList(messages) {
		ev := map[string]any{"type": "user/message", "data": map[string]any{"message": msg, "source": "host"}, "surfaceOp": "append"}
		if _, err := session.Append(ev); err != nil {
			return err
		}
	}
	return nil
}

// stringChars counts the characters of every string in a decoded JSON value (keys left out).
func stringChars(v any) int {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x)
	case []any:
		n := 0
		for _, e := range x {
			n += stringChars(e)
		}
		return n
	case map[string]any:
		n := 0
		for _, e := range x {
			n += stringChars(e)
		}
		return n
	}
	return 0
}

// makeCounter is a host token counter (docs/scenarios.md, "Token counters").
func (w *world) makeCounter(spec any, agent *Agent, session *Session) TokenCounter {
	m, _ := spec.(map[string]any)
	st := &lstate{spec: m}
	per := 4
	if p, ok := m["perToken"].(float64); ok && p >= 1 {
		per = int(p)
	}
	return func(ctx context.Context, item json.RawMessage) (int, error) {
		w.mu.Lock()
		w.counterCalls++
		w.mu.Unlock()
		active := st.next()
		var v any
		if err := json.Unmarshal(item, &v); err != nil {
			return 0, err
		}
		n := (stringChars(v) + per - 1) / per
		switch k := st.kind("chars"); {
		case k == "fail" && active:
			return 0, errors.New("token counter failed")
		case k == "append-during" && active:
			if err := appendHost(session, m["messages"]); err != nil {
				return 0, err
			}
		case k == "dispose" && active:
			w.noteDisposed()
			if err := agent.Dispose(); err != nil {
				return 0, err
			}
		}
		return n, nil
	}
}

func (w *world) newAgent() error {
	a, err := NewAgent(w.session, w.options)
	if err != nil {
		return err
	}
	session := w.session
	for _, l := range w.listeners {
		if err := a.AddPrefixListenerRaw(w.prefixListener(l, a, session)); err != nil {
			return err
		}
	}
	for _, l := range w.preSteps {
		if err := a.AddPreStepListener(w.preStep(l, a, session)); err != nil {
			return err
		}
	}
	if w.policy != nil {
		if err := a.SetPolicy(w.policy); err != nil {
			a.Close()
			return err
		}
	}
	spec := w.summariser
	if spec == nil {
		spec = map[string]any{"kind": "fixed"}
	}
	if err := a.SetSummariser(w.makeSummariser(spec, a, session)); err != nil {
		return err
	}
	if w.counter != nil {
		if err := a.SetTokenCounter(w.makeCounter(w.counter, a, session)); err != nil {
			return err
		}
	}
	w.agent = a
	return nil
}

func (w *world) dropAgent() error {
	if w.agent == nil {
		return nil
	}
	err := w.agent.Dispose()
	w.agent.Close()
	w.agent = nil
	return err
}

func (w *world) needAgent() (*Agent, error) {
	if w.agent == nil {
		return nil, errors.New("no live agent (disposed?)")
	}
	return w.agent, nil
}

// ---- JSON helpers ----

func pointer(doc any, p string) (any, bool) {
	if p == "" {
		return doc, true
	}
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func matches(got any, present bool, want any) bool {
	if m, ok := want.(map[string]any); ok && len(m) > 0 {
		all := true
		for k := range m {
			if !strings.HasPrefix(k, "$") {
				all = false
			}
		}
		if all {
			for k, arg := range m {
				switch k {
				case "$contains":
					g, ok1 := got.(string)
					a, ok2 := arg.(string)
					if !present || !ok1 || !ok2 || !strings.Contains(g, a) {
						return false
					}
				case "$absent":
					b, ok := arg.(bool)
					if !ok {
						b = true
					}
					if !present != b {
						return false
					}
				case "$gt", "$lt":
					g, ok1 := got.(float64)
					a, ok2 := arg.(float64)
					if !present || !ok1 || !ok2 || (k == "$gt" && !(g > a)) || (k == "$lt" && !(g < a)) {
						return false
					}
				default:
					return false
				}
			}
			return true
		}
	}
	return present && reflect.DeepEqual(got, want)
}

func clip(v any) string {
	b, _ := json.Marshal(v)
	s := []rune(string(b))
	if len(s) > 300 {
		return fmt.Sprintf("%s… (%d characters)", string(s[:300]), len(s))
	}
	return string(s)
}

func checkPointers(what string, doc any, ptrs any) error {
	m, _ := ptrs.(map[string]any)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, p := range keys {
		want := m[p]
		got, present := pointer(doc, p)
		if !matches(got, present, want) {
			g := "(absent)"
			if present {
				g = clip(got)
			}
			return fmt.Errorf("%s: at %s: expected %s, got %s", what, p, clip(want), g)
		}
	}
	return nil
}

func expand(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if r, ok := x["$repeat"]; ok {
			return strings.Repeat(r.(string), int(x["times"].(float64)))
		}
		for k, e := range x {
			x[k] = expand(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = expand(e)
		}
		return x
	}
	return v
}

func decode(b []byte) any {
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

func (w *world) checkError(op map[string]any, err error) error {
	w.record(err)
	want, has := op["expectError"].(map[string]any)
	switch {
	case !has && err == nil:
		return nil
	case !has:
		return fmt.Errorf("unexpected error: %v", err)
	case err == nil:
		return fmt.Errorf("expected an error %s, got success", clip(want))
	}
	var le *Error
	if !errors.As(err, &le) {
		return fmt.Errorf("expected a library error, got %v", err)
	}
	if k, ok := want["kind"].(string); ok && k != le.Kind {
		return fmt.Errorf("expected error kind %s, got %v", k, err)
	}
	if c, ok := want["contains"].(string); ok && !strings.Contains(le.Message, c) {
		return fmt.Errorf("expected the error message to contain %q, got %v", c, err)
	}
	return nil
}

func splitMessages(env []byte) []json.RawMessage {
	var e struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(env, &e)
	return e.Messages
}

func rawPrefix(short, long []json.RawMessage) bool {
	if len(short) > len(long) {
		return false
	}
	for i := range short {
		if !bytes.Equal(short[i], long[i]) {
			return false
		}
	}
	return true
}

func userMsg(v any) any {
	if s, ok := v.(string); ok {
		return UserText(s)
	}
	return v
}

// ---- ops ----

func (w *world) opCtx() context.Context {
	c, err := NewCancel()
	if err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	old := w.cur
	w.cur = c
	w.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return WithCancel(context.Background(), c)
}

func (w *world) checkRequest(req map[string]any, msgs []json.RawMessage, exp map[string]any) error {
	if err := checkPointers("request", req, exp["pointers"]); err != nil {
		return err
	}
	if eq, ok := exp["equals"]; ok && !reflect.DeepEqual(eq, any(req)) {
		return fmt.Errorf("request differs:\n  expected %s\n  got      %s", clip(eq), clip(req))
	}
	if n, ok := exp["messageCount"].(float64); ok && int(n) != len(msgs) {
		return fmt.Errorf("expected %v messages, got %d", n, len(msgs))
	}
	if a, ok := exp["absent"].([]any); ok {
		for _, p := range a {
			if v, present := pointer(req, p.(string)); present {
				return fmt.Errorf("expected %s to be absent, got %s", p, clip(v))
			}
		}
	}
	if texts, ok := exp["historyExcludes"].([]any); ok {
		plen := 0
		if n, ok := exp["prefixLen"].(float64); ok {
			plen = int(n)
		}
		var hist strings.Builder
		for _, m := range msgs[plen:] {
			hist.Write(m)
		}
		for _, t := range texts {
			if strings.Contains(hist.String(), t.(string)) {
				return fmt.Errorf("history contains %q", t)
			}
		}
	}
	if b, _ := exp["extendsPrevious"].(bool); b {
		if w.lastRequest == nil {
			return errors.New("extendsPrevious: there is no previous request")
		}
		for _, k := range []string{"provider", "model", "system", "tools", "temperature", "maxTokens", "reasoningEffort", "stop"} {
			if !reflect.DeepEqual(w.lastRequest[k], req[k]) {
				return fmt.Errorf("extendsPrevious: field %s differs: %s vs %s", k, clip(w.lastRequest[k]), clip(req[k]))
			}
		}
		if !rawPrefix(w.lastMsgs, msgs) {
			return fmt.Errorf("extendsPrevious: the previous request's %d messages are not a prefix of this one's %d", len(w.lastMsgs), len(msgs))
		}
	}
	return nil
}

// runOp runs one op; an instance a callback disposed during it is dropped afterwards.
func (w *world) runOp(op map[string]any) error {
	err := w.runOpInner(op)
	w.mu.Lock()
	disposed := w.disposed
	w.disposed = false
	w.mu.Unlock()
	if disposed && w.agent != nil {
		w.agent.Close()
		w.agent = nil
	}
	return err
}

func (w *world) runOpInner(op map[string]any) error {
	name, _ := op["op"].(string)
	switch name {
	case "turn":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		_, err = a.StartTurn(userMsg(op["user"]))
		return w.checkError(op, err)
	case "request":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		ctx := w.opCtx()
		if c, _ := op["cancelled"].(bool); c {
			w.trip()
		}
		r, err := a.NextRequest(ctx)
		if errors.Is(err, ErrDisposed) {
			w.agent.Close()
			w.agent = nil
		}
		if err == nil {
			info, _ := json.Marshal(r.Info)
			w.out["request"] = decode(info)
			exp, _ := op["expect"].(map[string]any)
			if n, ok := exp["prefixLen"].(float64); ok && int(n) != r.Info.PrefixLen {
				return fmt.Errorf("expected prefixLen %v, got %d", n, r.Info.PrefixLen)
			}
			if n, ok := exp["sharedMessages"].(float64); ok && int(n) != r.Info.SharedMessages {
				return fmt.Errorf("expected sharedMessages %v, got %d", n, r.Info.SharedMessages)
			}
			req, _ := decode(r.Envelope).(map[string]any)
			msgs := splitMessages(r.Envelope)
			if e := w.checkRequest(req, msgs, exp); e != nil {
				return e
			}
			w.requests = append(w.requests, req)
			w.requestRaw = append(w.requestRaw, msgs)
			w.mu.Lock()
			w.requestMarks = append(w.requestMarks, len(w.summaries))
			w.mu.Unlock()
			w.lastRequest, w.lastMsgs = req, msgs
		}
		return w.checkError(op, err)
	case "respond":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		msg := op["message"]
		if msg == nil {
			content := []any{}
			if t, ok := op["text"].(string); ok {
				content = append(content, map[string]any{"type": "text", "text": t})
			}
			if calls, ok := op["toolCalls"].([]any); ok {
				for _, c := range calls {
					cm := c.(map[string]any)
					args, ok := cm["arguments"].(string)
					if !ok {
						args = "{}"
					}
					content = append(content, map[string]any{"type": "tool-call", "id": cm["id"], "name": cm["name"], "arguments": args})
				}
			}
			msg = map[string]any{"role": "assistant", "content": content}
		}
		resp := map[string]any{"message": msg}
		if u, ok := op["usage"]; ok {
			resp["usage"] = u
		}
		_, err = a.RecordResponse(resp)
		return w.checkError(op, err)
	case "toolResult":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		res := map[string]any{"callId": op["callId"]}
		if res["callId"] == nil {
			res["callId"] = ""
		}
		if c, ok := op["content"]; ok {
			res["content"] = c
		} else if t, ok := op["text"].(string); ok {
			res["text"] = t
		} else {
			res["text"] = "ok"
		}
		if e, ok := op["isError"].(bool); ok {
			res["isError"] = e
		}
		_, err = a.RecordToolResult(res)
		return w.checkError(op, err)
	case "inject":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		_, _, err = a.Inject(userMsg(op["user"]))
		return w.checkError(op, err)
	case "providerError":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		msg, ok := op["message"].(string)
		if !ok {
			msg = "provider error"
		}
		overflow, _ := op["overflow"].(bool)
		retry, err := a.ProviderError(w.opCtx(), msg, overflow)
		if err == nil {
			got := "recorded"
			if retry {
				got = "retry"
			}
			w.out["providerError"] = got
			if want, ok := op["expectOutcome"].(string); ok {
				if got != want {
					return fmt.Errorf("expected outcome %s, got %s", want, got)
				}
			}
		}
		return w.checkError(op, err)
	case "endTurn":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		reason, ok := op["reason"].(string)
		if !ok {
			reason = "completed"
		}
		return w.checkError(op, a.EndTurn(reason))
	case "setOptions":
		o := map[string]any{}
		for k, v := range w.options {
			o[k] = v
		}
		if s, ok := op["system"]; ok {
			if s == nil {
				delete(o, "system")
			} else {
				o["system"] = s
			}
		}
		if t, ok := op["tools"]; ok {
			o["tools"] = t
		}
		if c, ok := op["config"]; ok {
			o["config"] = c
		}
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		// Invalid options are the op's error (the library names them) and change nothing.
		err = a.SetOptions(o)
		if err == nil {
			w.options = o
		}
		return w.checkError(op, err)
	case "mutateListener":
		i := 0
		if n, ok := op["index"].(float64); ok {
			i = int(n)
		}
		if i >= len(w.listeners) {
			return errors.New("no such listener")
		}
		text, ok := op["text"].(string)
		if !ok {
			text = "mutated"
		}
		l := w.listeners[i]
		l.mu.Lock()
		for j, m := range l.held {
			var mm map[string]any
			_ = json.Unmarshal(m, &mm)
			mm["content"] = []any{map[string]any{"type": "text", "text": text}}
			l.held[j], _ = json.Marshal(mm)
		}
		l.mu.Unlock()
		return nil
	case "resume":
		if err := w.dropAgent(); err != nil {
			return err
		}
		if reload, ok := op["reload"].(bool); !ok || reload {
			records, err := w.records()
			if err != nil {
				return err
			}
			s, err := OpenStore(memStore(records), nil)
			if err != nil {
				return err
			}
			w.session.Close()
			w.session = s
		}
		w.setListeners(op["listeners"], op["preStep"])
		if s, ok := op["system"]; ok {
			o := map[string]any{}
			for k, v := range w.options {
				o[k] = v
			}
			if s == nil {
				delete(o, "system")
			} else {
				o["system"] = s
			}
			w.options = o
		}
		w.lastRequest, w.lastMsgs = nil, nil
		err := w.newAgent()
		w.record(err)
		_, expect := op["expectError"]
		switch {
		case !expect:
			return err
		case err == nil:
			return errors.New("expected resume to fail")
		}
		return nil
	case "secondAgent":
		a, err := NewAgent(w.session, w.options)
		if err == nil {
			a.Close()
		}
		return w.checkError(op, err)
	case "fork":
		if err := w.dropAgent(); err != nil {
			return err
		}
		fo := &ForkOptions{ID: "forked-session"}
		if n, ok := op["seedLength"].(float64); ok {
			u := uint64(n)
			fo.SeedLength = &u
		}
		s, err := w.session.Fork(fo)
		if err == nil {
			w.session.Close()
			w.session = s
			w.lastRequest, w.lastMsgs = nil, nil
			if e := w.newAgent(); e != nil {
				return e
			}
			return w.checkError(op, nil)
		}
		r := w.checkError(op, err)
		if e := w.newAgent(); e != nil {
			return e
		}
		return r
	case "compact":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		var opts any
		if sp, ok := op["span"]; ok {
			opts = map[string]any{"span": sp}
		}
		out, err := a.Compact(w.opCtx(), opts)
		// The C ABI reports a compaction that ran and failed as ErrSummariser with the outcome
		// object in the detail; the Rust API returns it as a result. Same thing, as a result.
		var le *Error
		if errors.As(err, &le) && le.Code == StatusSummariser {
			if o, ok := le.Field("outcome").(map[string]any); ok {
				out, _ = json.Marshal(o)
				err = nil
			}
		}
		if err == nil {
			w.out["compaction"] = decode(out)
			if want, ok := op["expectOutcome"].(string); ok {
				var o struct {
					Outcome string          `json:"outcome"`
					Error   json.RawMessage `json:"error"`
				}
				_ = json.Unmarshal(out, &o)
				if o.Outcome != want {
					return fmt.Errorf("expected compaction outcome %s, got %s (%s)", want, o.Outcome, o.Error)
				}
			}
		}
		return w.checkError(op, err)
	case "setPolicy":
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		err = a.SetPolicy(op["policy"])
		if err == nil {
			w.policy = op["policy"]
		}
		return w.checkError(op, err)
	case "setSummariser":
		w.summariser = op["summariser"]
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		return a.SetSummariser(w.makeSummariser(op["summariser"], a, w.session))
	case "dispose":
		return w.dropAgent()
	case "setCounter":
		w.counter = op["counter"]
		a, err := w.needAgent()
		if err != nil {
			return err
		}
		if w.counter == nil {
			return a.ClearTokenCounter()
		}
		return a.SetTokenCounter(w.makeCounter(w.counter, a, w.session))
	case "load":
		return w.load(op)
	case "expectLog":
		return w.expectLog(op)
	case "expectSummaryRequest":
		return w.expectSummary(op)
	case "expectPreStep":
		w.mu.Lock()
		seen := append([]any(nil), w.preStepSeen...)
		w.mu.Unlock()
		i := 0
		if n, ok := op["index"].(float64); ok {
			i = int(n)
		}
		if i >= len(seen) {
			return fmt.Errorf("pre-step call %d did not happen (%d calls)", i, len(seen))
		}
		return checkPointers("pre-step", seen[i], op["pointers"])
	}
	return fmt.Errorf("unknown op %q", name)
}

func (w *world) events() ([]json.RawMessage, error) {
	b, err := w.session.Events(0, -1)
	if err != nil {
		return nil, err
	}
	var evs []json.RawMessage
	err = json.Unmarshal(b, &evs)
	return evs, err
}

// records is the serialised log: the session header record, then one event per record.
func (w *world) records() ([]json.RawMessage, error) {
	info, err := w.session.Info()
	if err != nil {
		return nil, err
	}
	evs, err := w.events()
	if err != nil {
		return nil, err
	}
	return append([]json.RawMessage{info}, evs...), nil
}

// memStore is a host store over a list of records (what a database-backed host would do).
func memStore(initial []json.RawMessage) StoreFunc {
	var mu sync.Mutex
	records := make([]string, 0, len(initial))
	for _, r := range initial {
		records = append(records, string(r))
	}
	return func(ctx context.Context, req json.RawMessage) (any, error) {
		var r struct {
			Op      string   `json:"op"`
			Seq     int      `json:"seq"`
			Records []string `json:"records"`
			Header  *string  `json:"header"`
			From    int      `json:"from"`
			Keep    int      `json:"keep"`
		}
		if err := json.Unmarshal(req, &r); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		switch r.Op {
		case "load":
			return map[string]any{"records": append([]string{}, records...)}, nil
		case "append":
			// A conditional append: seq must be the number of events stored.
			if (r.Header != nil) != (len(records) == 0) || (len(records) > 0 && r.Seq != len(records)-1) {
				return map[string]any{"conflict": fmt.Sprintf("seq %d is not the next one", r.Seq)}, nil
			}
			if r.Header != nil {
				records = append(records, *r.Header)
			}
			records = append(records, r.Records...)
		case "undo":
			if r.From < len(records) {
				records = records[:r.From]
			}
		case "cut":
			if r.Keep < len(records) {
				records = records[:r.Keep]
			}
		case "sync":
		default:
			return nil, fmt.Errorf("unknown store op %q", r.Op)
		}
		return true, nil
	}
}

// load reopens the session from a log file written from the op's records, or the current
// log's, changed as the op says (docs/scenarios.md, "Loading a log").
func (w *world) load(op map[string]any) error {
	var records []string
	if given, ok := op["records"]; ok {
		a, ok := given.([]any)
		if !ok {
			return errors.New("load: records must be an array")
		}
		for _, r := range a {
			if s, ok := r.(string); ok {
				records = append(records, s)
			} else {
				b, _ := json.Marshal(r)
				records = append(records, string(b))
			}
		}
	} else {
		current, err := w.records()
		if err != nil {
			return err
		}
		for _, r := range current {
			records = append(records, string(r))
		}
	}
	if n, ok := op["dropLast"].(float64); ok {
		records = records[:max(0, len(records)-int(n))]
	}
	if edits, ok := op["edit"].([]any); ok {
		for _, e := range edits {
			em, _ := e.(map[string]any)
			from, _ := em["replace"].(string)
			to, _ := em["with"].(string)
			i := -1
			if n, ok := em["record"].(float64); ok {
				i = int(n)
				if i < 0 {
					i += len(records)
				}
			} else {
				for j := len(records) - 1; j >= 0; j-- {
					if strings.Contains(records[j], from) {
						i = j
						break
					}
				}
			}
			if i < 0 || i >= len(records) {
				return fmt.Errorf("load: there is no record %d to edit", i)
			}
			if !strings.Contains(records[i], from) {
				return fmt.Errorf("load: record %d does not contain %q", i, from)
			}
			records[i] = strings.Replace(records[i], from, to, 1)
		}
	}
	var b strings.Builder
	for _, r := range records {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	if t, ok := op["tail"].(string); ok {
		b.WriteString(t)
	}
	if err := w.dropAgent(); err != nil {
		return err
	}
	w.loads++
	path := filepath.Join(w.dir, fmt.Sprintf("load-%d.jsonl", w.loads))
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return err
	}
	s, err := OpenFile(path, nil)
	if err != nil {
		// The session stays the one before; a new instance drives it.
		r := w.checkError(op, err)
		if e := w.newAgent(); e != nil {
			return e
		}
		return r
	}
	report, err := s.LoadReport()
	if err != nil {
		s.Close()
		return err
	}
	w.out["loadReport"] = decode(report)
	if err := checkPointers("load report", decode(report), op["expectReport"]); err != nil {
		s.Close()
		return err
	}
	w.session.Close()
	w.session = s
	w.lastRequest, w.lastMsgs = nil, nil
	if err := w.newAgent(); err != nil {
		return err
	}
	return w.checkError(op, nil)
}

func (w *world) expectLog(op map[string]any) error {
	raw, err := w.events()
	if err != nil {
		return err
	}
	events := make([]map[string]any, len(raw))
	for i, r := range raw {
		events[i], _ = decode(r).(map[string]any)
	}
	if want, ok := op["headers"].([]any); ok {
		var got []map[string]any
		for _, e := range events {
			if e["type"] == "request/header" {
				got = append(got, e)
			}
		}
		if len(got) != len(want) {
			var reasons []any
			for _, g := range got {
				d, _ := g["data"].(map[string]any)
				reasons = append(reasons, d["reason"])
			}
			return fmt.Errorf("expected %d header snapshots, got %d: %v", len(want), len(got), reasons)
		}
		for i := range got {
			if err := checkPointers("header", got[i]["data"], want[i]); err != nil {
				return err
			}
		}
	}
	if counts, ok := op["count"].(map[string]any); ok {
		for ty, n := range counts {
			got := 0
			for _, e := range events {
				if e["type"] == ty {
					got++
				}
			}
			if float64(got) != n.(float64) {
				return fmt.Errorf("expected %v %s events, got %d", n, ty, got)
			}
		}
	}
	if want, ok := op["last"].([]any); ok {
		if len(events) < len(want) {
			return errors.New("fewer events than expected")
		}
		tail := events[len(events)-len(want):]
		for i := range want {
			if err := checkPointers("event", any(tail[i]), want[i]); err != nil {
				return err
			}
		}
	}
	if n, ok := op["compositions"].(float64); ok {
		got := 0
		if len(w.listeners) > 0 {
			w.listeners[0].mu.Lock()
			got = w.listeners[0].calls
			w.listeners[0].mu.Unlock()
		}
		if float64(got) != n {
			return fmt.Errorf("expected %v compositions (calls of the first listener), got %d", n, got)
		}
	}
	hist, err := w.session.History()
	if err != nil {
		return err
	}
	h := string(hist)
	if texts, ok := op["historyExcludes"].([]any); ok {
		for _, t := range texts {
			if strings.Contains(h, t.(string)) {
				return fmt.Errorf("history contains %q", t)
			}
		}
	}
	if texts, ok := op["historyIncludes"].([]any); ok {
		for _, t := range texts {
			if !strings.Contains(h, t.(string)) {
				return fmt.Errorf("history does not contain %q: %s", t, clip(h))
			}
		}
	}
	if ptrs, ok := op["historyPointers"]; ok {
		if err := checkPointers("history", decode(hist), ptrs); err != nil {
			return err
		}
	}
	if n, ok := op["historyLength"].(float64); ok {
		a, _ := decode(hist).([]any)
		if float64(len(a)) != n {
			return fmt.Errorf("expected %v history messages, got %d", n, len(a))
		}
	}
	return nil
}

func (w *world) expectSummary(op map[string]any) error {
	w.mu.Lock()
	seen := append([]summaryRec(nil), w.summaries...)
	w.mu.Unlock()
	if n, ok := op["count"].(float64); ok {
		if float64(len(seen)) != n {
			return fmt.Errorf("expected %v summarisation requests so far, got %d", n, len(seen))
		}
		only := true
		for k := range op {
			if k != "op" && k != "count" {
				only = false
			}
		}
		if only {
			return nil
		}
	}
	i := 0
	if n, ok := op["index"].(float64); ok {
		i = int(n)
	}
	if i < 0 {
		i += len(seen)
	}
	if i < 0 || i >= len(seen) {
		return fmt.Errorf("summarisation request %d was not sent (%d sent)", i, len(seen))
	}
	req := seen[i]
	v := decode(req.json)
	if err := checkPointers("summary request", v, op["pointers"]); err != nil {
		return err
	}
	for _, kw := range []struct {
		key  string
		want bool
	}{{"includes", true}, {"excludes", false}} {
		if texts, ok := op[kw.key].([]any); ok {
			for _, t := range texts {
				if strings.Contains(string(req.json), t.(string)) != kw.want {
					how := "contains"
					if kw.want {
						how = "does not contain"
					}
					return fmt.Errorf("summary request %d %s %q", i, how, t)
				}
			}
		}
	}
	replays, _ := op["replaysLastRequest"].(bool)
	extends, _ := op["extendsLastRequest"].(bool)
	if !replays && !extends {
		return nil
	}
	k := -1
	for j := len(w.requestMarks) - 1; j >= 0; j-- {
		if w.requestMarks[j] <= i {
			k = j
			break
		}
	}
	if k < 0 {
		return errors.New("no routed request precedes this summarisation request")
	}
	last := w.requests[k]
	vm, _ := v.(map[string]any)
	if err := checkSummaryEnvelope(vm, last); err != nil {
		return err
	}
	m := splitMessages(req.json)
	l := w.requestRaw[k]
	body := m[:len(m)-1]
	short, long, shared := body, l, len(body)
	if extends {
		short, long, shared = l, body, len(l)
	}
	if !rawPrefix(short, long) {
		return fmt.Errorf("the summary request without its last message (%d messages) and the last routed request (%d messages) do not share their leading messages byte for byte", len(body), len(l))
	}
	if req.shared != shared {
		return fmt.Errorf("sharedMessages is %d, expected %d", req.shared, shared)
	}
	lastm, _ := decode(m[len(m)-1]).(map[string]any)
	if lastm["role"] != "user" || !strings.Contains(string(m[len(m)-1]), "compaction engine") {
		return fmt.Errorf("the last message is not the instruction: %s", m[len(m)-1])
	}
	return nil
}

// checkSummaryEnvelope compares every envelope field of a summarisation request but its messages
// with the routed request it replays: the routed call config with maxTokens replaced by the
// summary budget and the model by the target's; a target of another provider keeps only the
// vocabulary's fields (no pass-through field). System, tools and the session id are the routed
// request's.
func checkSummaryEnvelope(summary, routed map[string]any) error {
	want := map[string]any{}
	for k, v := range routed {
		if k != "messages" && k != "turn" && k != "step" {
			want[k] = v
		}
	}
	budget, ok := summary["maxTokens"].(float64)
	if !ok {
		return errors.New("summary request: maxTokens (the summary budget) is missing")
	}
	want["maxTokens"] = budget
	want["purpose"] = "compaction"
	if summary["provider"] != routed["provider"] {
		kept := map[string]bool{"provider": true, "model": true, "reasoningEffort": true, "temperature": true, "maxTokens": true,
			"stop": true, "system": true, "tools": true, "sessionId": true, "purpose": true}
		for k := range want {
			if !kept[k] {
				delete(want, k)
			}
		}
		want["provider"] = summary["provider"]
	}
	want["model"] = summary["model"]
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range summary {
		keys[k] = true
	}
	delete(keys, "messages")
	for k := range keys {
		if !reflect.DeepEqual(want[k], summary[k]) {
			return fmt.Errorf("summary request field %s is %s but the routed request gives %s", k, clip(summary[k]), clip(want[k]))
		}
	}
	return nil
}

// verifyAndDamage verifies the final log with the library (lls_verify_file), then checks that
// damaged copies fail, naming the step.
func (w *world) verifyAndDamage(dir string) error {
	records, err := w.records()
	if err != nil {
		return err
	}
	write := func(name string, recs []json.RawMessage) string {
		var b bytes.Buffer
		for _, r := range recs {
			b.Write(r)
			b.WriteByte('\n')
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			w.t.Fatal(err)
		}
		return p
	}
	out, err := VerifyFile(write("final.jsonl", records))
	if err != nil {
		return fmt.Errorf("verify failed on the final log: %v", err)
	}
	var rep struct {
		Requests int `json:"requests"`
	}
	_ = json.Unmarshal(out, &rep)
	if rep.Requests == 0 {
		return nil
	}
	events := records[1:]
	type ev struct {
		Type string                     `json:"type"`
		Data map[string]json.RawMessage `json:"data"`
	}
	parsed := make([]ev, len(events))
	for i, e := range events {
		_ = json.Unmarshal(e, &parsed[i])
	}
	mustFail := func(what string, recs []json.RawMessage) error {
		_, err := VerifyFile(write("damaged.jsonl", recs))
		if err == nil {
			return fmt.Errorf("verify passed on a copy %s", what)
		}
		// An edited record breaks its chained digest (the failure names the line); a rebuilt
		// request that differs names the step.
		var le *Error
		if !errors.As(err, &le) || (le.Field("step") == nil && le.Field("line") == nil) {
			return fmt.Errorf("verify failure on a copy %s names neither the line nor the step: %v", what, err)
		}
		return nil
	}
	// Damage 1: the messagePrefix removed from the first header that has one.
	for i, e := range parsed {
		if e.Type != "request/header" {
			continue
		}
		var hdr map[string]json.RawMessage
		if json.Unmarshal(e.Data["header"], &hdr) != nil {
			continue
		}
		if _, ok := hdr["messagePrefix"]; !ok {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(events[i]))
		dec.UseNumber()
		var full map[string]any
		if err := dec.Decode(&full); err != nil {
			return err
		}
		delete(full["data"].(map[string]any)["header"].(map[string]any), "messagePrefix")
		nb, _ := json.Marshal(full)
		bad := append([]json.RawMessage{records[0]}, events...)
		bad[i+1] = nb
		if err := mustFail("whose prefix was removed from the header", bad); err != nil {
			return err
		}
		break
	}
	// Damage 2: the first user/message before the last step/start dropped.
	lastStep := -1
	for i, e := range parsed {
		if e.Type == "step/start" {
			lastStep = i
		}
	}
	for i := 0; i < lastStep; i++ {
		if parsed[i].Type == "user/message" {
			bad := append([]json.RawMessage{records[0]}, events[:i]...)
			bad = append(bad, events[i+1:]...)
			if err := mustFail(fmt.Sprintf("with event %d dropped", i), bad); err != nil {
				return err
			}
			break
		}
	}
	return nil
}

func (w *world) close() {
	if w.agent != nil {
		w.agent.Close()
	}
	if w.session != nil {
		w.session.Close()
	}
	if w.cur != nil {
		w.cur.Close()
	}
}

func runScenario(t *testing.T, path string) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var sc map[string]any
	if err := json.Unmarshal(text, &sc); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	sc = expand(sc).(map[string]any)
	opts, _ := sc["agent"].(map[string]any)
	o := map[string]any{}
	for k, v := range opts {
		o[k] = v
	}
	o["checkRequests"] = true
	s, err := NewMemorySession(&SessionOptions{ID: "scenario-session"})
	if err != nil {
		return err
	}
	w := &world{t: t, session: s, options: o, summariser: sc["summariser"], policy: sc["policy"], counter: sc["counter"], dir: t.TempDir(), out: map[string]any{}}
	defer w.close()
	w.setListeners(sc["listeners"], sc["preStep"])
	if err := w.newAgent(); err != nil {
		return err
	}
	ops, _ := sc["ops"].([]any)
	entries := []any{}
	for i, op := range ops {
		m, _ := op.(map[string]any)
		w.out = map[string]any{"outcome": "ok"}
		if err := w.runOp(m); err != nil {
			return fmt.Errorf("op %d (%v): %v", i, m["op"], err)
		}
		entry := w.out
		entry["i"], entry["op"] = i, m["op"]
		evs, err := w.events()
		if err != nil {
			return err
		}
		entry["events"] = len(evs)
		w.mu.Lock()
		if len(w.calls) > 0 {
			entry["calls"] = w.calls
		}
		if w.counterCalls > 0 {
			entry["counterCalls"] = w.counterCalls
		}
		w.calls, w.counterCalls = nil, 0
		w.mu.Unlock()
		entries = append(entries, entry)
	}
	records, err := w.records()
	if err != nil {
		return err
	}
	events := []any{}
	for _, r := range records[1:] {
		events = append(events, maskedRecord(r))
	}
	hist, err := w.session.History()
	if err != nil {
		return err
	}
	transcript := map[string]any{"transcript": 1, "scenario": filepath.Base(path), "name": sc["name"], "ops": entries,
		"final": map[string]any{"session": maskedRecord(records[0]), "events": events, "history": decode(hist)}}
	if err := settle(path, normalise(transcript, w.dir)); err != nil {
		return err
	}
	return w.verifyAndDamage(t.TempDir())
}

func scenarioFiles(t *testing.T) []string {
	if f := os.Getenv("LLMSESSION_SCENARIO_FILE"); f != "" {
		return []string{f}
	}
	dirs := []string{filepath.Join("..", "..", "tests", "scenarios")}
	if d := os.Getenv("LLMSESSION_SCENARIOS"); d != "" {
		dirs = append(dirs, d)
	}
	var files []string
	for _, d := range dirs {
		m, err := filepath.Glob(filepath.Join(d, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(m)
		files = append(files, m...)
	}
	return files
}

func TestScenarios(t *testing.T) {
	files := scenarioFiles(t)
	if len(files) == 0 {
		t.Fatal("no scenario files found")
	}
	before := LiveHandleCount()
	for _, f := range files {
		f := f
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			if err := runScenario(t, f); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		})
	}
	if after := LiveHandleCount(); after != before {
		t.Errorf("live handles: %d before the scenarios, %d after", before, after)
	}
}
