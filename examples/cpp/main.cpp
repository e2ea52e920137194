// A small llmsession host in C++: a session kept in a JSONL file, an agent with a session
// prefix listener, a summariser answering from another thread (std::async), and a scripted
// "model" standing in for the provider. Every request is rendered to an OpenAI-style body.
//
//   llmsession_example [log.jsonl]
#include <llmsession.hpp>

#include <cstdio>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::string text_message(const char *role, const std::string &text) {
    std::string escaped;
    for (char c : text) {
        if (c == '"' || c == '\\') {
            escaped += '\\';
        }
        escaped += c;
    }
    return std::string(R"({"role":")") + role + R"(","content":[{"type":"text","text":")" + escaped + "\"}]}";
}

// `prefixLen` from lls_agent_request_info's JSON (a real host would use a JSON library).
std::size_t prefix_len_of(const std::string &info) {
    std::size_t at = info.find("\"prefixLen\":");
    return at == std::string::npos ? 0 : std::stoul(info.substr(at + 12));
}

// What the scripted model answers, in order: a tool call, then text.
const std::vector<std::string> kScript = {
    R"({"message":{"role":"assistant","content":[{"type":"tool-call","id":"c1","name":"read_file","arguments":"{\"path\":\"README.md\"}"}]},"usage":{"inputTokens":120,"outputTokens":12}})",
    R"({"message":{"role":"assistant","content":[{"type":"text","text":"The README describes the build."}]},"usage":{"inputTokens":160,"outputTokens":9}})",
    R"({"message":{"role":"assistant","content":[{"type":"text","text":"Run make test."}]},"usage":{"inputTokens":190,"outputTokens":5}})",
};

} // namespace

int main(int argc, char **argv) {
    try {
        llmsession::check_abi();
        std::string path = argc > 1 ? argv[1] : "example-session.jsonl";
        llmsession::Session session = llmsession::Session::open_file(path);
        llmsession::Agent agent(session, R"({
            "config": {"provider": "openai", "model": "gpt-4o-mini"},
            "system": "You are a careful coding assistant.",
            "tools": [{"name": "read_file", "description": "Read a file", "parameters": {"type": "object"}}]
        })");

        // The session prefix: project notes, composed once per agent instance. Listeners form a
        // waterfall (each prepends its messages to `rest`, what the later ones produced); this is
        // the only listener, so `rest` is empty and the answer is just the notes.
        agent.add_prefix_listener([](std::string_view input) {
            if (input.find("\"rest\":[]") == std::string_view::npos) {
                throw std::runtime_error("this example expects to be the only prefix listener");
            }
            return "[" + text_message("user", "Project notes: tabs, not spaces.") + "]";
        });

        // A summariser that answers from another thread (a real host would call its provider).
        agent.set_summariser(std::function<std::future<std::string>(std::string_view)>(
            [](std::string_view) {
                return std::async(std::launch::async,
                                  [] { return std::string(R"({"text":"The user asked about the build."})"); });
            }));

        std::size_t step = 0;
        for (const char *question : {"What does the README say?", "And how do I test?"}) {
            agent.start_turn(text_message("user", question));
            while (true) {
                std::string request = agent.next_request();
                std::size_t prefix_len = prefix_len_of(agent.request_info());
                std::string body = llmsession::render("openai", request, prefix_len);
                std::printf("request %zu: %zu bytes envelope, %zu bytes body\n", step + 1, request.size(),
                            body.size());
                const std::string &reply = kScript.at(step++ % kScript.size());
                agent.record_response(reply);
                if (reply.find("tool-call") == std::string::npos) {
                    break;
                }
                agent.record_tool_result(R"({"callId":"c1","text":"# Build\nmake build"})");
            }
            agent.end_turn();
        }
        std::printf("compaction: %s\n", agent.compact().c_str());
        std::printf("agent stats: %s\nsession stats: %s\n", agent.stats().c_str(), session.stats().c_str());
        std::printf("verify: %s\n", session.verify().c_str());
        return 0;
    } catch (const llmsession::Error &e) {
        std::fprintf(stderr, "llmsession error [%s]: %s\n", e.kind(), e.what());
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
    }
    return 1;
}
