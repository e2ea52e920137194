// An agent tree in C++: a lead hands two tasks to two child agents that run in parallel, each
// on a std::async thread of its own; each child's first request extends the lead's last one,
// and the children's answers become the lead's tool results in call order, whichever finishes
// first. A scripted "model" stands in for the provider. docs/caching.md ("Agent trees").
//
//   llmsession_tree_example [DIR]
//
// The logs go to DIR (default: the working directory): lead.jsonl and, beside it, the
// children's lead.task_1.jsonl and lead.task_2.jsonl (`llmsession tree DIR/lead.jsonl`).
#include <llmsession.hpp>

#include <chrono>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string answer(const std::string &text) {
    return R"({"message":{"role":"assistant","content":[{"type":"text","text":")" + text + "\"}]}}";
}

} // namespace

int main(int argc, char **argv) {
    try {
        llmsession::check_abi();
        std::string dir = argc > 1 ? argv[1] : ".";
        std::remove((dir + "/lead.jsonl").c_str());
        std::remove((dir + "/lead.task_1.jsonl").c_str());
        std::remove((dir + "/lead.task_2.jsonl").c_str());
        llmsession::Session session = llmsession::Session::open_file(dir + "/lead.jsonl", R"({"id":"lead"})");
        llmsession::Agent lead(session, R"({
            "config": {"provider": "openai", "model": "gpt-4o-mini"},
            "system": "You lead a team of coding agents. Hand tasks to subagents with the task tool.",
            "tools": [{"name": "task", "description": "Hand a task to a subagent", "parameters": {"type": "object"}}]
        })");
        lead.set_renderer("openai");
        lead.start_turn(R"({"role":"user","content":[{"type":"text","text":"Fix issues #12 and #15."}]})");
        lead.next_body();
        lead.record_response(R"({"message":{"role":"assistant","content":[
            {"type":"tool-call","id":"task_1","name":"task","arguments":"{\"issue\":12}"},
            {"type":"tool-call","id":"task_2","name":"task","arguments":"{\"issue\":15}"}]}})");

        std::vector<llmsession::Child> children;
        children.push_back(lead.spawn(R"({"callId":"task_1","directive":"Fix issue #12 (rounding)."})"));
        children.push_back(lead.spawn(R"({"callId":"task_2","directive":"Fix issue #15 (timeout)."})"));
        const char *answers[] = {"Rounded to one decimal.", "Added a 10 s timeout."};
        std::vector<std::future<std::string>> running;
        for (std::size_t i = 0; i < children.size(); i++) {
            running.push_back(std::async(std::launch::async, [&, i] {
                llmsession::Agent &child = children[i].agent;
                llmsession::Body body = child.next_body();
                std::printf("%s: first request, %zu bytes\n", children[i].session.id().c_str(), body.body.size());
                // The first child answers last: its result still goes first into the lead's log.
                std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? 30 : 0));
                child.record_response(answer(answers[i]));
                return lead.finish_child(child);
            }));
        }
        for (auto &r : running) {
            std::printf("finished: %s\n", r.get().c_str());
        }
        llmsession::Body next = lead.next_body();
        std::printf("lead: next request, %zu bytes, with both answers\n", next.body.size());
        lead.record_response(answer("Both fixed."));
        lead.end_turn();
        std::string tree = session.explain(R"({"tree":true})");
        if (tree.find("\"nodes\":3") == std::string::npos) {
            throw std::runtime_error("the tree does not have 3 sessions: " + tree);
        }
        for (auto &c : children) {
            c.session.verify();
        }
        std::printf("tree: 3 sessions verified\n");
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "llmsession_tree_example: %s\n", e.what());
        return 1;
    }
}
