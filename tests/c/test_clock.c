/* C tests of the cache clock (issue #35): lls_agent_cache_clock, lls_agent_keepalive_body and
 * the idle compaction of lls_agent_compact, their errors naming the field, and the keep-warm
 * request answered through lls_agent_record_body and rebuilt by lls_session_verify. Built and run
 * by `make test-c` (or `make test-c-one T=test_clock`). */
#include "helpers.h"

static const char OPTS[] =
    "{\"config\":{\"provider\":\"anthropic\",\"model\":\"claude-sonnet-4-5\"},\"system\":\"You are a coding agent.\","
    "\"checkRequests\":true,\"policy\":{\"contextWindow\":1000000,\"retainedTokens\":10}}";
static const char PRICES[] = "\"prices\":{\"anthropic\":{\"input\":3,\"cachedInput\":0.3,\"cacheWrite\":{\"5m\":3.75,\"1h\":6},"
                             "\"output\":15}}";
static const char USER[] = "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What does the weather module do?\"}]}";
static const char REPLY[] =
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"stop_reason\":\"end_turn\","
    "\"content\":[{\"type\":\"text\",\"text\":\"It reads the forecast.\"}],"
    "\"usage\":{\"input_tokens\":40,\"output_tokens\":8,\"cache_read_input_tokens\":0,\"cache_creation_input_tokens\":30000}}";

static char *clock_of(lls_agent *a, const char *opts) {
    char *out = NULL;
    EXPECT_OK(lls_agent_cache_clock(a, opts, opts ? strlen(opts) : 0, &out, NULL, &err));
    return out;
}

