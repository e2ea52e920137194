/* C tests of lls_tool_calls: the tool calls of a message read without a JSON parser, from a
 * parsed response, from the assistant/message event lls_agent_record_body logged, from a
 * message or an array; the tool loop run on them; bad input and bad handles are clear errors.
 * Built and run by `make test-c`. */
#define _POSIX_C_SOURCE 200809L

#include "helpers.h"

#define TWO_CALLS                                                                          \
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Reading both.\"},"   \
    "{\"type\":\"tool-call\",\"id\":\"call_a\",\"name\":\"read_file\","                      \
    "\"arguments\":\"{\\\"path\\\":\\\"a.txt\\\"}\"},"                                      \
    "{\"type\":\"tool-call\",\"id\":\"call_b\",\"name\":\"list_dir\",\"arguments\":\"\"}]}"

/* Call `i` of `calls` has this id, name and arguments (lengths and NUL checked). */
static void check_call(const lls_tool_calls *calls, size_t i, const char *id, const char *name,
                       const char *arguments) {
    const char *got_id = NULL, *got_name = NULL, *got_args = NULL;
    size_t id_len = 99, name_len = 99, args_len = 99;
    EXPECT_OK(lls_tool_calls_get(calls, i, &got_id, &id_len, &got_name, &name_len, &got_args,
                                 &args_len, &err));
    CHECK_STR(got_id, id);
    CHECK_INT(id_len, strlen(id));
    CHECK_STR(got_name, name);
    CHECK_INT(name_len, strlen(name));
    CHECK_STR(got_args, arguments);
    CHECK_INT(args_len, strlen(arguments));
}

static void test_message_and_response(void) {
    lls_tool_calls *calls = NULL;
    EXPECT_OK(lls_tool_calls_parse(S(TWO_CALLS), &calls, &err));
    size_t n = 0;
    EXPECT_OK(lls_tool_calls_count(calls, &n, &err));
    CHECK_INT(n, 2);
    check_call(calls, 0, "call_a", "read_file", "{\"path\":\"a.txt\"}");
    check_call(calls, 1, "call_b", "list_dir", "");
    /* Every out-parameter may be NULL. */
    const char *name = NULL;
    EXPECT_OK(lls_tool_calls_get(calls, 1, NULL, NULL, &name, NULL, NULL, NULL, &err));
    CHECK_STR(name, "list_dir");
    EXPECT_ERR_DETAIL(lls_tool_calls_get(calls, 2, NULL, NULL, &name, NULL, NULL, NULL, &err),
                      LLS_ERR_INVALID_ARGUMENT, "is 2, and there are 2 tool calls",
                      "\"argument\":\"index\"");
    lls_tool_calls_free(calls);

    /* A parsed response (lls_parse_response's output) gives the same calls. */
    const char *body =
        "{\"id\":\"c1\",\"object\":\"chat.completion\",\"model\":\"m\",\"choices\":[{\"index\":0,"
        "\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_7\","
        "\"type\":\"function\",\"function\":{\"name\":\"grep\",\"arguments\":\"{\\\"q\\\":\\\"x\\\"}\"}}]},"
        "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}";
    char *parsed = NULL;
    size_t parsed_len = 0;
    EXPECT_OK(lls_parse_response(S("openai"), body, strlen(body), &parsed, &parsed_len, &err));
    EXPECT_OK(lls_tool_calls_parse(parsed, parsed_len, &calls, &err));
    lls_string_free(parsed);
    EXPECT_OK(lls_tool_calls_count(calls, &n, &err));
    CHECK_INT(n, 1);
    check_call(calls, 0, "call_7", "grep", "{\"q\":\"x\"}"); /* still valid: borrowed from calls */
    lls_tool_calls_free(calls);

    /* A message without calls: none, not an error; an empty array likewise. */
    EXPECT_OK(lls_tool_calls_parse(S("{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
                                     "\"text\":\"Done.\"}]}"),
                                   &calls, &err));
    n = 9;
    EXPECT_OK(lls_tool_calls_count(calls, &n, &err));
    CHECK_INT(n, 0);
    EXPECT_ERR(lls_tool_calls_get(calls, 0, NULL, NULL, NULL, NULL, NULL, NULL, &err),
               LLS_ERR_INVALID_ARGUMENT, "there are 0 tool calls");
    lls_tool_calls_free(calls);
    EXPECT_OK(lls_tool_calls_parse(S("[]"), &calls, &err));
    lls_tool_calls_free(calls);
}

/* The tool loop of the hot path: record the raw body, read its calls from the logged event,
 * answer each by its id, go on until the model stops calling tools. */
