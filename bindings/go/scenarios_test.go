package llmsession

// The shared scenario files (tests/scenarios/*.json, docs/scenarios.md) played through the Go
// binding: a thin driver. It runs the ops and the declarative fakes (listeners, pre-step
// listeners, summariser, token counter, host store) as Go funcs, records the golden transcript of
// the run (golden_test.go) and compares it with the one the Rust runner wrote. The checks a file
// spells out (expectError, expect blocks, expectLog, ...) are the Rust runner's: the transcript
// holds everything they look at, so they are not repeated here.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// failure is a driver failure (not the library's answer to an op): it stops the scenario.
type failure struct{ error }

func fail(format string, a ...any) { panic(failure{fmt.Errorf(format, a...)}) }

func check(err error) {
	if err != nil {
		panic(failure{err})
	}
}

type world struct {
	session                   *Session
	agent                     *Agent
	options                   map[string]any
	listeners, preSteps       []*fake
	summariser, policy, count any // the specs later instances get
	mu                        sync.Mutex
	cur                       *Cancel // the running op's token
	disposed                  bool    // a callback disposed the instance during the running op
	dir                       string  // where load writes the logs it opens
	loads                     int
	calls                     []any          // the fakes' inputs during the running op, in call order
	counterCalls              int            // items the token counter counted during the running op
	out                       map[string]any // the running op's transcript entry
	summaries                 [][]byte       // every summarisation request's envelope, in order
	sent                      []sentRequest  // every request and nativeBegin envelope, in order
}

// sentRequest is an envelope the run sent, with how many summarisation requests came before it
// (replay interleaves them where they happened).
type sentRequest struct {
	mark     int
	envelope []byte
}

func (w *world) journal(call map[string]any) {
	w.mu.Lock()
	w.calls = append(w.calls, call)
	w.mu.Unlock()
}

func (w *world) trip() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur != nil {
		_ = w.cur.Trip()
	}
}

// newAgent creates an instance over the session with the current fakes, policy and counter.
func (w *world) newAgent() error {
	a, err := NewAgent(w.session, w.options)
	if err != nil {
		return err
	}
	for _, l := range w.listeners {
		err = errors.Join(err, a.AddPrefixListenerRaw(w.prefixListener(l, a, w.session)))
	}
	for _, l := range w.preSteps {
		err = errors.Join(err, a.AddPreStepListener(w.preStep(l, a, w.session)))
	}
	if w.policy != nil && err == nil {
		err = a.SetPolicy(w.policy)
	}
	err = errors.Join(err, a.SetSummariser(w.summariserFor(w.summariser, a, w.session)))
	if w.count != nil {
		err = errors.Join(err, a.SetTokenCounter(w.counterFor(w.count, a, w.session)))
	}
	if err != nil {
		a.Close()
		return err
	}
	w.agent = a
	return nil
}

func (w *world) dropAgent() {
	if w.agent != nil {
		err := w.agent.Dispose()
		w.agent.Close()
		w.agent = nil
		check(err)
	}
}

func (w *world) a() *Agent {
	if w.agent == nil {
		fail("no live agent (disposed?)")
	}
	return w.agent
}

func (w *world) opCtx() context.Context {
	c, err := NewCancel()
	check(err)
	w.mu.Lock()
	old := w.cur
	w.cur = c
	w.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return WithCancel(context.Background(), c)
}

func (w *world) switchTo(s *Session) {
	w.session.Close()
	w.session = s
}

