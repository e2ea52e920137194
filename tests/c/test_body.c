/* C tests of the one-way hot path: an agent with a renderer builds the provider body
 * (lls_agent_next_body, with lls_request_info), which equals the rendering of the logged
 * envelope (lls_agent_last_envelope) for every renderer; the provider's raw reply is recorded
 * from its body (lls_agent_record_body) or a stream (lls_agent_record_stream), the _info forms
 * giving the finish reason too (lls_recorded_info); every bad input
 * is a clear error that changes nothing; native compaction (lls_agent_native_compaction_*).
 * Built and run by `make test-c`. */
#define _POSIX_C_SOURCE 200809L

#include "helpers.h"

static const char OPTS[] =
    "{\"config\":{\"provider\":\"p\",\"model\":\"m-test\",\"maxTokens\":256},"
    "\"system\":\"You are a careful coding agent.\","
    "\"tools\":[{\"name\":\"read_file\",\"description\":\"Read a file\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}}],"
    "\"checkRequests\":true}";

#define USER(text) "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"" text "\"}]}"

/* One provider, with its render options and a reply that calls `read_file` (id call_<n>). */
typedef struct {
    const char *renderer;
    const char *options;        /* for lls_agent_set_renderer (NULL: defaults) */
    const char *render_options; /* the same, with prefixLen %d, for lls_render_with_options */
    const char *reply_fmt;      /* printf format: %d is the call number */
    const char *final_reply;    /* a text-only reply */
} provider;

static const provider PROVIDERS[] = {
    {"openai", "{\"promptCacheKey\":\"tenant-7\"}", "{\"prefixLen\":%d,\"promptCacheKey\":\"tenant-7\"}",
     "{\"id\":\"c%d\",\"object\":\"chat.completion\",\"model\":\"m-test\",\"choices\":[{\"index\":0,\"message\":{"
     "\"role\":\"assistant\",\"content\":\"Reading it.\",\"tool_calls\":[{\"id\":\"call_%d\",\"type\":\"function\","
     "\"function\":{\"name\":\"read_file\",\"arguments\":\"{\\\"path\\\":\\\"a.txt\\\"}\"}}]},\"finish_reason\":"
     "\"tool_calls\"}],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":10}}",
     "{\"id\":\"cz\",\"object\":\"chat.completion\",\"model\":\"m-test\",\"choices\":[{\"index\":0,\"message\":{"
     "\"role\":\"assistant\",\"content\":\"Done.\"},\"finish_reason\":\"stop\"}]}"},
    {"openai-responses", NULL, "{\"prefixLen\":%d}",
     "{\"id\":\"resp_%d\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"m-test\",\"output\":["
     "{\"type\":\"message\",\"id\":\"msg_%d\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
     "\"text\":\"Reading it.\",\"annotations\":[]}]},{\"type\":\"function_call\",\"id\":\"fc_%d\",\"call_id\":"
     "\"call_%d\",\"name\":\"read_file\",\"arguments\":\"{\\\"path\\\":\\\"a.txt\\\"}\"}],\"usage\":{"
     "\"input_tokens\":50,\"output_tokens\":10}}",
     "{\"id\":\"resp_z\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"m-test\",\"output\":["
     "{\"type\":\"message\",\"id\":\"msg_z\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
     "\"text\":\"Done.\",\"annotations\":[]}]}]}"},
    {"anthropic", "{\"cacheTtl\":\"1h\"}", "{\"prefixLen\":%d,\"cacheTtl\":\"1h\"}",
     "{\"id\":\"msg_%d\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m-test\",\"content\":["
     "{\"type\":\"text\",\"text\":\"Reading it.\"},{\"type\":\"tool_use\",\"id\":\"call_%d\",\"name\":"
     "\"read_file\",\"input\":{\"path\":\"a.txt\"}}],\"stop_reason\":\"tool_use\",\"usage\":{\"input_tokens\":50,"
     "\"output_tokens\":10,\"cache_read_input_tokens\":40}}",
     "{\"id\":\"msg_z\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m-test\",\"content\":["
     "{\"type\":\"text\",\"text\":\"Done.\"}],\"stop_reason\":\"end_turn\"}"},
    {"gemini", NULL, "{\"prefixLen\":%d}",
     "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Reading it.\"},{\"functionCall\":"
     "{\"id\":\"call_%d\",\"name\":\"read_file\",\"args\":{\"path\":\"a.txt\"}}}]},\"finishReason\":\"STOP\"}],"
     "\"usageMetadata\":{\"promptTokenCount\":50,\"candidatesTokenCount\":10},\"modelVersion\":\"m-test\"}",
     "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Done.\"}]},\"finishReason\":"
     "\"STOP\"}],\"modelVersion\":\"m-test\"}"},
};

