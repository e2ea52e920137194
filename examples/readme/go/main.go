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
	opts := map[string]any{"config": map[string]string{"provider": "llama.cpp", "model": "smollm2"}, "system": "Be brief."}
	a := must(llmsession.NewAgent(s, opts))
	defer a.Close()
	must(a.StartTurn(llmsession.UserText("Hi!")))
	req := must(a.NextRequest(context.Background()))                            // logged; Verify rebuilds it byte for byte
	body := must(llmsession.Render("openai", req.Envelope, req.Info.PrefixLen)) // POST to /chat/completions
	reply := `{"choices":[{"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":3}}`
	must(a.RecordResponse(must(llmsession.ParseResponse("openai", []byte(reply)))))
	if err := a.EndTurn("completed"); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sent %d bytes; verify: %s\n", len(body), must(s.Verify()))
}

func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
