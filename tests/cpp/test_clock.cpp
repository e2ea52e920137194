// The C++ wrappers of the cache clock: Agent::cache_clock, Agent::keepalive_body (answered
// through record_body, rebuilt by verify) and Agent::compact_idle; bad options throw an Error
// naming the field.
#include "llmsession.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

using json = nlohmann::json;
using llmsession::Agent;
using llmsession::Error;
using llmsession::Purpose;
using llmsession::Session;

namespace {

const char *const kPrices =
    R"({"anthropic":{"input":3,"cachedInput":0.3,"cacheWrite":{"5m":3.75,"1h":6},"output":15}})";
const char *const kReply = R"({"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",)"
                           R"("stop_reason":"end_turn","content":[{"type":"text","text":"It reads the forecast."}],)"
                           R"("usage":{"input_tokens":40,"output_tokens":8,"cache_read_input_tokens":0,)"
                           R"("cache_creation_input_tokens":30000}})";

Agent after_one_turn(Session &s) {
    Agent a(s, R"({"config":{"provider":"anthropic","model":"claude-sonnet-4-5"},"system":"You are a coding agent.",)"
               R"("checkRequests":true})");
    a.set_renderer("anthropic");
    a.start_turn(R"({"role":"user","content":[{"type":"text","text":"What does the weather module do?"}]})");
    a.next_body();
    a.record_body(kReply);
    a.end_turn("completed");
    return a;
}

TEST(Clock, KeepsWarmThroughTheRecordPath) {
    Session s = Session::memory();
    Agent a = after_one_turn(s);
    json d = json::parse(a.cache_clock(json{{"prices", json::parse(kPrices)}}.dump()));
    EXPECT_EQ(d["state"]["tier"], "5m");
    EXPECT_EQ(d["decision"], "none");
    const auto sent = d["state"]["lastRequestAt"].get<std::int64_t>();
    EXPECT_EQ(d["nextDecisionAt"].get<std::int64_t>(), sent + 290000);
    d = json::parse(a.cache_clock(json{{"prices", json::parse(kPrices)},
                                       {"now", sent + 292000},
                                       {"returnModel", {{"gapsMs", {1200000}}, {"neverReturns", 0}}}}
                                      .dump()));
    EXPECT_EQ(d["decision"], "keep-warm") << d["reason"];
    EXPECT_EQ(d["tier"], "1h") << d["reason"];
    auto body = a.keepalive_body();
    EXPECT_EQ(body.info.purpose, Purpose::keepalive);
    EXPECT_NE(body.body.view().find(R"("ttl":"1h")"), std::string_view::npos);
    EXPECT_EQ(json::parse(body.body.view())["max_tokens"], 1);
    EXPECT_EQ(a.record_body(kReply).tool_calls, 0u);
    const json v = json::parse(s.verify());
    EXPECT_EQ(v["keepalives"], 1);
    EXPECT_EQ(v["decisions"], 1);
}

TEST(Clock, BadOptionsNameTheField) {
    Session s = Session::memory();
    Agent a = after_one_turn(s);
    try {
        a.cache_clock(R"({"marginMs":-1})");
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLS_ERR_INVALID_INPUT);
        EXPECT_NE(std::string(e.what()).find("options.marginMs"), std::string::npos) << e.what();
    }
    EXPECT_THROW(a.compact_idle(), Error);
}

}  // namespace