/* ------------------------------------------------------------ helpers */

static lls_session *memory_session(const char *id) {
    char opts[128];
    snprintf(opts, sizeof opts, "{\"id\":\"%s\"}", id);
    lls_session *s = NULL;
    CHECK_INT(lls_session_new_memory(opts, strlen(opts), &s, NULL), LLS_OK);
    return s;
}

static lls_agent *new_agent(lls_session *s) {
    lls_agent *a = NULL;
    EXPECT_OK(lls_agent_new(s, OPTS, strlen(OPTS), &a, &err));
    return a;
}

/* A prefix listener contributing one user message (so the body has a session prefix). */
static int32_t prefix_cb(void *ud, const char *in, size_t in_len, lls_reply *reply) {
    (void)ud;
    (void)in;
    (void)in_len;
    static const char out[] = "[" USER("Rules: indent with tabs.") "]";
    lls_reply_set_json(reply, S(out), NULL);
    return LLS_CB_OK;
}

/* A reply in the provider's format for call number `n`. */
static char *reply_of(const provider *p, int n) {
    char *out = malloc(4096);
    snprintf(out, 4096, p->reply_fmt, n, n, n, n);
    return out;
}

/* The body the agent built equals lls_render_with_options of its logged envelope, and the
 * envelope's digest and length are the info's. */
static void check_body(lls_agent *a, const provider *p, const char *body, size_t body_len, const lls_request_info *info) {
    char *env = NULL;
    size_t env_len = 0;
    EXPECT_OK(lls_agent_last_envelope(a, &env, &env_len, &err));
    CHECK_INT(env_len, info->envelope_len);
    char opts[256];
    snprintf(opts, sizeof opts, p->render_options, (int)info->prefix_len);
    char *fresh = NULL;
    size_t fresh_len = 0;
    EXPECT_OK(lls_render_with_options(p->renderer, strlen(p->renderer), env, env_len, opts, strlen(opts), &fresh, &fresh_len, &err));
    CHECK_INT(fresh_len, body_len);
    CHECK(fresh != NULL && body != NULL && fresh_len == body_len && memcmp(fresh, body, body_len) == 0);
    CHECK_INT(strlen(body), body_len);
    /* The JSON info of the same request says the same. */
    char *j = NULL;
    EXPECT_OK(lls_agent_request_info(a, &j, NULL, &err));
    CHECK_INT(json_int(j, "turn"), (long long)info->turn);
    CHECK_INT(json_int(j, "step"), (long long)info->step);
    CHECK_INT(json_int(j, "stepSeq"), (long long)info->step_seq);
    CHECK_INT(json_int(j, "prefixLen"), (long long)info->prefix_len);
    CHECK_INT(json_int(j, "messageCount"), (long long)info->message_count);
    CHECK_INT(json_int(j, "sharedMessages"), (long long)info->shared_messages);
    CHECK_INT(json_int(j, "instance"), (long long)info->instance);
    CHECK_INT(json_int(j, "bytes"), (long long)info->envelope_len);
    CHECK_CONTAINS(j, info->digest);
    lls_string_free(j);
    lls_string_free(fresh);
    lls_string_free(env);
}

/* ------------------------------------------------------------ the loop, per renderer */

