// Binding overhead (docs/performance.md): the C++ harness of benches/bindings.sh, through
// include/llmsession.hpp.
//
//   bindings_cpp DIR ITERATIONS OUT [request|body]
//
// Same procedure as examples/bench_bindings.rs (see there): per round, fork DIR/session.jsonl
// into memory, create an agent, open a turn, build the first request (untimed), then for each
// exchange of DIR/inputs.jsonl record the response and the tool result and build the next
// request, timing the step and the request alone. Round 0 warms up.
//
// "request" (the default): the envelope path. Agent::record_response of the parsed message,
// Agent::record_tool_result, Agent::next_request (an OwnedString: the library's buffer without
// a copy). "body": the hot path. The agent gets the "openai" renderer (Agent::set_renderer,
// default options); per exchange Agent::record_body of the provider's raw reply
// (DIR/replies.jsonl, which the driver writes), Agent::record_tool_result and Agent::next_body
// (the body as an OwnedString, its RequestInfo giving the digest), the body destroyed (which
// frees it) inside the timed part, as a host drops it once sent. The last body of the first
// timed round goes to OUT.body.
//
// Writes "next_ns step_ns" per iteration to OUT; prints "bytes=N digest=D" (the request's
// length, the envelope digest of the last request of the first timed round).
#include <llmsession.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace {

std::string digest_of(const std::string &info) {
    const std::string key = "\"digest\":\"";
    auto at = info.find(key);
    if (at == std::string::npos) return {};
    at += key.size();
    return info.substr(at, info.find('"', at) - at);
}

/// The non-empty lines of a file.
std::vector<std::string> read_lines(const std::string &path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) {
        if (!l.empty()) lines.push_back(l);
    }
    return lines;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        std::cerr << "usage: " << argv[0] << " DIR ITERATIONS OUT [request|body]\n";
        return 2;
    }
    const std::string mode = argc == 5 ? argv[4] : "request";
    if (mode != "request" && mode != "body") {
        std::cerr << "bindings.cpp: MODE is request or body, not \"" << mode << "\"\n";
        return 2;
    }
    const bool body_mode = mode == "body";
    const std::string dir = argv[1];
    const std::size_t iterations = std::strtoull(argv[2], nullptr, 10);
    const std::vector<std::string> lines = read_lines(dir + "/inputs.jsonl");
    if (lines.size() < 5) {
        std::cerr << "bindings.cpp: " << dir << "/inputs.jsonl has too few lines\n";
        return 1;
    }
    const std::string &agent_opts = lines[0], &fork_opts = lines[1], &user = lines[2];
    const std::size_t exchanges = (lines.size() - 3) / 2;
    std::vector<std::string> replies;
    if (body_mode) {
        replies = read_lines(dir + "/replies.jsonl");
        if (replies.size() != exchanges) {
            std::cerr << "bindings.cpp: " << dir << "/replies.jsonl has " << replies.size() << " replies for "
                      << exchanges << " exchanges\n";
            return 1;
        }
    }

    using clock = std::chrono::steady_clock;
    auto ns = [](clock::duration d) {
        return static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
    };
    try {
        auto parent = llmsession::Session::open_file(dir + "/session.jsonl", R"({"durability":"never"})");
        std::vector<std::pair<unsigned long long, unsigned long long>> samples;
        samples.reserve(iterations);
        std::size_t bytes = 0;
        std::string digest;
        std::string last_body;
        for (unsigned round = 0; samples.size() < iterations; round++) {
            auto child = parent.fork(fork_opts);
            llmsession::Agent agent(child, agent_opts);
            if (body_mode) agent.set_renderer("openai");
            agent.start_turn(user);
            if (body_mode)
                agent.next_body();
            else
                agent.next_request();
            for (std::size_t k = 0; k < exchanges && (round == 0 || samples.size() < iterations); k++) {
                clock::time_point t0, t1, t2;
                clock::duration excluded{};
                if (body_mode) {
                    t0 = clock::now();
                    agent.record_body(replies[k]);
                    agent.record_tool_result(lines[4 + 2 * k]);
                    t1 = clock::now();
                    {
                        llmsession::Body body = agent.next_body();
                        if (round == 1) {
                            // The copy for OUT.body is not part of the step: its time is taken out.
                            auto c0 = clock::now();
                            last_body.assign(body.body.data(), body.body.size());
                            bytes = body.body.size();
                            digest = body.info.digest;
                            excluded = clock::now() - c0;
                        }
                    }
                    t2 = clock::now();
                } else {
                    t0 = clock::now();
                    agent.record_response(lines[3 + 2 * k]);
                    agent.record_tool_result(lines[4 + 2 * k]);
                    t1 = clock::now();
                    llmsession::OwnedString request = agent.next_request();
                    t2 = clock::now();
                    if (round == 1) bytes = request.size();
                }
                if (round > 0) samples.emplace_back(ns(t2 - t1 - excluded), ns(t2 - t0 - excluded));
            }
            if (round == 1 && !body_mode) digest = digest_of(agent.request_info());
            agent.dispose();
        }
        std::FILE *out = std::fopen(argv[3], "w");
        if (!out) {
            std::perror(argv[3]);
            return 1;
        }
        for (auto &s : samples) std::fprintf(out, "%llu %llu\n", s.first, s.second);
        std::fclose(out);
        if (body_mode) {
            std::ofstream b(std::string(argv[3]) + ".body", std::ios::binary);
            b.write(last_body.data(), static_cast<std::streamsize>(last_body.size()));
            if (!b) {
                std::cerr << "bindings.cpp: cannot write " << argv[3] << ".body\n";
                return 1;
            }
        }
        std::printf("bytes=%zu digest=%s\n", bytes, digest.c_str());
    } catch (const std::exception &e) {
        std::cerr << "bindings.cpp: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
