/* C tests of the provider mapping helpers: lls_parse_response, lls_usage_from_provider,
 * lls_is_context_overflow. Built and run by `make test-c`. */
#include "helpers.h"

static const char OPENAI[] =
    "{\"model\":\"smol\",\"choices\":[{\"finish_reason\":\"tool_calls\",\"message\":{\"role\":\"assistant\","
    "\"content\":\"looking\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"read\","
    "\"arguments\":\"{}\"}}]}}],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":9,"
    "\"prompt_tokens_details\":{\"cached_tokens\":100}}}";

static void test_parse_openai_response(void) {
    char *out = NULL;
    size_t len = 0;
    EXPECT_OK(lls_parse_response(S("openai"), S(OPENAI), &out, &len, &err));
    CHECK(out != NULL && strlen(out) == len);
    CHECK_CONTAINS(out, "\"inputTokens\":20");
    CHECK_CONTAINS(out, "\"cacheReadTokens\":100");
    CHECK_CONTAINS(out, "\"finishReason\":\"tool-calls\"");
    CHECK_CONTAINS(out, "\"type\":\"tool-call\"");
    lls_string_free(out);
}

/* The parser's output is what lls_agent_record_response takes, finishReason included. */
static void test_parsed_response_records(void) {
    lls_session *s = NULL;
    lls_agent *a = NULL;
    char *req = NULL, *parsed = NULL, *history = NULL;
    size_t len = 0;
    uint64_t seq = 0;
    EXPECT_OK(lls_session_new_memory(NULL, 0, &s, &err));
    EXPECT_OK(lls_agent_new(s, S("{\"config\":{\"provider\":\"openai\",\"model\":\"smol\"}}"), &a, &err));
    EXPECT_OK(lls_agent_start_turn(a, S("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}"), NULL, &err));
    EXPECT_OK(lls_agent_next_request(a, NULL, &req, &len, &err));
    EXPECT_OK(lls_parse_response(S("openai"), S(OPENAI), &parsed, &len, &err));
    EXPECT_OK(lls_agent_record_response(a, parsed, len, &seq, &err));
    CHECK(seq > 0);
    EXPECT_OK(lls_session_history(s, &history, &len, &err));
    CHECK_CONTAINS(history, "\"name\":\"read\"");
    lls_string_free(history);
    lls_string_free(parsed);
    lls_string_free(req);
    lls_agent_free(a);
    lls_session_free(s);
}

static void test_usage_mapping(void) {
    char *out = NULL;
    size_t len = 0;
    EXPECT_OK(lls_usage_from_provider(S("anthropic"), S("{\"input_tokens\":5,\"output_tokens\":2,\"cache_read_input_tokens\":900}"),
                                      &out, &len, &err));
    CHECK_STR(out, "{\"inputTokens\":5,\"outputTokens\":2,\"cacheReadTokens\":900}");
    lls_string_free(out);
    EXPECT_OK(lls_usage_from_provider(S("deepseek"),
                                      S("{\"prompt_tokens\":50,\"completion_tokens\":3,\"prompt_cache_hit_tokens\":40,"
                                        "\"prompt_cache_miss_tokens\":10}"),
                                      &out, &len, &err));
    CHECK_STR(out, "{\"inputTokens\":10,\"outputTokens\":3,\"cacheReadTokens\":40}");
    lls_string_free(out);
}

static void test_bad_inputs(void) {
    char *out = (char *)0x1;
    size_t len = 7;
    EXPECT_ERR(lls_parse_response(S("cohere"), S(OPENAI), &out, &len, &err), LLS_ERR_INVALID_INPUT, "cohere");
    EXPECT_ERR(lls_parse_response(S("openai"), S("{\"choices\":"), &out, &len, &err), LLS_ERR_MALFORMED_JSON, "malformed JSON");
    EXPECT_ERR(lls_parse_response(S("openai"), S("{\"choices\":[]}"), &out, &len, &err), LLS_ERR_INVALID_INPUT,
               "response.choices: expected at least one choice");
    EXPECT_ERR(lls_parse_response(NULL, 6, S(OPENAI), &out, &len, &err), LLS_ERR_NULL_POINTER, "renderer");
    EXPECT_ERR(lls_parse_response(S("openai"), S("{\"x\":\"\xff\"}"), &out, &len, &err), LLS_ERR_INVALID_UTF8, "UTF-8");
    EXPECT_ERR(lls_usage_from_provider(S("openai"), S("{\"completion_tokens\":1}"), &out, &len, &err), LLS_ERR_INVALID_INPUT,
               "usage.prompt_tokens");
    EXPECT_ERR(lls_usage_from_provider(S("openai"), S("{}"), NULL, &len, &err), LLS_ERR_NULL_POINTER, "out");
    CHECK(out == (char *)0x1 && len == 7); /* out-parameters untouched on failure */
}

static void test_overflow(void) {
    CHECK(lls_is_context_overflow(400, S("{\"error\":{\"code\":\"context_length_exceeded\"}}")));
    CHECK(lls_is_context_overflow(400, S("the request exceeds the available context size")));
    CHECK(!lls_is_context_overflow(429, S("too many tokens per minute")));
    CHECK(!lls_is_context_overflow(400, NULL, 5));
    CHECK(!lls_is_context_overflow(400, S("\xff\xfe")));
}

int main(void) {
    RUN(test_parse_openai_response);
    RUN(test_parsed_response_records);
    RUN(test_usage_mapping);
    RUN(test_bad_inputs);
    RUN(test_overflow);
    CHECK_INT(lls_live_handle_count(), 0);
    return check_report();
}
