// Sessions in a store named by URL: PostgreSQL (LLMSESSION_PG_URL, which `make test-pg` sets to a
// throwaway server; without it those tests are skipped loudly) and file: URLs.
#include "llmsession.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <glob.h>
#include <string>
#include <stdexcept>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

using json = nlohmann::json;
using llmsession::Error;
using llmsession::Session;

namespace {

std::string pg_url() {
    const char *u = std::getenv("LLMSESSION_PG_URL");
    return u ? u : "";
}

#define REQUIRE_PG()                                                                               \
    if (pg_url().empty())                                                                          \
    GTEST_SKIP() << "*** SKIPPED: LLMSESSION_PG_URL is not set; `make test-pg` starts a "          \
                    "throwaway PostgreSQL server ***"

std::string uid(const std::string &prefix) {
    auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    return "cpp-" + prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(now);
}

std::string context(const std::string &text) {
    return json{{"type", "user/message"},
                {"data",
                 {{"message", {{"role", "user"}, {"content", {{{"type", "text"}, {"text", text}}}}}},
                  {"source", "host"}}},
                {"surfaceOp", "append"}}
        .dump();
}

lls_status status_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const Error &e) {
        return e.status();
    }
    return LLS_OK;
}

} // namespace

TEST(Postgres, OneWriterReadersAndTheLease) {
    REQUIRE_PG();
    const std::string url = pg_url();
    const std::string id = uid("lease");
    const std::string opts = json{{"id", id}}.dump();
    {
        Session w = Session::open_url(url, opts);
        EXPECT_EQ(w.id(), id);
        w.append(context("kept in PostgreSQL"));
        try {
            Session::open_url(url, opts);
            FAIL() << "a second writer opened";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LLS_ERR_LOCKED) << e.what();
            EXPECT_NE(json::parse(e.detail())["holder"].get<std::string>().find("llmsession pid"),
                      std::string::npos);
        }
        Session r = Session::open_url(url + "?session=" + id, R"({"readOnly":true})");
        EXPECT_EQ(status_of([&] { r.append(context("no")); }), LLS_ERR_READ_ONLY);
        EXPECT_EQ(json::parse(r.stats())["events"], 1);
    }
    Session again = Session::open_url(url, json{{"id", id}, {"create", false}}.dump());
    EXPECT_EQ(json::parse(again.stats())["events"], 1);
    again.verify();
}

TEST(Postgres, ForkAndList) {
    REQUIRE_PG();
    const std::string url = pg_url();
    const std::string id = uid("parent");
    Session p = Session::open_url(url, json{{"id", id}}.dump());
    p.append(context("seed"));
    {
        Session f = p.fork(json{{"url", url}, {"id", id + "-fork"}}.dump());
        EXPECT_EQ(json::parse(f.info())["parent"]["id"], id);
    }
    json page = json::parse(llmsession::list_sessions(url, json{{"after", id}, {"limit", 1}}.dump()));
    ASSERT_EQ(page.size(), 1u);
    EXPECT_EQ(page[0]["id"], id + "-fork");
    EXPECT_EQ(page[0]["parent"]["seedLength"], 1);
    EXPECT_EQ(page[0]["inUse"], false);
}

TEST(Postgres, ClearErrors) {
    REQUIRE_PG();
    std::string bad = pg_url();
    bad.replace(bad.find('@'), 1, "x@");
    EXPECT_EQ(status_of([&] { Session::open_url(bad, R"({"id":"x"})"); }), LLS_ERR_STORAGE);
    EXPECT_EQ(status_of([&] { Session::open_url("postgres://nobody@127.0.0.1:1/x?connect_timeout=3",
                                                R"({"id":"x"})"); }),
              LLS_ERR_STORAGE);
    EXPECT_EQ(status_of([&] { Session::open_url(pg_url(), R"({"readOnly":true})"); }),
              LLS_ERR_INVALID_INPUT);
}

TEST(Url, FileUrls) {
    char dir[] = "/tmp/lls-cpp-url-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string file = std::string(dir) + "/log.jsonl";
    {
        Session s = Session::open_url("file:" + file, R"({"id":"file-session"})");
        s.append(context("in a file"));
        EXPECT_EQ(status_of([&] { Session::open_url("file://" + file); }), LLS_ERR_LOCKED);
    }
    json list = json::parse(llmsession::list_sessions("file:" + file));
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0]["id"], "file-session");
    EXPECT_EQ(status_of([&] { Session::open_url("nosuch://x"); }), LLS_ERR_INVALID_INPUT);
    std::remove(file.c_str());
    rmdir(dir);
}

