// The C++ wrapper of lls_tool_calls: llmsession::tool_calls reads the calls of a message, a
// parsed response or the logged assistant/message event; the tool loop runs on it; bad input
// throws an llmsession::Error with the status and the field.
#include "llmsession.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using llmsession::Agent;
using llmsession::Error;
using llmsession::Session;
using llmsession::ToolCall;

namespace {

const char *const kTwoCalls =
    R"({"role":"assistant","content":[{"type":"text","text":"Reading both."},)"
    R"({"type":"tool-call","id":"call_a","name":"read_file","arguments":"{\"path\":\"a.txt\"}"},)"
    R"({"type":"tool-call","id":"call_b","name":"list_dir","arguments":""}]})";

TEST(ToolCalls, MessageResponseAndArray) {
    std::vector<ToolCall> calls = llmsession::tool_calls(kTwoCalls);
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[0].id, "call_a");
    EXPECT_EQ(calls[0].name, "read_file");
    EXPECT_EQ(calls[0].arguments, R"({"path":"a.txt"})");
    EXPECT_EQ(calls[1].name, "list_dir");
    EXPECT_EQ(calls[1].arguments, "");
    EXPECT_EQ(llmsession::tool_calls(std::string(R"({"message":)") + kTwoCalls + "}").size(), 2u);
    EXPECT_EQ(llmsession::tool_calls(std::string("[") + kTwoCalls + "," + kTwoCalls + "]").size(), 4u);
    EXPECT_TRUE(llmsession::tool_calls(R"({"role":"assistant","content":[{"type":"text","text":"ok"}]})").empty());
    std::string parsed = llmsession::parse_response(
        "openai", R"({"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_9",)"
                  R"("type":"function","function":{"name":"grep","arguments":"{}"}}]},"finish_reason":"tool_calls"}]})");
    calls = llmsession::tool_calls(parsed);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].id, "call_9");
    EXPECT_EQ(llmsession::live_handle_count(), 0u);
}

TEST(ToolCalls, ToolLoopOnRecordBody) {
    Session s = Session::memory();
    Agent a(s, R"({"config":{"provider":"openai","model":"m"},"tools":[{"name":"read_file","description":"Read",)"
               R"("parameters":{"type":"object"}}]})");
    a.set_renderer("openai");
    a.start_turn(R"({"role":"user","content":[{"type":"text","text":"Read a.txt"}]})");
    a.next_body();
    llmsession::Recorded r = a.record_body(
        R"({"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1",)"
        R"("type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]},)"
        R"("finish_reason":"tool_calls"}]})");
    std::vector<ToolCall> calls = llmsession::tool_calls(s.events(r.seq, r.seq + 1));
    ASSERT_EQ(calls.size(), r.tool_calls);
    EXPECT_EQ(calls[0].arguments, R"({"path":"a.txt"})");
    for (const ToolCall &c : calls) {
        a.record_tool_result(R"({"callId":")" + c.id + R"(","text":"hi"})");
    }
    a.next_body();
    r = a.record_body(R"({"choices":[{"message":{"role":"assistant","content":"It says hi."},"finish_reason":"stop"}]})");
    EXPECT_TRUE(llmsession::tool_calls(s.events(r.seq, r.seq + 1)).empty());
    a.end_turn("completed");
    EXPECT_NE(s.verify().find(R"("requests":2)"), std::string::npos);
}

TEST(ToolCalls, BadInputThrows) {
    try {
        llmsession::tool_calls(R"({"message":{"role":"assistant","content":[{"type":"tool-call","id":"","name":"x","arguments":""}]}})");
        FAIL() << "an empty call id was accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLS_ERR_INVALID_INPUT);
        EXPECT_NE(e.detail().find("message.content[0].id"), std::string::npos) << e.detail();
    }
    EXPECT_THROW(llmsession::tool_calls("\"text\""), Error);
    try {
        llmsession::tool_calls("[1,");
        FAIL() << "malformed JSON was accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLS_ERR_MALFORMED_JSON);
    }
    EXPECT_EQ(llmsession::live_handle_count(), 0u);
}

} // namespace
