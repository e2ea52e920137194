/* C tests of cache fidelity: lls_render_with_options, lls_session_explain, lls_explain_file and
 * lls_replay_* (issue #17). Built and run by `make test-c` (or `make test-c-one T=test_cache`). */
#include "helpers.h"

#define USER(t) "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"" t "\"}]}"
#define REPLY "{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}," \
              "\"usage\":{\"inputTokens\":10,\"outputTokens\":2,\"cacheReadTokens\":90}}"

static const char ENV[] =
    "{\"provider\":\"openai\",\"model\":\"m\",\"system\":\"S\",\"messages\":[" USER("q") "],"
    "\"sessionId\":\"sess-1\",\"purpose\":\"conversation\"}";

static void test_render_with_options(void) {
    char *body = NULL;
    EXPECT_OK(lls_render_with_options(S("openai"), S(ENV), NULL, 0, &body, NULL, &err));
    CHECK_CONTAINS(body, "\"prompt_cache_key\":\"sess-1\"");
    lls_string_free(body);
    EXPECT_OK(lls_render_with_options(S("openai"), S(ENV), S("{\"promptCacheKey\":false}"), &body, NULL, &err));
    CHECK(strstr(body, "prompt_cache_key") == NULL);
    lls_string_free(body);
    EXPECT_OK(lls_render_with_options(S("openai"), S(ENV), S("{\"promptCacheKey\":\"tenant\",\"promptCacheRetention\":\"24h\"}"), &body,
                                      NULL, &err));
    CHECK_CONTAINS(body, "\"prompt_cache_key\":\"tenant\"");
    CHECK_CONTAINS(body, "\"prompt_cache_retention\":\"24h\"");
    lls_string_free(body);
    EXPECT_OK(lls_render_with_options(S("anthropic"), S(ENV), S("{\"cacheTtl\":\"1h\"}"), &body, NULL, &err));
    CHECK_CONTAINS(body, "\"cache_control\":{\"ttl\":\"1h\",\"type\":\"ephemeral\"}");
    lls_string_free(body);
    body = NULL;
    EXPECT_ERR(lls_render_with_options(S("anthropic"), S(ENV), S("{\"cacheTtl\":\"2h\"}"), &body, NULL, &err), LLS_ERR_INVALID_INPUT,
               "options.cacheTtl: expected \"5m\" or \"1h\", got \"2h\"");
    EXPECT_ERR(lls_render_with_options(S("openai"), S(ENV), S("{\"prefixLen\":3}"), &body, NULL, &err), LLS_ERR_INVALID_ARGUMENT,
               "prefixLen 3 is more than the envelope's 1 messages");
    EXPECT_ERR(lls_render_with_options(S("openai"), S(ENV), S("{\"prefixLen\":"), &body, NULL, &err), LLS_ERR_MALFORMED_JSON,
               "`options_json`");
    EXPECT_ERR(lls_render_with_options(S("openai"), NULL, 0, NULL, 0, &body, NULL, &err), LLS_ERR_NULL_POINTER,
               "argument `envelope_json` is NULL");
    CHECK(body == NULL);
}

/* Two turns; each answer is `answer(envelope)` (a canned reply, or the replay's). */
static int run_host(lls_session *s, const char *opts, lls_replay *replay) {
    lls_agent *a = NULL;
    lls_error *e = NULL;
    if (lls_agent_new(s, opts, strlen(opts), &a, &e) != LLS_OK) {
        lls_error_free(e);
        return -1;
    }
    int rc = 0;
    const char *users[] = {USER("first"), USER("second")};
    for (int i = 0; i < 2 && rc == 0; i++) {
        char *env = NULL, *ans = NULL;
        size_t n = 0, an = 0;
        CHECK_INT(lls_agent_start_turn(a, users[i], strlen(users[i]), NULL, NULL), LLS_OK);
        CHECK_INT(lls_agent_next_request(a, NULL, &env, &n, NULL), LLS_OK);
        if (replay == NULL) {
            CHECK_INT(lls_agent_record_response(a, S(REPLY), NULL, NULL), LLS_OK);
        } else if ((rc = lls_replay_answer(replay, env, n, &ans, &an, &e)) == LLS_OK) {
            /* The recorded answer's "response" is what lls_agent_record_response takes. */
            CHECK_CONTAINS(ans, "\"outcome\":\"response\"");
            char *rec = json_dup(ans, "response");
            CHECK(rec != NULL && an > 0);
            CHECK_INT(lls_agent_record_response(a, rec, strlen(rec), NULL, NULL), LLS_OK);
            free(rec);
        } else {
            CHECK_INT(lls_error_code(e), LLS_ERR_RECONSTRUCTION);
            CHECK_CONTAINS(lls_error_message(e), "request 1 (turn 1 step 1) differs from the recorded one at system line 1");
            CHECK_CONTAINS(lls_error_detail(e), "\"component\":\"system\"");
            lls_error_free(e);
        }
        lls_string_free(ans);
        lls_string_free(env);
        if (rc == LLS_OK) {
            CHECK_INT(lls_agent_end_turn(a, S("completed"), NULL), LLS_OK);
        } else {
            CHECK_INT(lls_agent_end_turn(a, S("error"), NULL), LLS_OK);
        }
    }
    lls_agent_free(a);
    return rc;
}