// ---- PostgreSQL at scale: the pool, TLS and the fenced lease (all options in the URL) ----
namespace {

std::string with_params(const std::string &base, const std::string &params) {
    return base + (base.find('?') == std::string::npos ? "?" : "&") + params;
}

// A URL parameter's value (a file path), percent-encoded.
std::string url_param(const std::string &v) {
    static const char *hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : v) {
        if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

std::string shell_quote(const std::string &s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

bool is_file(const std::string &p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The server's psql: LLMSESSION_PG_BIN, /usr/lib/postgresql/*/bin (the newest), or PATH, as
// scripts/pg/server.sh finds the server's binaries; empty when there is none.
std::string find_psql() {
    std::vector<std::string> candidates;
    if (const char *d = std::getenv("LLMSESSION_PG_BIN"))
        candidates.push_back(std::string(d) + "/psql");
    glob_t g{};
    if (glob("/usr/lib/postgresql/*/bin/psql", 0, nullptr, &g) == 0) {
        for (size_t i = g.gl_pathc; i > 0; i--)
            candidates.emplace_back(g.gl_pathv[i - 1]);
    }
    globfree(&g);
    if (const char *path = std::getenv("PATH")) {
        std::string p = path;
        for (size_t start = 0; start <= p.size();) {
            size_t end = p.find(':', start);
            if (end == std::string::npos)
                end = p.size();
            if (end > start)
                candidates.push_back(p.substr(start, end - start) + "/psql");
            start = end + 1;
        }
    }
    for (const auto &c : candidates)
        if (is_file(c))
            return c;
    return "";
}

// Runs one SQL statement on the test server (LLMSESSION_PG_URL); its output, or throws.
std::string psql(const std::string &sql) {
    const std::string bin = find_psql();
    if (bin.empty())
        throw std::runtime_error("psql not found (LLMSESSION_PG_BIN, /usr/lib/postgresql/*/bin, "
                                 "PATH): it comes with the server binaries");
    const std::string cmd = shell_quote(bin) + " -X -q -v ON_ERROR_STOP=1 -At -d " +
                            shell_quote(pg_url()) + " -c " + shell_quote(sql) + " 2>&1";
    FILE *f = popen(cmd.c_str(), "r");
    if (!f)
        throw std::runtime_error("popen psql failed");
    std::string out;
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        out.append(buf, n);
    int rc = pclose(f);
    if (rc != 0)
        throw std::runtime_error("psql " + sql + ": " + out);
    return out;
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
        s.pop_back();
    return s;
}

} // namespace

// Six writers of six sessions share one pool of two connections (pool_size=2: a session holds no
// connection between calls), appending from six threads at once; pool_size=0 is refused.
TEST(Postgres, PooledWritersShareABoundedPool) {
    REQUIRE_PG();
    const std::string url = with_params(pg_url(), "pool_size=2&pool_timeout=20");
    const std::string prefix = uid("pool");
    constexpr int kWriters = 6, kAppends = 5;
    std::vector<Session> writers;
    for (int i = 0; i < kWriters; i++)
        writers.push_back(
            Session::open_url(url, json{{"id", prefix + "-" + std::to_string(i)}}.dump()));
    std::atomic<int> failures{0};
    std::vector<std::string> errors(kWriters);
    std::vector<std::thread> threads;
    for (int i = 0; i < kWriters; i++) {
        threads.emplace_back([&, i] {
            try {
                for (int j = 0; j < kAppends; j++)
                    writers[i].append(context("writer " + std::to_string(i) + ", event " +
                                              std::to_string(j)));
            } catch (const Error &e) {
                errors[i] = e.what();
                failures++;
            }
        });
    }
    for (auto &t : threads)
        t.join();
    for (int i = 0; i < kWriters; i++) {
        EXPECT_EQ(errors[i], "") << "writer " << i;
    }
    ASSERT_EQ(failures.load(), 0);
    for (auto &w : writers) {
        EXPECT_EQ(json::parse(w.stats())["events"], kAppends);
    }
    writers.clear();
    for (int i = 0; i < kWriters; i++) {
        Session r = Session::open_url(
            pg_url(), json{{"id", prefix + "-" + std::to_string(i)}, {"readOnly", true}}.dump());
        EXPECT_EQ(json::parse(r.verify())["events"], kAppends);
    }
    try {
        Session::open_url(with_params(pg_url(), "pool_size=0"),
                          json{{"id", prefix + "-none"}}.dump());
        FAIL() << "pool_size=0 opened";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLS_ERR_INVALID_INPUT) << e.what();
        EXPECT_STREQ(e.kind(), "invalid-input");
        EXPECT_NE(e.message().find("pool_size"), std::string::npos) << e.what();
    }
}

// TLS with the server's certificate checked (sslmode=verify-full against the test CA); a CA that
// did not sign it is a storage error about the certificate; verify-full without a CA is invalid.
TEST(Postgres, TlsVerifyFull) {
    REQUIRE_PG();
    const char *ca = std::getenv("LLMSESSION_PG_CA");
    if (!ca || !*ca)
        GTEST_SKIP() << "*** SKIPPED: LLMSESSION_PG_CA is not set (scripts/pg/server.sh run sets it "
                        "when the server has TLS) ***";
    const std::string id = uid("tls");
    const std::string opts = json{{"id", id}}.dump();
    {
        Session s = Session::open_url(
            with_params(pg_url(), "sslmode=verify-full&sslrootcert=" + url_param(ca)), opts);
        s.append(context("over TLS"));
        EXPECT_EQ(json::parse(s.stats())["events"], 1);
    }
    if (const char *other = std::getenv("LLMSESSION_PG_OTHER_CA"); other && *other) {
        try {
            Session::open_url(
                with_params(pg_url(),
                            "sslmode=verify-full&connect_timeout=5&sslrootcert=" + url_param(other)),
                opts);
            FAIL() << "verify-full with an unrelated CA opened";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LLS_ERR_STORAGE) << e.what();
            EXPECT_NE(e.message().find("certificate"), std::string::npos) << e.what();
        }
    }
    try {
        Session::open_url(with_params(pg_url(), "sslmode=verify-full"), opts);
        FAIL() << "verify-full without sslrootcert opened";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLS_ERR_INVALID_INPUT) << e.what();
        EXPECT_NE(e.message().find("sslrootcert"), std::string::npos) << e.what();
    }
}

