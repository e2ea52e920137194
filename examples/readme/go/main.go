// The README's Go example: one turn through llmsession, with a canned provider reply.
package main

import (
	"context"
	"fmt"
	"log"

	llmsession "github.com/llmsession/llmsession/bindings/go"
)

func main() {
	s := must(llmsession.OpenFile("hello.jsonl", nil))
	defer s.Close()
	a := must(llmsession.NewAgent(s, llmsession.AgentOptions{
		Config: llmsession.CallConfig{Provider: "llama.cpp", Model: "smollm2"},
		System: "Be brief.",
		Tools:  []llmsession.Tool{{Name: "clock", Description: "The time now", Parameters: []byte(`{"type":"object"}`)}},
	}))
	defer a.Close()
	check(a.SetRenderer("openai", nil)) // bodies for /chat/completions
	must(a.StartTurn(llmsession.UserText("Hi!")))
	for { // the tool loop: until the model answers without calling a tool
		body := must(a.NextBody(context.Background())) // POST body.Bytes; logged, Verify rebuilds it byte for byte
		rec := must(a.RecordBodyOf(provider(body.Bytes))) // the provider's raw answer, parsed and logged
		if len(rec.ToolCalls()) == 0 {
			fmt.Printf("assistant: %s\n", rec.Message.Text())
			break
		}
		for _, call := range rec.ToolCalls() { // call.ID, call.Name, call.Arguments (JSON text)
			must(a.RecordToolResult(llmsession.ToolResult{CallID: call.ID, Text: "12:00"}))
		}
	}
	check(a.EndTurn("completed"))
	fmt.Printf("verify: %s\n", must(s.VerifyOf()).Raw)
}

// provider stands in for the HTTP call: a canned chat-completions reply.
func provider(body []byte) []byte {
	return []byte(`{"choices":[{"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":3}}`)
}

func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