static void test_explain_and_replay(void) {
    const char *path = "build/c-tests-cache.jsonl";
    remove(path);
    lls_session *s = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), S("{\"id\":\"rec-1\"}"), &s, &err));
    const char *opts = "{\"config\":{\"provider\":\"openai\",\"model\":\"gpt-5\"},\"system\":\"Be brief.\"}";
    CHECK_INT(run_host(s, opts, NULL), 0);
    char *out = NULL;
    EXPECT_OK(lls_session_explain(s, NULL, 0, &out, NULL, &err));
    CHECK_CONTAINS(out, "\"extends\":true");
    /* Request 2 sends nothing new: the 10 tokens the server did not read are below the
       provider's 1024-token minimum. */
    CHECK_CONTAINS(out, "\"growth\":10,");
    CHECK_CONTAINS(out, "\"below-minimum\":10,");
    lls_string_free(out);
    EXPECT_OK(lls_session_explain(s, S("{\"prices\":{\"openai\":{\"input\":1,\"cachedInput\":0.5,\"output\":2}}}"), &out, NULL, &err));
    CHECK_CONTAINS(out, "\"noCache\":");
    lls_string_free(out);
    EXPECT_ERR(lls_session_explain(s, S("{\"prices\":{\"openai\":{\"input\":1}}}"), &out, NULL, &err), LLS_ERR_INVALID_INPUT,
               "prices.openai.cachedInput: is required");
    EXPECT_ERR(lls_session_explain(s, S("{\"counter\":1}"), &out, NULL, &err), LLS_ERR_INVALID_INPUT, "options.counter: is not an explain option");
    EXPECT_ERR(lls_session_explain(NULL, NULL, 0, &out, NULL, &err), LLS_ERR_NULL_POINTER, "`session`");
    lls_session_free(s);
    EXPECT_OK(lls_explain_file(path, strlen(path), NULL, 0, &out, NULL, &err));
    CHECK_CONTAINS(out, "\"conversationRequests\":2");
    lls_string_free(out);

    lls_replay *r = NULL;
    EXPECT_OK(lls_replay_open_file(path, strlen(path), &r, &err));
    lls_session *offline = NULL;
    EXPECT_OK(lls_session_new_memory(S("{\"id\":\"rec-1\"}"), &offline, &err));
    CHECK_INT(run_host(offline, opts, r), 0);
    EXPECT_OK(lls_replay_info(r, &out, NULL, &err));
    CHECK_STR(out, "{\"answered\":2,\"requests\":2,\"sessionId\":\"rec-1\"}");
    lls_string_free(out);
    EXPECT_OK(lls_session_verify(offline, &out, NULL, &err));
    lls_string_free(out);

    lls_replay *again = NULL;
    EXPECT_OK(lls_replay_new(offline, &again, &err));
    lls_session *other = NULL;
    EXPECT_OK(lls_session_new_memory(S("{\"id\":\"rec-1\"}"), &other, &err));
    CHECK_INT(run_host(other, "{\"config\":{\"provider\":\"openai\",\"model\":\"gpt-5\"},\"system\":\"Be very brief.\"}", again),
              LLS_ERR_RECONSTRUCTION);

    EXPECT_ERR(lls_replay_open_file(S("build/no-such-log.jsonl"), &r, &err), LLS_ERR_STORAGE, "cannot open a session log");
    EXPECT_ERR(lls_replay_answer((lls_replay *)offline, S("{}"), &out, NULL, &err), LLS_ERR_INVALID_HANDLE, "lls_replay");
    lls_replay_free(NULL);
    lls_replay_free(r);
    lls_replay_free(again);
    lls_session_free(offline);
    lls_session_free(other);
    remove(path);
}

int main(void) {
    RUN(test_render_with_options);
    RUN(test_explain_and_replay);
    CHECK_INT(lls_live_handle_count(), 0);
    return check_report();
}