// A writer whose lease was taken over (expired from outside with SQL, then taken by a writer of
// another pool) gets LockedError naming its fencing token on its next append and on every one
// after; the new writer's log holds none of the refused events.
TEST(Postgres, LockedAfterALostLease) {
    REQUIRE_PG();
    // A long lease: the renewer (every third of it) does not renew A's lease between the expiry
    // and B's open.
    const std::string url = with_params(pg_url(), "lease_time=60");
    const std::string id = uid("takeover");
    {
        Session a = Session::open_url(url, json{{"id", id}}.dump());
        a.append(context("A, before the takeover"));
        const std::string out = psql(
            "UPDATE llmsession_sessions SET lease_expires = now() - interval '1 second', "
            "lease_live = NULL WHERE id = '" +
            id + "' RETURNING id");
        ASSERT_EQ(trim(out), id) << "the expiry matched no row";
        // Another pool (another URL), as another process would have.
        Session b =
            Session::open_url(url + "&pool_size=3", json{{"id", id}, {"create", false}}.dump());
        b.append(context("B, after the takeover"));
        json first;
        try {
            a.append(context("A, refused 1"));
            FAIL() << "A appended after losing its lease";
        } catch (const llmsession::LockedError &e) {
            EXPECT_STREQ(e.kind(), "locked");
            first = json::parse(e.detail());
        }
        ASSERT_TRUE(first["epoch"].is_number_integer()) << first.dump();
        EXPECT_GE(first["epoch"].get<long long>(), 1);
        if (first.contains("currentEpoch")) {
            EXPECT_GT(first["currentEpoch"].get<long long>(), first["epoch"].get<long long>())
                << first.dump();
        }
        try {
            a.append(context("A, refused 2"));
            FAIL() << "A appended a second time after losing its lease";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LLS_ERR_LOCKED) << e.what();
            EXPECT_EQ(json::parse(e.detail())["epoch"], first["epoch"]);
        }
        b.append(context("B, still writing"));
    }
    Session r = Session::open_url(pg_url(), json{{"id", id}, {"readOnly", true}}.dump());
    EXPECT_EQ(json::parse(r.verify())["events"], 3);
    const std::string log = r.export_jsonl();
    for (const char *want :
         {"A, before the takeover", "B, after the takeover", "B, still writing"}) {
        EXPECT_NE(log.find(want), std::string::npos) << want;
    }
    EXPECT_EQ(log.find("A, refused"), std::string::npos) << log;
}