// runOp runs one op and returns the library's error, if it refused the op.
func (w *world) runOp(op map[string]any) error {
	str := func(k, def string) string {
		if s, ok := op[k].(string); ok {
			return s
		}
		return def
	}
	switch name := str("op", ""); name {
	case "turn":
		return second(w.a().StartTurn(userMsg(op["user"])))
	case "request":
		ctx := w.opCtx()
		if c, _ := op["cancelled"].(bool); c {
			w.trip()
		}
		r, err := w.a().NextRequest(ctx)
		if err == nil {
			info, _ := json.Marshal(r.Info)
			ri := asMap(decode(info))
			betas, err := w.a().RequestBetas()
			check(err)
			if len(betas) > 0 {
				ri["betas"] = betas
			}
			w.out["request"] = ri
			w.mu.Lock()
			w.sent = append(w.sent, sentRequest{len(w.summaries), append([]byte(nil), r.Envelope...)})
			w.mu.Unlock()
		}
		return err
	case "respond":
		msg, given := op["message"] // as written: a null message too
		if !given {
			content := []any{}
			if t, ok := op["text"].(string); ok {
				content = append(content, map[string]any{"type": "text", "text": t})
			}
			for _, c := range asList(op["toolCalls"]) {
				cm := c.(map[string]any)
				args, ok := cm["arguments"].(string)
				if !ok {
					args = "{}"
				}
				content = append(content, map[string]any{"type": "tool-call", "id": cm["id"], "name": cm["name"], "arguments": args})
			}
			msg = map[string]any{"role": "assistant", "content": content}
		}
		resp := map[string]any{"message": msg}
		if u, ok := op["usage"]; ok {
			resp["usage"] = u
		}
		return second(w.a().RecordResponse(resp))
	case "toolResult":
		res := map[string]any{"callId": str("callId", "")}
		if c, ok := op["content"]; ok {
			res["content"] = c
		} else {
			res["text"] = str("text", "ok")
		}
		if e, ok := op["isError"]; ok {
			res["isError"] = e
		}
		return second(w.a().RecordToolResult(res))
	case "inject":
		_, _, err := w.a().Inject(userMsg(op["user"]))
		return err
	case "providerError":
		overflow, _ := op["overflow"].(bool)
		retry, err := w.a().ProviderError(w.opCtx(), str("message", "provider error"), overflow)
		if err == nil {
			w.out["providerError"] = map[bool]string{true: "retry", false: "recorded"}[retry]
		}
		return err
	case "endTurn":
		return w.a().EndTurn(str("reason", "completed"))
	case "setOptions":
		o := w.withOptions(op, "config", "tools", "system")
		err := w.a().SetOptions(o)
		if err == nil {
			w.options = o
		}
		return err
	case "mutateListener":
		i, _ := op["index"].(float64)
		if int(i) >= len(w.listeners) {
			fail("no such listener")
		}
		l := w.listeners[int(i)]
		l.mu.Lock()
		for j, m := range l.held {
			mm, _ := decode(m).(map[string]any)
			mm["content"] = []any{map[string]any{"type": "text", "text": str("text", "mutated")}}
			l.held[j], _ = json.Marshal(mm)
		}
		l.mu.Unlock()
	case "resume":
		w.dropAgent()
		if reload, ok := op["reload"].(bool); !ok || reload {
			s, err := OpenStore(memStore(w.records()), nil)
			check(err)
			w.switchTo(s)
		}
		w.setFakes(op["listeners"], op["preStep"])
		w.options = w.withOptions(op, "system")
		return w.newAgent()
	case "secondAgent":
		a, err := NewAgent(w.session, w.options)
		if err == nil {
			a.Close()
		}
		return err
	case "fork":
		w.dropAgent()
		fo := &ForkOptions{ID: "forked-session"}
		if n, ok := count(op["seedLength"]); ok {
			fo.SeedLength = &n
		}
		s, err := w.session.Fork(fo)
		if err == nil {
			w.switchTo(s)
		}
		check(w.newAgent())
		return err
	case "compact":
		var opts any
		if sp, ok := op["span"]; ok {
			opts = map[string]any{"span": sp}
		}
		out, err := w.a().Compact(w.opCtx(), opts)
		// The C ABI reports a compaction that ran and failed as ErrSummariser with the outcome in
		// the detail; the Rust API returns it as a result, and so does the transcript.
		var le *Error
		if errors.As(err, &le) && le.Code == StatusSummariser {
			if o, ok := le.Field("outcome").(map[string]any); ok {
				out, _ = json.Marshal(o)
				err = nil
			}
		}
		if err == nil {
			w.out["compaction"] = decode(out)
		}
		return err
	case "setPolicy":
		err := w.a().SetPolicy(op["policy"])
		if err == nil {
			w.policy = op["policy"]
		}
		return err
	case "setSummariser":
		w.summariser = op["summariser"]
		return w.a().SetSummariser(w.summariserFor(w.summariser, w.agent, w.session))
	case "dispose":
		w.dropAgent()
	case "setCounter":
		w.count = op["counter"]
		if w.count == nil {
			return w.a().ClearTokenCounter()
		}
		return w.a().SetTokenCounter(w.counterFor(w.count, w.a(), w.session))
	case "load":
		return w.load(op)
	case "nativeBegin":
		r, err := w.a().BeginNativeCompaction()
		if err == nil {
			v := asMap(decode(r.Raw))
			v["envelope"], v["body"] = len(r.Envelope), len(r.Body)
			w.out["native"] = v
			w.mu.Lock()
			w.sent = append(w.sent, sentRequest{len(w.summaries), []byte(r.Envelope)})
			w.mu.Unlock()
		}
		return err
	case "nativeRecord", "nativeFail":
		var o *NativeOutcome
		var err error
		if name == "nativeRecord" {
			body, _ := json.Marshal(op["body"])
			o, err = w.a().RecordNativeCompaction(body)
		} else {
			o, err = w.a().FailNativeCompaction(str("error", ""))
		}
		if err == nil {
			w.out["native"] = decode(o.Raw)
		}
		return err
	case "replay":
		r, err := NewReplay(w.session)
		if err != nil {
			return err
		}
		defer r.Close()
		var order [][]byte
		done := 0
		for _, s := range w.sent {
			order = append(order, w.summaries[done:s.mark]...)
			done = s.mark
			order = append(order, s.envelope)
		}
		order = append(order, w.summaries[done:]...)
		answers := []any{}
		for _, env := range order {
			a, err := r.Answer(env)
			if err != nil {
				return err
			}
			m := asMap(decode(a))
			answers = append(answers, map[string]any{"purpose": m["purpose"], "id": m["id"], "outcome": m["outcome"]})
		}
		ib, err := r.Info()
		if err != nil {
			return err
		}
		info := asMap(decode(ib))
		w.out["replay"] = map[string]any{"requests": info["requests"], "answers": answers}
	case "explain":
		x, err := w.session.Explain(nil)
		if err == nil {
			v := asMap(decode(x))
			t := asMap(v["totals"])
			w.out["explain"] = map[string]any{"compactions": v["compactions"], "compactionTotals": v["compactionTotals"],
				"requests": map[string]any{"conversation": t["conversationRequests"], "compaction": t["compactionRequests"], "notRebuilt": t["notRebuilt"]}}
		}
		return err
	case "expectLog", "expectSummaryRequest", "expectPreStep":
		// Checked by the Rust runner; the transcript holds what they look at.
	default:
		fail("unknown op %q", name)
	}
	return nil
}

