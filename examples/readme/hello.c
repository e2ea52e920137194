#include <llmsession.h>
#include <stdio.h>
#include <string.h>
#define S(text) text, strlen(text)
#define TRY(call) if ((call) != LLS_OK) { fprintf(stderr, "%s\n", lls_error_message(err)); return 1; }

int main(void) {
    lls_session *s; lls_agent *a; lls_error *err = NULL; char *body, *report; size_t n, bn;
    TRY(lls_session_open_file(S("hello.jsonl"), NULL, 0, &s, &err));
    TRY(lls_agent_new(s, S("{\"config\":{\"provider\":\"llama.cpp\",\"model\":\"smollm2\"},\"system\":\"Be brief.\"}"), &a, &err));
    TRY(lls_agent_set_renderer(a, S("openai"), NULL, 0, &err));      /* bodies for /chat/completions */
    TRY(lls_agent_start_turn(a, S("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi!\"}]}"), NULL, &err));
    TRY(lls_agent_next_body(a, NULL, &body, &bn, NULL, &err));      /* POST this; logged, verify rebuilds it */
    const char *reply = "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"Hello!\"},"
                        "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":14,\"completion_tokens\":3}}";
    TRY(lls_agent_record_body(a, S(reply), NULL, NULL, &err));      /* the provider's raw answer */
    TRY(lls_agent_end_turn(a, S("completed"), &err));
    TRY(lls_session_verify(s, &report, &n, &err));
    printf("sent %zu bytes; verify: %s\n", bn, report);
    lls_string_free(body), lls_string_free(report);
    lls_agent_free(a), lls_session_free(s);
}
