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
	check(a.SetRenderer("openai", nil)) // bodies for /chat/completions
	must(a.StartTurn(llmsession.UserText("Hi!")))
	body := must(a.NextBody(context.Background())) // POST body.Bytes; logged, Verify rebuilds it byte for byte
	reply := `{"choices":[{"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":3}}`
	_, _, err := a.RecordBody([]byte(reply)) // the provider's raw answer
	check(err)
	check(a.EndTurn("completed"))
	fmt.Printf("sent %d bytes; verify: %s\n", len(body.Bytes), must(s.Verify()))
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