// withOptions is the agent options with the op's keys replacing theirs (a null system clears it).
func (w *world) withOptions(op map[string]any, keys ...string) map[string]any {
	o := map[string]any{}
	for k, v := range w.options {
		o[k] = v
	}
	for _, k := range keys {
		if v, ok := op[k]; ok && v == nil && k == "system" {
			delete(o, k)
		} else if ok {
			o[k] = v
		}
	}
	return o
}

// setFakes replaces the listeners and the pre-step listeners that are given (arrays).
func (w *world) setFakes(listeners, pre any) {
	fakes := func(v any, old []*fake) []*fake {
		a, ok := v.([]any)
		if !ok {
			return old
		}
		out := []*fake{}
		for i, spec := range a {
			out = append(out, newFake(i, spec))
		}
		return out
	}
	w.listeners, w.preSteps = fakes(listeners, w.listeners), fakes(pre, w.preSteps)
}

// load reopens the session from a log file written from the op's records, or the current
// log's, changed as the op says (docs/scenarios.md, "Loading a log").
func (w *world) load(op map[string]any) error {
	var records []string
	if given, ok := op["records"]; ok {
		for _, r := range asList(given) {
			if s, ok := r.(string); ok {
				records = append(records, s)
			} else {
				b, _ := json.Marshal(r)
				records = append(records, string(b))
			}
		}
	} else {
		for _, r := range w.records() {
			records = append(records, string(r))
		}
	}
	if n, ok := count(op["dropLast"]); ok {
		records = records[:max(0, len(records)-int(min(n, uint64(len(records)))))]
	}
	for _, e := range asList(op["edit"]) {
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
			for j := len(records) - 1; j >= 0 && i < 0; j-- {
				if strings.Contains(records[j], from) {
					i = j
				}
			}
		}
		if i < 0 || i >= len(records) || !strings.Contains(records[i], from) {
			fail("load: record %d does not exist or does not contain %q", i, from)
		}
		records[i] = strings.Replace(records[i], from, to, 1)
	}
	text := strings.Join(append(records, ""), "\n")
	if t, ok := op["tail"].(string); ok {
		text += t
	}
	w.dropAgent()
	w.loads++
	path := filepath.Join(w.dir, fmt.Sprintf("load-%d.jsonl", w.loads))
	check(os.WriteFile(path, []byte(text), 0o600))
	s, err := OpenFile(path, nil)
	if err == nil {
		report, e := s.LoadReport()
		check(e)
		w.out["loadReport"] = decode(report)
		w.switchTo(s)
	}
	// On failure the session stays the one before; either way a new instance drives it.
	check(w.newAgent())
	return err
}

