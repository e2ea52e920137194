/* C tests of streamed responses: lls_stream_new / _feed / _next_delta / _finish / _body /
 * _free. Built and run by `make test-c` (from the repository root: it reads the fixture
 * streams of tests/data/stream). */
#include "helpers.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s (run from the repository root)\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = 0;
    *len = got;
    return buf;
}

/* Feeds `bytes` in chunks of `step` bytes, collecting the text of every text delta; returns
 * the finished response (free it). */
static char *stream_in_chunks(const char *format, const char *bytes, size_t len, size_t step, char *texts, size_t texts_cap) {
    lls_stream *s = NULL;
    char *out = NULL, *delta = NULL;
    size_t n = 0, used = 0;
    EXPECT_OK(lls_stream_new(format, strlen(format), &s, &err));
    for (size_t at = 0; at < len; at += step) {
        size_t k = len - at < step ? len - at : step;
        EXPECT_OK(lls_stream_feed(s, bytes + at, k, &err));
        for (;;) {
            EXPECT_OK(lls_stream_next_delta(s, &delta, &n, &err));
            if (delta == NULL) {
                break;
            }
            CHECK(strlen(delta) == n);
            /* {"type":"text","index":0,"text":"..."}: keep the fragment as JSON text. */
            const char *t = strstr(delta, "\"type\":\"text\"") ? strstr(delta, "\"text\":\"") : NULL;
            if (t != NULL && used + strlen(t) < texts_cap) {
                memcpy(texts + used, t + 8, strlen(t + 8) - 2);
                used += strlen(t + 8) - 2;
                texts[used] = 0;
            }
            lls_string_free(delta);
        }
    }
    EXPECT_OK(lls_stream_finish(s, false, &out, &n, &err));
    lls_stream_free(s);
    return out;
}

static void test_every_chunking_gives_the_parsed_response(void) {
    static const struct {
        const char *format, *stream, *body;
    } fx[] = {
        {"openai", "tests/data/stream/openai-chat-tools.sse", "tests/data/stream/openai-chat-tools.json"},
        {"openai-responses", "tests/data/stream/openai-responses-tools.sse", "tests/data/stream/openai-responses-tools.json"},
        {"anthropic", "tests/data/stream/anthropic-tools.sse", "tests/data/stream/anthropic-tools.json"},
        {"gemini", "tests/data/stream/gemini-tools.sse", "tests/data/stream/gemini-tools.json"},
        {"gemini", "tests/data/stream/gemini-array.stream.json", "tests/data/stream/gemini-array.json"},
    };
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        size_t slen = 0, blen = 0, n = 0;
        char *stream = read_file(fx[i].stream, &slen), *body = read_file(fx[i].body, &blen), *parsed = NULL;
        CHECK(stream != NULL && body != NULL);
        if (stream == NULL || body == NULL) {
            free(stream), free(body);
            continue;
        }
        EXPECT_OK(lls_parse_response(fx[i].format, strlen(fx[i].format), body, blen, &parsed, &n, &err));
        const size_t steps[] = {1, 3, 7, 64, slen};
        for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
            char texts[512] = {0};
            char *got = stream_in_chunks(fx[i].format, stream, slen, steps[k], texts, sizeof texts);
            CHECK_STR(got, parsed);
            lls_string_free(got);
        }
        lls_string_free(parsed);
        free(stream), free(body);
    }
}

static void test_deltas_and_recording(void) {
    size_t slen = 0, n = 0;
    char *stream = read_file("tests/data/stream/anthropic-tools.sse", &slen);
    char texts[512] = {0};
    char *parsed = stream_in_chunks("anthropic", stream, slen, 5, texts, sizeof texts);
    /* The text deltas, put together (here as JSON-escaped text), are the text block. */
    CHECK_STR(texts, "Je lis le fichier «\xc2\xa0" "café.txt\xc2\xa0» 📄");
    CHECK_CONTAINS(parsed, "\"finishReason\":\"tool-calls\"");
    CHECK_CONTAINS(parsed, "\"cacheReadTokens\":2048");
    /* What finish gives is what lls_agent_record_response takes. */
    lls_session *s = NULL;
    lls_agent *a = NULL;
    char *req = NULL, *history = NULL;
    uint64_t seq = 0;
    EXPECT_OK(lls_session_new_memory(NULL, 0, &s, &err));
    EXPECT_OK(lls_agent_new(s, S("{\"config\":{\"provider\":\"anthropic\",\"model\":\"claude\"}}"), &a, &err));
    EXPECT_OK(lls_agent_start_turn(a, S("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"lis\"}]}"), NULL, &err));
    EXPECT_OK(lls_agent_next_request(a, NULL, &req, &n, &err));
    EXPECT_OK(lls_agent_record_response(a, parsed, strlen(parsed), &seq, &err));
    EXPECT_OK(lls_session_history(s, &history, &n, &err));
    CHECK_CONTAINS(history, "\"signature\":\"EqQBCkYIBxgCKkBsig==\"");
    CHECK_CONTAINS(history, "\"id\":\"toolu_01AbC\"");
    lls_string_free(history), lls_string_free(req), lls_string_free(parsed);
    lls_agent_free(a), lls_session_free(s);
    free(stream);
}