static void test_tool_loop(void) {
    lls_session *s = NULL;
    lls_agent *a = NULL;
    EXPECT_OK(lls_session_new_memory(NULL, 0, &s, &err));
    EXPECT_OK(lls_agent_new(s, S("{\"config\":{\"provider\":\"openai\",\"model\":\"m\"},"
                                 "\"tools\":[{\"name\":\"read_file\",\"description\":\"Read\","
                                 "\"parameters\":{\"type\":\"object\"}}]}"),
                            &a, &err));
    EXPECT_OK(lls_agent_set_renderer(a, S("openai"), NULL, 0, &err));
    EXPECT_OK(lls_agent_start_turn(a, S("{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                                        "\"text\":\"Read a.txt and b.txt\"}]}"),
                                   NULL, &err));
    const char *replies[] = {
        "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"read_file\","
        "\"arguments\":\"{\\\"path\\\":\\\"a.txt\\\"}\"}},"
        "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"read_file\","
        "\"arguments\":\"{\\\"path\\\":\\\"b.txt\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}",
        "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"Both say hi.\"},"
        "\"finish_reason\":\"stop\"}]}",
    };
    int results = 0;
    for (int step = 0; step < 2; step++) {
        char *body = NULL;
        size_t body_len = 0;
        EXPECT_OK(lls_agent_next_body(a, NULL, &body, &body_len, NULL, &err));
        lls_string_free(body);
        uint64_t seq = 0;
        uint32_t count = 0;
        EXPECT_OK(lls_agent_record_body(a, replies[step], strlen(replies[step]), &seq, &count, &err));
        char *events = NULL;
        size_t events_len = 0;
        EXPECT_OK(lls_session_events(s, seq, seq + 1, &events, &events_len, &err));
        lls_tool_calls *calls = NULL;
        EXPECT_OK(lls_tool_calls_parse(events, events_len, &calls, &err));
        lls_string_free(events);
        size_t n = 0;
        EXPECT_OK(lls_tool_calls_count(calls, &n, &err));
        CHECK_INT(n, count); /* the same count lls_agent_record_body gave */
        for (size_t i = 0; i < n; i++) {
            const char *id = NULL, *arguments = NULL;
            size_t id_len = 0;
            EXPECT_OK(lls_tool_calls_get(calls, i, &id, &id_len, NULL, NULL, &arguments, NULL, &err));
            char result[256];
            int len = snprintf(result, sizeof result, "{\"callId\":\"%.*s\",\"text\":\"ran with %zu bytes\"}",
                               (int)id_len, id, strlen(arguments));
            EXPECT_OK(lls_agent_record_tool_result(a, result, (size_t)len, NULL, &err));
            results++;
        }
        lls_tool_calls_free(calls);
    }
    CHECK_INT(results, 2);
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    char *report = NULL;
    EXPECT_OK(lls_session_verify(s, &report, NULL, &err));
    CHECK_CONTAINS(report, "\"requests\":2");
    lls_string_free(report);
    /* The whole log: every assistant message's calls, and none from the other events. */
    char *all = NULL;
    size_t all_len = 0;
    EXPECT_OK(lls_session_events(s, 0, UINT64_MAX, &all, &all_len, &err));
    lls_tool_calls *calls = NULL;
    EXPECT_OK(lls_tool_calls_parse(all, all_len, &calls, &err));
    lls_string_free(all);
    size_t n = 0;
    EXPECT_OK(lls_tool_calls_count(calls, &n, &err));
    CHECK_INT(n, 2);
    check_call(calls, 1, "call_2", "read_file", "{\"path\":\"b.txt\"}");
    lls_tool_calls_free(calls);
    lls_agent_free(a);
    lls_session_free(s);
}

static void test_bad_inputs(void) {
    lls_tool_calls *calls = NULL;
    EXPECT_ERR(lls_tool_calls_parse(S("\"text\""), &calls, &err), LLS_ERR_INVALID_INPUT,
               "got a string");
    EXPECT_ERR(lls_tool_calls_parse(S("{\"usage\":{}}"), &calls, &err), LLS_ERR_INVALID_INPUT,
               "expected a message");
    EXPECT_ERR_DETAIL(
        lls_tool_calls_parse(S("{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":"
                               "\"tool-call\",\"id\":\"\",\"name\":\"x\",\"arguments\":\"\"}]}}"),
                             &calls, &err),
        LLS_ERR_INVALID_INPUT, "must not be empty", "\"field\":\"message.content[0].id\"");
    EXPECT_ERR(lls_tool_calls_parse(S("{\"role\":"), &calls, &err), LLS_ERR_MALFORMED_JSON, "");
    EXPECT_ERR(lls_tool_calls_parse(NULL, 0, &calls, &err), LLS_ERR_NULL_POINTER, "`json`");
    EXPECT_ERR(lls_tool_calls_parse(S("[]"), NULL, &err), LLS_ERR_NULL_POINTER, "`out`");
    CHECK(calls == NULL); /* nothing was made */

    size_t n = 0;
    EXPECT_ERR(lls_tool_calls_count(NULL, &n, &err), LLS_ERR_NULL_POINTER, "`calls`");
    lls_session *s = NULL;
    EXPECT_OK(lls_session_new_memory(NULL, 0, &s, &err));
    EXPECT_ERR(lls_tool_calls_count((const lls_tool_calls *)(const void *)s, &n, &err),
               LLS_ERR_INVALID_HANDLE, "lls_session");
    lls_session_free(s);
    EXPECT_OK(lls_tool_calls_parse(S(TWO_CALLS), &calls, &err));
    EXPECT_ERR(lls_tool_calls_count(calls, NULL, &err), LLS_ERR_NULL_POINTER, "`out_count`");
    lls_tool_calls_free(calls);
    EXPECT_ERR(lls_tool_calls_count(calls, &n, &err), LLS_ERR_INVALID_HANDLE, "");
    lls_tool_calls_free(NULL);  /* a no-op */
    lls_tool_calls_free(calls); /* freed already: a no-op */
}

static void test_abi_minor(void) {
    CHECK(LLS_ABI_MINOR >= 3);
    CHECK_INT(lls_abi_minor(), LLS_ABI_MINOR);
}

static void test_no_handle_leaks(void) {
    CHECK_INT(lls_live_handle_count(), 0);
    CHECK_INT(lls_live_string_count(), 0);
}

int main(void) {
    RUN(test_message_and_response);
    RUN(test_tool_loop);
    RUN(test_bad_inputs);
    RUN(test_abi_minor);
    RUN(test_no_handle_leaks);
    return check_report();
}