// records is the serialised log: the session header record, then one event per record.
func (w *world) records() []json.RawMessage {
	info, err := w.session.Info()
	check(err)
	return append([]json.RawMessage{info}, w.events()...)
}

func (w *world) events() []json.RawMessage {
	b, err := w.session.Events(0, -1)
	check(err)
	var evs []json.RawMessage
	check(json.Unmarshal(b, &evs))
	return evs
}

// play runs a scenario file and returns its transcript, normalised for comparison.
func play(t *testing.T, path string) (transcript any, err error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var sc map[string]any
	if err := json.Unmarshal(text, &sc); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	sc = expand(sc).(map[string]any)
	o := map[string]any{"checkRequests": true}
	for k, v := range asMap(sc["agent"]) {
		o[k] = v
	}
	s, err := NewMemorySession(&SessionOptions{ID: "scenario-session"})
	if err != nil {
		return nil, err
	}
	w := &world{session: s, options: o, summariser: sc["summariser"], policy: sc["policy"], count: sc["counter"], dir: t.TempDir()}
	defer func() {
		if w.agent != nil {
			w.agent.Close()
		}
		w.session.Close()
		if w.cur != nil {
			w.cur.Close()
		}
	}()
	var at string
	defer func() {
		switch r := recover().(type) {
		case nil:
		case failure:
			err = fmt.Errorf("%s: %v", at, r.error)
		default:
			panic(r)
		}
	}()
	at = "creating the agent"
	w.setFakes(sc["listeners"], sc["preStep"])
	check(w.newAgent())
	entries := []any{}
	for i, op := range asList(sc["ops"]) {
		m := asMap(op)
		at = fmt.Sprintf("op %d (%v)", i, m["op"])
		w.out = map[string]any{"i": i, "op": m["op"], "outcome": "ok"}
		opErr := w.runOp(m)
		if opErr != nil {
			w.out["outcome"], w.out["error"] = "error", errorValue(opErr)
		}
		w.mu.Lock()
		// An instance disposed during the op (by a callback) is dropped, as a host drops it.
		if w.agent != nil && (w.disposed || errors.Is(opErr, ErrDisposed)) {
			w.agent.Close()
			w.agent = nil
		}
		if len(w.calls) > 0 {
			w.out["calls"] = w.calls
		}
		if w.counterCalls > 0 {
			w.out["counterCalls"] = w.counterCalls
		}
		w.calls, w.counterCalls, w.disposed = nil, 0, false
		w.mu.Unlock()
		w.out["events"] = len(w.events())
		entries = append(entries, w.out)
	}
	at = "the final state"
	records := w.records()
	events := []any{}
	for _, r := range records[1:] {
		events = append(events, maskedRecord(r))
	}
	hist, e := w.session.History()
	check(e)
	// The final log, written as a file, verifies through lls_verify_file.
	final := filepath.Join(w.dir, "final.jsonl")
	check(os.WriteFile(final, joinLines(records), 0o600))
	_, e = VerifyFile(final)
	check(e)
	name, ok := sc["name"].(string)
	if !ok {
		name = "(unnamed)"
	}
	return normalise(map[string]any{"transcript": 1, "scenario": filepath.Base(path), "name": name, "ops": entries,
		"final": map[string]any{"session": maskedRecord(records[0]), "events": events, "history": decode(hist)}}, w.dir), nil
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
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			transcript, err := play(t, f)
			if err == nil {
				err = settle(f, transcript)
			}
			if err != nil {
				t.Errorf("%s: %v", f, err)
			}
		})
	}
	if after := LiveHandleCount(); after != before {
		t.Errorf("live handles: %d before the scenarios, %d after", before, after)
	}
}

// count is v when it is a count (a JSON integer, 0 or more), what the Rust runner's as_u64 reads.
func count(v any) (uint64, bool) {
	n, ok := v.(float64)
	if !ok || n < 0 || n != math.Trunc(n) {
		return 0, false
	}
	return uint64(n), true
}

// second is the error of a call that returns a value and an error.
func second[T any](_ T, err error) error { return err }

func joinLines(records []json.RawMessage) []byte {
	var b []byte
	for _, r := range records {
		b = append(append(b, r...), '\n')
	}
	return b
}

// userMsg: a string is a user text message; anything else is handed over as it is.
func userMsg(v any) any {
	if s, ok := v.(string); ok {
		return UserText(s)
	}
	return v
}
