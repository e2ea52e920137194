/* Binding overhead (docs/performance.md): the C harness of benches/bindings.sh, calling the
 * lls_ functions directly (the baseline that separates the cost of crossing the C ABI from the
 * cost of a binding).
 *
 *   bindings_c DIR ITERATIONS OUT [request|body]
 *
 * Same procedure as examples/bench_bindings.rs (see there): per round, fork DIR/session.jsonl
 * into memory, create an agent, open a turn, build the first request (untimed), then for each
 * exchange of DIR/inputs.jsonl record the response and the tool result and build the next
 * request, timing the step and the request alone. Round 0 warms up.
 *
 * "request" (the default): the envelope path. lls_agent_record_response of the parsed message,
 * lls_agent_record_tool_result, lls_agent_next_request (the envelope).
 * "body": the hot path. The agent gets the "openai" renderer (lls_agent_set_renderer, default
 * options); per exchange lls_agent_record_body of the provider's raw reply (DIR/replies.jsonl,
 * which the driver writes), lls_agent_record_tool_result and lls_agent_next_body, whose
 * lls_request_info gives the digest; the body is freed with lls_string_free inside the timed
 * part, as a host frees it once sent. The last body of the first timed round goes to OUT.body.
 *
 * Writes "next_ns step_ns" per iteration to OUT; prints "bytes=N digest=D" (the request's
 * length, the envelope digest of the last request of the first timed round). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmsession.h"

static void check(lls_status st, lls_error *err, const char *what) {
    if (st != LLS_OK) {
        fprintf(stderr, "bindings.c: %s failed: %s\n", what, err ? lls_error_message(err) : "(no detail)");
        exit(1);
    }
}

/* Copies the "digest" of a request_info JSON object into `digest`. */
static void digest_of(const char *info, char *digest, size_t cap) {
    const char *d = strstr(info, "\"digest\":\"");
    if (!d) return;
    d += strlen("\"digest\":\"");
    size_t i = 0;
    while (d[i] && d[i] != '"' && i + 1 < cap) {
        digest[i] = d[i];
        i++;
    }
    digest[i] = 0;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

typedef struct {
    char *text;
    size_t len;
} line;

/* Reads the non-empty lines of `path` (at most `max`) into `lines`; returns how many. */
static size_t read_lines(const char *path, line *lines, size_t max) {
    FILE *in = fopen(path, "r");
    if (!in) {
        perror(path);
        exit(1);
    }
    size_t nlines = 0;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n;
    while (nlines < max && (n = getline(&buf, &cap, in)) > 0) {
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
        if (n == 0) continue;
        lines[nlines].text = malloc((size_t)n + 1);
        memcpy(lines[nlines].text, buf, (size_t)n);
        lines[nlines].text[n] = 0;
        lines[nlines].len = (size_t)n;
        nlines++;
    }
    free(buf);
    fclose(in);
    return nlines;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s DIR ITERATIONS OUT [request|body]\n", argv[0]);
        return 2;
    }
    int body_mode = 0;
    if (argc == 5) {
        if (strcmp(argv[4], "body") == 0) {
            body_mode = 1;
        } else if (strcmp(argv[4], "request") != 0) {
            fprintf(stderr, "bindings.c: MODE is request or body, not \"%s\"\n", argv[4]);
            return 2;
        }
    }
    const char *dir = argv[1];
    size_t iterations = (size_t)strtoull(argv[2], NULL, 10);
    char path[4096];

    snprintf(path, sizeof path, "%s/inputs.jsonl", dir);
    static line lines[1024];
    size_t nlines = read_lines(path, lines, 1024);
    if (nlines < 5) {
        fprintf(stderr, "bindings.c: %s has too few lines\n", path);
        return 1;
    }
    const line *agent_opts = &lines[0], *fork_opts = &lines[1], *user = &lines[2];
    size_t exchanges = (nlines - 3) / 2;
    static line replies[1024];
    if (body_mode) {
        snprintf(path, sizeof path, "%s/replies.jsonl", dir);
        size_t nreplies = read_lines(path, replies, 1024);
        if (nreplies != exchanges) {
            fprintf(stderr, "bindings.c: %s has %zu replies for %zu exchanges\n", path, nreplies, exchanges);
            return 1;
        }
    }

    lls_error *err = NULL;
    lls_session *parent = NULL;
    snprintf(path, sizeof path, "%s/session.jsonl", dir);
    static const char never[] = "{\"durability\":\"never\"}";
    check(lls_session_open_file(path, strlen(path), never, sizeof never - 1, &parent, &err), err, "lls_session_open_file");

    uint64_t(*samples)[2] = calloc(iterations + 1, sizeof *samples);
    size_t count = 0;
    size_t bytes = 0;
    char digest[128] = "";
    char *last_body = NULL;
    size_t last_len = 0;
    static const char renderer[] = "openai";
    for (unsigned round = 0; count < iterations; round++) {
        lls_session *child = NULL;
        lls_agent *agent = NULL;
        check(lls_session_fork(parent, fork_opts->text, fork_opts->len, &child, &err), err, "lls_session_fork");
        check(lls_agent_new(child, agent_opts->text, agent_opts->len, &agent, &err), err, "lls_agent_new");
        if (body_mode)
            check(lls_agent_set_renderer(agent, renderer, sizeof renderer - 1, NULL, 0, &err), err, "lls_agent_set_renderer");
        uint64_t turn = 0;
        check(lls_agent_start_turn(agent, user->text, user->len, &turn, &err), err, "lls_agent_start_turn");
        char *out = NULL;
        size_t out_len = 0;
        lls_request_info info;
        memset(&info, 0, sizeof info);
        if (body_mode)
            check(lls_agent_next_body(agent, NULL, &out, &out_len, NULL, &err), err, "first lls_agent_next_body");
        else
            check(lls_agent_next_request(agent, NULL, &out, &out_len, &err), err, "first lls_agent_next_request");
        lls_string_free(out);
        for (size_t k = 0; k < exchanges && (round == 0 || count < iterations); k++) {
            const line *resp = &lines[3 + 2 * k], *res = &lines[4 + 2 * k];
            uint64_t seq = 0;
            uint32_t calls = 0;
            size_t written = 0;
            uint64_t t0, t1, t2, excluded = 0;
            if (body_mode) {
                t0 = now_ns();
                check(lls_agent_record_body(agent, replies[k].text, replies[k].len, &seq, &calls, &err), err, "lls_agent_record_body");
                check(lls_agent_record_tool_result(agent, res->text, res->len, &written, &err), err, "lls_agent_record_tool_result");
                t1 = now_ns();
                check(lls_agent_next_body(agent, NULL, &out, &out_len, &info, &err), err, "lls_agent_next_body");
                if (round == 1) {
                    /* The copy for OUT.body is not part of the step: its time is taken out. */
                    uint64_t c0 = now_ns();
                    last_body = realloc(last_body, out_len ? out_len : 1);
                    memcpy(last_body, out, out_len);
                    last_len = out_len;
                    bytes = out_len;
                    snprintf(digest, sizeof digest, "%s", info.digest);
                    excluded = now_ns() - c0;
                }
                lls_string_free(out);
                t2 = now_ns();
            } else {
                t0 = now_ns();
                check(lls_agent_record_response(agent, resp->text, resp->len, &seq, &err), err, "lls_agent_record_response");
                check(lls_agent_record_tool_result(agent, res->text, res->len, &written, &err), err, "lls_agent_record_tool_result");
                t1 = now_ns();
                check(lls_agent_next_request(agent, NULL, &out, &out_len, &err), err, "lls_agent_next_request");
                t2 = now_ns();
                if (round == 1) bytes = out_len;
                lls_string_free(out);
            }
            if (round > 0) {
                samples[count][0] = t2 - t1 - excluded;
                samples[count][1] = t2 - t0 - excluded;
                count++;
            }
        }
        /* The digest is the one of the round's last request (as the other harnesses print). */
        if (round == 1 && !body_mode) {
            char *info_json = NULL;
            check(lls_agent_request_info(agent, &info_json, NULL, &err), err, "lls_agent_request_info");
            digest_of(info_json, digest, sizeof digest);
            lls_string_free(info_json);
        }
        check(lls_agent_dispose(agent, &err), err, "lls_agent_dispose");
        lls_agent_free(agent);
        lls_session_free(child);
    }
    lls_session_free(parent);

    FILE *out = fopen(argv[3], "w");
    if (!out) {
        perror(argv[3]);
        return 1;
    }
    for (size_t i = 0; i < count; i++) fprintf(out, "%llu %llu\n", (unsigned long long)samples[i][0], (unsigned long long)samples[i][1]);
    fclose(out);
    if (body_mode) {
        snprintf(path, sizeof path, "%s.body", argv[3]);
        FILE *b = fopen(path, "wb");
        if (!b || fwrite(last_body, 1, last_len, b) != last_len || fclose(b) != 0) {
            perror(path);
            return 1;
        }
        for (size_t i = 0; i < exchanges; i++) free(replies[i].text);
    }
    free(last_body);
    free(samples);
    for (size_t i = 0; i < nlines; i++) free(lines[i].text);
    printf("bytes=%zu digest=%s\n", bytes, digest);
    return 0;
}