static void test_errors(void) {
    lls_stream *s = NULL;
    char *out = (char *)0x1;
    size_t len = 9;
    EXPECT_ERR(lls_stream_new(S("cohere"), &s, &err), LLS_ERR_INVALID_INPUT, "renderer: expected");
    EXPECT_ERR(lls_stream_new(S("openai"), NULL, &err), LLS_ERR_NULL_POINTER, "out");
    CHECK(s == NULL);

    /* A provider error event: the detail carries it, and whether it is an overflow. */
    EXPECT_OK(lls_stream_new(S("openai-responses"), &s, &err));
    static const char bad[] = "event: error\ndata: {\"type\":\"error\",\"code\":\"context_length_exceeded\","
                              "\"message\":\"Your input exceeds the context window of this model.\",\"param\":\"input\"}\n\n";
    EXPECT_ERR_DETAIL(lls_stream_feed(s, S(bad), &err), LLS_ERR_INVALID_INPUT, "the provider reported an error in the stream",
                      "\"overflow\":true");
    EXPECT_ERR_DETAIL(lls_stream_feed(s, S("\n"), &err), LLS_ERR_INVALID_INPUT, "context window", "\"stream\":\"provider-error\"");
    EXPECT_ERR(lls_stream_finish(s, false, &out, &len, &err), LLS_ERR_INVALID_INPUT, "context window");
    CHECK(out == (char *)0x1 && len == 9); /* out-parameters untouched on failure */
    lls_stream_free(s);

    /* A cut connection: incomplete, unless the host asks for the partial message. */
    EXPECT_OK(lls_stream_new(S("openai"), &s, &err));
    EXPECT_OK(lls_stream_feed(s, S("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Bonj\"}}]}\n\ndata: {\"choi"), &err));
    EXPECT_ERR_DETAIL(lls_stream_finish(s, false, &out, &len, &err), LLS_ERR_INVALID_INPUT, "the stream ended inside an event",
                      "\"stream\":\"incomplete\"");
    EXPECT_OK(lls_stream_finish(s, true, &out, &len, &err));
    CHECK_CONTAINS(out, "\"text\":\"Bonj\"");
    CHECK_CONTAINS(out, "\"finishReason\":\"incomplete\"");
    lls_string_free(out);
    EXPECT_ERR(lls_stream_feed(s, S("data: [DONE]\n\n"), &err), LLS_ERR_OUT_OF_ORDER, "finished");
    lls_stream_free(s);

    /* A malformed event. */
    EXPECT_OK(lls_stream_new(S("gemini"), &s, &err));
    EXPECT_ERR_DETAIL(lls_stream_feed(s, S("data: {nope}\n\n"), &err), LLS_ERR_MALFORMED_JSON, "not valid JSON", "\"stream\":\"malformed\"");
    EXPECT_ERR(lls_stream_feed(s, S("data: {}\n\n"), &err), LLS_ERR_MALFORMED_JSON, "not valid JSON"); /* the stream stays failed */
    lls_stream_free(s);

    /* Handles. */
    EXPECT_ERR(lls_stream_feed(NULL, S("x"), &err), LLS_ERR_NULL_POINTER, "stream");
    EXPECT_ERR(lls_stream_feed(s, S("x"), &err), LLS_ERR_INVALID_HANDLE, "lls_stream");
    lls_cancel *c = NULL;
    EXPECT_OK(lls_cancel_new(&c, &err));
    EXPECT_ERR(lls_stream_next_delta((lls_stream *)c, &out, &len, &err), LLS_ERR_INVALID_HANDLE, "lls_cancel handle");
    lls_cancel_free(c);
    lls_stream_free(NULL);
}

static void test_body(void) {
    lls_stream *s = NULL;
    char *out = NULL;
    size_t len = 0, slen = 0;
    char *stream = read_file("tests/data/stream/openai-chat-reasoning.sse", &slen);
    EXPECT_OK(lls_stream_new(S("openai"), &s, &err));
    EXPECT_OK(lls_stream_feed(s, stream, slen, &err));
    EXPECT_OK(lls_stream_body(s, &out, &len, &err));
    CHECK_CONTAINS(out, "\"cache_n\":800"); /* llama.cpp's timings, kept for the host */
    lls_string_free(out);
    lls_stream_free(s);
    free(stream);
}

int main(void) {
    RUN(test_every_chunking_gives_the_parsed_response);
    RUN(test_deltas_and_recording);
    RUN(test_errors);
    RUN(test_body);
    CHECK_INT(lls_live_handle_count(), 0);
    return check_report();
}
