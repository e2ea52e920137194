/* llmsession quickstart in C: a complete small agent loop.
 *
 * The "provider" and the "tool" are scripted here so that the example runs offline; in a real
 * host, send the rendered body over HTTP and run real tools. Build against an installed copy:
 *
 *     cc -std=c11 quickstart.c $(pkg-config --cflags --libs llmsession) -o quickstart
 *     ./quickstart                  # the session in memory
 *     ./quickstart session.jsonl    # the session in a file; run it again to resume it
 *
 * What it shows: a session and an agent instance, a session prefix listener, the turn/step
 * loop with a tool call (read with lls_tool_calls, no JSON parser needed), the provider body
 * and what it shares with the last request (lls_request_info), compaction through a summariser
 * callback, and verifying that every request can be rebuilt from the log. */
#include <llmsession.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every fallible call returns a status and fills an lls_error on failure. */
static void check(lls_status status, lls_error *err, const char *what) {
    if (status != LLS_OK) {
        fprintf(stderr, "%s failed (status %d): %s\n", what, status, lls_error_message(err));
        lls_error_free(err);
        exit(1);
    }
}

/* The call runs first and only then is `err` read: C leaves the order in which a function's
 * arguments are evaluated unspecified, so `check((call), err, ...)` may read `err` before the
 * call has filled it. */
