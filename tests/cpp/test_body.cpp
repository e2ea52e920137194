// The C++ wrappers of the one-way hot path: Agent::set_renderer, Agent::next_body (the provider
// body as an OwnedString, with a RequestInfo), Agent::last_envelope, Agent::record_body and
// Agent::record_stream. The body is the rendering of the logged envelope for every renderer;
// bad input throws an llmsession::Error with the status and changes nothing.
#include "llmsession.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

using json = nlohmann::json;
using llmsession::Agent;
using llmsession::Body;
using llmsession::Error;
using llmsession::OwnedString;
using llmsession::Purpose;
using llmsession::Recorded;
using llmsession::RequestInfo;
using llmsession::Session;
using llmsession::Stream;

namespace {

const char *const kOpts = R"({"config":{"provider":"p","model":"m-test","maxTokens":256},)"
                          R"("system":"You are a careful coding agent.",)"
                          R"("tools":[{"name":"read_file","description":"Read a file","parameters":{)"
                          R"("type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}],)"
                          R"("checkRequests":true})";

std::string user(const std::string &text) {
    return json{{"role", "user"}, {"content", {{{"type", "text"}, {"text", text}}}}}.dump();
}

/// An OpenAI chat completions reply that calls read_file (id call_<n>).
std::string openai_reply(int n) {
    return json{{"id", "c" + std::to_string(n)},
                {"object", "chat.completion"},
                {"model", "m-test"},
                {"choices",
                 {{{"index", 0},
                   {"message",
                    {{"role", "assistant"},
                     {"content", "Reading it."},
                     {"tool_calls",
                      {{{"id", "call_" + std::to_string(n)},
                        {"type", "function"},
                        {"function", {{"name", "read_file"}, {"arguments", R"({"path":"a.txt"})"}}}}}}}},
                   {"finish_reason", "tool_calls"}}}},
                {"usage", {{"prompt_tokens", 50}, {"completion_tokens", 10}}}}
        .dump();
}

/// An Anthropic Messages reply that calls read_file (id call_<n>).
std::string anthropic_reply(int n) {
    return json{{"id", "msg_" + std::to_string(n)},
                {"type", "message"},
                {"role", "assistant"},
                {"model", "m-test"},
                {"content",
                 {{{"type", "text"}, {"text", "Reading it."}},
                  {{"type", "tool_use"},
                   {"id", "call_" + std::to_string(n)},
                   {"name", "read_file"},
                   {"input", {{"path", "a.txt"}}}}}},
                {"stop_reason", "tool_use"},
                {"usage", {{"input_tokens", 50}, {"output_tokens", 10}}}}
        .dump();
}

std::string tool_result(int n) {
    return json{{"callId", "call_" + std::to_string(n)}, {"text", "hello from a.txt (" + std::to_string(n) + ")"}}.dump();
}

/// Records the status of the Error `f` throws (or fails the test).
template <class F> Error expect_error(F &&f, lls_status status) {
    try {
        f();
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), status) << e.kind() << ": " << e.message();
        return e;
    }
    ADD_FAILURE() << "expected an llmsession::Error with status " << status;
    return Error(LLS_OK, "", "{}");
}

std::size_t event_count(const Session &s) { return json::parse(s.events()).size(); }

/// The body equals the rendering of the logged envelope, and the info is what the JSON
/// request_info says.
void check_body(const Agent &a, const std::string &renderer, const std::string &options, const Body &b) {
    OwnedString env = a.last_envelope();
    EXPECT_EQ(env.size(), b.info.envelope_len);
    json opts = options.empty() ? json::object() : json::parse(options);
    opts["prefixLen"] = b.info.prefix_len;
    EXPECT_EQ(b.body, llmsession::render_with_options(renderer, env, opts.dump()));
    json info = json::parse(a.request_info());
    EXPECT_EQ(info["instance"], b.info.instance);
    EXPECT_EQ(info["turn"], b.info.turn);
    EXPECT_EQ(info["step"], b.info.step);
    EXPECT_EQ(info["stepSeq"], b.info.step_seq);
    EXPECT_EQ(info["prefixLen"], b.info.prefix_len);
    EXPECT_EQ(info["messageCount"], b.info.message_count);
    EXPECT_EQ(info["sharedMessages"], b.info.shared_messages);
    EXPECT_EQ(info["bytes"], b.info.envelope_len);
    EXPECT_EQ(info["digest"], b.info.digest);
}

