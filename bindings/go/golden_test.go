package llmsession

// Golden transcripts (docs/scenarios.md, "Golden transcripts"): the scenario runner records what
// the binding observes while it plays a file, masks what varies from run to run, and compares the
// document with tests/scenarios/golden/<stem>.json, written by the Rust runner.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// cWording is what the C ABI puts before a host callback's own message (the Rust runner's fakes
// fail with the message alone); removed from every string before comparing.
var cWording = []string{"prefix listener callback: ", "summariser callback: ", "host callback failed: "}

// goldenPath is golden/<stem>.json in the scenario file's directory.
func goldenPath(scenario string) string {
	stem := strings.TrimSuffix(filepath.Base(scenario), filepath.Ext(scenario))
	return filepath.Join(filepath.Dir(scenario), "golden", stem+".json")
}

// errorValue is an op's error as the transcript records it: {"kind", "field"?, "message"}.
func errorValue(err error) map[string]any {
	var le *Error
	if !errors.As(err, &le) {
		return map[string]any{"kind": "(not a library error)", "message": err.Error()}
	}
	v := map[string]any{"kind": le.Kind, "message": le.Message}
	if f := le.Field("field"); f != nil {
		v["field"] = f
	}
	return v
}

// maskedRecord is a stored record with its times and chained digest replaced by tokens.
func maskedRecord(raw []byte) any {
	v := decode(raw)
	if m, ok := v.(map[string]any); ok {
		for key, token := range map[string]string{"time": "<time>", "createdAt": "<time>", "chain": "<chain>"} {
			if _, has := m[key]; has {
				m[key] = token
			}
		}
	}
	return v
}

// maskString masks the scratch directory and a cut-off tail's sidecar time, and removes the C
// ABI's callback wording.
func maskString(s, dir string) string {
	s = strings.ReplaceAll(s, dir, "<dir>")
	for _, w := range cWording {
		s = strings.ReplaceAll(s, w, "")
	}
	var b strings.Builder
	for {
		at := strings.Index(s, ".cut-")
		if at < 0 {
			break
		}
		b.WriteString(s[:at+5])
		s = s[at+5:]
		n := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
		if n < 0 {
			n = len(s)
		}
		if n > 0 {
			b.WriteString("<time>")
		}
		s = s[n:]
	}
	b.WriteString(s)
	return b.String()
}

// normalise gives v as JSON decodes it (numbers as float64) with every string masked.
func normalise(v any, dir string) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var walk func(any) any
	walk = func(x any) any {
		switch y := x.(type) {
		case string:
			return maskString(y, dir)
		case []any:
			for i := range y {
				y[i] = walk(y[i])
			}
		case map[string]any:
			for k := range y {
				y[k] = walk(y[k])
			}
		}
		return x
	}
	return walk(decode(b))
}

// firstDifference is the JSON Pointer of the first place where got differs from want (depth
// first, object keys sorted), with both values there; ok is false when they are equal.
func firstJSONDifference(want, got any, wantHas, gotHas bool, at string) (ptr string, w, g any, wh, gh bool, ok bool) {
	wm, wIsMap := want.(map[string]any)
	gm, gIsMap := got.(map[string]any)
	if wantHas && gotHas && wIsMap && gIsMap {
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			a, ah := wm[k]
			b, bh := gm[k]
			esc := strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
			if p, x, y, xh, yh, d := firstJSONDifference(a, b, ah, bh, at+"/"+esc); d {
				return p, x, y, xh, yh, true
			}
		}
		return "", nil, nil, false, false, false
	}
	wa, wIsArr := want.([]any)
	ga, gIsArr := got.([]any)
	if wantHas && gotHas && wIsArr && gIsArr {
		for i := 0; i < max(len(wa), len(ga)); i++ {
			var a, b any
			ah, bh := i < len(wa), i < len(ga)
			if ah {
				a = wa[i]
			}
			if bh {
				b = ga[i]
			}
			if p, x, y, xh, yh, d := firstJSONDifference(a, b, ah, bh, fmt.Sprintf("%s/%d", at, i)); d {
				return p, x, y, xh, yh, true
			}
		}
		return "", nil, nil, false, false, false
	}
	if wantHas == gotHas && reflect.DeepEqual(want, got) {
		return "", nil, nil, false, false, false
	}
	return at, want, got, wantHas, gotHas, true
}

func shownValue(v any, present bool) string {
	if !present {
		return "(nothing)"
	}
	return clip(v)
}

// settle compares a transcript (already normalised) with the scenario's golden file; on a
// difference it names the op, the pointer and both values, and leaves this run's transcript in
// the temporary directory for inspection.
func settle(scenario string, transcript any) error {
	golden := goldenPath(scenario)
	text, err := os.ReadFile(golden)
	if err != nil {
		return fmt.Errorf("the golden transcript: %v", err)
	}
	var want any
	if err := json.Unmarshal(text, &want); err != nil {
		return fmt.Errorf("%s: not JSON: %v", golden, err)
	}
	want = expand(want)
	// The ops first (the first op that differs explains the rest), then the whole document.
	ptr, w, g, wh, gh, differs := firstJSONDifference(asMap(want)["ops"], asMap(transcript)["ops"], true, true, "/ops")
	if !differs {
		if ptr, w, g, wh, gh, differs = firstJSONDifference(want, transcript, true, true, ""); !differs {
			return nil
		}
	}
	where := "the transcript"
	parts := strings.Split(ptr, "/")
	if i, err := strconv.Atoi(parts[min(2, len(parts)-1)]); err == nil && parts[1] == "ops" {
		ops, _ := asMap(want)["ops"].([]any)
		where = fmt.Sprintf("op %d", i)
		if i < len(ops) {
			where += fmt.Sprintf(" (%v)", asMap(ops[i])["op"])
		}
	} else if len(parts) > 2 && parts[1] == "final" {
		where = "the final " + parts[2]
	}
	kept := filepath.Join(os.TempDir(), "llmsession-go-scenario-transcripts", filepath.Base(golden))
	if b, err := json.MarshalIndent(transcript, "", "  "); err == nil && os.MkdirAll(filepath.Dir(kept), 0o755) == nil {
		_ = os.WriteFile(kept, append(b, '\n'), 0o644)
	}
	return fmt.Errorf("the transcript differs from %s at %s, %s\n  expected: %s\n  got:      %s\n  this run's transcript: %s",
		golden, where, ptr, shownValue(w, wh), shownValue(g, gh), kept)
}

// expand replaces every {"$repeat": text, "times": n} in v by text repeated n times.
func expand(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if r, ok := x["$repeat"].(string); ok {
			n, _ := x["times"].(float64)
			return strings.Repeat(r, int(n))
		}
		for k, e := range x {
			x[k] = expand(e)
		}
	case []any:
		for i, e := range x {
			x[i] = expand(e)
		}
	}
	return v
}

// decode is b as JSON decodes it into any (nil when b is not JSON).
func decode(b []byte) any {
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

func asList(v any) []any { a, _ := v.([]any); return a }

// clip is v as JSON, shortened for a report.
func clip(v any) string {
	b, _ := json.Marshal(v)
	s := []rune(string(b))
	if len(s) > 400 {
		return fmt.Sprintf("%s… (%d characters)", string(s[:400]), len(s))
	}
	return string(s)
}
