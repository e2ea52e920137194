// Binding overhead (docs/performance.md): the C++ harness of benches/bindings.sh, through
// include/llmsession.hpp.
//
//   bindings_cpp DIR ITERATIONS OUT
//
// Same procedure as examples/bench_bindings.rs (see there): per round, fork DIR/session.jsonl
// into memory, create an agent, open a turn, build the first request (untimed), then for each
// exchange of DIR/inputs.jsonl record the response and the tool result and build the next
// request with Agent::next_request (what a C++ host gets: an OwnedString, the library's
// buffer without a copy), timing the step and the request
// alone. Round 0 warms up. Writes "next_ns step_ns" per iteration to OUT; prints
// "bytes=N digest=D" (the last request of the first timed round).
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

}  // namespace

int main(int argc, char **argv) {
    if (argc != 4) {
        std::cerr << "usage: " << argv[0] << " DIR ITERATIONS OUT\n";
        return 2;
    }
    const std::string dir = argv[1];
    const std::size_t iterations = std::strtoull(argv[2], nullptr, 10);
    std::ifstream in(dir + "/inputs.jsonl");
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    if (lines.size() < 5) {
        std::cerr << "bindings.cpp: " << dir << "/inputs.jsonl has too few lines\n";
        return 1;
    }
    const std::string &agent_opts = lines[0], &fork_opts = lines[1], &user = lines[2];
    const std::size_t exchanges = (lines.size() - 3) / 2;

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
        for (unsigned round = 0; samples.size() < iterations; round++) {
            auto child = parent.fork(fork_opts);
            llmsession::Agent agent(child, agent_opts);
            agent.start_turn(user);
            agent.next_request();
            for (std::size_t k = 0; k < exchanges && (round == 0 || samples.size() < iterations); k++) {
                auto t0 = clock::now();
                agent.record_response(lines[3 + 2 * k]);
                agent.record_tool_result(lines[4 + 2 * k]);
                auto t1 = clock::now();
                llmsession::OwnedString request = agent.next_request();
                auto t2 = clock::now();
                bytes = request.size();
                if (round > 0) samples.emplace_back(ns(t2 - t1), ns(t2 - t0));
            }
            if (round == 1) digest = digest_of(agent.request_info());
            agent.dispose();
        }
        std::FILE *out = std::fopen(argv[3], "w");
        if (!out) {
            std::perror(argv[3]);
            return 1;
        }
        for (auto &s : samples) std::fprintf(out, "%llu %llu\n", s.first, s.second);
        std::fclose(out);
        std::printf("bytes=%zu digest=%s\n", bytes, digest.c_str());
    } catch (const std::exception &e) {
        std::cerr << "bindings.cpp: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
