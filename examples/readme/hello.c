#include <llmsession.h>
#include <stdio.h>
#include <string.h>
#define S(text) text, strlen(text)
#define TRY(call) if ((call) != LLS_OK) { fprintf(stderr, "%s\n", lls_error_message(err)); return 1; }

int main(void) {
    lls_session *s; lls_agent *a; lls_error *err = NULL; char *req, *body, *msg, *report; size_t n, bn, mn;
    TRY(lls_session_open_file(S("hello.jsonl"), NULL, 0, &s, &err));
    TRY(lls_agent_new(s, S("{\"config\":{\"provider\":\"llama.cpp\",\"model\":\"smollm2\"},\"system\":\"Be brief.\"}"), &a, &err));
    TRY(lls_agent_start_turn(a, S("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi!\"}]}"), NULL, &err));
    TRY(lls_agent_next_request(a, NULL, &req, &n, &err));        /* logged; verify rebuilds it */
    TRY(lls_render(S("openai"), req, n, 0, &body, &bn, &err));     /* POST this to /chat/completions */
    const char *reply = "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"Hello!\"},"
                        "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":14,\"completion_tokens\":3}}";
    TRY(lls_parse_response(S("openai"), S(reply), &msg, &mn, &err));
    TRY(lls_agent_record_response(a, msg, mn, NULL, &err));
    TRY(lls_agent_end_turn(a, S("completed"), &err));
    TRY(lls_session_verify(s, &report, &n, &err));
    printf("sent %zu bytes; verify: %s\n", bn, report);
    lls_string_free(req), lls_string_free(body), lls_string_free(msg), lls_string_free(report);
    lls_agent_free(a), lls_session_free(s);
}
