package llmsession

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// The library's JSON vocabulary as Go types (docs/go.md, "Typed values"): messages, content
// blocks, tools, usage, provider responses, tool results and agent options. Each marshals to the
// wire form the library reads and writes: the same keys, optional fields absent (never null),
// keys in the order the library's calls return them (a type's own fields first, in its order,
// then the others in key order; a content block's keys all in key order), and every field the
// type does not know (an "origin" a parser added, a provider's extra) kept in Extra and written
// back as it came. The bytes are the library's own (History, ParseResponse, ...), except that
// json.Marshal escapes <, > and & (as \u003c, ...), the same JSON value; a json.Encoder with
// SetEscapeHTML(false) gives the library's bytes exactly for messages, blocks, usage and
// responses (floats may differ in form: Go writes 0 where the library writes 0.0).

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Content block types. Any other type (e.g. a provider's own) is carried as an opaque block:
// its fields are all in Extra.
const (
	BlockText       = "text"        // Text
	BlockReasoning  = "reasoning"   // Text
	BlockToolCall   = "tool-call"   // ID, Name, Arguments
	BlockToolResult = "tool-result" // ToolCallID, Content, IsError
	BlockImage      = "image"       // URL, or MediaType and Data (base64)
	BlockFile       = "file"        // MediaType, and Data (base64), URL or FileID; Filename
)

// Block is one content block. Which fields it uses depends on Type (see the Block* constants);
// the others are ignored when it is marshalled.
type Block struct {
	Type string

	// Text is the text of a text or reasoning block.
	Text string

	// ID, Name and Arguments are a tool call's: Arguments is the raw string the model produced
	// (usually JSON; decode it with json.Unmarshal([]byte(b.Arguments), &v)).
	ID, Name, Arguments string

	// ToolCallID, Content and IsError are a tool result's.
	ToolCallID string
	Content    []Block
	IsError    bool

	// URL, or MediaType and Data (base64), are an image's. A file's are MediaType and one of
	// Data (base64), URL and FileID (the id or URI the provider's Files API gave it), with its
	// Filename (docs/contract.md, "Images and files").
	URL, MediaType, Data string
	FileID, Filename     string

	// Extra holds every other field of the block, as it came (for an opaque block: all but
	// "type"). A key that names one of the fields above is ignored.
	Extra map[string]json.RawMessage
}

// TextBlock is a text block.
func TextBlock(text string) Block { return Block{Type: BlockText, Text: text} }

// ReasoningBlock is a reasoning block.
func ReasoningBlock(text string) Block { return Block{Type: BlockReasoning, Text: text} }

// ToolCallBlock is a tool-call block (arguments: the raw argument string, usually JSON).
func ToolCallBlock(id, name, arguments string) Block {
	return Block{Type: BlockToolCall, ID: id, Name: name, Arguments: arguments}
}

// ToolResultBlock is a tool-result block answering the call callID.
func ToolResultBlock(callID string, content []Block, isError bool) Block {
	return Block{Type: BlockToolResult, ToolCallID: callID, Content: content, IsError: isError}
}

// ImageURL is an image block given by URL.
func ImageURL(url string) Block { return Block{Type: BlockImage, URL: url} }

// ImageData is an image block given inline: its media type ("image/png") and base64 data.
func ImageData(mediaType, base64Data string) Block {
	return Block{Type: BlockImage, MediaType: mediaType, Data: base64Data}
}

// FileData is a file block given inline: its media type ("application/pdf", "audio/wav",
// "video/mp4", ...), base64 data and file name ("" for none).
func FileData(mediaType, base64Data, filename string) Block {
	return Block{Type: BlockFile, MediaType: mediaType, Data: base64Data, Filename: filename}
}

// FileURL is a file block given by URL.
func FileURL(mediaType, url string) Block {
	return Block{Type: BlockFile, MediaType: mediaType, URL: url}
}

// FileByID is a file block given by the id (or URI) the provider's Files API gave it.
func FileByID(mediaType, fileID string) Block {
	return Block{Type: BlockFile, MediaType: mediaType, FileID: fileID}
}

// knownKeys are the fields a block type has of its own (besides "type").
func (b *Block) knownKeys() []string {
	switch b.Type {
	case BlockText, BlockReasoning:
		return []string{"text"}
	case BlockToolCall:
		return []string{"id", "name", "arguments"}
	case BlockToolResult:
		return []string{"toolCallId", "content", "isError"}
	case BlockImage:
		return []string{"url", "mediaType", "data"}
	case BlockFile:
		return []string{"url", "mediaType", "data", "fileId", "filename"}
	}
	return nil
}

// MarshalJSON writes the block's wire form.
func (b Block) MarshalJSON() ([]byte, error) {
	known := b.knownKeys()
	if b.Type == BlockImage || b.Type == BlockFile {
		// An image's or a file's fields override Extra only when set: a field that is not a
		// non-empty string was left in Extra by UnmarshalJSON, as it came.
		known = nil
	}
	o := newObject(b.Extra, append(known, "type"))
	o.sortAll = true // the library keeps blocks as plain JSON objects: keys in key order
	o.set("type", b.Type)
	switch b.Type {
	case BlockText, BlockReasoning:
		o.set("text", b.Text)
	case BlockToolCall:
		o.set("id", b.ID)
		o.set("name", b.Name)
		o.set("arguments", b.Arguments)
	case BlockToolResult:
		o.set("toolCallId", b.ToolCallID)
		o.set("content", nonNil(b.Content))
		o.set("isError", b.IsError)
	case BlockImage:
		o.setString("url", b.URL)
		o.setString("mediaType", b.MediaType)
		o.setString("data", b.Data)
	case BlockFile:
		o.setString("url", b.URL)
		o.setString("mediaType", b.MediaType)
		o.setString("data", b.Data)
		o.setString("fileId", b.FileID)
		o.setString("filename", b.Filename)
	}
	return o.marshal()
}

// UnmarshalJSON reads a block; the fields of its type that are missing stay zero.
func (b *Block) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*b = Block{}
	if err := take(m, "type", &b.Type); err != nil {
		return fmt.Errorf("content block: %w", err)
	}
	var err error
	switch b.Type {
	case BlockText, BlockReasoning:
		err = takeAll(m, field{"text", &b.Text})
	case BlockToolCall:
		err = takeAll(m, field{"id", &b.ID}, field{"name", &b.Name}, field{"arguments", &b.Arguments})
	case BlockToolResult:
		err = takeAll(m, field{"toolCallId", &b.ToolCallID}, field{"content", &b.Content}, field{"isError", &b.IsError})
	case BlockImage, BlockFile:
		// The renderers check an image's or a file's fields; anything but a non-empty string
		// stays in Extra.
		fields := []field{{"url", &b.URL}, {"mediaType", &b.MediaType}, {"data", &b.Data}}
		if b.Type == BlockFile {
			fields = append(fields, field{"fileId", &b.FileID}, field{"filename", &b.Filename})
		}
		for _, f := range fields {
			var s string
			if raw, ok := m[f.key]; ok && json.Unmarshal(raw, &s) == nil && s != "" {
				*f.dst.(*string) = s
				delete(m, f.key)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%s block: %w", b.Type, err)
	}
	b.Extra = extra(m)
	return nil
}

// Provenance says which provider and model produced an assistant message.
type Provenance struct {
	Provider string
	Model    string
	Extra    map[string]json.RawMessage
}

// MarshalJSON writes the provenance's wire form.
func (p Provenance) MarshalJSON() ([]byte, error) {
	o := newObject(p.Extra, []string{"provider", "model"})
	o.set("provider", p.Provider)
	o.set("model", p.Model)
	return o.marshal()
}

// UnmarshalJSON reads a provenance object.
func (p *Provenance) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*p = Provenance{}
	if err := takeAll(m, field{"provider", &p.Provider}, field{"model", &p.Model}); err != nil {
		return fmt.Errorf("provenance: %w", err)
	}
	p.Extra = extra(m)
	return nil
}

// Message is a provider message: a role and content blocks, and on assistant messages the
// provenance.
type Message struct {
	Role       string
	Content    []Block
	Provenance *Provenance
	Extra      map[string]json.RawMessage
}

// UserText is a user message with one text block.
func UserText(text string) Message { return Message{Role: RoleUser, Content: []Block{TextBlock(text)}} }

// UserMessage is a user message with the given blocks.
func UserMessage(blocks ...Block) Message { return Message{Role: RoleUser, Content: blocks} }

// SystemText is a system message with one text block (allowed in a session prefix).
func SystemText(text string) Message {
	return Message{Role: RoleSystem, Content: []Block{TextBlock(text)}}
}

// AssistantMessage is an assistant message with the given blocks.
func AssistantMessage(blocks ...Block) Message { return Message{Role: RoleAssistant, Content: blocks} }

// ToolCalls are the message's tool-call blocks, in order (ID, Name, Arguments).
func (m Message) ToolCalls() []Block {
	var out []Block
	for _, b := range m.Content {
		if b.Type == BlockToolCall {
			out = append(out, b)
		}
	}
	return out
}

// Text is the text of the message's text blocks, joined with newlines (reasoning left out).
func (m Message) Text() string {
	var parts []string
	for _, b := range m.Content {
		if b.Type == BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// MarshalJSON writes the message's wire form.
func (m Message) MarshalJSON() ([]byte, error) {
	o := newObject(m.Extra, []string{"role", "content", "provenance"})
	o.set("role", m.Role)
	o.set("content", nonNil(m.Content))
	if m.Provenance != nil {
		o.set("provenance", m.Provenance)
	}
	return o.marshal()
}

// UnmarshalJSON reads a message.
func (m *Message) UnmarshalJSON(data []byte) error {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*m = Message{}
	if err := takeAll(f, field{"role", &m.Role}, field{"content", &m.Content}, field{"provenance", &m.Provenance}); err != nil {
		return fmt.Errorf("message: %w", err)
	}
	m.Extra = extra(f)
	return nil
}

// Usage is the token usage a provider reported, in disjoint buckets: InputTokens is the
// uncached input only. The optional buckets are nil when absent (absent is not 0 in the log).
type Usage struct {
	InputTokens      uint64
	OutputTokens     uint64
	CacheReadTokens  *uint64
	CacheWriteTokens *uint64
	ReasoningTokens  *uint64
	Extra            map[string]json.RawMessage
}

// PromptTokens is the whole prompt as the provider counted it: uncached + cache read + cache
// write.
func (u Usage) PromptTokens() uint64 {
	return u.InputTokens + deref(u.CacheReadTokens) + deref(u.CacheWriteTokens)
}

// CachedTokens is CacheReadTokens, 0 when absent.
func (u Usage) CachedTokens() uint64 { return deref(u.CacheReadTokens) }

// Count is a pointer to n, for the optional fields of Usage and CallConfig.
func Count(n uint64) *uint64 { return &n }

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// MarshalJSON writes the usage's wire form.
func (u Usage) MarshalJSON() ([]byte, error) {
	o := newObject(u.Extra, []string{"inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "reasoningTokens"})
	o.set("inputTokens", u.InputTokens)
	o.set("outputTokens", u.OutputTokens)
	o.setCount("cacheReadTokens", u.CacheReadTokens)
	o.setCount("cacheWriteTokens", u.CacheWriteTokens)
	o.setCount("reasoningTokens", u.ReasoningTokens)
	return o.marshal()
}

// UnmarshalJSON reads a usage object.
func (u *Usage) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*u = Usage{}
	if err := takeAll(m, field{"inputTokens", &u.InputTokens}, field{"outputTokens", &u.OutputTokens},
		field{"cacheReadTokens", &u.CacheReadTokens}, field{"cacheWriteTokens", &u.CacheWriteTokens},
		field{"reasoningTokens", &u.ReasoningTokens}); err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	u.Extra = extra(m)
	return nil
}

// Tool is a tool the model may use. A function tool (the host runs it) has its name, what it
// does, and the JSON schema of its arguments (Parameters; nil is written as {}). A provider tool
// (the provider runs it server-side: web search, code execution, ...) has Provider set and
// nothing else: it is sent verbatim, only to its own format (docs/render.md, "Tools"); the
// library names it in the list by Name, "<format>:<key>" (it is filled in when decoded).
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
	Extra       map[string]json.RawMessage
	Provider    *ProviderTool
}

// ProviderTool is a provider's own tool: the body format whose renderer sends it ("anthropic",
// "openai-responses", "openai", "gemini", "gemini-interactions") and the tool object in that
// provider's shape, e.g. {"type":"web_search_20250305","name":"web_search","max_uses":5}.
type ProviderTool struct {
	Format string
	Tool   json.RawMessage
}

// MarshalJSON writes the tool's wire form: {"type":"provider","format","tool"} for a provider
// tool, else {"name","description","parameters",...Extra}.
func (t Tool) MarshalJSON() ([]byte, error) {
	if t.Provider != nil {
		o := newObject(nil, nil)
		o.set("type", "provider")
		o.set("format", t.Provider.Format)
		o.set("tool", t.Provider.Tool)
		return o.marshal()
	}
	o := newObject(t.Extra, []string{"name", "description", "parameters"})
	o.set("name", t.Name)
	o.set("description", t.Description)
	if len(t.Parameters) == 0 {
		o.set("parameters", json.RawMessage(`{}`))
	} else {
		o.set("parameters", t.Parameters)
	}
	return o.marshal()
}

// UnmarshalJSON reads a tool (as the library gives it: a function tool, or a provider tool).
func (t *Tool) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*t = Tool{}
	var kind string
	if err := take(m, "type", &kind); err != nil {
		return fmt.Errorf("tool: %w", err)
	}
	if kind == "provider" {
		p := &ProviderTool{}
		if err := takeAll(m, field{"format", &p.Format}, field{"tool", &p.Tool}); err != nil {
			return fmt.Errorf("provider tool: %w", err)
		}
		t.Provider = p
		t.Name = p.Format + ":" + providerToolKey(p.Tool)
		return nil
	}
	if kind != "" {
		m["type"] = json.RawMessage(fmt.Sprintf("%q", kind))
	}
	var description *string
	if err := takeAll(m, field{"name", &t.Name}, field{"description", &description}, field{"parameters", &t.Parameters}); err != nil {
		return fmt.Errorf("tool: %w", err)
	}
	if description != nil {
		t.Description = *description
	}
	t.Extra = extra(m)
	return nil
}

// providerToolKey is the key the library gives a provider tool object: its "name", else its
// "type" (with ":<server_label>"), else its one field.
func providerToolKey(raw json.RawMessage) string {
	var o map[string]json.RawMessage
	if json.Unmarshal(raw, &o) != nil {
		return ""
	}
	text := func(k string) string {
		var s string
		_ = json.Unmarshal(o[k], &s)
		return s
	}
	if n := text("name"); n != "" {
		return n
	}
	if ty := text("type"); ty != "" {
		if label := text("server_label"); label != "" {
			return ty + ":" + label
		}
		return ty
	}
	if len(o) == 1 {
		for k := range o {
			return k
		}
	}
	return ""
}

// Finish reasons of a parsed or recorded response (Response.FinishReason,
// Recorded.FinishReason), normalised across providers (docs/render.md, "Finish reasons", says
// what a host does for each); a provider's own word comes through as it is, and a cut stream
// finished with partial gives FinishIncomplete.
const (
	// FinishStop: the answer is complete; end the turn.
	FinishStop = "stop"
	// FinishToolCalls: run the tools, record their results, build the next request.
	FinishToolCalls = "tool-calls"
	// FinishMaxTokens: the output budget cut the answer.
	FinishMaxTokens = "max-tokens"
	// FinishPauseTurn (Anthropic pause_turn): the turn is not over; build the next request of
	// the same turn, with no new user message.
	FinishPauseTurn = "pause-turn"
	// FinishRefusal: the model declined (an OpenAI refusal is a text block marked "refusal").
	FinishRefusal = "refusal"
	// FinishContextOverflow (Anthropic model_context_window_exceeded): the answer filled the
	// context window; record it, then compact before the next request.
	FinishContextOverflow = "context-overflow"
	// FinishContentFilter: the provider's filter stopped the answer.
	FinishContentFilter = "content-filter"
	// FinishIncomplete: the partial message of a cut stream.
	FinishIncomplete = "incomplete"
)

// Response is a parsed provider response: what ParseResponseOf and Stream.FinishOf give and
// Agent.RecordResponse takes (a *Response or a Response). Raw is the JSON it was decoded from
// (nil for one built in Go); marshalling uses the fields, never Raw.
type Response struct {
	Message      Message
	Usage        *Usage
	FinishReason string
	Raw          json.RawMessage
}

// ToolCalls are the tool calls of the response's message (ID, Name, Arguments).
func (r *Response) ToolCalls() []Block { return r.Message.ToolCalls() }

// MarshalJSON writes {"message","usage"?,"finishReason"?}.
func (r Response) MarshalJSON() ([]byte, error) {
	o := newObject(nil, nil)
	o.set("message", r.Message)
	if r.Usage != nil {
		o.set("usage", r.Usage)
	}
	o.setString("finishReason", r.FinishReason)
	return o.marshal()
}

// UnmarshalJSON reads {"message","usage"?,"finishReason"?} and keeps the bytes in Raw.
func (r *Response) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*r = Response{}
	if err := takeAll(m, field{"message", &r.Message}, field{"usage", &r.Usage}, field{"finishReason", &r.FinishReason}); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	r.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// ToolResult is what Agent.RecordToolResult takes: the result of the call CallID, as Content
// blocks or, when Content is nil, as one text block Text; IsError when the tool failed.
type ToolResult struct {
	CallID  string
	Text    string
	Content []Block
	IsError bool
}

// MarshalJSON writes {"callId", "content" | "text", "isError"?}.
func (t ToolResult) MarshalJSON() ([]byte, error) {
	o := newObject(nil, nil)
	o.set("callId", t.CallID)
	if t.Content != nil {
		o.set("content", t.Content)
	} else {
		o.set("text", t.Text)
	}
	if t.IsError {
		o.set("isError", true)
	}
	return o.marshal()
}

// CallConfig is the per-call configuration: provider, model and sampling settings. Extra holds
// further fields sent into the request envelope (e.g. "seed").
type CallConfig struct {
	Provider        string
	Model           string
	ReasoningEffort string
	Temperature     *float64
	MaxTokens       *uint64
	Stop            []string
	Extra           map[string]json.RawMessage
}

// MarshalJSON writes the config's wire form.
func (c CallConfig) MarshalJSON() ([]byte, error) {
	o := newObject(c.Extra, []string{"provider", "model", "reasoningEffort", "temperature", "maxTokens", "stop"})
	o.set("provider", c.Provider)
	o.set("model", c.Model)
	o.setString("reasoningEffort", c.ReasoningEffort)
	if c.Temperature != nil {
		o.set("temperature", *c.Temperature)
	}
	o.setCount("maxTokens", c.MaxTokens)
	if c.Stop != nil {
		o.set("stop", c.Stop)
	}
	return o.marshal()
}

// UnmarshalJSON reads a call config.
func (c *CallConfig) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*c = CallConfig{}
	if err := takeAll(m, field{"provider", &c.Provider}, field{"model", &c.Model}, field{"reasoningEffort", &c.ReasoningEffort},
		field{"temperature", &c.Temperature}, field{"maxTokens", &c.MaxTokens}, field{"stop", &c.Stop}); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	c.Extra = extra(m)
	return nil
}

// Policy is a compaction policy (docs/compaction.md); zero fields are left out (the library's
// defaults).
type Policy struct {
	ContextWindow    uint64  `json:"contextWindow"`
	Threshold        float64 `json:"threshold,omitempty"`
	RetainedTokens   uint64  `json:"retainedTokens,omitempty"`
	RetainedRatio    float64 `json:"retainedRatio,omitempty"`
	SummaryMaxTokens uint64  `json:"summaryMaxTokens,omitempty"`
	SummaryProvider  string  `json:"summaryProvider,omitempty"`
	SummaryModel     string  `json:"summaryModel,omitempty"`
	Retries          *uint64 `json:"retries,omitempty"`
	OverflowRetries  *uint64 `json:"overflowRetries,omitempty"`
}

// AgentOptions are what NewAgent takes (a map or JSON works too): the call config, the system
// prompt, the tools, the compaction policy and a tokenizer file. SetOptions takes Config,
// System, Tools and CheckRequests only.
type AgentOptions struct {
	Config        CallConfig `json:"config"`
	System        string     `json:"system,omitempty"`
	Tools         []Tool     `json:"tools,omitempty"`
	CheckRequests *bool      `json:"checkRequests,omitempty"`
	Policy        *Policy    `json:"policy,omitempty"`
	Tokenizer     string     `json:"tokenizer,omitempty"`
}

// Event is one event of the session log: {"type","seq","time","data","surfaceOp"?,"sources"?}.
// Raw is the event as the library gave it.
type Event struct {
	Type      string          `json:"type"`
	Seq       uint64          `json:"seq"`
	Time      uint64          `json:"time"` // Unix ms
	Data      json.RawMessage `json:"data"`
	SurfaceOp string          `json:"surfaceOp,omitempty"`
	Sources   []uint64        `json:"sources,omitempty"`
	Raw       json.RawMessage `json:"-"`
}

// Message is the message a user/message or assistant/message event carries (nil for other
// events).
func (e *Event) Message() (*Message, error) {
	if e.Type != "user/message" && e.Type != "assistant/message" {
		return nil, nil
	}
	var d struct {
		Message *Message `json:"message"`
	}
	if err := json.Unmarshal(e.Data, &d); err != nil {
		return nil, fmt.Errorf("llmsession: %s event %d: %w", e.Type, e.Seq, err)
	}
	return d.Message, nil
}

// Usage is the usage an assistant/message event carries (nil when none).
func (e *Event) Usage() (*Usage, error) {
	if e.Type != "assistant/message" {
		return nil, nil
	}
	var d struct {
		Usage *Usage `json:"usage"`
	}
	if err := json.Unmarshal(e.Data, &d); err != nil {
		return nil, fmt.Errorf("llmsession: %s event %d: %w", e.Type, e.Seq, err)
	}
	return d.Usage, nil
}

// VerifyReport is what Verify and VerifyFile report: how many events were checked and how many
// conversation and compaction requests were rebuilt from the log and matched. Raw is the JSON.
type VerifyReport struct {
	Events      uint64 `json:"events"`
	Requests    uint64 `json:"requests"`
	Compactions uint64 `json:"compactions"`
	Bodies      uint64 `json:"bodies,omitempty"`
	// Keepalives and Decisions count the cache clock's keep-warm requests rebuilt and its
	// decisions recomputed (ABI minor 6).
	Keepalives uint64          `json:"keepalives,omitempty"`
	Decisions  uint64          `json:"decisions,omitempty"`
	Raw        json.RawMessage `json:"-"`
}

// LoadReport is what opening a session found and repaired: records cut from the end (a torn
// last line, or damage in an unfinished last turn: CutDamaged), where they were kept, and the
// synthetic events appended to close a turn left open. Raw is the JSON.
type LoadReport struct {
	CutRecords     uint64          `json:"cutRecords"`
	RepairedEvents uint64          `json:"repairedEvents"`
	CutAtLine      uint64          `json:"cutAtLine,omitempty"` // 1-based
	CutReason      string          `json:"cutReason,omitempty"`
	CutDamaged     bool            `json:"cutDamaged,omitempty"`
	CutSavedTo     string          `json:"cutSavedTo,omitempty"`
	Raw            json.RawMessage `json:"-"`
}

// Recorded is what RecordBodyOf and RecordStreamOf give: the seq of the assistant/message
// event, the response as the log holds it (message, usage, tool calls), and its finish reason
// (one of the Finish* constants, a provider's own word, or "" when the response gives none),
// which the log does not keep.
type Recorded struct {
	Seq          uint64
	Message      Message
	Usage        *Usage
	FinishReason string
}

// ToolCalls are the tool calls of the recorded message (ID, Name, Arguments).
func (r *Recorded) ToolCalls() []Block { return r.Message.ToolCalls() }

// ---------------------------------------------------------------------------------------------
// Helpers of the marshallers above.

// object is a JSON object under construction: known fields (in the order they are set) and
// the extra ones not named by a known key (after them, in key order). With sortAll every key
// comes out in key order (content blocks, which the library keeps as plain JSON objects).
// Values are written without HTML escaping, as the library writes them.
type object struct {
	keys    []string
	vals    map[string]any
	extra   map[string]json.RawMessage
	sortAll bool
}

func newObject(extra map[string]json.RawMessage, known []string) *object {
	o := &object{vals: map[string]any{}, extra: map[string]json.RawMessage{}}
	for k, v := range extra {
		o.extra[k] = v
	}
	for _, k := range known {
		delete(o.extra, k)
	}
	return o
}

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
	delete(o.extra, k)
}