#define TRY(call)                                                                          \
    do {                                                                                   \
        lls_error *err = NULL;                                                             \
        lls_status status_ = (call);                                                       \
        check(status_, err, #call);                                                        \
    } while (0)

/* ------------------------------------------------------------------- callbacks */

/* A session prefix listener: contributes the project's rules once per agent instance. Its
 * input is {"instance", "rest": [...], "turn"}; it answers [mine, ...rest]. With a single
 * listener `rest` is always empty, so the answer is just [mine]. */
static int32_t project_rules(void *userdata, const char *in, size_t in_len, lls_reply *reply) {
    (void)in, (void)in_len;
    const char *rules = userdata;
    char answer[512];
    snprintf(answer, sizeof answer,
             "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}]", rules);
    lls_reply_set_json(reply, answer, strlen(answer), NULL);
    return LLS_CB_OK;
}

/* The summariser: receives {"request": <envelope>, "provider", "model", ...}. A real host
 * renders `request` with lls_render, sends it, and answers with the model's text. */
static int32_t summarise(void *userdata, const char *in, size_t in_len, lls_reply *reply) {
    (void)userdata, (void)in_len;
    if (strstr(in, "\"purpose\":\"compaction\"") == NULL) {
        lls_reply_fail(reply, "not a compaction request", 24, NULL);
        return LLS_CB_ERROR;
    }
    const char *answer =
        "{\"text\":\"## Primary request and intent\\nList the files and read README.md.\\n"
        "## Current work\\nDone: README.md says hello.\","
        "\"usage\":{\"inputTokens\":40,\"outputTokens\":25,\"cacheReadTokens\":300}}";
    lls_reply_set_json(reply, answer, strlen(answer), NULL);
    return LLS_CB_OK;
}

/* ------------------------------------------------------------------- the scripted world */

/* What the "model" answers, in order: a tool call, then a final text per turn. A tool call id
 * is unique within a session, so the scripted one carries the turn number (%llu). */
static const char *const SCRIPT[] = {
    "{\"message\":{\"role\":\"assistant\",\"content\":["
    "{\"type\":\"text\",\"text\":\"Let me look at the README.\"},"
    "{\"type\":\"tool-call\",\"id\":\"call_%llu\",\"name\":\"read_file\","
    "\"arguments\":\"{\\\"path\\\":\\\"README.md\\\"}\"}]},"
    "\"usage\":{\"inputTokens\":120,\"outputTokens\":30}}",
    "{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
    "\"text\":\"The README says hello, and nothing else.\"}]},"
    "\"usage\":{\"inputTokens\":20,\"outputTokens\":12,\"cacheReadTokens\":150}}",
    "{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
    "\"text\":\"It is a one-line greeting; it needs no changes.\"}]},"
    "\"usage\":{\"inputTokens\":25,\"outputTokens\":14,\"cacheReadTokens\":200}}",
};
static size_t script_at;

/* "Sends" the provider body and returns the model's response (no HTTP in this example). */
static const char *send_to_provider(const char *body, uint64_t turn) {
    static char response[512];
    (void)body;
    snprintf(response, sizeof response, SCRIPT[script_at++ % 3], (unsigned long long)turn);
    return response;
}

/* Runs one turn: requests until the model stops calling tools. */
static void run_turn(lls_agent *agent, const char *user_message) {
    uint64_t turn = 0;
    TRY(lls_agent_start_turn(agent, user_message, strlen(user_message), &turn, &err));
    for (;;) {
        /* The provider body (the agent renders it with the renderer set in main), and what
         * it holds: how many leading messages are the session prefix, and how many the
         * provider has already seen (a prompt-cache hit). */
        char *body = NULL;
        size_t body_len = 0;
        lls_request_info info;
        TRY(lls_agent_next_body(agent, NULL, &body, &body_len, &info, &err));
        printf("turn %llu step %llu: %u messages (%u of the session prefix, %u shared with the "
               "last request)\n",
               (unsigned long long)info.turn, (unsigned long long)info.step, info.message_count,
               info.prefix_len, info.shared_messages);
        const char *response = send_to_provider(body, turn);
        printf("  sent %zu bytes to the provider\n", body_len);
        lls_string_free(body);

        TRY(lls_agent_record_response(agent, response, strlen(response), NULL, &err));

        /* The tool calls the model made, read without a JSON parser (the strings are borrowed
         * from `calls` until lls_tool_calls_free). None: the turn is done. */
        lls_tool_calls *calls = NULL;
        TRY(lls_tool_calls_parse(response, strlen(response), &calls, &err));
        size_t count = 0;
        TRY(lls_tool_calls_count(calls, &count, &err));
        for (size_t i = 0; i < count; i++) {
            const char *id = NULL, *name = NULL, *arguments = NULL;
            size_t id_len = 0;
            TRY(lls_tool_calls_get(calls, i, &id, &id_len, &name, NULL, &arguments, NULL, &err));
            /* Run the (scripted) tool and report its result under the call's id. */
            char result[1024];
            int result_len = snprintf(result, sizeof result,
                "{\"callId\":\"%.*s\",\"text\":\"# Hello\\n\\nHello, world. This repository holds a "
                "small greeting program written in portable C. Build it with make, run it with "
                "./hello, and it prints a friendly greeting to standard output. The code lives in "
                "src/hello.c and the tests in tests/hello_test.c; both follow the house style of "
                "four-space indents and no global state. Contributions are welcome by pull "
                "request.\"}", (int)id_len, id);
            TRY(lls_agent_record_tool_result(agent, result, (size_t)result_len, NULL, &err));
            printf("  ran %s(%s)\n", name, arguments);
        }
        lls_tool_calls_free(calls);
        if (count == 0) {
            break;
        }
    }
    TRY(lls_agent_end_turn(agent, "completed", 9, &err));
}

int main(int argc, char **argv) {
    /* The library must be of this header's ABI, with the additions used here (minor 3:
     * lls_tool_calls). */
    if (lls_abi_version() != LLS_ABI_VERSION || lls_abi_minor() < 3) {
        fprintf(stderr, "llmsession ABI mismatch: built for %d (minor 3 or later), loaded %u.%u\n",
                LLS_ABI_VERSION, lls_abi_version(), lls_abi_minor());
        return 1;
    }
    printf("llmsession %s\n", lls_version());

    /* A session kept in memory, or with a path argument in a JSONL file: run it again with
     * the same path and the session resumes where the last run left it. */
    lls_session *session = NULL;
    const char *session_opts = "{\"id\":\"quickstart\"}";
    if (argc > 1) {
        TRY(lls_session_open_file(argv[1], strlen(argv[1]), session_opts, strlen(session_opts),
                                  &session, &err));
        char *stats = NULL;
        TRY(lls_session_stats(session, &stats, NULL, &err));
        printf("opened %s: %s\n", argv[1], stats);
        lls_string_free(stats);
    } else {
        TRY(lls_session_new_memory(session_opts, strlen(session_opts), &session, &err));
    }

    /* An agent instance: what every request carries. */
    const char *agent_opts =
        "{\"config\":{\"provider\":\"openai\",\"model\":\"gpt-4o-mini\"},"
        "\"system\":\"You are a helpful coding agent.\","
        "\"tools\":[{\"name\":\"read_file\",\"description\":\"Read a file\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}}]}";
    lls_agent *agent = NULL;
    TRY(lls_agent_new(session, agent_opts, strlen(agent_opts), &agent, &err));
    /* Provider bodies for OpenAI's /chat/completions, built by the agent (lls_render renders
     * an envelope by hand, as the summariser below would). */
    TRY(lls_agent_set_renderer(agent, "openai", 6, NULL, 0, &err));

    /* Callbacks: the library owns the userdata from here on (static strings need no free). */
    TRY(lls_agent_add_prefix_listener(agent, project_rules,
                                      "Project rules: C11, four-space indents, no globals.",
                                      NULL, &err));
    TRY(lls_agent_set_summariser(agent, summarise, NULL, NULL, &err));

    run_turn(agent, "{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                    "\"text\":\"What does README.md say?\"}]}");
    run_turn(agent, "{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                    "\"text\":\"Does it need changes?\"}]}");

    /* Compact the history: the summarisation request replays the cached prefix. */
    char *outcome = NULL;
    TRY(lls_agent_compact(agent, NULL, 0, NULL, &outcome, NULL, &err));
    printf("compaction: %s\n", outcome);
    lls_string_free(outcome);

    /* Every request can be rebuilt byte for byte from the log alone. */
    char *report = NULL;
    TRY(lls_session_verify(session, &report, NULL, &err));
    printf("verify: %s\n", report);
    lls_string_free(report);
    char *stats = NULL;
    TRY(lls_session_stats(session, &stats, NULL, &err));
    printf("stats: %s\n", stats);
    lls_string_free(stats);

    lls_agent_free(agent);
    lls_session_free(session);
    printf("quickstart: ok\n");
    return 0;
}
