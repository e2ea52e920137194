/* C tests of agent instances: a full agent loop (prefix listeners, tool calls, compaction via a
 * C summariser, rendering, verify), overflow recovery and automatic compaction, resume, crash
 * repair, child agents (spawn, finish), and every agent entry point's bad inputs and
 * out-of-order calls. Built and run by
 * `make test-c`. */
#define _POSIX_C_SOURCE 200809L

#include "helpers.h"

#include <unistd.h>

static const char OPTS[] =
    "{\"config\":{\"provider\":\"openai\",\"model\":\"gpt-test\"},"
    "\"system\":\"You are a careful coding agent.\","
    "\"tools\":[{\"name\":\"read_file\",\"description\":\"Read a file\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}}],"
    "\"checkRequests\":true}";

#define USER(text) "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"" text "\"}]}"
#define ASSISTANT(text) \
    "{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"" text "\"}]}}"

/* ------------------------------------------------------------ callbacks */

typedef struct {
    const char *text;
    int calls;
    int frees;
} prefix_state;

static void prefix_free(void *ud) {
    ((prefix_state *)ud)->frees++;
}

/* Prepends its own message to what the later listeners produced. */
static int32_t prefix_cb(void *ud, const char *in, size_t in_len, lls_reply *reply) {
    (void)in_len;
    prefix_state *p = ud;
    p->calls++;
    size_t rest_len = 0;
    const char *rest = json_value(in, "rest", &rest_len);
    char mine[512];
    snprintf(mine, sizeof mine, "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", p->text);
    char *out = prepend_message(mine, rest, rest_len);
    lls_reply_set_json(reply, out, strlen(out), NULL);
    free(out);
    return LLS_CB_OK;
}

typedef struct {
    int calls;
    int frees;
    bool saw_prefix;
} pre_step_state;

static void pre_step_free(void *ud) {
    ((pre_step_state *)ud)->frees++;
}

static int32_t pre_step_cb(void *ud, const char *in, size_t in_len, lls_reply *reply) {
    (void)in_len;
    pre_step_state *p = ud;
    p->calls++;
    p->saw_prefix = strstr(in, "\"prefix\":[{") != NULL && strstr(in, "\"step\":") != NULL;
    lls_reply_set_json(reply, S("null"), NULL);
    return LLS_CB_OK;
}

typedef struct {
    int calls;
    int frees;
    char *last_input;
    const char *reply; /* NULL: a fixed short checkpoint */
} summariser_state;

static void summariser_free(void *ud) {
    summariser_state *s = ud;
    s->frees++;
    free(s->last_input);
    s->last_input = NULL;
}

static int32_t summariser_cb(void *ud, const char *in, size_t in_len, lls_reply *reply) {
    summariser_state *s = ud;
    s->calls++;
    free(s->last_input);
    s->last_input = malloc(in_len + 1);
    memcpy(s->last_input, in, in_len + 1);
    const char *answer = s->reply ? s->reply
                                  : "{\"text\":\"## Primary request and intent\\nRead a.txt.\\n## Current work\\nDone: "
                                    "it says hello.\",\"usage\":{\"inputTokens\":120,\"outputTokens\":20}}";
    lls_reply_set_json(reply, answer, strlen(answer), NULL);
    return LLS_CB_OK;
}

/* ------------------------------------------------------------ helpers */

static lls_session *memory_session(const char *id) {
    char opts[128];
    snprintf(opts, sizeof opts, "{\"id\":\"%s\"}", id);
    lls_session *s = NULL;
    CHECK_INT(lls_session_new_memory(opts, strlen(opts), &s, NULL), LLS_OK);
    return s;
}

static lls_agent *new_agent(lls_session *s, const char *opts) {
    lls_agent *a = NULL;
    EXPECT_OK(lls_agent_new(s, opts, strlen(opts), &a, &err));
    return a;
}

static char *next_request(lls_agent *a) {
    char *env = NULL;
    EXPECT_OK(lls_agent_next_request(a, NULL, &env, NULL, &err));
    return env;
}

static char *request_info(lls_agent *a) {
    char *info = NULL;
    EXPECT_OK(lls_agent_request_info(a, &info, NULL, &err));
    return info;
}

/* A long text of `n` words, as a JSON string body. */
static char *long_text(const char *word, int n) {
    size_t wl = strlen(word);
    char *out = malloc((wl + 1) * (size_t)n + 1);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        memcpy(out + at, word, wl);
        at += wl;
        out[at++] = ' ';
    }
    out[at] = '\0';
    return out;
}