/// Three steps of a turn on the hot path, then a text reply and the end of the turn.
void run_loop(const std::string &renderer, const std::string &options, std::string (*reply)(int),
              const std::string &final_reply) {
    Session s = Session::memory(R"({"id":"body"})");
    Agent a(s, kOpts);
    a.add_prefix_listener([](std::string_view) { return "[" + user("Rules: indent with tabs.") + "]"; });
    a.set_renderer(renderer, options);
    a.start_turn(user("Please read a.txt"));
    std::uint32_t prev = 0;
    for (int step = 1; step <= 3; ++step) {
        Body b = a.next_body();
        EXPECT_EQ(b.info.instance, 1u);
        EXPECT_EQ(b.info.turn, 1u);
        EXPECT_EQ(b.info.step, static_cast<std::uint64_t>(step));
        EXPECT_EQ(b.info.purpose, Purpose::conversation);
        EXPECT_EQ(b.info.prefix_len, 1u);
        EXPECT_EQ(b.info.message_count, static_cast<std::uint32_t>(2 + 2 * (step - 1)));
        EXPECT_EQ(b.info.shared_messages, step == 1 ? 0u : prev);
        prev = b.info.message_count;
        ASSERT_EQ(b.info.digest.size(), 71u);
        EXPECT_EQ(b.info.digest.rfind("sha256:", 0), 0u);
        EXPECT_NE(s.events().find(b.info.digest), std::string::npos) << "step/start records the digest";
        check_body(a, renderer, options, b);
        EXPECT_NE(b.body.view().find("Please read a.txt"), std::string_view::npos);

        Recorded r = a.record_body(reply(step));
        EXPECT_EQ(r.tool_calls, 1u);
        EXPECT_EQ(r.finish_reason, "tool-calls") << renderer;
        json ev = json::parse(s.events(r.seq, r.seq + 1));
        ASSERT_EQ(ev.size(), 1u);
        EXPECT_EQ(ev[0]["type"], "assistant/message");
        EXPECT_EQ(a.record_tool_result(tool_result(step)), 1u);
    }
    Body b = a.next_body();
    EXPECT_NE(b.body.view().find("hello from a.txt (3)"), std::string_view::npos);
    Recorded last = a.record_body(final_reply);
    EXPECT_EQ(last.tool_calls, 0u);
    EXPECT_EQ(last.finish_reason, "stop") << renderer;
    a.end_turn();
    EXPECT_EQ(json::parse(s.verify())["requests"], 4);
}

class HotPath : public testing::Test {
protected:
    void SetUp() override { before_ = llmsession::live_handle_count(); }
    void TearDown() override { EXPECT_EQ(llmsession::live_handle_count(), before_) << "leaked handles"; }
    std::size_t before_ = 0;
};

} // namespace

TEST_F(HotPath, OpenAiBodyIsTheRenderedEnvelope) {
    run_loop("openai", R"({"promptCacheKey":"tenant-7"})", openai_reply,
             R"({"id":"cz","object":"chat.completion","model":"m-test","choices":[{"index":0,)"
             R"("message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]})");
}

TEST_F(HotPath, AnthropicBodyIsTheRenderedEnvelope) {
    run_loop("anthropic", R"({"cacheTtl":"1h"})", anthropic_reply,
             R"({"id":"msg_z","type":"message","role":"assistant","model":"m-test","content":[)"
             R"({"type":"text","text":"Done."}],"stop_reason":"end_turn"})");
}

TEST_F(HotPath, DefaultOptionsAndRequestInfoFromTheCRecord) {
    Session s = Session::memory(R"({"id":"defaults"})");
    Agent a(s, kOpts);
    a.set_renderer("openai");
    a.start_turn(user("hi"));
    Body b = a.next_body();
    EXPECT_EQ(b.info.prefix_len, 0u);
    check_body(a, "openai", "", b);
    // The body is the library's buffer: moving it moves the bytes, not a copy.
    const char *bytes = b.body.data();
    OwnedString kept = std::move(b.body);
    EXPECT_EQ(kept.data(), bytes);
    EXPECT_TRUE(b.body.empty());

    lls_request_info c{};
    c.instance = 3;
    c.turn = 4;
    c.step = 5;
    c.step_seq = 6;
    c.purpose = LLS_PURPOSE_COMPACTION;
    c.prefix_len = 7;
    c.message_count = 8;
    c.shared_messages = 9;
    c.envelope_len = 10;
    std::snprintf(c.digest, sizeof c.digest, "sha256:%064d", 0);
    RequestInfo r = RequestInfo::from(c);
    EXPECT_EQ(r.instance, 3u);
    EXPECT_EQ(r.turn, 4u);
    EXPECT_EQ(r.step, 5u);
    EXPECT_EQ(r.step_seq, 6u);
    EXPECT_EQ(r.purpose, Purpose::compaction);
    EXPECT_EQ(r.prefix_len, 7u);
    EXPECT_EQ(r.message_count, 8u);
    EXPECT_EQ(r.shared_messages, 9u);
    EXPECT_EQ(r.envelope_len, 10u);
    EXPECT_EQ(r.digest, "sha256:" + std::string(64, '0'));
}

TEST_F(HotPath, NextRequestAndLastEnvelopeAgree) {
    Session s = Session::memory(R"({"id":"both"})");
    Agent a(s, kOpts);
    expect_error([&] { a.last_envelope(); }, LLS_ERR_OUT_OF_ORDER);
    a.set_renderer("openai");
    a.start_turn(user("hi"));
    OwnedString env = a.next_request();
    EXPECT_EQ(a.last_envelope(), env.view());
}