static void run_loop(const provider *p) {
    lls_session *s = memory_session("body");
    lls_agent *a = new_agent(s);
    EXPECT_OK(lls_agent_add_prefix_listener(a, prefix_cb, NULL, NULL, &err));
    EXPECT_OK(lls_agent_set_renderer(a, p->renderer, strlen(p->renderer), p->options, p->options ? strlen(p->options) : 0, &err));
    EXPECT_OK(lls_agent_start_turn(a, S(USER("Please read a.txt")), NULL, &err));

    size_t prev_count = 0;
    for (int step = 1; step <= 3; step++) {
        char *body = NULL;
        size_t body_len = 0;
        lls_request_info info;
        memset(&info, 0xab, sizeof info);
        EXPECT_OK(lls_agent_next_body(a, NULL, &body, &body_len, &info, &err));
        CHECK_INT(info.instance, 1);
        CHECK_INT(info.turn, 1);
        CHECK_INT(info.step, (long long)step);
        CHECK_INT(info.purpose, LLS_PURPOSE_CONVERSATION);
        CHECK_INT(info.prefix_len, 1);
        CHECK_INT(info.message_count, 2 + 2 * (step - 1));
        CHECK_INT(info.shared_messages, step == 1 ? 0 : (long long)prev_count);
        CHECK_INT(strlen(info.digest), 71);
        CHECK(strncmp(info.digest, "sha256:", 7) == 0);
        prev_count = info.message_count;
        /* The digest is the one step/start records. */
        char *events = events_of(s);
        CHECK_CONTAINS(events, info.digest);
        lls_string_free(events);
        check_body(a, p, body, body_len, &info);
        CHECK_CONTAINS(body, "Please read a.txt");
        if (step > 1) {
            CHECK_CONTAINS(body, "Reading it.");
        }
        lls_string_free(body);

        /* The provider's reply, recorded from its raw body. */
        char *reply = reply_of(p, step);
        uint64_t seq = 0;
        uint32_t calls = 99;
        EXPECT_OK(lls_agent_record_body(a, reply, strlen(reply), &seq, &calls, &err));
        free(reply);
        CHECK(seq > 0);
        CHECK_INT(calls, 1);
        char *ev = NULL;
        EXPECT_OK(lls_session_events(s, seq, seq + 1, &ev, NULL, &err));
        CHECK_CONTAINS(ev, "\"type\":\"assistant/message\"");
        CHECK_CONTAINS(ev, "\"inputTokens\":50,\"outputTokens\":10}");
        lls_string_free(ev);
        char result[256];
        snprintf(result, sizeof result, "{\"callId\":\"call_%d\",\"text\":\"hello from a.txt (%d)\"}", step, step);
        EXPECT_OK(lls_agent_record_tool_result(a, result, strlen(result), NULL, &err));
    }
    /* A final text reply, then the turn ends and the session verifies. */
    char *body = NULL;
    EXPECT_OK(lls_agent_next_body(a, NULL, &body, NULL, NULL, &err));
    CHECK_CONTAINS(body, "hello from a.txt (3)");
    lls_string_free(body);
    /* The _info form gives the normalised finish reason too (not logged). */
    lls_recorded_info rec;
    memset(&rec, 0xab, sizeof rec);
    EXPECT_OK(lls_agent_record_body_info(a, p->final_reply, strlen(p->final_reply), &rec, &err));
    CHECK(rec.seq > 0);
    CHECK_INT(rec.tool_calls, 0);
    CHECK(strcmp(rec.finish_reason, "stop") == 0);
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    char *report = NULL;
    EXPECT_OK(lls_session_verify(s, &report, NULL, &err));
    CHECK_INT(json_int(report, "requests"), 4);
    lls_string_free(report);
    lls_agent_free(a);
    lls_session_free(s);
}

static void test_openai(void) {
    run_loop(&PROVIDERS[0]);
}

static void test_responses(void) {
    run_loop(&PROVIDERS[1]);
}

static void test_anthropic(void) {
    run_loop(&PROVIDERS[2]);
}

static void test_gemini(void) {
    run_loop(&PROVIDERS[3]);
}

/* ------------------------------------------------------------ streams */

