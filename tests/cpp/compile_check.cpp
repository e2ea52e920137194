// The header twice in one translation unit (include guards), compiled with -Wall -Wextra
// -Werror -pedantic; a second translation unit (compile_check_second.cpp) includes it too, so
// that a non-inline definition would fail to link. Every wrapper is used once.
#include "llmsession.hpp"
#include "llmsession.hpp"

#include <cstdio>

std::string second_unit_version();

int main() {
    llmsession::check_abi();
    if (second_unit_version() != llmsession::version()) {
        return 1;
    }
    llmsession::Session s = llmsession::Session::memory(R"({"id":"compile-check"})");
    llmsession::Agent a(s, R"({"config":{"provider":"p","model":"m"}})");
    a.add_prefix_listener([](std::string_view in) { return std::string("[]") + (in.empty() ? " " : ""); });
    a.add_pre_step_listener([](std::string_view) {});
    a.set_summariser([](std::string_view) { return std::string(R"({"text":"s"})"); });
    a.set_token_counter([](std::string_view in) { return static_cast<std::uint64_t>(in.size() / 4); });
    llmsession::Cancel c;
    a.start_turn(R"({"role":"user","content":[{"type":"text","text":"hi"}]})");
    std::string req = a.next_request(c);
    std::string body = llmsession::render("openai", req, 0);
    a.record_response(R"({"message":{"role":"assistant","content":[{"type":"text","text":"hello"}]}})");
    a.end_turn();
    llmsession::Stream st("openai");
    st << "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    std::size_t deltas = 0;
    st.for_each_delta([&](const std::string &) { ++deltas; });
    if (deltas != 1 || st.finish().empty() || st.body().empty()) {
        return 1;
    }
    a.set_renderer("openai", R"({"promptCacheKey":false})");
    a.start_turn(R"({"role":"user","content":[{"type":"text","text":"again"}]})");
    llmsession::Body hot = a.next_body(c);
    if (a.last_envelope().size() != hot.info.envelope_len || hot.body.empty()) {
        return 1;
    }
    a.record_body(R"({"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]})");
    a.end_turn();
    a.start_turn(R"({"role":"user","content":[{"type":"text","text":"streamed"}]})");
    hot = a.next_body();
    llmsession::Stream hot_stream("openai");
    hot_stream << "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    if (a.record_stream(hot_stream).tool_calls != 0) {
        return 1;
    }
    a.end_turn();
    std::printf("compile_check: llmsession %s, ABI %u, %zu request bytes, %zu body bytes\n",
                llmsession::version().c_str(), llmsession::abi_version(), req.size(), body.size());
    return 0;
}
