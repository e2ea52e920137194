package llmsession

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "tests", "data", "stream", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var streamFixtures = []struct{ format, stream, body string }{
	{"openai", "openai-chat-tools.sse", "openai-chat-tools.json"},
	{"openai", "openai-chat-reasoning.sse", "openai-chat-reasoning.json"},
	{"openai-responses", "openai-responses-tools.sse", "openai-responses-tools.json"},
	{"anthropic", "anthropic-tools.sse", "anthropic-tools.json"},
	{"gemini", "gemini-tools.sse", "gemini-tools.json"},
	{"gemini", "gemini-array.stream.json", "gemini-array.json"},
}

func TestReadStreamGivesTheParsedResponse(t *testing.T) {
	for _, fx := range streamFixtures {
		want, err := ParseResponse(fx.format, fixture(t, fx.body))
		if err != nil {
			t.Fatal(err)
		}
		// One byte per Read: every line and character is cut somewhere.
		var texts strings.Builder
		var deltas int
		got, body, err := ReadStream(fx.format, iotest.OneByteReader(bytes.NewReader(fixture(t, fx.stream))), func(d Delta) {
			deltas++
			if d.Type == "text" {
				texts.WriteString(d.Text)
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", fx.stream, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", fx.stream, got, want)
		}
		if deltas == 0 || len(body) == 0 {
			t.Errorf("%s: %d deltas, body %s", fx.stream, deltas, body)
		}
		var p struct {
			Message struct {
				Content []struct{ Type, Text string } `json:"content"`
			} `json:"message"`
		}
		_ = json.Unmarshal(got, &p)
		var all strings.Builder
		for _, c := range p.Message.Content {
			if c.Type == "text" {
				all.WriteString(c.Text)
			}
		}
		if texts.String() != all.String() {
			t.Errorf("%s: text deltas %q, message text %q", fx.stream, texts.String(), all.String())
		}
	}
}

func TestStreamIsAWriterAndRecords(t *testing.T) {
	before := LiveHandleCount()
	s, err := NewStream("openai")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(s, iotest.HalfReader(bytes.NewReader(fixture(t, "openai-chat-tools.sse")))); err != nil {
		t.Fatal(err)
	}
	var calls []Delta
	for {
		d, err := s.NextDelta()
		if err != nil {
			t.Fatal(err)
		}
		if d == nil {
			break
		}
		if d.Type == "tool-call" {
			calls = append(calls, *d)
		}
	}
	if len(calls) < 4 || calls[0].ID != "call_Qa1" || calls[0].Name != "read_file" {
		t.Errorf("tool-call deltas: %+v", calls)
	}
	resp, err := s.Finish(false)
	if err != nil {
		t.Fatal(err)
	}
	body, err := s.Body()
	if err != nil || !bytes.Contains(body, []byte(`"cached_tokens":1152`)) {
		t.Errorf("body %s %v", body, err)
	}
	if _, err := s.Write([]byte("data: [DONE]\n\n")); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("write after finish: %v", err)
	}
	s.Close()
	if _, err := s.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: %v", err)
	}

	sess, _ := NewMemorySession(nil)
	defer sess.Close()
	a, err := NewAgent(sess, map[string]any{"config": map[string]string{"provider": "openai", "model": "gpt-4.1-mini"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = a.StartTurn(UserText("Lis café.txt"))
	must(err)
	_, err = a.NextRequest(context.Background())
	must(err)
	_, err = a.RecordResponse(resp)
	must(err)
	h, err := sess.History()
	must(err)
	if !bytes.Contains(h, []byte(`"id":"call_Rb2"`)) {
		t.Errorf("history %s", h)
	}
	a.Close()
	sess.Close()
	if n := LiveHandleCount(); n != before {
		t.Errorf("live handles %d, before %d", n, before)
	}
}

func TestBrokenStreams(t *testing.T) {
	// The provider's error event: an *Error saying so, with whether it is an overflow.
	s, _ := NewStream("gemini")
	defer s.Close()
	_, err := s.Write([]byte(`data: {"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}` + "\n\n"))
	var le *Error
	if !errors.As(err, &le) || le.Code != StatusInvalidInput || le.Field("stream") != "provider-error" || le.Field("overflow") != true {
		t.Fatalf("provider error: %v (%s)", err, le.Detail)
	}
	if _, err := s.Finish(false); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("finish after a provider error: %v", err)
	}

	// A cut connection: the reader fails mid-stream; nothing to record.
	cut := fixture(t, "anthropic-tools.sse")
	cut = cut[:bytes.Index(cut, []byte("event: message_delta"))]
	_, _, err = ReadStream("anthropic", io.MultiReader(bytes.NewReader(cut), iotest.ErrReader(io.ErrUnexpectedEOF)), nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read error: %v", err)
	}
	// The same bytes, then EOF: incomplete, unless the partial message is asked for.
	_, _, err = ReadStream("anthropic", bytes.NewReader(cut), nil)
	if !errors.As(err, &le) || le.Field("stream") != "incomplete" {
		t.Fatalf("cut stream: %v", err)
	}
	p, _ := NewStream("anthropic")
	defer p.Close()
	if _, err := p.Write(cut); err != nil {
		t.Fatal(err)
	}
	partial, err := p.Finish(true)
	if err != nil || !bytes.Contains(partial, []byte(`"finishReason":"incomplete"`)) || !bytes.Contains(partial, []byte(`"toolu_01AbC"`)) {
		t.Errorf("partial %s %v", partial, err)
	}

	// A malformed event.
	m, _ := NewStream("openai-responses")
	defer m.Close()
	if _, err := m.Write([]byte("data: {no\n\n")); !errors.Is(err, ErrMalformedJSON) {
		t.Errorf("malformed: %v", err)
	}
	if _, err := NewStream("cohere"); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("unknown format: %v", err)
	}
}