static void test_record_stream(void) {
    lls_session *s = memory_session("stream");
    lls_agent *a = new_agent(s);
    EXPECT_OK(lls_agent_set_renderer(a, S("openai"), NULL, 0, &err));
    EXPECT_OK(lls_agent_start_turn(a, S(USER("hi")), NULL, &err));
    char *body = NULL;
    EXPECT_OK(lls_agent_next_body(a, NULL, &body, NULL, NULL, &err));
    lls_string_free(body);

    /* A stream of another format is refused, and so is one cut short; nothing changes. */
    char *before = events_of(s);
    lls_stream *other = NULL;
    EXPECT_OK(lls_stream_new(S("anthropic"), &other, &err));
    EXPECT_ERR_DETAIL(lls_agent_record_stream(a, other, false, NULL, NULL, &err), LLS_ERR_INVALID_INPUT,
                      "is a anthropic stream, but the agent renders openai bodies", "\"field\":\"stream\"");
    lls_stream_free(other);
    lls_stream *st = NULL;
    EXPECT_OK(lls_stream_new(S("openai"), &st, &err));
    static const char part1[] = "data: {\"model\":\"m-test\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    EXPECT_OK(lls_stream_feed(st, S(part1), &err));
    EXPECT_ERR_DETAIL(lls_agent_record_stream(a, st, false, NULL, NULL, &err), LLS_ERR_INVALID_INPUT, "", "incomplete");
    EXPECT_ERR(lls_agent_record_stream(a, NULL, false, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "stream");
    CHECK_UNCHANGED(s, before);
    lls_string_free(before);

    /* A stream is finished by recording it, even when that fails: what arrived can still be
       recorded as it is (partial). */
    lls_recorded_info rec;
    memset(&rec, 0xab, sizeof rec);
    EXPECT_OK(lls_agent_record_stream_info(a, st, true, &rec, &err));
    CHECK_INT(rec.tool_calls, 0);
    CHECK(strcmp(rec.finish_reason, "incomplete") == 0);
    uint64_t seq = rec.seq;
    uint32_t calls = 9;
    char *ev = NULL;
    EXPECT_OK(lls_session_events(s, seq, seq + 1, &ev, NULL, &err));
    CHECK_CONTAINS(ev, "\"text\":\"Hel\"");
    lls_string_free(ev);
    lls_stream_free(st);
    /* The step is closed now: recording again is out of order. */
    EXPECT_ERR(lls_agent_record_stream(a, st, false, NULL, NULL, &err), LLS_ERR_INVALID_HANDLE, "stream");

    /* A whole stream, with a tool call, in the next step. */
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    EXPECT_OK(lls_agent_start_turn(a, S(USER("again")), NULL, &err));
    EXPECT_OK(lls_agent_next_body(a, NULL, &body, NULL, NULL, &err));
    lls_string_free(body);
    st = NULL;
    EXPECT_OK(lls_stream_new(S("openai"), &st, &err));
    static const char whole[] =
        "data: {\"model\":\"m-test\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me look.\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":"
        "\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"{\\\"path\\\":\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
        "\"\\\"b.txt\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"
        "data: [DONE]\n\n";
    EXPECT_OK(lls_stream_feed(st, S(whole), &err));
    EXPECT_OK(lls_agent_record_stream(a, st, false, &seq, &calls, &err));
    CHECK_INT(calls, 1);
    EXPECT_ERR(lls_agent_record_stream_info(a, st, false, NULL, &err), LLS_ERR_OUT_OF_ORDER, "no request is open");
    EXPECT_OK(lls_session_events(s, seq, seq + 2, &ev, NULL, &err));
    CHECK_CONTAINS(ev, "\"type\":\"tool/call\"");
    CHECK_CONTAINS(ev, "\"callId\":\"call_9\"");
    CHECK_CONTAINS(ev, "b.txt");
    lls_string_free(ev);
    EXPECT_ERR(lls_agent_record_stream(a, st, false, NULL, NULL, &err), LLS_ERR_OUT_OF_ORDER, "no request is open");
    EXPECT_OK(lls_agent_record_tool_result(a, S("{\"callId\":\"call_9\",\"text\":\"bee\"}"), NULL, &err));
    lls_stream_free(st);
    lls_agent_free(a);
    lls_session_free(s);
}

/* ------------------------------------------------------------ errors change nothing */

static void test_bad_inputs(void) {
    lls_session *s = memory_session("bad");
    lls_agent *a = new_agent(s);
    char *body = NULL;
    size_t len = 0;
    lls_request_info info;
    EXPECT_OK(lls_agent_start_turn(a, S(USER("hi")), NULL, &err));
    char *before = events_of(s);

    /* No renderer yet. */
    EXPECT_ERR(lls_agent_next_body(a, NULL, &body, &len, &info, &err), LLS_ERR_OUT_OF_ORDER, "no renderer");
    EXPECT_ERR(lls_agent_record_body(a, S("{}"), NULL, NULL, &err), LLS_ERR_OUT_OF_ORDER, "no renderer");
    EXPECT_ERR(lls_agent_last_envelope(a, &body, &len, &err), LLS_ERR_OUT_OF_ORDER, "has not built a request");
    CHECK_UNCHANGED(s, before);

    /* Bad renderers and options. */
    EXPECT_ERR_DETAIL(lls_agent_set_renderer(a, S("cohere"), NULL, 0, &err), LLS_ERR_INVALID_INPUT, "renderer: expected",
                      "\"field\":\"renderer\"");
    EXPECT_ERR(lls_agent_set_renderer(a, NULL, 0, NULL, 0, &err), LLS_ERR_NULL_POINTER, "renderer");
    EXPECT_ERR(lls_agent_set_renderer(NULL, S("openai"), NULL, 0, &err), LLS_ERR_NULL_POINTER, "agent");
    EXPECT_ERR_DETAIL(lls_agent_set_renderer(a, S("anthropic"), S("{\"prefixLen\":2}"), &err), LLS_ERR_INVALID_INPUT,
                      "options.prefixLen: is the agent's own", "\"field\":\"options.prefixLen\"");
    EXPECT_ERR(lls_agent_set_renderer(a, S("anthropic"), S("{\"cacheTTL\":\"1h\"}"), &err), LLS_ERR_INVALID_INPUT,
               "options.cacheTTL: is not a render option");
    EXPECT_ERR(lls_agent_set_renderer(a, S("anthropic"), S("{\"cacheTtl\":"), &err), LLS_ERR_MALFORMED_JSON, "options_json");
    /* Still no renderer: the failed calls set none. */
    EXPECT_ERR(lls_agent_next_body(a, NULL, &body, &len, NULL, &err), LLS_ERR_OUT_OF_ORDER, "no renderer");

    EXPECT_OK(lls_agent_set_renderer(a, S("openai"), NULL, 0, &err));
    EXPECT_ERR(lls_agent_next_body(a, NULL, NULL, &len, NULL, &err), LLS_ERR_NULL_POINTER, "body");
    /* No open step: a reply is out of order. */
    static const char reply[] = "{\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"x\"}}]}";
    EXPECT_ERR(lls_agent_record_body(a, S(reply), NULL, NULL, &err), LLS_ERR_OUT_OF_ORDER, "no request is open");
    CHECK_UNCHANGED(s, before);
    lls_string_free(before);

    EXPECT_OK(lls_agent_next_body(a, NULL, &body, &len, &info, &err));
    lls_string_free(body);
    before = events_of(s);
    /* A body of another format, one without a message, malformed JSON, bad UTF-8, NULL. */
    static const char anthropic_reply[] =
        "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}";
    EXPECT_ERR_DETAIL(lls_agent_record_body(a, S(anthropic_reply), NULL, NULL, &err), LLS_ERR_INVALID_INPUT,
                      "a openai response body: response.choices: expected at least one choice", "\"field\":\"response.choices\"");
    EXPECT_ERR(lls_agent_record_body(a, S("{\"model\":\"m\",\"choices\":[]}"), NULL, NULL, &err), LLS_ERR_INVALID_INPUT,
               "expected at least one choice");
    EXPECT_ERR(lls_agent_record_body(a, S("{\"model\":\"m\",\"choices\":[{\"index\":0}]}"), NULL, NULL, &err),
               LLS_ERR_INVALID_INPUT, "response.choices[0].message: is required");
    EXPECT_ERR(lls_agent_record_body(a, S("{\"choices\":"), NULL, NULL, &err), LLS_ERR_MALFORMED_JSON, "malformed JSON");
    EXPECT_ERR(lls_agent_record_body(a, S("{\"a\":\"\xff\"}"), NULL, NULL, &err), LLS_ERR_INVALID_UTF8, "body");
    EXPECT_ERR(lls_agent_record_body(a, NULL, 0, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "body");
    EXPECT_ERR(lls_agent_record_body_info(a, NULL, 0, NULL, &err), LLS_ERR_NULL_POINTER, "body");
    EXPECT_ERR(lls_agent_record_body_info(NULL, S("{}"), NULL, &err), LLS_ERR_NULL_POINTER, "agent");
    CHECK_UNCHANGED(s, before);
    lls_string_free(before);

    /* A good reply still goes in after all that. */
    uint32_t calls = 9;
    EXPECT_OK(lls_agent_record_body(a, S(reply), NULL, &calls, &err));
    CHECK_INT(calls, 0);
    lls_agent_free(a);
    lls_session_free(s);
}

/* A history the renderer has no form for fails next_body before anything is written; the
 * envelope path still works. */
static void test_unrenderable_history(void) {
    lls_session *s = memory_session("unrenderable");
    lls_agent *a = new_agent(s);
    EXPECT_OK(lls_agent_set_renderer(a, S("openai"), NULL, 0, &err));
    EXPECT_OK(lls_agent_start_turn(
        a, S("{\"role\":\"user\",\"content\":[{\"type\":\"audio\",\"data\":\"AAAA\"}]}"), NULL, &err));
    char *before = events_of(s);
    char *body = NULL;
    EXPECT_ERR_DETAIL(lls_agent_next_body(a, NULL, &body, NULL, NULL, &err), LLS_ERR_INVALID_INPUT,
                      "block type \"audio\" is not supported in a user message by the openai renderer",
                      "\"field\":\"messages[0].content[0]\"");
    CHECK(body == NULL);
    CHECK_UNCHANGED(s, before);
    lls_string_free(before);
    /* The envelope path does not render, so it goes ahead. */
    char *env = NULL;
    EXPECT_OK(lls_agent_next_request(a, NULL, &env, NULL, &err));
    CHECK_CONTAINS(env, "\"type\":\"audio\"");
    lls_string_free(env);
    lls_agent_free(a);
    lls_session_free(s);
}

/* Native compaction through the C ABI (minor 6): a request of the route's own compaction, its
 * answer recorded (the block replaces what it held), a refused answer and a failure logged, and
 * the bad inputs that change nothing. */
static void test_native_compaction(void) {
    CHECK(lls_abi_minor() >= 6);
    lls_session *s = memory_session("native-c");
    lls_agent *a = new_agent(s);
    char *out = NULL;
    size_t len = 0;
    EXPECT_ERR(lls_agent_native_compaction_begin(a, &out, &len, &err), LLS_ERR_INVALID_INPUT, "has no native compaction");
    EXPECT_OK(lls_agent_set_renderer(a, S("anthropic"), NULL, 0, &err));
    EXPECT_OK(lls_agent_start_turn(a, S(USER("Start logsift.")), NULL, &err));
    char *body = NULL;
    size_t body_len = 0;
    lls_request_info info;
    EXPECT_OK(lls_agent_next_body(a, NULL, &body, &body_len, &info, &err));
    lls_string_free(body);
    EXPECT_OK(lls_agent_record_body(a, S("{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m-test\","
                                        "\"content\":[{\"type\":\"text\",\"text\":\"Started.\"}],\"stop_reason\":\"end_turn\"}"),
                                    NULL, NULL, &err));
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));

    EXPECT_OK(lls_agent_native_compaction_begin(a, &out, &len, &err));
    CHECK_CONTAINS(out, "\"endpoint\":\"/v1/messages\"");
    CHECK_CONTAINS(out, "\"betas\":[\"compact-2026-09-04\"]");
    CHECK_CONTAINS(out, "summarize");
    lls_string_free(out);
    EXPECT_ERR(lls_agent_native_compaction_begin(a, &out, &len, &err), LLS_ERR_OUT_OF_ORDER, "already open");

    /* Bad inputs change nothing: the request stays in flight. */
    char *before = events_of(s);
    EXPECT_ERR(lls_agent_native_compaction_record(a, NULL, 3, &out, &len, &err), LLS_ERR_NULL_POINTER, "body");
    EXPECT_ERR(lls_agent_native_compaction_record(a, S("{not json"), &out, &len, &err), LLS_ERR_MALFORMED_JSON, "");
    EXPECT_ERR(lls_agent_native_compaction_record(a, S("{\"content\":3}"), NULL, &len, &err), LLS_ERR_NULL_POINTER, "out");
    CHECK_UNCHANGED(s, before);
    lls_string_free(before);

    /* An answer without the block: a failed attempt, logged. */
    EXPECT_OK(lls_agent_native_compaction_record(a, S("{\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m-test\","
                                                       "\"content\":[],\"stop_reason\":\"max_tokens\"}"),
                                                 &out, &len, &err));
    CHECK_CONTAINS(out, "\"outcome\":\"failed\"");
    CHECK_CONTAINS(out, "\"stopReason\":\"max_tokens\"");
    lls_string_free(out);
    EXPECT_ERR(lls_agent_native_compaction_fail(a, S("late"), &out, &len, &err), LLS_ERR_OUT_OF_ORDER, "in flight");

    /* A timeout the host reports. */
    EXPECT_OK(lls_agent_native_compaction_begin(a, &out, &len, &err));
    lls_string_free(out);
    EXPECT_OK(lls_agent_native_compaction_fail(a, S("timed out"), &out, &len, &err));
    CHECK_CONTAINS(out, "\"error\":\"timed out\"");
    lls_string_free(out);

    /* The block lands: it replaces the two messages the request held. */
    EXPECT_OK(lls_agent_native_compaction_begin(a, &out, &len, &err));
    lls_string_free(out);
    EXPECT_OK(lls_agent_native_compaction_record(
        a, S("{\"id\":\"m2\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m-test\",\"content\":[{\"type\":"
             "\"compaction\",\"content\":\"logsift was started.\",\"signature\":\"c2ln\"}],\"stop_reason\":\"compaction\"}"),
        &out, &len, &err));
    CHECK_CONTAINS(out, "\"outcome\":\"landed\"");
    CHECK_CONTAINS(out, "\"span\":[0,1]");
    lls_string_free(out);
    char *history = NULL;
    EXPECT_OK(lls_session_history(s, &history, &len, &err));
    CHECK_CONTAINS(history, "\"signature\":\"c2ln\"");
    CHECK(strstr(history, "Start logsift.") == NULL);
    lls_string_free(history);
    char *report = NULL;
    EXPECT_OK(lls_session_verify(s, &report, &len, &err));
    CHECK_CONTAINS(report, "\"nativeCompactions\":3");
    lls_string_free(report);
    lls_agent_free(a);
    lls_session_free(s);
}

/* A body of 4 KiB or more is the agent's own buffer, shared with the host: it stays as it was
 * while the agent builds the next body from it, and after the agent and the session are freed,
 * until the host frees it (valgrind and the sanitizers watch the reads). Anthropic: the moving
 * breakpoint is patched into each body, and undone when the next one is built. */
static void test_shared_body(void) {
    const provider *p = &PROVIDERS[2];
    CHECK(strcmp(p->renderer, "anthropic") == 0);
    lls_session *s = memory_session("shared");
    lls_agent *a = new_agent(s);
    EXPECT_OK(lls_agent_set_renderer(a, p->renderer, strlen(p->renderer), p->options, p->options ? strlen(p->options) : 0, &err));
    char user[6000 + 128];
    char text[6001];
    memset(text, 'x', 6000);
    text[6000] = 0;
    snprintf(user, sizeof user, "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    EXPECT_OK(lls_agent_start_turn(a, user, strlen(user), NULL, &err));
    char *held[3];
    char *copies[3];
    size_t lens[3];
    size_t live = lls_live_string_count();
    for (int step = 1; step <= 3; step++) {
        EXPECT_OK(lls_agent_next_body(a, NULL, &held[step - 1], &lens[step - 1], NULL, &err));
        CHECK(lens[step - 1] > 6000);
        CHECK_INT(strlen(held[step - 1]), (long long)lens[step - 1]);
        copies[step - 1] = strdup(held[step - 1]);
        CHECK_CONTAINS(held[step - 1], "cache_control");
        char *reply = reply_of(p, step);
        EXPECT_OK(lls_agent_record_body(a, reply, strlen(reply), NULL, NULL, &err));
        free(reply);
        char result[128];
        snprintf(result, sizeof result, "{\"callId\":\"call_%d\",\"text\":\"result %d\"}", step, step);
        EXPECT_OK(lls_agent_record_tool_result(a, result, strlen(result), NULL, &err));
    }
    CHECK_INT(lls_live_string_count(), (long long)(live + 3));
    /* Each body is as it was handed out, though the agent built the next ones from it. */
    for (int i = 0; i < 3; i++) {
        CHECK(memcmp(held[i], copies[i], lens[i] + 1) == 0);
    }
    lls_agent_free(a);
    lls_session_free(s);
    /* And after the agent is gone. */
    for (int i = 0; i < 3; i++) {
        CHECK(memcmp(held[i], copies[i], lens[i] + 1) == 0);
        lls_string_free(held[i]);
        free(copies[i]);
    }
    CHECK_INT(lls_live_string_count(), (long long)live);
}

static void test_no_handle_leaks(void) {
    CHECK_INT(lls_live_handle_count(), 0);
    CHECK_INT(lls_live_string_count(), 0); /* every body, envelope and info was freed */
}

int main(void) {
    RUN(test_openai);
    RUN(test_responses);
    RUN(test_anthropic);
    RUN(test_gemini);
    RUN(test_record_stream);
    RUN(test_bad_inputs);
    RUN(test_unrenderable_history);
    RUN(test_native_compaction);
    RUN(test_shared_body);
    RUN(test_no_handle_leaks);
    return check_report();
}