func (o *object) setString(k, v string) {
	if v != "" {
		o.set(k, v)
	}
}

func (o *object) setCount(k string, v *uint64) {
	if v != nil {
		o.set(k, *v)
	}
}

func (o *object) marshal() ([]byte, error) {
	extraKeys := make([]string, 0, len(o.extra))
	for k := range o.extra {
		extraKeys = append(extraKeys, k)
	}
	sort.Strings(extraKeys)
	keys := append(append([]string(nil), o.keys...), extraKeys...)
	if o.sortAll {
		sort.Strings(keys)
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeJSON(&buf, k); err != nil {
			return nil, err
		}
		buf.WriteByte(':')
		v, known := o.vals[k]
		if !known {
			v = o.extra[k]
		}
		if err := writeJSON(&buf, v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// writeJSON appends v's JSON without HTML escaping (raw JSON compacted).
func writeJSON(buf *bytes.Buffer, v any) error {
	if raw, ok := v.(json.RawMessage); ok {
		if len(raw) == 0 {
			buf.WriteString("null")
			return nil
		}
		return json.Compact(buf, raw)
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	return nil
}

func nonNil(b []Block) []Block {
	if b == nil {
		return []Block{}
	}
	return b
}

type field struct {
	key string
	dst any
}

// take decodes m[key] into dst and removes it (a missing key leaves dst as it is).
func take(m map[string]json.RawMessage, key string, dst any) error {
	raw, ok := m[key]
	if !ok {
		return nil
	}
	delete(m, key)
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

func takeAll(m map[string]json.RawMessage, fields ...field) error {
	for _, f := range fields {
		if err := take(m, f.key, f.dst); err != nil {
			return err
		}
	}
	return nil
}

func extra(m map[string]json.RawMessage) map[string]json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	return m
}

// Compaction outcomes (CompactionOutcome.Outcome).
const (
	OutcomeLanded    = "landed"    // the summary replaced the span
	OutcomeFailed    = "failed"    // the summariser failed, or storing the summary did
	OutcomeDiscarded = "discarded" // the span changed while the summariser ran
	OutcomeCancelled = "cancelled" // cancelled (or the agent disposed) while it ran
)

// CompactionOutcome is what Compact reports: how it ended, the compacted span (surface
// positions, inclusive) and its events' seqs, the summarisation request that was sent, and the
// error when it did not land. Raw is the JSON.
type CompactionOutcome struct {
	Outcome string   `json:"outcome"`
	Span    [2]int   `json:"span"`
	Seqs    []uint64 `json:"seqs"`
	Request struct {
		Digest         string `json:"digest"`
		SharedMessages int    `json:"sharedMessages"`
		MessageCount   int    `json:"messageCount"`
	} `json:"request"`
	Error string          `json:"error,omitempty"`
	Raw   json.RawMessage `json:"-"`
}
