// Golden transcripts for the C++ scenario driver (docs/scenarios.md, "Golden transcripts"): the
// masks, the C ABI wording normalisation, and the comparison with tests/scenarios/golden/<stem>.json
// (JSON values, the first differing JSON Pointer reported with the op it falls in).
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace golden {

using json = nlohmann::json;

/// Replaces every `{"$repeat": text, "times": n}` with text repeated n times.
inline void expand(json &v) {
    if (v.is_object() && v.contains("$repeat")) {
        std::string text = v["$repeat"].get<std::string>(), out;
        for (std::size_t i = 0, n = v.at("times").get<std::size_t>(); i < n; ++i) {
            out += text;
        }
        v = out;
    } else if (v.is_structured()) {
        for (auto &x : v) {
            expand(x);
        }
    }
}

inline void replace_all(std::string &s, const std::string &from, const std::string &to) {
    if (from.empty()) {
        return;
    }
    for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
        s.replace(at, from.size(), to);
    }
}

/// In every string: the scratch directory becomes `<dir>`, `.cut-<digits>` becomes
/// `.cut-<time>`, and the phrases the C ABI puts before a host callback's own message are
/// dropped (the Rust runner's fakes fail with the message alone).
inline void mask_strings(json &v, const std::string &dir) {
    if (v.is_string()) {
        std::string s = v.get<std::string>();
        replace_all(s, dir, "<dir>");
        for (const char *p : {"prefix listener callback: ", "summariser callback: ", "host callback failed: "}) {
            replace_all(s, p, "");
        }
        for (std::size_t at = s.find(".cut-"); at != std::string::npos; at = s.find(".cut-", at + 5)) {
            std::size_t end = s.find_first_not_of("0123456789", at + 5);
            end = end == std::string::npos ? s.size() : end;
            if (end > at + 5) {
                s.replace(at + 5, end - at - 5, "<time>");
            }
        }
        v = s;
    } else if (v.is_structured()) {
        for (auto &x : v) {
            mask_strings(x, dir);
        }
    }
}

/// A stored record (header or event) with its wall-clock times and chained digest masked.
inline json masked_record(json r) {
    for (const char *k : {"time", "createdAt"}) {
        if (r.contains(k)) {
            r[k] = "<time>";
        }
    }
    if (r.contains("chain")) {
        r["chain"] = "<chain>";
    }
    return r;
}

/// The first pointer where `got` differs from `want` (object keys in sorted order), if any.
inline std::optional<std::string> first_difference(const json *want, const json *got, const std::string &at = "") {
    if (want && got && want->is_object() && got->is_object()) {
        json keys = json::object();
        for (const auto *o : {want, got}) {
            for (auto it = o->begin(); it != o->end(); ++it) {
                keys[it.key()] = true;
            }
        }
        for (auto it = keys.begin(); it != keys.end(); ++it) {
            std::string k = it.key();
            replace_all(k, "~", "~0");
            replace_all(k, "/", "~1");
            auto w = want->find(it.key()), g = got->find(it.key());
            if (auto d = first_difference(w == want->end() ? nullptr : &*w, g == got->end() ? nullptr : &*g, at + "/" + k)) {
                return d;
            }
        }
        return std::nullopt;
    }
    if (want && got && want->is_array() && got->is_array()) {
        for (std::size_t i = 0; i < std::max(want->size(), got->size()); ++i) {
            if (auto d = first_difference(i < want->size() ? &(*want)[i] : nullptr, i < got->size() ? &(*got)[i] : nullptr,
                                          at + "/" + std::to_string(i))) {
                return d;
            }
        }
        return std::nullopt;
    }
    if ((want == nullptr) != (got == nullptr) || (want && *want != *got)) {
        return at;
    }
    return std::nullopt;
}

inline std::string shown(const json &doc, const std::string &ptr) {
    json::json_pointer p(ptr);
    if (!doc.contains(p)) {
        return "(nothing)";
    }
    std::string s = doc.at(p).dump();
    return s.size() <= 400 ? s : s.substr(0, 400) + "... (" + std::to_string(s.size()) + " bytes)";
}

/// Compares `transcript` with the golden file of `scenario` (`golden/<stem>.json` next to it);
/// returns what differs first, or nothing. This run's transcript is written to `out_dir`.
inline std::optional<std::string> compare(const std::string &scenario, const json &transcript, const std::string &out_dir) {
    namespace fs = std::filesystem;
    fs::path sc(scenario);
    fs::path path = sc.parent_path() / "golden" / (sc.stem().string() + ".json");
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    std::string mine = (fs::path(out_dir) / path.filename()).string();
    std::ofstream(mine, std::ios::binary | std::ios::trunc) << transcript.dump(2) << '\n';
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return "the golden transcript " + path.string() + " is missing\n  this run's transcript: " + mine;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    json want = json::parse(ss.str());
    expand(want);
    auto d = first_difference(&want, &transcript);
    if (!d) {
        return std::nullopt;
    }
    std::string place = "the transcript";
    if (d->rfind("/ops/", 0) == 0) {
        std::string i = d->substr(5, d->find('/', 5) - 5);
        json::json_pointer op("/ops/" + i + "/op");
        place = "op " + i + " (" + (want.contains(op) ? want.at(op).get<std::string>() : "?") + ")";
    } else if (d->rfind("/final/", 0) == 0) {
        place = "the final " + d->substr(7, d->find('/', 7) - 7);
    }
    return "the transcript differs from " + path.string() + " at " + place + ", " + *d + "\n  expected: " + shown(want, *d) +
           "\n  got:      " + shown(transcript, *d) + "\n  this run's transcript: " + mine;
}

} // namespace golden
