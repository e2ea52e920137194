// Agent trees in C++: children spawned from a lead's open tool calls run on threads of their
// own and finish in any order; their answers become the lead's tool results in call order; a
// child keeps its lead's model; a woken child carries on; the tree explains.
#include "llmsession.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

using json = nlohmann::json;
using llmsession::Agent;
using llmsession::Child;
using llmsession::Error;
using llmsession::Session;

namespace {

const char *const kOpts = R"({"config":{"provider":"openai","model":"m1"},"system":"You lead."})";
const char *const kCalls = R"({"message":{"role":"assistant","content":[
    {"type":"tool-call","id":"c1","name":"task","arguments":"{}"},
    {"type":"tool-call","id":"c2","name":"task","arguments":"{}"}]}})";

std::string answer(const std::string &text) {
    return json{{"message", {{"role", "assistant"}, {"content", {{{"type", "text"}, {"text", text}}}}}}}
        .dump();
}

} // namespace

TEST(Tree, TwoChildrenOnThreadsAnswerInCallOrder) {
    Session s = Session::memory();
    Agent lead(s, kOpts);
    lead.set_renderer("openai");
    lead.start_turn(R"({"role":"user","content":[{"type":"text","text":"Fix both."}]})");
    std::string parent(lead.next_body().body.view());
    lead.record_response(kCalls);
    std::vector<Child> kids;
    kids.push_back(lead.spawn(R"({"callId":"c1","directive":"Do c1."})"));
    kids.push_back(lead.spawn(R"({"callId":"c2","directive":"Do c2."})"));
    std::vector<std::future<json>> running;
    for (std::size_t i = 0; i < kids.size(); i++) {
        running.push_back(std::async(std::launch::async, [&, i] {
            std::string body(kids[i].agent.next_body().body.view());
            std::size_t end = parent.find("],\"model\"");
            EXPECT_EQ(body.substr(0, end), parent.substr(0, end));
            std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? 30 : 0));
            kids[i].agent.record_response(answer("answer " + std::to_string(i + 1)));
            return json::parse(lead.finish_child(kids[i].agent));
        }));
    }
    json first = running[0].get();
    json second = running[1].get();
    EXPECT_EQ(first["recorded"], 2);
    EXPECT_EQ(second["recorded"], 0);
    EXPECT_EQ(second["answer"], "answer 2");
    std::vector<std::string> order;
    for (const auto &e : json::parse(s.events())) {
        if (e["type"] == "tool/result") {
            order.push_back(e["data"]["callId"]);
            EXPECT_EQ(e["data"]["child"], e["data"]["callId"] == "c1" ? kids[0].session.id() : kids[1].session.id());
        }
    }
    EXPECT_EQ(order, (std::vector<std::string>{"c1", "c2"}));
    json tree = json::parse(s.explain(R"({"tree":true})"));
    EXPECT_EQ(tree["totals"]["nodes"], 3);
    EXPECT_EQ(tree["nodes"][1]["kind"], "spawn");
    for (auto &k : kids) {
        k.session.verify();
    }
}

TEST(Tree, AChildKeepsItsModelAndWakesFromItsLog) {
    char dir[] = "/tmp/lls-cpp-tree-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string lead_path = std::string(dir) + "/lead.jsonl";
    Session s = Session::open_file(lead_path);
    Agent lead(s, kOpts);
    try {
        lead.spawn(R"({"directive":"x"})");
        FAIL() << "a spawn before any request";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLS_ERR_OUT_OF_ORDER);
    }
    lead.start_turn(R"({"role":"user","content":[{"type":"text","text":"hi"}]})");
    lead.next_request();
    lead.record_response(kCalls);
    json first;
    {
        Child c = lead.spawn(R"({"callId":"c1","directive":"Do c1."})");
        try {
            c.agent.set_options(R"({"config":{"provider":"openai","model":"m2"},"system":"You lead."})");
            FAIL() << "a child changing its model";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LLS_ERR_INVALID_INPUT);
            EXPECT_NE(e.message().find("is a child agent"), std::string::npos) << e.message();
        }
        first = json::parse(std::string(c.agent.next_request().view()));
        c.agent.record_response(answer("done"));
        c.agent.end_turn();
    }
    Session again = Session::open_file(std::string(dir) + "/lead.c1.jsonl");
    Agent woken = Agent::wake(again);
    woken.start_turn(R"({"role":"user","content":[{"type":"text","text":"more?"}]})");
    json next = json::parse(std::string(woken.next_request().view()));
    ASSERT_GE(next["messages"].size(), first["messages"].size());
    for (std::size_t i = 0; i < first["messages"].size(); i++) {
        EXPECT_EQ(next["messages"][i], first["messages"][i]);
    }
    EXPECT_EQ(next["sessionId"], s.id());
    json kids = json::parse(llmsession::list_sessions("file:" + lead_path, R"({"parent":")" + s.id() + "\"}"));
    ASSERT_EQ(kids.size(), 1u);
    EXPECT_EQ(kids[0]["parent"]["callId"], "c1");
}
