/* Binding overhead (docs/performance.md): the C harness of benches/bindings.sh, calling the
 * lls_ functions directly (the baseline that separates the cost of crossing the C ABI from the
 * cost of a binding).
 *
 *   bindings DIR ITERATIONS OUT
 *
 * Same procedure as examples/bench_bindings.rs (see there): per round, fork DIR/session.jsonl
 * into memory, create an agent, open a turn, build the first request (untimed), then for each
 * exchange of DIR/inputs.jsonl record the response and the tool result and build the next
 * request, timing the step and the request alone. The request is what lls_agent_next_request
 * hands out (the envelope bytes, freed with lls_string_free). Round 0 warms up. Writes
 * "next_ns step_ns" per iteration to OUT; prints "bytes=N digest=D". */
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

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR ITERATIONS OUT\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    size_t iterations = (size_t)strtoull(argv[2], NULL, 10);
    char path[4096];

    snprintf(path, sizeof path, "%s/inputs.jsonl", dir);
    FILE *in = fopen(path, "r");
    if (!in) {
        perror(path);
        return 1;
    }
    line lines[1024];
    size_t nlines = 0;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n;
    while (nlines < 1024 && (n = getline(&buf, &cap, in)) > 0) {
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
        lines[nlines].text = malloc((size_t)n + 1);
        memcpy(lines[nlines].text, buf, (size_t)n);
        lines[nlines].text[n] = 0;
        lines[nlines].len = (size_t)n;
        nlines++;
    }
    free(buf);
    fclose(in);
    if (nlines < 5) {
        fprintf(stderr, "bindings.c: %s has too few lines\n", path);
        return 1;
    }
    const line *agent_opts = &lines[0], *fork_opts = &lines[1], *user = &lines[2];
    size_t exchanges = (nlines - 3) / 2;

    lls_error *err = NULL;
    lls_session *parent = NULL;
    snprintf(path, sizeof path, "%s/session.jsonl", dir);
    static const char never[] = "{\"durability\":\"never\"}";
    check(lls_session_open_file(path, strlen(path), never, sizeof never - 1, &parent, &err), err, "lls_session_open_file");

    uint64_t(*samples)[2] = calloc(iterations + 1, sizeof *samples);
    size_t count = 0;
    size_t bytes = 0;
    char digest[128] = "";
    for (unsigned round = 0; count < iterations; round++) {
        lls_session *child = NULL;
        lls_agent *agent = NULL;
        check(lls_session_fork(parent, fork_opts->text, fork_opts->len, &child, &err), err, "lls_session_fork");
        check(lls_agent_new(child, agent_opts->text, agent_opts->len, &agent, &err), err, "lls_agent_new");
        uint64_t turn = 0;
        check(lls_agent_start_turn(agent, user->text, user->len, &turn, &err), err, "lls_agent_start_turn");
        char *out = NULL;
        size_t out_len = 0;
        check(lls_agent_next_request(agent, NULL, &out, &out_len, &err), err, "first lls_agent_next_request");
        lls_string_free(out);
        for (size_t k = 0; k < exchanges && (round == 0 || count < iterations); k++) {
            const line *resp = &lines[3 + 2 * k], *res = &lines[4 + 2 * k];
            uint64_t seq = 0;
            size_t written = 0;
            uint64_t t0 = now_ns();
            check(lls_agent_record_response(agent, resp->text, resp->len, &seq, &err), err, "lls_agent_record_response");
            check(lls_agent_record_tool_result(agent, res->text, res->len, &written, &err), err, "lls_agent_record_tool_result");
            uint64_t t1 = now_ns();
            check(lls_agent_next_request(agent, NULL, &out, &out_len, &err), err, "lls_agent_next_request");
            uint64_t t2 = now_ns();
            bytes = out_len;
            lls_string_free(out);
            if (round > 0) {
                samples[count][0] = t2 - t1;
                samples[count][1] = t2 - t0;
                count++;
            }
        }
        /* The digest is the one of the round's last request (as the other harnesses print). */
        if (round == 1) {
            char *info = NULL;
            check(lls_agent_request_info(agent, &info, NULL, &err), err, "lls_agent_request_info");
            digest_of(info, digest, sizeof digest);
            lls_string_free(info);
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
    free(samples);
    for (size_t i = 0; i < nlines; i++) free(lines[i].text);
    printf("bytes=%zu digest=%s\n", bytes, digest);
    return 0;
}