static void test_errors_name_the_field(void) {
    lls_session *s = NULL;
    lls_agent *a = NULL;
    char *out = NULL;
    EXPECT_OK(lls_session_new_memory(S("{}"), &s, &err));
    EXPECT_OK(lls_agent_new(s, S(OPTS), &a, &err));
    EXPECT_ERR(lls_agent_cache_clock(NULL, NULL, 0, &out, NULL, &err), LLS_ERR_NULL_POINTER, "argument `agent` is NULL");
    EXPECT_ERR(lls_agent_cache_clock(a, NULL, 0, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR(lls_agent_cache_clock(a, S("{\"now\":"), &out, NULL, &err), LLS_ERR_MALFORMED_JSON, "`opts_json`");
    EXPECT_ERR_DETAIL(lls_agent_cache_clock(a, S("{\"marginMs\":-1}"), &out, NULL, &err), LLS_ERR_INVALID_INPUT,
                      "options.marginMs: expected a non-negative integer", "\"field\":\"options.marginMs\"");
    EXPECT_ERR(lls_agent_cache_clock(a, S("{\"prices\":{\"anthropic\":{\"input\":1}}}"), &out, NULL, &err), LLS_ERR_INVALID_INPUT,
               "prices.anthropic.cachedInput: is required");
    EXPECT_ERR(lls_agent_cache_clock(a, S("{\"returnModel\":{\"neverReturns\":1}}"), &out, NULL, &err), LLS_ERR_INVALID_INPUT,
               "options.returnModel.neverReturns: must be in [0, 1), got 1");
    EXPECT_ERR(lls_agent_cache_clock(a, S("{\"when\":1}"), &out, NULL, &err), LLS_ERR_INVALID_INPUT,
               "options.when: is not a cache clock option");
    CHECK(out == NULL);
    /* Nothing sent yet: nothing is cached, nothing to keep warm. */
    out = clock_of(a, NULL);
    CHECK_CONTAINS(out, "\"decision\":\"none\"");
    CHECK_CONTAINS(out, "no request has been sent yet");
    lls_string_free(out);
    char *body = NULL;
    EXPECT_ERR(lls_agent_keepalive_body(a, &body, NULL, NULL, &err), LLS_ERR_OUT_OF_ORDER, "the agent has no renderer");
    EXPECT_OK(lls_agent_set_renderer(a, S("anthropic"), NULL, 0, &err));
    EXPECT_ERR(lls_agent_keepalive_body(a, &body, NULL, NULL, &err), LLS_ERR_OUT_OF_ORDER, "no conversation request was sent yet");
    EXPECT_ERR(lls_agent_keepalive_body(a, NULL, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "argument `body` is NULL");
    CHECK(body == NULL);
    /* An idle compaction takes no span, and needs the clock's decision. */
    EXPECT_ERR(lls_agent_compact(a, S("{\"trigger\":\"idle\",\"span\":[0,1]}"), NULL, &out, NULL, &err), LLS_ERR_INVALID_INPUT,
               "trigger: an idle compaction takes the head region the clock priced");
    EXPECT_ERR(lls_agent_compact(a, S("{\"trigger\":\"later\"}"), NULL, &out, NULL, &err), LLS_ERR_INVALID_INPUT,
               "trigger: expected \"manual\" or \"idle\", got \"later\"");
    EXPECT_ERR(lls_agent_compact(a, S("{\"trigger\":\"idle\"}"), NULL, &out, NULL, &err), LLS_ERR_OUT_OF_ORDER,
               "the cache clock has not decided to compact");
    lls_agent_free(a);
    lls_session_free(s);
}

static void test_keep_warm_through_the_record_path(void) {
    lls_session *s = NULL;
    lls_agent *a = NULL;
    EXPECT_OK(lls_session_new_memory(S("{}"), &s, &err));
    EXPECT_OK(lls_agent_new(s, S(OPTS), &a, &err));
    EXPECT_OK(lls_agent_set_renderer(a, S("anthropic"), NULL, 0, &err));
    char *body = NULL;
    EXPECT_OK(lls_agent_start_turn(a, S(USER), NULL, &err));
    EXPECT_OK(lls_agent_next_body(a, NULL, &body, NULL, NULL, &err));
    lls_string_free(body);
    EXPECT_OK(lls_agent_record_body(a, S(REPLY), NULL, NULL, &err));
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));

    char opts[1024];
    snprintf(opts, sizeof opts, "{%s}", PRICES);
    char *out = clock_of(a, opts);
    CHECK_CONTAINS(out, "\"tier\":\"5m\"");
    CHECK_CONTAINS(out, "\"ttlMs\":300000");
    CHECK_CONTAINS(out, "\"warmTokens\":30040");
    long long sent = json_int(out, "lastRequestAt");
    CHECK(sent > 0);
    lls_string_free(out);
    /* Eight seconds before expiry, the host back in twenty minutes: keep warm. */
    snprintf(opts, sizeof opts, "{%s,\"now\":%lld,\"returnModel\":{\"gapsMs\":[1200000],\"neverReturns\":0}}", PRICES, sent + 292000);
    out = clock_of(a, opts);
    CHECK_CONTAINS(out, "\"decision\":\"keep-warm\"");
    CHECK_CONTAINS(out, "\"tier\":\"1h\",\"warmUntil\""); /* the decision's tier: one keep-warm request at the hour */
    CHECK_CONTAINS(out, "\"nextDecisionAt\":");
    CHECK_CONTAINS(out, "\"recorded\":");
    lls_string_free(out);

    lls_request_info info;
    size_t n = 0;
    EXPECT_OK(lls_agent_keepalive_body(a, &body, &n, &info, &err));
    CHECK_INT(info.purpose, LLS_PURPOSE_KEEPALIVE);
    CHECK_CONTAINS(body, "\"max_tokens\":1");
    CHECK_CONTAINS(body, "\"cache_control\"");
    CHECK_CONTAINS(body, "\"ttl\":\"1h\""); /* kept warm at the hour tier */
    CHECK_INT(strlen(body), n);
    lls_string_free(body);
    uint64_t seq = 0;
    uint32_t calls = 9;
    EXPECT_OK(lls_agent_record_body(a, S(REPLY), &seq, &calls, &err));
    CHECK_INT(calls, 0);
    char *events = events_of(s);
    CHECK_CONTAINS(events, "\"type\":\"clock/keepalive-end\"");
    CHECK_INT(count_of(events, "\"type\":\"assistant/message\""), 1);
    lls_string_free(events);
    char *report = NULL;
    EXPECT_OK(lls_session_verify(s, &report, NULL, &err));
    CHECK_CONTAINS(report, "\"keepalives\":1");
    CHECK_CONTAINS(report, "\"decisions\":1");
    lls_string_free(report);
    lls_agent_free(a);
    lls_session_free(s);
}

int main(void) {
    RUN(test_errors_name_the_field);
    RUN(test_keep_warm_through_the_record_path);
    CHECK_INT(lls_live_handle_count(), 0);
    return check_report();
}
