// The README's C++ example: one turn through llmsession, with a canned provider reply.
#include <llmsession.hpp>

#include <cstdio>

int main() try {
    auto session = llmsession::Session::open_file("hello.jsonl");
    llmsession::Agent agent(session, R"({"config":{"provider":"llama.cpp","model":"smollm2"},"system":"Be brief."})");
    agent.start_turn(R"({"role":"user","content":[{"type":"text","text":"Hi!"}]})");
    auto request = agent.next_request(); // logged; verify() rebuilds it byte for byte
    std::string body = llmsession::render("openai", request, agent.prefix_len()); // POST to /chat/completions
    std::string reply = R"({"choices":[{"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],)"
                        R"("usage":{"prompt_tokens":14,"completion_tokens":3}})";
    agent.record_response(llmsession::parse_response("openai", reply));
    agent.end_turn();
    std::printf("sent %zu bytes; verify: %s\n", body.size(), session.verify().c_str());
} catch (const llmsession::Error &e) {
    std::fprintf(stderr, "llmsession error [%s]: %s\n", e.kind(), e.what());
    return 1;
}