static void start_turn_text(lls_agent *a, const char *text) {
    size_t cap = strlen(text) + 128;
    char *msg = malloc(cap);
    snprintf(msg, cap, "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    EXPECT_OK(lls_agent_start_turn(a, msg, strlen(msg), NULL, &err));
    free(msg);
}

/* Records an assistant text response; with `usage`, the provider's usage too. */
static void respond(lls_agent *a, const char *text, bool usage) {
    size_t cap = strlen(text) + 256;
    char *msg = malloc(cap);
    snprintf(msg, cap, "{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}%s}", text,
             usage ? ",\"usage\":{\"inputTokens\":100,\"outputTokens\":20,\"cacheReadTokens\":80}" : "");
    EXPECT_OK(lls_agent_record_response(a, msg, strlen(msg), NULL, &err));
    free(msg);
}

static void respond_text(lls_agent *a, const char *text) {
    respond(a, text, false);
}

/* The length of the envelope's bytes up to the end of its messages array (without `]`). */
static size_t messages_end(const char *env) {
    const char *p = strstr(env, "],\"sessionId\"");
    return p ? (size_t)(p - env) : 0;
}

/* ------------------------------------------------------------ the full loop */

static void test_agent_loop(void) {
    lls_session *s = memory_session("loop");
    lls_agent *a = new_agent(s, OPTS);
    prefix_state rules = {"Rules: indent with tabs.", 0, 0};
    prefix_state project = {"Project: llmsession, a Rust library.", 0, 0};
    pre_step_state pre = {0, 0, false};
    summariser_state summ = {0, 0, NULL, NULL};
    EXPECT_OK(lls_agent_add_prefix_listener(a, prefix_cb, &rules, prefix_free, &err));
    EXPECT_OK(lls_agent_add_prefix_listener(a, prefix_cb, &project, prefix_free, &err));
    EXPECT_OK(lls_agent_add_pre_step_listener(a, pre_step_cb, &pre, pre_step_free, &err));
    EXPECT_OK(lls_agent_set_summariser(a, summariser_cb, &summ, summariser_free, &err));

    char *t = NULL;
    EXPECT_OK(lls_agent_prefix(a, &t, NULL, &err));
    CHECK_STR(t, "null"); /* not composed before the first request */
    lls_string_free(t);

    /* Turn 1, step 1. */
    uint64_t turn = 0;
    EXPECT_OK(lls_agent_start_turn(a, S(USER("Please read a.txt")), &turn, &err));
    CHECK_INT(turn, 1);
    char *env1 = next_request(a);
    CHECK_INT(rules.calls, 1);
    CHECK_INT(project.calls, 1);
    CHECK_INT(pre.calls, 1);
    CHECK(pre.saw_prefix);
    CHECK_CONTAINS(env1, "\"provider\":\"openai\",\"model\":\"gpt-test\"");
    CHECK_CONTAINS(env1, "\"system\":\"You are a careful coding agent.\"");
    CHECK_CONTAINS(env1, "\"purpose\":\"conversation\"");
    CHECK_CONTAINS(env1, "\"sessionId\":\"loop\",\"turn\":1,\"step\":1");
    /* The prefix in registration order, then the history. */
    const char *r = strstr(env1, "Rules: indent");
    const char *p = strstr(env1, "Project: llmsession");
    const char *u = strstr(env1, "Please read a.txt");
    CHECK(r != NULL && p != NULL && u != NULL && r < p && p < u);
    char *info = request_info(a);
    CHECK_INT(json_int(info, "turn"), 1);
    CHECK_INT(json_int(info, "step"), 1);
    CHECK_INT(json_int(info, "prefixLen"), 2);
    CHECK_INT(json_int(info, "messageCount"), 3);
    CHECK_INT(json_int(info, "sharedMessages"), 0);
    CHECK_INT(json_int(info, "bytes"), (long long)strlen(env1));
    CHECK_CONTAINS(info, "\"digest\":\"sha256:");
    /* The digest is the one logged in step/start. */
    char *digest = json_dup(info, "digest");
    char *events = events_of(s);
    CHECK_CONTAINS(events, digest);
    lls_string_free(events);
    free(digest);
    lls_string_free(info);

    /* Render for two providers. */
    char *body = NULL;
    EXPECT_OK(lls_render(S("openai"), env1, strlen(env1), 2, &body, NULL, &err));
    CHECK_CONTAINS(body, "\"messages\":[");
    CHECK_CONTAINS(body, "\"model\":\"gpt-test\"");
    CHECK_CONTAINS(body, "read_file");
    lls_string_free(body);
    EXPECT_OK(lls_render(S("anthropic"), env1, strlen(env1), 2, &body, NULL, &err));
    CHECK_CONTAINS(body, "cache_control");
    lls_string_free(body);

    /* The model calls a tool. */
    uint64_t seq = 0;
    EXPECT_OK(lls_agent_record_response(
        a,
        S("{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Reading it.\"},"
          "{\"type\":\"tool-call\",\"id\":\"call_1\",\"name\":\"read_file\",\"arguments\":\"{\\\"path\\\":\\\"a.txt\\\"}\"}]},"
          "\"usage\":{\"inputTokens\":50,\"outputTokens\":10,\"cacheReadTokens\":0}}"),
        &seq, &err));
    CHECK(seq > 0);
    char *before = events_of(s);
    char *env = NULL;
    EXPECT_ERR_DETAIL(lls_agent_next_request(a, NULL, &env, NULL, &err), LLS_ERR_OUT_OF_ORDER, "has no result yet",
                      "\"callId\":\"call_1\"");
    EXPECT_ERR(lls_agent_end_turn(a, S("completed"), &err), LLS_ERR_OUT_OF_ORDER, "has no result yet");
    CHECK_UNCHANGED(s, before);
    lls_string_free(before);
    size_t written = 99;
    EXPECT_OK(lls_agent_record_tool_result(a, S("{\"callId\":\"call_1\",\"text\":\"hello from a.txt\"}"), &written, &err));
    CHECK_INT(written, 1);

    /* Step 2 extends step 1: a cache hit on everything before. */
    char *env2 = next_request(a);
    CHECK_CONTAINS(env2, "\"turn\":1,\"step\":2");
    size_t n1 = messages_end(env1);
    CHECK(n1 > 0 && strncmp(env1, env2, n1) == 0);
    info = request_info(a);
    CHECK_INT(json_int(info, "sharedMessages"), 3);
    CHECK_INT(json_int(info, "messageCount"), 5);
    lls_string_free(info);
    CHECK_INT(rules.calls, 1); /* composed once per instance */
    CHECK_INT(pre.calls, 2);
    respond(a, "It says hello.", true);
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));

    /* Context injected between turns is written now; during a step it is deferred. */
    EXPECT_OK(lls_agent_inject(a, S(USER("Note: a.txt is read-only.")), &seq, &err));
    CHECK(seq != LLS_SEQ_NONE);
    char *long_question = long_text("summarise", 120);
    start_turn_text(a, long_question);
    free(long_question);
    char *env3 = next_request(a);
    CHECK_CONTAINS(env3, "a.txt is read-only");
    EXPECT_OK(lls_agent_inject(a, S(USER("Late note.")), &seq, &err));
    CHECK(seq == LLS_SEQ_NONE);
    respond_text(a, "It is a greeting file that says hello, and it must not be modified by us at any time.");
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    t = NULL;
    EXPECT_OK(lls_session_history(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "Late note.");
    lls_string_free(t);

    /* Manual compaction through the C summariser. */
    char *outcome = NULL;
    EXPECT_OK(lls_agent_compact(a, NULL, 0, NULL, &outcome, NULL, &err));
    CHECK_CONTAINS(outcome, "\"outcome\":\"landed\"");
    CHECK_INT(summ.calls, 1);
    CHECK_CONTAINS(summ.last_input, "\"request\":{\"provider\":\"openai\",\"model\":\"gpt-test\"");
    CHECK_CONTAINS(summ.last_input, "\"purpose\":\"compaction\"");
    CHECK_CONTAINS(summ.last_input, "compaction engine");
    CHECK_CONTAINS(summ.last_input, "\"prefixLen\":2");
    CHECK(json_int(summ.last_input, "sharedMessages") > 2);
    char *want = json_dup(outcome, "digest");
    char *got = json_dup(summ.last_input, "digest");
    CHECK(want != NULL && got != NULL && strcmp(want, got) == 0);
    free(want);
    free(got);
    /* The summarisation request renders like any other. */
    char *sreq = json_dup(summ.last_input, "request");
    EXPECT_OK(lls_render(S("openai"), sreq, strlen(sreq), 2, &body, NULL, &err));
    CHECK_CONTAINS(body, "compaction engine");
    lls_string_free(body);
    free(sreq);
    lls_string_free(outcome);
    EXPECT_OK(lls_session_history(s, &t, NULL, &err));
    const char *checkpoint = "[{\"role\":\"user\",\"content\":[{\"text\":\"<conversation-checkpoint>";
    CHECK(strncmp(t, checkpoint, strlen(checkpoint)) == 0);
    lls_string_free(t);

    /* Turn 3 carries the checkpoint. */
    EXPECT_OK(lls_agent_start_turn(a, S(USER("Thanks. Anything else?")), NULL, &err));
    char *env4 = next_request(a);
    CHECK_CONTAINS(env4, "conversation-checkpoint");
    CHECK_CONTAINS(env4, "Rules: indent"); /* the prefix is untouched by compaction */
    respond_text(a, "No.");
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));

    /* Everything the log says checks out. */
    EXPECT_OK(lls_session_verify(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"compactions\":1");
    CHECK_CONTAINS(t, "\"requests\":4");
    lls_string_free(t);
    EXPECT_OK(lls_agent_stats(a, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"requests\":4");
    CHECK_CONTAINS(t, "\"compactions\":1");
    CHECK_CONTAINS(t, "\"compositions\":1");
    CHECK_CONTAINS(t, "\"instance\":1");
    lls_string_free(t);
    EXPECT_OK(lls_session_stats(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"turns\":3");
    CHECK_CONTAINS(t, "\"requests\":4");
    lls_string_free(t);
    EXPECT_OK(lls_agent_measure(a, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"counter\":\"estimate\"");
    CHECK(json_int(t, "total") > 0);
    CHECK(json_int(t, "prefix") > 0);
    lls_string_free(t);
    EXPECT_OK(lls_agent_prefix(a, &t, NULL, &err));
    CHECK_CONTAINS(t, "Rules: indent");
    CHECK(strstr(t, "Rules: indent") < strstr(t, "Project: llmsession"));
    lls_string_free(t);
    EXPECT_OK(lls_session_header(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"messagePrefix\":[");
    lls_string_free(t);

    /* Freeing the agent releases every callback's userdata exactly once. */
    CHECK_INT(rules.frees + project.frees + pre.frees + summ.frees, 0);
    lls_agent_free(a);
    CHECK_INT(rules.frees, 1);
    CHECK_INT(project.frees, 1);
    CHECK_INT(pre.frees, 1);
    CHECK_INT(summ.frees, 1);
    lls_string_free(env1);
    lls_string_free(env2);
    lls_string_free(env3);
    lls_string_free(env4);
    lls_session_free(s);
}

/* ------------------------------------------------- overflow and the pressure gate */

static void test_overflow_and_gate(void) {
    lls_session *s = memory_session("pressure");
    lls_agent *a = new_agent(
        s, "{\"config\":{\"provider\":\"deepseek\",\"model\":\"deepseek-chat\"},"
           "\"policy\":{\"contextWindow\":4000,\"threshold\":0.5,\"summaryMaxTokens\":1000,\"retainedTokens\":100}}");
    summariser_state summ = {0, 0, NULL, NULL};
    EXPECT_OK(lls_agent_set_summariser(a, summariser_cb, &summ, summariser_free, &err));
    char *words = long_text("lorem", 700);

    start_turn_text(a, words);
    char *env = next_request(a);
    lls_string_free(env);
    respond_text(a, words);
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    start_turn_text(a, "And then?");
    env = next_request(a);
    lls_string_free(env);
    CHECK_INT(summ.calls, 0);

    /* A plain provider error: recorded, no retry advice. */
    int32_t retry = -1;
    EXPECT_OK(lls_agent_provider_error(a, S("{\"message\":\"HTTP 503\"}"), NULL, &retry, &err));
    CHECK_INT(retry, 0);
    env = next_request(a);
    lls_string_free(env);

    /* A context overflow: compaction down to the newest message, then retry. */
    EXPECT_OK(lls_agent_provider_error(a, S("{\"message\":\"context too long\",\"overflow\":true}"), NULL, &retry, &err));
    CHECK_INT(retry, 1);
    CHECK_INT(summ.calls, 1);
    env = next_request(a);
    CHECK_CONTAINS(env, "conversation-checkpoint");
    lls_string_free(env);
    /* Two overflows in a row exceed the budget of one recovery. */
    EXPECT_ERR(lls_agent_provider_error(a, S("{\"message\":\"context too long\",\"overflow\":true}"), NULL, &retry, &err),
               LLS_ERR_OVERFLOW_BUDGET, "context overflow 2 times in a row");
    CHECK_INT(retry, 1);
    EXPECT_OK(lls_agent_end_turn(a, S("error"), &err));

    /* The gate: a prompt over the threshold is compacted before the request is built. */
    int before_calls = summ.calls;
    start_turn_text(a, words);
    env = next_request(a);
    lls_string_free(env);
    respond_text(a, words);
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    start_turn_text(a, words);
    env = next_request(a);
    CHECK(summ.calls > before_calls);
    CHECK_CONTAINS(env, "conversation-checkpoint");
    lls_string_free(env);
    respond_text(a, "ok");
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    char *t = NULL;
    EXPECT_OK(lls_agent_measure(a, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"threshold\":2000");
    CHECK_CONTAINS(t, "\"contextWindow\":4000");
    lls_string_free(t);
    EXPECT_OK(lls_session_verify(s, &t, NULL, &err));
    CHECK(json_int(t, "compactions") >= 2);
    lls_string_free(t);

    /* Without a policy an overflow cannot be recovered. */
    EXPECT_OK(lls_agent_set_policy(a, S("null"), &err));
    start_turn_text(a, "Again.");
    env = next_request(a);
    lls_string_free(env);
    EXPECT_ERR(lls_agent_provider_error(a, S("{\"message\":\"too long\",\"overflow\":true}"), NULL, &retry, &err),
               LLS_ERR_OVERFLOW_BUDGET, "no compaction policy");
    EXPECT_OK(lls_agent_end_turn(a, S("aborted"), &err));

    /* A summariser that fails: LLS_ERR_SUMMARISER, the surface untouched. */
    summ.reply = "{\"text\":\"\"}";
    char *hist = NULL;
    EXPECT_OK(lls_session_history(s, &hist, NULL, &err));
    char *out = NULL;
    EXPECT_ERR_DETAIL(lls_agent_compact(a, NULL, 0, NULL, &out, NULL, &err), LLS_ERR_SUMMARISER,
                      "compaction failed: the summary is empty", "\"outcome\":{\"error\":");
    CHECK(out == NULL);
    EXPECT_OK(lls_session_history(s, &t, NULL, &err));
    CHECK_STR(t, hist);
    lls_string_free(t);
    lls_string_free(hist);
    summ.reply = "{\"summary\":\"wrong field\"}";
    EXPECT_ERR(lls_agent_compact(a, NULL, 0, NULL, &out, NULL, &err), LLS_ERR_SUMMARISER,
               "the summariser callback replied with unusable data: reply.summary: is not a summary field");
    summ.reply = "{\"usage\":{\"inputTokens\":1,\"outputTokens\":1}}";
    EXPECT_ERR(lls_agent_compact(a, NULL, 0, NULL, &out, NULL, &err), LLS_ERR_SUMMARISER,
               "the summariser callback replied with unusable data: reply.text: is required");
    summ.reply = NULL;
    /* A middle span. */
    EXPECT_ERR(lls_agent_compact(a, S("{\"span\":[1,99]}"), NULL, &out, NULL, &err), LLS_ERR_INVALID_INPUT, "");

    free(words);
    lls_agent_free(a);
    CHECK_INT(summ.frees, 1);
    lls_session_free(s);
}

/* ------------------------------------------------------- busy, resume, crash repair */

static void test_busy_and_resume(void) {
    lls_session *s = memory_session("resume");
    lls_agent *a = new_agent(s, OPTS);
    lls_agent *b = NULL;
    EXPECT_ERR(lls_agent_new(s, S(OPTS), &b, &err), LLS_ERR_BUSY, "already has a live agent instance");
    CHECK(b == NULL);
    start_turn_text(a, "Hello");
    char *env = next_request(a);
    lls_string_free(env);
    /* Disposing closes the open turn. */
    EXPECT_OK(lls_agent_dispose(a, &err));
    EXPECT_OK(lls_agent_dispose(a, &err)); /* idempotent */
    char *ev = events_of(s);
    CHECK_CONTAINS(ev, "\"reason\":\"disposed\"");
    lls_string_free(ev);
    EXPECT_ERR(lls_agent_start_turn(a, S(USER("x")), NULL, &err), LLS_ERR_DISPOSED, "agent instance 1 was disposed");
    char *t = NULL;
    EXPECT_ERR(lls_agent_stats(a, &t, NULL, &err), LLS_ERR_DISPOSED, "was disposed");
    lls_agent_free(a);

    /* A new instance resumes: its first request records a resume snapshot. */
    b = new_agent(s, OPTS);
    EXPECT_OK(lls_agent_stats(b, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"instance\":2");
    lls_string_free(t);
    start_turn_text(b, "Hello again");
    env = next_request(b);
    lls_string_free(env);
    ev = events_of(s);
    CHECK_CONTAINS(ev, "\"reason\":\"initial\"");
    CHECK_CONTAINS(ev, "\"reason\":\"resume\"");
    lls_string_free(ev);
    respond_text(b, "Hi.");
    EXPECT_OK(lls_agent_end_turn(b, S("completed"), &err));
    lls_agent_free(b);

    /* A fork resumes too, with the parent's history. */
    lls_session *f = NULL;
    EXPECT_OK(lls_session_fork(s, S("{\"id\":\"forked\"}"), &f, &err));
    lls_agent *c = new_agent(f, OPTS);
    start_turn_text(c, "From the fork");
    env = next_request(c);
    CHECK_CONTAINS(env, "Hello again");
    CHECK_CONTAINS(env, "\"sessionId\":\"forked\"");
    lls_string_free(env);
    respond_text(c, "ok");
    EXPECT_OK(lls_agent_end_turn(c, S("completed"), &err));
    EXPECT_OK(lls_session_verify(f, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"requests\":3");
    lls_string_free(t);
    lls_agent_free(c);
    lls_session_free(f);
    lls_session_free(s);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

static void test_crash_repair(void) {
    char dir[] = "/tmp/lls-agent-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128], crashed[128];
    snprintf(path, sizeof path, "%s/live.jsonl", dir);
    snprintf(crashed, sizeof crashed, "%s/crashed.jsonl", dir);
    lls_session *s = NULL;
    EXPECT_OK(lls_session_open_file(path, strlen(path), S("{\"durability\":\"every-event\"}"), &s, &err));
    lls_agent *a = new_agent(s, OPTS);
    start_turn_text(a, "Read b.txt");
    char *env = next_request(a);
    lls_string_free(env);
    EXPECT_OK(lls_agent_record_response(
        a,
        S("{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"tool-call\",\"id\":\"c9\",\"name\":\"read_file\","
          "\"arguments\":\"{}\"}]}}"),
        NULL, &err));
    /* The process "crashes" here: copy the file as it is, with the turn open. */
    size_t len = 0;
    char *bytes = read_file(path, &len);
    FILE *f = fopen(crashed, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    free(bytes);
    lls_agent_free(a);
    lls_session_free(s);

    s = NULL;
    EXPECT_OK(lls_session_open_file(crashed, strlen(crashed), NULL, 0, &s, &err));
    char *t = NULL;
    EXPECT_OK(lls_session_load_report(s, &t, NULL, &err));
    CHECK_CONTAINS(t, "\"repairedEvents\":2");
    lls_string_free(t);
    char *ev = events_of(s);
    CHECK_CONTAINS(ev, "\"reason\":\"interrupted\"");
    CHECK_CONTAINS(ev, "\"isError\":true");
    lls_string_free(ev);
    /* The repaired log is complete: a new instance goes on. */
    a = new_agent(s, OPTS);
    start_turn_text(a, "Try again");
    env = next_request(a);
    lls_string_free(env);
    respond_text(a, "Done.");
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    lls_agent_free(a);
    lls_session_free(s);
    EXPECT_OK(lls_verify_file(crashed, strlen(crashed), &t, NULL, &err));
    CHECK_CONTAINS(t, "\"requests\":2");
    lls_string_free(t);
    unlink(path);
    unlink(crashed);
    rmdir(dir);
}

/* ------------------------------------------------------------ bad inputs */

/* Entry points with a uniform (agent, text, len, err) shape, for table-driven checks. */
typedef lls_status (*agent_text_fn)(lls_agent *, const char *, size_t, lls_error **);

static lls_status op_set_options(lls_agent *a, const char *j, size_t n, lls_error **e) {
    return lls_agent_set_options(a, j, n, e);
}
static lls_status op_set_policy(lls_agent *a, const char *j, size_t n, lls_error **e) {
    return lls_agent_set_policy(a, j, n, e);
}
static lls_status op_set_tokenizer(lls_agent *a, const char *j, size_t n, lls_error **e) {
    return lls_agent_set_tokenizer(a, j, n, e);
}
static lls_status op_start_turn(lls_agent *a, const char *j, size_t n, lls_error **e) {
    uint64_t turn = 12345;
    lls_status st = lls_agent_start_turn(a, j, n, &turn, e);
    CHECK(st == LLS_OK || turn == 12345);
    return st;
}
static lls_status op_record_response(lls_agent *a, const char *j, size_t n, lls_error **e) {
    uint64_t seq = 12345;
    lls_status st = lls_agent_record_response(a, j, n, &seq, e);
    CHECK(st == LLS_OK || seq == 12345);
    return st;
}
static lls_status op_record_tool_result(lls_agent *a, const char *j, size_t n, lls_error **e) {
    size_t w = 12345;
    lls_status st = lls_agent_record_tool_result(a, j, n, &w, e);
    CHECK(st == LLS_OK || w == 12345);
    return st;
}
static lls_status op_inject(lls_agent *a, const char *j, size_t n, lls_error **e) {
    return lls_agent_inject(a, j, n, NULL, e);
}
static lls_status op_provider_error(lls_agent *a, const char *j, size_t n, lls_error **e) {
    int32_t retry = 12345;
    lls_status st = lls_agent_provider_error(a, j, n, NULL, &retry, e);
    CHECK(st == LLS_OK || retry == 12345);
    return st;
}
static lls_status op_end_turn(lls_agent *a, const char *j, size_t n, lls_error **e) {
    return lls_agent_end_turn(a, j, n, e);
}
static lls_status op_compact(lls_agent *a, const char *j, size_t n, lls_error **e) {
    char *out = NULL;
    lls_status st = lls_agent_compact(a, j, n, NULL, &out, NULL, e);
    CHECK(st == LLS_OK || out == NULL);
    lls_string_free(out);
    return st;
}

/* Entry points with an (agent, err) shape (outputs handled inside). */
typedef lls_status (*agent_fn)(lls_agent *, lls_error **);

static lls_status op_next_request(lls_agent *a, lls_error **e) {
    char *out = NULL;
    lls_status st = lls_agent_next_request(a, NULL, &out, NULL, e);
    CHECK(st == LLS_OK || out == NULL);
    lls_string_free(out);
    return st;
}
static lls_status op_request_info(lls_agent *a, lls_error **e) {
    char *out = NULL;
    lls_status st = lls_agent_request_info(a, &out, NULL, e);
    lls_string_free(out);
    return st;
}
static lls_status op_measure(lls_agent *a, lls_error **e) {
    char *out = NULL;
    lls_status st = lls_agent_measure(a, &out, NULL, e);
    lls_string_free(out);
    return st;
}
static lls_status op_stats(lls_agent *a, lls_error **e) {
    char *out = NULL;
    lls_status st = lls_agent_stats(a, &out, NULL, e);
    lls_string_free(out);
    return st;
}
static lls_status op_prefix(lls_agent *a, lls_error **e) {
    char *out = NULL;
    lls_status st = lls_agent_prefix(a, &out, NULL, e);
    lls_string_free(out);
    return st;
}
static lls_status op_clear_counter(lls_agent *a, lls_error **e) {
    return lls_agent_clear_token_counter(a, e);
}
static lls_status op_dispose(lls_agent *a, lls_error **e) {
    return lls_agent_dispose(a, e);
}
static int32_t never_called(void *ud, const char *in, size_t len, lls_reply *reply) {
    (void)ud, (void)in, (void)len, (void)reply;
    return LLS_CB_ERROR;
}
static counted registration_ud;
static lls_status op_add_prefix(lls_agent *a, lls_error **e) {
    return lls_agent_add_prefix_listener(a, never_called, &registration_ud, counted_free, e);
}
static lls_status op_add_pre_step(lls_agent *a, lls_error **e) {
    return lls_agent_add_pre_step_listener(a, never_called, &registration_ud, counted_free, e);
}
static lls_status op_set_summariser(lls_agent *a, lls_error **e) {
    return lls_agent_set_summariser(a, never_called, &registration_ud, counted_free, e);
}
static lls_status op_set_counter(lls_agent *a, lls_error **e) {
    return lls_agent_set_token_counter(a, never_called, &registration_ud, counted_free, e);
}

static const struct {
    const char *name;
    agent_fn fn;
} AGENT_FNS[] = {
    {"next_request", op_next_request}, {"request_info", op_request_info},
    {"measure", op_measure},           {"stats", op_stats},
    {"prefix", op_prefix},             {"clear_token_counter", op_clear_counter},
    {"dispose", op_dispose},           {"add_prefix_listener", op_add_prefix},
    {"add_pre_step_listener", op_add_pre_step}, {"set_summariser", op_set_summariser},
    {"set_token_counter", op_set_counter},
};

static const struct {
    const char *name;
    agent_text_fn fn;
    const char *valid;  /* well-formed input (used to probe handles) */
    const char *mistyped; /* parses, wrong shape */
    lls_status mistyped_status;
    const char *mistyped_message;
} AGENT_TEXT_FNS[] = {
    {"set_options", op_set_options, OPTS, "{\"config\":{\"provider\":\"p\"}}", LLS_ERR_INVALID_INPUT, "config.model: is required"},
    {"set_policy", op_set_policy, "null", "{\"contextWindow\":1000,\"threshold\":2}", LLS_ERR_INVALID_POLICY, "threshold: must be in (0, 1]"},
    {"set_tokenizer", op_set_tokenizer, "/nonexistent/tokenizer.json", "/nonexistent/tokenizer.json", LLS_ERR_TOKENIZER, "cannot read tokenizer file"},
    {"start_turn", op_start_turn, USER("hi"), "{\"role\":\"assistant\",\"content\":[]}", LLS_ERR_INVALID_INPUT, "message.role"},
    {"record_response", op_record_response, ASSISTANT("ok"), "{\"message\":{\"role\":\"user\",\"content\":[]}}", LLS_ERR_INVALID_INPUT, "message.role"},
    {"record_tool_result", op_record_tool_result, "{\"callId\":\"x\",\"text\":\"t\"}", "{\"callId\":3,\"text\":\"t\"}", LLS_ERR_INVALID_INPUT, "callId: expected a string"},
    {"inject", op_inject, USER("ctx"), "{\"role\":\"user\",\"content\":\"text\"}", LLS_ERR_INVALID_INPUT, "content: expected an array"},
    {"provider_error", op_provider_error, "{\"message\":\"x\"}", "{\"message\":5}", LLS_ERR_INVALID_INPUT, "message: expected a string"},
    {"end_turn", op_end_turn, "completed", "finished", LLS_ERR_INVALID_INPUT, "unknown turn end reason \"finished\""},
    {"compact", op_compact, "{}", "{\"span\":[3,1]}", LLS_ERR_INVALID_INPUT, "span: start (3) is after end (1)"},
};

static void test_agent_bad_handles(void) {
    lls_session *s = memory_session("handles");
    lls_session *other = memory_session("handles-2");
    lls_agent *freed = new_agent(other, OPTS);
    lls_agent_free(freed);
    lls_agent *wrong = (lls_agent *)(void *)s;
    char *before = events_of(s);
    registration_ud.frees = 0;
    int registrations = 0;
    for (size_t i = 0; i < sizeof AGENT_FNS / sizeof AGENT_FNS[0]; i++) {
        bool registers = strstr(AGENT_FNS[i].name, "listener") || strstr(AGENT_FNS[i].name, "set_");
        EXPECT_ERR(AGENT_FNS[i].fn(NULL, &err), LLS_ERR_NULL_POINTER, "argument `agent` is NULL");
        EXPECT_ERR(AGENT_FNS[i].fn(wrong, &err), LLS_ERR_INVALID_HANDLE,
                   "argument `agent` is an lls_session handle, but an lls_agent handle is expected");
        EXPECT_ERR(AGENT_FNS[i].fn(freed, &err), LLS_ERR_INVALID_HANDLE, "is not a live lls_agent handle");
        registrations += registers ? 3 : 0;
    }
    for (size_t i = 0; i < sizeof AGENT_TEXT_FNS / sizeof AGENT_TEXT_FNS[0]; i++) {
        const char *v = AGENT_TEXT_FNS[i].valid;
        EXPECT_ERR(AGENT_TEXT_FNS[i].fn(NULL, v, strlen(v), &err), LLS_ERR_NULL_POINTER, "argument `agent` is NULL");
        EXPECT_ERR(AGENT_TEXT_FNS[i].fn(wrong, v, strlen(v), &err), LLS_ERR_INVALID_HANDLE, "is an lls_session handle");
        EXPECT_ERR(AGENT_TEXT_FNS[i].fn(freed, v, strlen(v), &err), LLS_ERR_INVALID_HANDLE, "is not a live lls_agent");
    }
    /* Every failed registration freed its userdata exactly once. */
    CHECK_INT(registration_ud.frees, registrations);

    /* Creation. */
    lls_agent *a = NULL;
    lls_cancel *cancel = NULL;
    CHECK_INT(lls_cancel_new(&cancel, NULL), LLS_OK);
    EXPECT_ERR(lls_agent_new(NULL, S(OPTS), &a, &err), LLS_ERR_NULL_POINTER, "argument `session` is NULL");
    EXPECT_ERR(lls_agent_new((lls_session *)(void *)cancel, S(OPTS), &a, &err), LLS_ERR_INVALID_HANDLE, "is an lls_cancel handle");
    EXPECT_ERR(lls_agent_new(s, NULL, 0, &a, &err), LLS_ERR_NULL_POINTER, "argument `opts_json` is NULL");
    EXPECT_ERR(lls_agent_new(s, S(OPTS), NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR(lls_agent_new(s, S("{\"config\":{\"provider\":\"\xe2\x82\"}}"), &a, &err), LLS_ERR_INVALID_UTF8, "`opts_json`");
    EXPECT_ERR(lls_agent_new(s, S("{\"config\":"), &a, &err), LLS_ERR_MALFORMED_JSON, "`opts_json`: malformed JSON");
    EXPECT_ERR(lls_agent_new(s, S("{}"), &a, &err), LLS_ERR_INVALID_INPUT, "config: is required");
    EXPECT_ERR(lls_agent_new(s, S("{\"config\":{\"provider\":\"p\",\"model\":\"m\"},\"tools\":{}}"), &a, &err), LLS_ERR_INVALID_INPUT,
               "tools");
    EXPECT_ERR(lls_agent_new(s, S("{\"config\":{\"provider\":\"p\",\"model\":\"m\"},\"colour\":1}"), &a, &err), LLS_ERR_INVALID_INPUT,
               "colour: is not an agent option");
    EXPECT_ERR_DETAIL(lls_agent_new(s, S("{\"config\":{\"provider\":\"p\",\"model\":\"m\"},\"policy\":{\"contextWindow\":0}}"), &a, &err),
                      LLS_ERR_INVALID_POLICY, "contextWindow: must be a positive number", "\"field\":\"contextWindow\"");
    EXPECT_ERR_DETAIL(lls_agent_new(s, S("{\"config\":{\"provider\":\"p\",\"model\":\"m\"},\"tokenizer\":\"/nonexistent/t.json\"}"), &a, &err),
                      LLS_ERR_TOKENIZER, "cannot read tokenizer file /nonexistent/t.json", "\"path\":\"/nonexistent/t.json\"");
    CHECK(a == NULL);
    CHECK_UNCHANGED(s, before);
    lls_cancel_free(cancel);

    /* The failed creations left the session free. */
    a = new_agent(s, OPTS);
    lls_agent_free(a);
    lls_string_free(before);
    lls_session_free(other);
    lls_session_free(s);
}

static void test_agent_bad_inputs(void) {
    lls_session *s = memory_session("inputs");
    lls_agent *a = new_agent(s, OPTS);
    start_turn_text(a, "Open turn");
    char *env = next_request(a);
    lls_string_free(env);
    char *before = events_of(s);

    for (size_t i = 0; i < sizeof AGENT_TEXT_FNS / sizeof AGENT_TEXT_FNS[0]; i++) {
        agent_text_fn fn = AGENT_TEXT_FNS[i].fn;
        bool is_compact = fn == op_compact;
        bool is_text = fn == op_set_tokenizer || fn == op_end_turn;
        if (!is_compact) {
            EXPECT_ERR(fn(a, NULL, 3, &err), LLS_ERR_NULL_POINTER, "is NULL");
        }
        EXPECT_ERR(fn(a, S("\"\xc3\x28\""), &err), LLS_ERR_INVALID_UTF8, "is not valid UTF-8");
        if (!is_text) {
            EXPECT_ERR_DETAIL(fn(a, S("{\n  \"x\": 1 2\n}"), &err), LLS_ERR_MALFORMED_JSON, "malformed JSON", "\"line\":2");
            EXPECT_ERR(fn(a, S(""), &err), LLS_ERR_MALFORMED_JSON, "malformed JSON");
            EXPECT_ERR(fn(a, S("[1,2]"), &err), LLS_ERR_INVALID_INPUT, "expected an object");
        }
        const char *m = AGENT_TEXT_FNS[i].mistyped;
        EXPECT_ERR(fn(a, m, strlen(m), &err), AGENT_TEXT_FNS[i].mistyped_status, AGENT_TEXT_FNS[i].mistyped_message);
        CHECK_UNCHANGED(s, before);
    }
    /* More mistyped shapes. */
    EXPECT_ERR(op_record_response(a, S("{\"message\":" USER("x") ",\"usage\":{\"inputTokens\":-1}}"), &err), LLS_ERR_INVALID_INPUT, "");
    EXPECT_ERR(op_record_response(a, S("{\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"tool-call\",\"id\":\"c\"}]}}"), &err),
               LLS_ERR_INVALID_INPUT, "content[0]");
    EXPECT_ERR(op_record_response(a, S("{\"msg\":{}}"), &err), LLS_ERR_INVALID_INPUT, "msg: is not a response field");
    EXPECT_ERR(op_record_response(a, S("{\"message\":" USER("x") ",\"finishReason\":1}"), &err), LLS_ERR_INVALID_INPUT,
               "finishReason: must be a string");
    EXPECT_ERR(op_record_tool_result(a, S("{\"callId\":\"x\"}"), &err), LLS_ERR_INVALID_INPUT, "content: is required (or give text)");
    EXPECT_ERR(op_record_tool_result(a, S("{\"callId\":\"x\",\"text\":\"a\",\"content\":[]}"), &err), LLS_ERR_INVALID_INPUT, "not both");
    EXPECT_ERR(op_record_tool_result(a, S("{\"callId\":\"x\",\"content\":[{\"text\":\"no type\"}]}"), &err), LLS_ERR_INVALID_INPUT, "content[0]");
    EXPECT_ERR(op_provider_error(a, S("{\"message\":\"x\",\"overflow\":\"yes\"}"), &err), LLS_ERR_INVALID_INPUT, "overflow: expected a boolean");
    EXPECT_ERR(op_compact(a, S("{\"span\":[1]}"), &err), LLS_ERR_INVALID_INPUT, "span: expected [start, end]");
    EXPECT_ERR(op_compact(a, S("{\"span\":[\"a\",2]}"), &err), LLS_ERR_INVALID_INPUT, "span[0]");
    EXPECT_ERR(op_compact(a, S("{\"region\":1}"), &err), LLS_ERR_INVALID_INPUT, "region: is not a compaction option");
    EXPECT_ERR(op_set_policy(a, S("{\"contextWindow\":1000,\"retainedRatio\":0.1,\"retainedTokens\":5}"), &err), LLS_ERR_INVALID_INPUT,
               "not both");
    EXPECT_ERR(op_set_policy(a, S("{\"contextWindow\":1000,\"summaryMaxTokens\":900}"), &err), LLS_ERR_INVALID_POLICY, "do not fit");
    EXPECT_ERR(op_set_policy(a, S("{\"models\":{\"m\":{\"contextWindow\":\"big\"}}}"), &err), LLS_ERR_INVALID_INPUT, "models.m");
    EXPECT_ERR(op_set_tokenizer(a, "", 0, &err), LLS_ERR_INVALID_ARGUMENT, "the path is empty");
    EXPECT_ERR(op_set_options(a, S("{\"config\":{\"provider\":\"p\",\"model\":\"m\"},\"policy\":{}}"), &err), LLS_ERR_INVALID_INPUT,
               "policy: is not an agent option");
    CHECK_UNCHANGED(s, before);

    /* Out-of-order calls: a distinct status, nothing changed. */
    EXPECT_ERR(op_start_turn(a, S(USER("again")), &err), LLS_ERR_OUT_OF_ORDER, "turn 1 is still open");
    EXPECT_ERR(op_next_request(a, &err), LLS_ERR_OUT_OF_ORDER, "step 1 is still open");
    EXPECT_ERR(op_end_turn(a, S("completed"), &err), LLS_ERR_OUT_OF_ORDER, "step 1 is still open");
    EXPECT_ERR(op_compact(a, NULL, 0, &err), LLS_ERR_OUT_OF_ORDER, "a request is open");
    EXPECT_ERR_DETAIL(op_record_tool_result(a, S("{\"callId\":\"nope\",\"text\":\"t\"}"), &err), LLS_ERR_OUT_OF_ORDER,
                      "the step is still open", "out-of-order");
    /* The live agent owns the lifecycle events. */
    EXPECT_ERR_DETAIL(lls_session_append(s, S("{\"type\":\"turn/end\",\"data\":{\"turn\":1,\"reason\":\"completed\"}}"), NULL, &err),
                      LLS_ERR_OUT_OF_ORDER, "the live agent instance owns this event type", "\"eventType\":\"turn/end\"");
    CHECK_UNCHANGED(s, before);
    respond_text(a, "ok");
    lls_string_free(before);
    before = events_of(s);
    EXPECT_ERR(op_record_response(a, S(ASSISTANT("again")), &err), LLS_ERR_OUT_OF_ORDER, "no request is open");
    EXPECT_ERR(op_provider_error(a, S("{\"message\":\"late\"}"), &err), LLS_ERR_OUT_OF_ORDER, "no request is open");
    EXPECT_ERR_DETAIL(op_record_tool_result(a, S("{\"callId\":\"nope\",\"text\":\"t\"}"), &err), LLS_ERR_OUT_OF_ORDER,
                      "\"nope\" is not a tool call waiting for a result", "\"callId\":\"nope\"");
    CHECK_UNCHANGED(s, before);
    EXPECT_OK(lls_agent_end_turn(a, S("completed"), &err));
    lls_string_free(before);
    before = events_of(s);
    EXPECT_ERR(op_end_turn(a, S("completed"), &err), LLS_ERR_OUT_OF_ORDER, "no turn is open");
    EXPECT_ERR(op_next_request(a, &err), LLS_ERR_OUT_OF_ORDER, "no turn is open");
    CHECK_UNCHANGED(s, before);
    lls_string_free(before);

    /* Output pointers are checked before any work. */
    before = events_of(s);
    EXPECT_OK(lls_agent_start_turn(a, S(USER("t")), NULL, &err));
    char *env2 = NULL;
    EXPECT_ERR(lls_agent_next_request(a, NULL, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR(lls_agent_request_info(a, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "`out`");
    EXPECT_ERR(lls_agent_measure(a, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "`out`");
    EXPECT_ERR(lls_agent_stats(a, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "`out`");
    EXPECT_ERR(lls_agent_prefix(a, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "`out`");
    EXPECT_ERR(lls_agent_compact(a, NULL, 0, NULL, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "`out`");
    lls_cancel *freed_cancel = NULL;
    CHECK_INT(lls_cancel_new(&freed_cancel, NULL), LLS_OK);
    lls_cancel_free(freed_cancel);
    EXPECT_ERR(lls_agent_next_request(a, freed_cancel, &env2, NULL, &err), LLS_ERR_INVALID_HANDLE, "argument `cancel`");
    CHECK(env2 == NULL);
    EXPECT_OK(lls_agent_end_turn(a, S("aborted"), &err));
    lls_string_free(before);

    /* Render: bad inputs. */
    char *body = NULL;
    env = NULL;
    EXPECT_ERR(lls_render(NULL, 0, S("{}"), 0, &body, NULL, &err), LLS_ERR_NULL_POINTER, "argument `renderer` is NULL");
    EXPECT_ERR(lls_render(S("openai"), NULL, 0, 0, &body, NULL, &err), LLS_ERR_NULL_POINTER, "argument `envelope_json` is NULL");
    EXPECT_ERR(lls_render(S("openai"), S("{}"), 0, NULL, NULL, &err), LLS_ERR_NULL_POINTER, "argument `out` is NULL");
    EXPECT_ERR(lls_render(S("cohere"), S("{}"), 0, &body, NULL, &err), LLS_ERR_INVALID_INPUT,
               "renderer: expected \"openai\", \"openai-responses\", \"anthropic\", \"gemini\" or \"gemini-interactions\"");
    EXPECT_ERR(lls_render(S("open\xff"), S("{}"), 0, &body, NULL, &err), LLS_ERR_INVALID_UTF8, "`renderer`");
    EXPECT_ERR(lls_render(S("openai"), S("{\"model\":"), 0, &body, NULL, &err), LLS_ERR_MALFORMED_JSON, "`envelope_json`");
    EXPECT_ERR(lls_render(S("openai"), S("{\"model\":\"m\",\"messages\":{}}"), 0, &body, NULL, &err), LLS_ERR_INVALID_INPUT, "messages");
    EXPECT_ERR(lls_render(S("anthropic"), S("{\"provider\":\"p\",\"model\":\"m\",\"messages\":[" USER("x") "]}"), 2, &body, NULL, &err),
               LLS_ERR_INVALID_ARGUMENT, "argument `prefix_len`: 2 is more than the envelope's 1 messages");
    CHECK(body == NULL);

    lls_agent_free(a);
    lls_session_free(s);
}

static void test_disposed_agent_refuses(void) {
    lls_session *s = memory_session("disposed");
    lls_agent *a = new_agent(s, OPTS);
    EXPECT_OK(lls_agent_dispose(a, &err));
    char *before = events_of(s);
    registration_ud.frees = 0;
    for (size_t i = 0; i < sizeof AGENT_TEXT_FNS / sizeof AGENT_TEXT_FNS[0]; i++) {
        if (AGENT_TEXT_FNS[i].fn == op_set_tokenizer) {
            continue; /* the file is read first */
        }
        const char *v = AGENT_TEXT_FNS[i].valid;
        EXPECT_ERR(AGENT_TEXT_FNS[i].fn(a, v, strlen(v), &err), LLS_ERR_DISPOSED, "agent instance 1 was disposed");
    }
    int registrations = 0;
    for (size_t i = 0; i < sizeof AGENT_FNS / sizeof AGENT_FNS[0]; i++) {
        agent_fn fn = AGENT_FNS[i].fn;
        if (fn == op_dispose) {
            EXPECT_OK(fn(a, &err));
        } else if (fn == op_request_info) {
            EXPECT_ERR(fn(a, &err), LLS_ERR_OUT_OF_ORDER, "has not built a request yet");
        } else {
            EXPECT_ERR(fn(a, &err), LLS_ERR_DISPOSED, "was disposed");
            registrations += fn == op_add_prefix || fn == op_add_pre_step || fn == op_set_summariser || fn == op_set_counter;
        }
    }
    CHECK_INT(registration_ud.frees, registrations);
    CHECK_UNCHANGED(s, before);
    lls_string_free(before);
    lls_agent_free(a);
    lls_agent_free(a); /* double free ignored */
    lls_agent_free(NULL);
    lls_session_free(s);
}

/* Agent trees: two children spawned from two open calls, the second finishing first; the
 * parent's results follow call order and name the children; a child's model is its parent's;
 * the spawn errors. */
static void test_spawn_and_finish_children(void) {
    lls_session *s = memory_session("lead");
    lls_agent *a = new_agent(s, OPTS);
    lls_session *cs[2] = {NULL, NULL};
    lls_agent *ca[2] = {NULL, NULL};
    EXPECT_ERR(lls_agent_spawn(a, S("{\"directive\":\"x\"}"), &cs[0], &ca[0], &err), LLS_ERR_OUT_OF_ORDER,
               "has sent no request yet");
    EXPECT_OK(lls_agent_start_turn(a, S(USER("Fix both.")), NULL, &err));
    lls_string_free(next_request(a));
    EXPECT_OK(lls_agent_record_response(
        a,
        S("{\"message\":{\"role\":\"assistant\",\"content\":["
          "{\"type\":\"tool-call\",\"id\":\"c1\",\"name\":\"read_file\",\"arguments\":\"{}\"},"
          "{\"type\":\"tool-call\",\"id\":\"c2\",\"name\":\"read_file\",\"arguments\":\"{}\"}]}}"),
        NULL, &err));
    EXPECT_ERR(lls_agent_spawn(a, S("{\"directive\":\"x\"}"), &cs[0], &ca[0], &err), LLS_ERR_OUT_OF_ORDER,
               "tool calls [c1, c2] wait for their results");
    EXPECT_ERR(lls_agent_spawn(a, S("{\"directive\":\"x\",\"colour\":1}"), &cs[0], &ca[0], &err),
               LLS_ERR_INVALID_INPUT, "colour");
    EXPECT_ERR(lls_agent_spawn(a, S("{\"callId\":\"c1\",\"directive\":\"x\"}"), NULL, &ca[0], &err),
               LLS_ERR_NULL_POINTER, "child_session");
    EXPECT_OK(lls_agent_spawn(a, S("{\"callId\":\"c1\",\"directive\":\"Do c1.\"}"), &cs[0], &ca[0], &err));
    EXPECT_OK(lls_agent_spawn(a, S("{\"callId\":\"c2\",\"directive\":\"Do c2.\"}"), &cs[1], &ca[1], &err));
    char *id = NULL;
    EXPECT_OK(lls_session_id(cs[0], &id, NULL, &err));
    CHECK_STR(id, "lead.c1");
    lls_string_free(id);
    EXPECT_ERR_DETAIL(lls_agent_set_options(ca[0], S("{\"config\":{\"provider\":\"openai\",\"model\":\"other\"}}"), &err),
                      LLS_ERR_INVALID_INPUT, "is a child agent", "config.model");
    char *out = NULL;
    for (int i = 1; i >= 0; i--) {
        lls_string_free(next_request(ca[i]));
        EXPECT_OK(lls_agent_record_response(ca[i], S(ASSISTANT("done")), NULL, &err));
        EXPECT_OK(lls_agent_finish_child(a, ca[i], NULL, 0, &out, NULL, &err));
        CHECK_CONTAINS(out, i == 1 ? "\"recorded\":0" : "\"recorded\":2");
        lls_string_free(out);
    }
    EXPECT_ERR(lls_agent_finish_child(a, ca[0], NULL, 0, &out, NULL, &err), LLS_ERR_OUT_OF_ORDER, "no longer waits");
    char *events = events_of(s);
    CHECK_CONTAINS(events, "\"callId\":\"c1\",\"child\":\"lead.c1\"");
    lls_string_free(events);
    EXPECT_OK(lls_session_explain(s, S("{\"tree\":true}"), &out, NULL, &err));
    CHECK_CONTAINS(out, "\"nodes\":3");
    lls_string_free(out);
    for (int i = 0; i < 2; i++) {
        EXPECT_OK(lls_session_verify(cs[i], &out, NULL, &err));
        lls_string_free(out);
        lls_agent_free(ca[i]);
        lls_session_free(cs[i]);
    }
    lls_agent_free(a);
    lls_session_free(s);
}

static void test_no_handle_leaks(void) {
    CHECK_INT(lls_live_handle_count(), 0);
}

int main(void) {
    RUN(test_agent_loop);
    RUN(test_overflow_and_gate);
    RUN(test_busy_and_resume);
    RUN(test_crash_repair);
    RUN(test_agent_bad_handles);
    RUN(test_agent_bad_inputs);
    RUN(test_disposed_agent_refuses);
    RUN(test_spawn_and_finish_children);
    RUN(test_no_handle_leaks);
    return check_report();
}