TEST_F(HotPath, BadInputThrowsAndChangesNothing) {
    Session s = Session::memory(R"({"id":"bad"})");
    Agent a(s, kOpts);
    a.start_turn(user("hi"));
    std::size_t events = event_count(s);

    Error e = expect_error([&] { a.next_body(); }, LLS_ERR_OUT_OF_ORDER);
    EXPECT_NE(e.message().find("renderer"), std::string::npos) << e.message();
    expect_error([&] { a.record_body(openai_reply(1)); }, LLS_ERR_OUT_OF_ORDER);
    e = expect_error([&] { a.set_renderer("no-such-format"); }, LLS_ERR_INVALID_INPUT);
    EXPECT_EQ(json::parse(e.detail())["field"], "renderer");
    e = expect_error([&] { a.set_renderer("openai", R"({"prefixLen":1})"); }, LLS_ERR_INVALID_INPUT);
    EXPECT_EQ(json::parse(e.detail())["field"], "options.prefixLen");
    expect_error([&] { a.set_renderer("openai", "{not json"); }, LLS_ERR_MALFORMED_JSON);
    // The failed calls left the agent without a renderer.
    expect_error([&] { a.next_body(); }, LLS_ERR_OUT_OF_ORDER);
    EXPECT_EQ(event_count(s), events);

    a.set_renderer("openai");
    // No open step yet: nothing to record a reply to.
    expect_error([&] { a.record_body(openai_reply(1)); }, LLS_ERR_OUT_OF_ORDER);
    Body b = a.next_body();
    events = event_count(s);
    expect_error([&] { a.record_body("{not json"); }, LLS_ERR_MALFORMED_JSON);
    expect_error([&] { a.record_body("\xc3\x28"); }, LLS_ERR_INVALID_UTF8);
    e = expect_error([&] { a.record_body(anthropic_reply(1)); }, LLS_ERR_INVALID_INPUT);
    EXPECT_NE(e.message().find("a openai response body"), std::string::npos) << e.message();
    EXPECT_EQ(event_count(s), events);
    // The step is still open: the right body records.
    EXPECT_EQ(a.record_body(openai_reply(1)).tool_calls, 1u);
    EXPECT_GT(event_count(s), events);

    a.dispose();
    expect_error([&] { a.next_body(); }, LLS_ERR_DISPOSED);
}

TEST_F(HotPath, UnrenderableHistoryLogsNothing) {
    Session s = Session::memory(R"({"id":"audio"})");
    Agent a(s, kOpts);
    a.set_renderer("openai");
    a.start_turn(R"({"role":"user","content":[{"type":"audio","data":"AAAA"}]})");
    std::size_t events = event_count(s);
    expect_error([&] { a.next_body(); }, LLS_ERR_INVALID_INPUT);
    EXPECT_EQ(event_count(s), events);
}

TEST_F(HotPath, RecordStream) {
    Session s = Session::memory(R"({"id":"stream"})");
    Agent a(s, kOpts);
    a.set_renderer("openai");
    a.start_turn(user("Please read a.txt"));
    a.next_body();

    Stream other("anthropic");
    Error e = expect_error([&] { a.record_stream(other); }, LLS_ERR_INVALID_INPUT);
    EXPECT_EQ(json::parse(e.detail())["field"], "stream");

    Stream st("openai");
    st << "data: {\"model\":\"m-test\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me look.\"}}]}\n\n"
       << "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":"
          "\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]}}]}\n\n"
       << "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
          "\"{\\\"path\\\":\\\"a.txt\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"
       << "data: [DONE]\n\n";
    Recorded r = a.record_stream(st);
    EXPECT_EQ(r.tool_calls, 1u);
    EXPECT_EQ(r.finish_reason, "tool-calls");
    json ev = json::parse(s.events(r.seq, r.seq + 1));
    EXPECT_EQ(ev[0]["type"], "assistant/message");
    EXPECT_NE(ev[0].dump().find("Let me look."), std::string::npos);
    a.record_tool_result(R"({"callId":"call_9","text":"tabs"})");

    // A stream cut before its end: refused, then recorded with partial = true.
    a.next_body();
    std::size_t events = event_count(s);
    Stream cut("openai");
    cut << "data: {\"model\":\"m-test\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    expect_error([&] { a.record_stream(cut); }, LLS_ERR_INVALID_INPUT);
    EXPECT_EQ(event_count(s), events);
    // Once finished, the stream takes no more bytes.
    EXPECT_THROW(cut.feed("data: [DONE]\n\n"), Error);
    r = a.record_stream(cut, true);
    EXPECT_EQ(r.tool_calls, 0u);
    EXPECT_EQ(r.finish_reason, "incomplete");
    EXPECT_NE(s.events(r.seq, r.seq + 1).find("Hel"), std::string::npos);
}
