// The C++ Stream class: the fixture streams of tests/data/stream (each provider's documented
// wire format), fed in any chunking, give what parse_response gives for the non-streamed body;
// broken streams throw llmsession::Error with the stream detail; RAII frees every handle.
#include "llmsession.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

using json = nlohmann::json;
using llmsession::Error;
using llmsession::Stream;

namespace {

std::string fixture(const std::string &name) {
    std::ifstream f(std::string(LLMSESSION_DATA_DIR) + "/stream/" + name, std::ios::binary);
    EXPECT_TRUE(f.good()) << name;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

struct Fixture {
    const char *format, *stream, *body;
};

const Fixture kFixtures[] = {
    {"openai", "openai-chat-tools.sse", "openai-chat-tools.json"},
    {"openai", "openai-chat-reasoning.sse", "openai-chat-reasoning.json"},
    {"openai-responses", "openai-responses-tools.sse", "openai-responses-tools.json"},
    {"anthropic", "anthropic-tools.sse", "anthropic-tools.json"},
    {"gemini", "gemini-tools.sse", "gemini-tools.json"},
    {"gemini", "gemini-array.stream.json", "gemini-array.json"},
};

TEST(Stream, EveryChunkingGivesTheParsedResponse) {
    std::size_t before = lls_live_handle_count();
    for (const Fixture &fx : kFixtures) {
        std::string want = llmsession::parse_response(fx.format, fixture(fx.body));
        std::string bytes = fixture(fx.stream);
        for (std::size_t step : {std::size_t{1}, std::size_t{5}, std::size_t{333}}) {
            Stream s(fx.format);
            std::string text;
            for (std::size_t at = 0; at < bytes.size(); at += step) {
                s << std::string_view(bytes).substr(at, step);
                s.for_each_delta([&](const std::string &d) {
                    json j = json::parse(d);
                    if (j["type"] == "text") {
                        text += j["text"].get<std::string>();
                    }
                });
            }
            EXPECT_EQ(s.finish(), want) << fx.stream << " step " << step;
            std::string blocks;
            const json parsed = json::parse(want);
            for (const auto &b : parsed["message"]["content"]) {
                if (b["type"] == "text") {
                    blocks += b["text"].get<std::string>();
                }
            }
            EXPECT_EQ(text, blocks) << fx.stream;
        }
    }
    EXPECT_EQ(lls_live_handle_count(), before);
}

TEST(Stream, RecordsAndKeepsTheBody) {
    Stream s("openai");
    s.feed(fixture("openai-chat-reasoning.sse"));
    EXPECT_FALSE(s.next_delta() == std::nullopt);
    std::string response = s.finish();
    EXPECT_EQ(json::parse(s.body())["timings"]["cache_n"], 800);
    llmsession::Session session = llmsession::Session::memory();
    llmsession::Agent agent(session, R"({"config":{"provider":"llama.cpp","model":"qwen3"}})");
    agent.start_turn(R"({"role":"user","content":[{"type":"text","text":"天气?"}]})");
    agent.next_request();
    EXPECT_GT(agent.record_response(response), 0u);
    EXPECT_NE(session.history().find("用户想要一个简短的回答。"), std::string::npos);
}

TEST(Stream, BrokenStreamsThrow) {
    Stream s("openai");
    try {
        s << "data: {\"error\":{\"message\":\"This model's maximum context length is 8192 tokens\",\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}}\n\n";
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLS_ERR_INVALID_INPUT);
        json d = json::parse(e.detail());
        EXPECT_EQ(d["stream"], "provider-error");
        EXPECT_EQ(d["overflow"], true);
    }
    EXPECT_THROW(s.finish(), Error);
    // Nothing arrived before the error: there is no partial message.
    try {
        s.finish(true);
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLS_ERR_INVALID_INPUT);
        json d = json::parse(e.detail());
        EXPECT_EQ(d["stream"], "provider-error");
        EXPECT_EQ(d["partial"], "empty");
    }

    Stream cut("gemini");
    std::string bytes = fixture("gemini-tools.sse");
    cut.feed(bytes.substr(0, bytes.find("STOP") - 100));
    try {
        cut.finish();
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(json::parse(e.detail())["stream"], "incomplete");
    }
    Stream bad("anthropic");
    EXPECT_THROW(bad << "data: {nope\n\n", Error);
    EXPECT_THROW(Stream("cohere"), Error);
    Stream moved("openai");
    Stream other(std::move(moved));
    EXPECT_THROW(moved.feed("x"), std::logic_error);
    other.feed("");
}

} // namespace
