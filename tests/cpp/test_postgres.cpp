// Sessions in a store named by URL: PostgreSQL (LLMSESSION_PG_URL, which `make test-pg` sets to a
// throwaway server; without it those tests are skipped loudly) and file: URLs.
#include "llmsession.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

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
