/*
 * llmsession -- C++17 header-only binding over the C ABI (llmsession.h).
 *
 * Move-only RAII wrappers over every handle (Session, Agent, Cancel; errors and replies are
 * handled inside), exceptions (llmsession::Error) carrying the status, message and JSON detail
 * of a failed call, and std::function callbacks behind noexcept trampolines: an exception a
 * callback throws never crosses the C boundary; it fails the reply and is rethrown, as itself,
 * when the library call that ran the callback fails. A callback may answer later, from another
 * thread, through its Reply. JSON goes in as std::string_view and comes out as std::string,
 * except request envelopes and provider bodies, which come out as an OwnedString (the
 * library's buffer, no copy).
 *
 * Documentation: docs/cpp.md. C ABI conventions: docs/abi.md.
 */

#ifndef LLMSESSION_HPP
#define LLMSESSION_HPP

#include "llmsession.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace llmsession {

/// A failed llmsession call: the status (`LLS_ERR_*`), its stable kind name, the message, and
/// the JSON detail object (`kind`, `status`, `message`, `field`, `seq`, `callback`, ...).
class Error : public std::runtime_error {
public:
    /// An error with the given status, message and JSON detail.
    Error(lls_status status, std::string message, std::string detail)
        : std::runtime_error(message), status_(status), message_(std::move(message)),
          detail_(std::move(detail)) {}

    /// The status code (`LLS_ERR_*`).
    lls_status status() const noexcept { return status_; }
    /// The message (also `what()`).
    const std::string &message() const noexcept { return message_; }
    /// The JSON detail object, as text.
    const std::string &detail() const noexcept { return detail_; }
    /// The stable kind name of the status (`"invalid-input"`, `"cancelled"`, ...).
    const char *kind() const noexcept { return kind_name(status_); }

    /// The stable kind name of a status, as in the error detail's `kind` (docs/abi.md): the
    /// library's `lls_status_name` (a static string, never freed; `"unknown"` for a value the
    /// library does not define).
    static const char *kind_name(lls_status status) noexcept { return lls_status_name(status); }

private:
    lls_status status_;
    std::string message_;
    std::string detail_;
};

/// `LLS_ERR_LOCKED`: the session is in use (another writer holds its lock or lease).
class LockedError : public Error {
public:
    using Error::Error;
};

/// `LLS_ERR_CONFLICT`: the store refused an append because another writer appended first; the
/// session appends nothing until `Session::refresh()` or a reopen.
class ConflictError : public Error {
public:
    using Error::Error;
};

/// `LLS_ERR_READ_ONLY`: the session was opened read-only.
class ReadOnlyError : public Error {
public:
    using Error::Error;
};

/// The loaded library's ABI does not match this header: its ABI version differs from the
/// `LLS_ABI_VERSION` this header describes, or it is that version with fewer compatible
/// additions (`lls_abi_minor()` below `LLS_ABI_MINOR`) than the header's inline wrappers call.
class AbiMismatch : public std::runtime_error {
public:
    /// A mismatch between the header's ABI version and the library's.
    AbiMismatch(std::uint32_t header, std::uint32_t library)
        : std::runtime_error("llmsession: the loaded library has ABI version " +
                             std::to_string(library) + ", but llmsession.hpp was built for " +
                             std::to_string(header)),
          header_(header), library_(library) {}
    /// The same ABI version, but the library's minor is below the header's.
    AbiMismatch(std::uint32_t version, std::uint32_t header_minor, std::uint32_t library_minor)
        : std::runtime_error("llmsession: the loaded library has ABI version " +
                             std::to_string(version) + "." + std::to_string(library_minor) +
                             ", but llmsession.hpp needs " + std::to_string(version) + "." +
                             std::to_string(header_minor) + " or later; install a newer libllmsession"),
          header_(version), library_(version), header_minor_(header_minor),
          library_minor_(library_minor) {}
    /// `LLS_ABI_VERSION` of the header.
    std::uint32_t header_version() const noexcept { return header_; }
    /// `lls_abi_version()` of the loaded library.
    std::uint32_t library_version() const noexcept { return library_; }
    /// `LLS_ABI_MINOR` of the header (0 when the versions themselves differ).
    std::uint32_t header_minor() const noexcept { return header_minor_; }
    /// `lls_abi_minor()` of the loaded library (0 when the versions themselves differ).
    std::uint32_t library_minor() const noexcept { return library_minor_; }

private:
    std::uint32_t header_;
    std::uint32_t library_;
    std::uint32_t header_minor_ = 0;
    std::uint32_t library_minor_ = 0;
};

/// The loaded library's version string, e.g. `"0.2.0"`.
inline std::string version() { return lls_version(); }

/// The loaded library's ABI version.
inline std::uint32_t abi_version() noexcept { return lls_abi_version(); }

/// The number of live C handles in the process (a leak check: see docs/abi.md).
inline std::size_t live_handle_count() noexcept { return lls_live_handle_count(); }

/// The loaded library's ABI minor version: its compatible additions to `LLS_ABI_VERSION`
/// (`LLS_ABI_MINOR` is the header's).
inline std::uint32_t abi_minor() noexcept { return lls_abi_minor(); }

/// The number of strings the library has handed out and not yet freed (a leak check;
/// `OwnedString` frees its own when destroyed).
inline std::size_t live_string_count() noexcept { return lls_live_string_count(); }

/// Throws AbiMismatch when the loaded library's ABI differs from this header's, or lacks
/// additions this header calls (its minor is below `LLS_ABI_MINOR`). Checked by every wrapper
/// object created; call it yourself to check at start-up.
inline void check_abi() {
    static const std::uint32_t loaded = lls_abi_version();
    if (loaded != LLS_ABI_VERSION) {
        throw AbiMismatch(LLS_ABI_VERSION, loaded);
    }
    // Asked only once the version matches: a library of another ABI may lack the function.
    static const std::uint32_t minor = lls_abi_minor();
    if (minor < LLS_ABI_MINOR) {
        throw AbiMismatch(LLS_ABI_VERSION, LLS_ABI_MINOR, minor);
    }
}

namespace detail {

/// Turns an owned `lls_error` into an Error (freeing it).
inline Error take_error(lls_status status, lls_error *err) {
    if (err == nullptr) {
        return Error(status, std::string("llmsession call failed with status ") +
                                 std::to_string(status) + " (" + Error::kind_name(status) + ")",
                     "{}");
    }
    Error e(lls_error_code(err), lls_error_message(err), lls_error_detail(err));
    lls_error_free(err);
    return e;
}

/// Throws the error of a failed call (freeing `err`), as its own type where the status has one
/// (LockedError, ConflictError, ReadOnlyError), else as Error.
[[noreturn]] inline void throw_error(lls_status status, lls_error *err) {
    Error e = take_error(status, err);
    switch (e.status()) {
    case LLS_ERR_LOCKED: throw LockedError(e.status(), e.message(), e.detail());
    case LLS_ERR_CONFLICT: throw ConflictError(e.status(), e.message(), e.detail());
    case LLS_ERR_READ_ONLY: throw ReadOnlyError(e.status(), e.message(), e.detail());
    default: throw e;
    }
}

/// Host exceptions captured by the trampolines of one library call.
struct CallContext {
    std::mutex mutex;
    std::exception_ptr first;

    void capture(std::exception_ptr e) noexcept {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) {
            first = std::move(e);
        }
    }
    std::exception_ptr take() noexcept {
        std::lock_guard<std::mutex> lock(mutex);
        return std::exchange(first, nullptr);
    }
};

/// The context of the library call running on this thread (callbacks run on the calling
/// thread, so a trampoline finds the call it serves here).
inline std::shared_ptr<CallContext> &current_call() noexcept {
    thread_local std::shared_ptr<CallContext> current;
    return current;
}

/// Runs one C call: `f(&err)` returns a status. A failure throws the first host exception a
/// callback of this call threw, or else an Error built from `err`.
template <class F> void call(F &&f) {
    auto ctx = std::make_shared<CallContext>();
    auto previous = std::exchange(current_call(), ctx);
    lls_error *err = nullptr;
    lls_status status = f(&err);
    current_call() = std::move(previous);
    if (status == LLS_OK) {
        return;
    }
    if (auto host = ctx->take()) {
        lls_error_free(err);
        std::rethrow_exception(host);
    }
    throw_error(status, err);
}

/// A `(pointer, length)` for a C input buffer (never NULL, even for an empty view).
inline const char *ptr(std::string_view s) noexcept { return s.data() ? s.data() : ""; }

/// An optional JSON argument: an empty view means NULL (the defaults).
inline const char *opt_ptr(std::string_view s) noexcept { return s.empty() ? nullptr : s.data(); }

/// Copies a library-owned output string and frees it.
inline std::string take_string(char *s, std::size_t len) {
    struct Free {
        char *p;
        ~Free() { lls_string_free(p); }
    } guard{s};
    return s ? std::string(s, len) : std::string();
}

/// Runs a C call with a `char **out, size_t *out_len` output and returns the string.
template <class F> std::string call_string(F &&f) {
    char *out = nullptr;
    std::size_t len = 0;
    call([&](lls_error **err) { return f(&out, &len, err); });
    return take_string(out, len);
}

/// The message of an exception (what() when it is a std::exception).
inline std::string exception_message(const std::exception_ptr &e) noexcept {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception &x) {
        try {
            return x.what();
        } catch (...) {
            return {};
        }
    } catch (...) {
        return "a C++ exception that is not a std::exception";
    }
}

struct Trampoline;

} // namespace detail

/// The answer slot of one callback call. Answer it exactly once, with `complete` (JSON) or
/// `fail`. Answered inside the callback, the answer is synchronous; moved out of the callback
/// (into a std::thread, a queue, ...) it becomes pending, and may be answered later from any
/// thread while the library call waits. A Reply destroyed unanswered fails its call with
/// "dropped without an answer". Move-only.
class Reply {
public:
    /// An empty reply (holds nothing; a place to move a pending reply into).
    Reply() noexcept = default;
    Reply(const Reply &) = delete;
    Reply &operator=(const Reply &) = delete;

    /// Takes over `other`'s answer slot; the reply becomes pending (answered from anywhere).
    Reply(Reply &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), ctx_(std::move(other.ctx_)),
          sync_(false) {
        other.moved_ = true;
    }

    /// Answers this reply (if still unanswered) as dropped, then takes over `other`'s slot.
    Reply &operator=(Reply &&other) noexcept {
        if (this != &other) {
            drop();
            handle_ = std::exchange(other.handle_, nullptr);
            ctx_ = std::move(other.ctx_);
            sync_ = false;
            other.moved_ = true;
        }
        return *this;
    }

    /// Fails an unanswered pending reply ("dropped without an answer").
    ~Reply() { drop(); }

    /// Whether this object still holds an unanswered reply.
    bool valid() const noexcept { return handle_ != nullptr; }
    explicit operator bool() const noexcept { return valid(); }

    /// Answers with a copy of the JSON text. Throws Error (and the call then fails with
    /// `LLS_ERR_LISTENER`) when the text is not UTF-8 JSON; throws std::logic_error when the
    /// reply was already answered or moved away.
    void complete(std::string_view json) {
        lls_reply *h = take("complete");
        lls_error *err = nullptr;
        lls_status st = sync_ ? lls_reply_set_json(h, detail::ptr(json), json.size(), &err)
                              : lls_reply_complete(h, detail::ptr(json), json.size(), &err);
        answered_ok_ = (st == LLS_OK);
        if (st != LLS_OK) {
            throw detail::take_error(st, err);
        }
    }

    /// Fails the call with a message (the library call fails with `LLS_ERR_LISTENER`, or the
    /// status of the operation the callback served, and a message that includes this one).
    void fail(std::string_view message) {
        lls_reply *h = take("fail");
        answered_ok_ = false;
        lls_reply_fail(h, detail::ptr(message), message.size(), nullptr);
    }

    /// Fails the call with an exception's message, and has the library call that waits for this
    /// reply rethrow `e` if it fails.
    void fail(std::exception_ptr e) {
        if (ctx_ && e) {
            ctx_->capture(e);
        }
        fail(detail::exception_message(e));
    }

private:
    friend struct detail::Trampoline;

    Reply(lls_reply *handle, std::shared_ptr<detail::CallContext> ctx) noexcept
        : handle_(handle), ctx_(std::move(ctx)), sync_(true) {}

    lls_reply *take(const char *what) {
        if (handle_ == nullptr) {
            throw std::logic_error(std::string("llmsession::Reply::") + what +
                                   ": the reply was already answered or moved away");
        }
        answered_ = true;
        return std::exchange(handle_, nullptr);
    }

    void drop() noexcept {
        if (handle_ != nullptr && !sync_) {
            static const char msg[] = "the C++ reply was dropped without an answer";
            lls_reply_fail(std::exchange(handle_, nullptr), msg, sizeof msg - 1, nullptr);
        }
    }

    lls_reply *handle_ = nullptr;
    std::shared_ptr<detail::CallContext> ctx_;
    bool sync_ = false;
    bool moved_ = false;
    bool answered_ = false;
    bool answered_ok_ = false;
};

/// A callback in its general form: it receives the input JSON and answers through the Reply,
/// synchronously or (moving the Reply elsewhere) later from any thread. An exception thrown
/// while the reply is unanswered fails it and is rethrown by the library call if that fails.
using Callback = std::function<void(std::string_view input_json, Reply &reply)>;

namespace detail {

/// The userdata of a registered callback.
struct Trampoline {
    Callback fn;

    static void free(void *userdata) noexcept { delete static_cast<Trampoline *>(userdata); }

    static std::int32_t run(void *userdata, const char *in, std::size_t len,
                            lls_reply *handle) noexcept {
        auto *self = static_cast<Trampoline *>(userdata);
        std::shared_ptr<CallContext> ctx = current_call();
        Reply reply(handle, ctx);
        try {
            self->fn(std::string_view(in, len), reply);
        } catch (...) {
            std::exception_ptr e = std::current_exception();
            if (ctx) {
                ctx->capture(e);
            }
            if (reply.handle_ != nullptr) {
                std::string msg = exception_message(e);
                lls_reply_fail(std::exchange(reply.handle_, nullptr), msg.data(), msg.size(),
                               nullptr);
                return LLS_CB_ERROR;
            }
        }
        if (reply.moved_) {
            return LLS_CB_PENDING;
        }
        if (reply.handle_ != nullptr) {
            static const char msg[] = "the C++ callback returned without answering its reply";
            lls_reply_fail(std::exchange(reply.handle_, nullptr), msg, sizeof msg - 1, nullptr);
            return LLS_CB_ERROR;
        }
        return reply.answered_ok_ ? LLS_CB_OK : LLS_CB_ERROR;
    }

    /// Boxes `fn` for a registration; the library owns the box from the C call on.
    static void *box(Callback fn) {
        if (!fn) {
            throw std::invalid_argument("llmsession: an empty std::function callback");
        }
        return new Trampoline{std::move(fn)};
    }
};

/// Registers `fn` through a C function taking `(callback, userdata, userdata_free, err)`.
template <class F> void register_callback(Callback fn, F &&reg) {
    void *ud = Trampoline::box(std::move(fn));
    call([&](lls_error **err) { return reg(&Trampoline::run, ud, &Trampoline::free, err); });
}

/// A callback answering with what `fn` returns.
inline Callback returning(std::function<std::string(std::string_view)> fn) {
    if (!fn) {
        throw std::invalid_argument("llmsession: an empty std::function callback");
    }
    return [fn = std::move(fn)](std::string_view in, Reply &reply) { reply.complete(fn(in)); };
}

/// A callback answering with what the future `fn` returns resolves to (or its exception):
/// at once when it is ready, otherwise from a thread that waits for it.
inline Callback from_future(std::function<std::future<std::string>(std::string_view)> fn) {
    if (!fn) {
        throw std::invalid_argument("llmsession: an empty std::function callback");
    }
    return [fn = std::move(fn)](std::string_view in, Reply &reply) {
        std::future<std::string> fut = fn(in);
        if (fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
            reply.complete(fut.get());
            return;
        }
        std::thread([fut = std::move(fut), r = std::move(reply)]() mutable {
            try {
                r.complete(fut.get());
            } catch (...) {
                if (r.valid()) {
                    r.fail(std::current_exception());
                }
            }
        }).detach();
    };
}

/// Owns a C handle and frees it with `Free`.
template <class T, void (*Free)(T *)> class Owned {
public:
    Owned() noexcept = default;
    explicit Owned(T *p) noexcept : p_(p) {}
    Owned(const Owned &) = delete;
    Owned &operator=(const Owned &) = delete;
    Owned(Owned &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Owned &operator=(Owned &&o) noexcept {
        if (this != &o) {
            reset(std::exchange(o.p_, nullptr));
        }
        return *this;
    }
    ~Owned() { reset(); }
    void reset(T *p = nullptr) noexcept { Free(std::exchange(p_, p)); }
    T *get() const noexcept { return p_; }
    T *release() noexcept { return std::exchange(p_, nullptr); }

private:
    T *p_ = nullptr;
};

template <class T> T *require(T *p, const char *what) {
    if (p == nullptr) {
        throw std::logic_error(std::string("llmsession: use of a moved-from or closed ") + what);
    }
    return p;
}

} // namespace detail

/// A cancel token (`lls_cancel`). Trip it from any thread to end the waits of the operations
/// given it (they fail with `LLS_ERR_CANCELLED`). Move-only; stays tripped.
class Cancel {
public:
    /// A new, untripped token.
    Cancel() {
        check_abi();
        lls_cancel *p = nullptr;
        detail::call([&](lls_error **err) { return lls_cancel_new(&p, err); });
        h_.reset(p);
    }
    /// Trips the token (idempotent; any thread, any time).
    void trip() const {
        detail::call([&](lls_error **err) { return lls_cancel_trip(get(), err); });
    }
    /// Whether the token was tripped.
    bool is_tripped() const {
        bool out = false;
        detail::call([&](lls_error **err) { return lls_cancel_is_tripped(get(), &out, err); });
        return out;
    }
    /// The C handle (still owned by this object).
    const lls_cancel *get() const { return detail::require(h_.get(), "llmsession::Cancel"); }

private:
    detail::Owned<lls_cancel, lls_cancel_free> h_;
};

namespace detail {
inline const lls_cancel *cancel_ptr(const Cancel *c) { return c ? c->get() : nullptr; }
} // namespace detail

class Agent;
struct Child;

/// A string the library allocated and handed over without a copy (a request envelope, half a
/// megabyte at 1k messages): move-only, freed with `lls_string_free` when destroyed. Read it as
/// a `std::string_view` (`view()`, `data()`/`size()`, `begin()`/`end()`, or the implicit
/// conversion), for free; `str()` or the implicit conversion to `std::string` copies it, so
/// `std::string s = agent.next_request();` keeps working.
class OwnedString {
public:
    /// An empty string.
    OwnedString() noexcept = default;
    /// Adopts `p` (`len` bytes, NUL-terminated), which `lls_string_free` must release.
    OwnedString(char *p, std::size_t len) noexcept : p_(p), n_(p ? len : 0) {}
    OwnedString(const OwnedString &) = delete;
    OwnedString &operator=(const OwnedString &) = delete;
    /// Takes over `other`'s buffer (`other` becomes empty).
    OwnedString(OwnedString &&other) noexcept
        : p_(std::exchange(other.p_, nullptr)), n_(std::exchange(other.n_, 0)) {}
    /// Frees the current buffer, then takes over `other`'s.
    OwnedString &operator=(OwnedString &&other) noexcept {
        if (this != &other) {
            lls_string_free(p_);
            p_ = std::exchange(other.p_, nullptr);
            n_ = std::exchange(other.n_, 0);
        }
        return *this;
    }
    ~OwnedString() { lls_string_free(p_); }

    /// The bytes (never NULL; NUL-terminated).
    const char *data() const noexcept { return p_ ? p_ : ""; }
    /// As `data()`.
    const char *c_str() const noexcept { return data(); }
    /// Length in bytes, without the NUL.
    std::size_t size() const noexcept { return n_; }
    /// As `size()`.
    std::size_t length() const noexcept { return n_; }
    /// Whether it holds no bytes.
    bool empty() const noexcept { return n_ == 0; }
    /// Iteration over the bytes.
    const char *begin() const noexcept { return data(); }
    /// End of the bytes.
    const char *end() const noexcept { return data() + n_; }
    /// A view of the bytes (valid while this object lives and is not moved from).
    std::string_view view() const noexcept { return {data(), n_}; }
    /// A copy as a `std::string`.
    std::string str() const { return std::string(data(), n_); }
    /// A view of the bytes, without a copy.
    operator std::string_view() const noexcept { return view(); }
    /// A copy as a `std::string` (for code that keeps the request as one).
    operator std::string() const { return str(); }

    /// Byte-wise comparison with any string.
    friend bool operator==(const OwnedString &a, std::string_view b) noexcept { return a.view() == b; }
    /// Byte-wise comparison with any string.
    friend bool operator==(std::string_view a, const OwnedString &b) noexcept { return a == b.view(); }
    /// Byte-wise comparison with any string.
    friend bool operator!=(const OwnedString &a, std::string_view b) noexcept { return a.view() != b; }
    /// Byte-wise comparison with any string.
    friend bool operator!=(std::string_view a, const OwnedString &b) noexcept { return a != b.view(); }

private:
    char *p_ = nullptr;
    std::size_t n_ = 0;
};

/// What a request is for (`lls_request_info.purpose`).
enum class Purpose : std::uint32_t {
    /// A conversation step (every request `Agent::next_body` builds).
    conversation = LLS_PURPOSE_CONVERSATION,
    /// A compaction's summarisation request.
    compaction = LLS_PURPOSE_COMPACTION,
    /// A keep-warm request of the cache clock (`Agent::keepalive_body`).
    keepalive = LLS_PURPOSE_KEEPALIVE,
};

/// What a built request is, from `lls_request_info` (plain data, no JSON to parse): the same
/// facts as `Agent::request_info()` gives as JSON.
struct RequestInfo {
    /// The agent instance (1, 2, ...).
    std::uint64_t instance = 0;
    /// The turn number.
    std::uint64_t turn = 0;
    /// The step number within the turn.
    std::uint64_t step = 0;
    /// The seq of the request's `step/start`.
    std::uint64_t step_seq = 0;
    /// What the request is for.
    Purpose purpose = Purpose::conversation;
    /// How many leading messages are the session prefix.
    std::uint32_t prefix_len = 0;
    /// Number of messages.
    std::uint32_t message_count = 0;
    /// How many leading messages the request shares with the previous one (a cache hit).
    std::uint32_t shared_messages = 0;
    /// The length in bytes of the logged envelope.
    std::size_t envelope_len = 0;
    /// The envelope's digest, `"sha256:"` and 64 lowercase hex digits.
    std::string digest;

    /// A copy of the C record.
    static RequestInfo from(const lls_request_info &c) {
        RequestInfo r;
        r.instance = c.instance;
        r.turn = c.turn;
        r.step = c.step;
        r.step_seq = c.step_seq;
        r.purpose = static_cast<Purpose>(c.purpose);
        r.prefix_len = c.prefix_len;
        r.message_count = c.message_count;
        r.shared_messages = c.shared_messages;
        r.envelope_len = c.envelope_len;
        r.digest = c.digest;
        return r;
    }
};

/// A request built as the provider's body (`Agent::next_body`): the bytes to POST, the
/// library's buffer itself (no copy: the agent's renderer keeps it and renders the next body
/// from it, so read it and never write into it), and what the request is.
struct Body {
    /// The provider body's JSON.
    OwnedString body;
    /// The request it renders.
    RequestInfo info;
};

/// What a recorded provider response was (`Agent::record_body`, `Agent::record_stream`).
struct Recorded {
    /// The seq of its `assistant/message`.
    std::uint64_t seq = 0;
    /// How many tool calls it made (report each one's result with `record_tool_result`).
    std::uint32_t tool_calls = 0;
    /// The response's finish reason, normalised (`"stop"`, `"tool-calls"`, `"max-tokens"`,
    /// `"pause-turn"`: the turn is not over, build the next request of the same turn,
    /// `"refusal"`, `"context-overflow"`, `"content-filter"`, `"incomplete"` for a cut stream
    /// recorded with `partial`), a provider's own word, or empty when the response gives none.
    /// The log does not keep it.
    std::string finish_reason;

    /// From the C record.
    static Recorded of(const lls_recorded_info &info) {
        Recorded r;
        r.seq = info.seq;
        r.tool_calls = info.tool_calls;
        std::size_t n = 0;
        while (n < sizeof info.finish_reason && info.finish_reason[n] != '\0') {
            ++n;
        }
        r.finish_reason.assign(info.finish_reason, n);
        return r;
    }
};

class Stream;

/// A session (`lls_session`): the append-only event log of one conversation, in memory, in a
/// JSONL file or in a host store. Move-only; thread-safe as the C session is.
class Session {
public:
    /// A new in-memory session; `opts_json` `{"id"?, "durability"?}` (empty: defaults).
    static Session memory(std::string_view opts_json = {}) {
        return make([&](lls_session **out, lls_error **err) {
            return lls_session_new_memory(detail::opt_ptr(opts_json), opts_json.size(), out, err);
        });
    }

    /// Opens (or creates) the session in the JSONL file at `path`. A writing open holds the
    /// file's lock until the session is freed: a second writer gets LockedError. `opts_json`
    /// `{"id"?, "durability"?, "readOnly"?, "mode"?, "maxBytes"?}`: with `readOnly` nothing is
    /// locked, created or changed (appends throw ReadOnlyError; `refresh()` follows the writer).
    static Session open_file(std::string_view path, std::string_view opts_json = {}) {
        return make([&](lls_session **out, lls_error **err) {
            return lls_session_open_file(detail::ptr(path), path.size(),
                                         detail::opt_ptr(opts_json), opts_json.size(), out, err);
        });
    }

    /// Opens (or creates) a session kept in a host store: `store` receives `{"op":"load"}`,
    /// `{"op":"append","sessionId","seq","records","header"?}`, `{"op":"sync"}`,
    /// `{"op":"undo","from"}`, `{"op":"cut","keep","reason"}` and answers through its Reply
    /// (see `lls_session_open_store`; `{"conflict": why}` refuses a stale append). It runs while
    /// the session is locked.
    static Session open_store(Callback store, std::string_view opts_json = {}) {
        check_abi();
        void *ud = detail::Trampoline::box(std::move(store));
        lls_session *p = nullptr;
        detail::call([&](lls_error **err) {
            return lls_session_open_store(&detail::Trampoline::run, ud, &detail::Trampoline::free,
                                          detail::opt_ptr(opts_json), opts_json.size(), &p, err);
        });
        return Session(p);
    }

    /// As `open_store`, with a store that returns its answer as JSON text.
    static Session open_store(std::function<std::string(std::string_view)> store,
                              std::string_view opts_json = {}) {
        return open_store(detail::returning(std::move(store)), opts_json);
    }

    /// Opens (or, for a writer, creates) a session in the store a URL names
    /// (`lls_session_open_url`): `file:PATH` or
    /// `postgres://user:password@host:port/dbname?session=ID`. `opts_json` `{"id"?,
    /// "readOnly"?, "create"?, "durability"?, "mode"?, "maxBytes"?}`. A second writer throws
    /// Error with status `LLS_ERR_LOCKED`; a read-only session's appends `LLS_ERR_READ_ONLY`.
    static Session open_url(std::string_view url, std::string_view opts_json = {}) {
        return make([&](lls_session **out, lls_error **err) {
            return lls_session_open_url(detail::ptr(url), url.size(), detail::opt_ptr(opts_json),
                                        opts_json.size(), out, err);
        });
    }

    /// Forks into a new session: `opts_json` `{"seedLength"?, "path"?, "url"?, "id"?,
    /// "durability"?}` (`url`: into the store it names, e.g. a new session in a database).
    Session fork(std::string_view opts_json = {}) const {
        return make([&](lls_session **out, lls_error **err) {
            return lls_session_fork(get(), detail::opt_ptr(opts_json), opts_json.size(), out, err);
        });
    }

    /// What loading found and repaired, as JSON.
    std::string load_report() const { return str(lls_session_load_report); }
    /// The session id (plain text, not JSON).
    std::string id() const { return str(lls_session_id); }
    /// The header record (the log's first line), as JSON.
    std::string info() const { return str(lls_session_info); }
    /// The derived history, a JSON array of messages.
    std::string history() const { return str(lls_session_history); }
    /// The folded request header as JSON (`null` before the first request).
    std::string header() const { return str(lls_session_header); }
    /// Counters over the log, as JSON.
    std::string stats() const { return str(lls_session_stats); }
    /// Rebuilds every recorded request and compares digests; throws on a divergence.
    std::string verify() const { return str(lls_session_verify); }

    /// Explains every request of the log (`lls_session_explain`): the cacheable prefix shared
    /// with the request before, where and why they part, expected beside reported cached
    /// tokens, and the prompt spend by cause, as JSON. `opts_json`: `{"tokenizer"?: path,
    /// "prices"?, "cacheRules"?, "tree"?: bool}` (`tree`: the tree rooted at this session, its
    /// children spawned in this process, per node and rolled up).
    std::string explain(std::string_view opts_json = {}) const {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_session_explain(get(), detail::opt_ptr(opts_json), opts_json.size(), out,
                                       len, err);
        });
    }

    /// Events with seq in `[from, to)` as a JSON array (`to` defaults to the end).
    std::string events(std::uint64_t from = 0, std::uint64_t to = UINT64_MAX) const {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_session_events(get(), from, to, out, len, err);
        });
    }

    /// Appends an event `{"type","data","surfaceOp"?,"sources"?}`; returns its seq.
    std::uint64_t append(std::string_view event_json) {
        std::uint64_t seq = 0;
        detail::call([&](lls_error **err) {
            return lls_session_append(get(), detail::ptr(event_json), event_json.size(), &seq,
                                      err);
        });
        return seq;
    }

    /// Makes every appended event durable now.
    void sync() {
        detail::call([&](lls_error **err) { return lls_session_sync(get(), err); });
    }

    /// Reads what another writer appended since; returns the number of new events (see
    /// `lls_session_refresh`).
    std::uint64_t refresh() {
        std::uint64_t n = 0;
        detail::call([&](lls_error **err) { return lls_session_refresh(get(), &n, err); });
        return n;
    }

    /// The whole log as JSONL text, each record exactly as stored (see `lls_session_export`).
    std::string export_jsonl() const { return str(lls_session_export); }

    /// The C handle (still owned by this object).
    lls_session *get() const { return detail::require(h_.get(), "llmsession::Session"); }
    /// Gives up ownership of the C handle.
    lls_session *release() noexcept { return h_.release(); }
    /// Whether this object holds a session.
    explicit operator bool() const noexcept { return h_.get() != nullptr; }

    /// Adopts a C handle (freed by this object).
    explicit Session(lls_session *adopt) noexcept : h_(adopt) {}

private:
    template <class F> static Session make(F &&f) {
        check_abi();
        lls_session *p = nullptr;
        detail::call([&](lls_error **err) { return f(&p, err); });
        return Session(p);
    }

    std::string str(lls_status (*fn)(const lls_session *, char **, std::size_t *,
                                     lls_error **)) const {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return fn(get(), out, len, err);
        });
    }

    detail::Owned<lls_session, lls_session_free> h_;
};

/// The sessions of the store a URL names, as a JSON array ordered by id
/// (`lls_store_list_sessions`); `opts_json` `{"after"?, "limit"?, "parent"?}` pages them
/// (`parent`: only that session's children and forks).
inline std::string list_sessions(std::string_view url, std::string_view opts_json = {}) {
    check_abi();
    return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
        return lls_store_list_sessions(detail::ptr(url), url.size(), detail::opt_ptr(opts_json),
                                       opts_json.size(), out, len, err);
    });
}

/// An agent instance (`lls_agent`) over a session: turns, steps, requests, compaction.
/// Move-only; destroying it disposes the instance (as `lls_agent_free`).
class Agent {
public:
    /// A new instance; `opts_json` as for `lls_agent_new` (`{"config", "system"?, "tools"?,
    /// "checkRequests"?, "policy"?, "tokenizer"?}`).
    Agent(const Session &session, std::string_view opts_json) {
        check_abi();
        lls_agent *p = nullptr;
        detail::call([&](lls_error **err) {
            return lls_agent_new(session.get(), detail::ptr(opts_json), opts_json.size(), &p,
                                 err);
        });
        h_.reset(p);
    }

    /// Adopts a C handle (freed by this object).
    explicit Agent(lls_agent *adopt) noexcept : h_(adopt) {}

    /// Replaces the options `{"config","system"?,"tools"?,"checkRequests"?}`.
    void set_options(std::string_view opts_json) { json_call(lls_agent_set_options, opts_json); }
    /// Sets the compaction policy (a policy, a table, or `null`).
    void set_policy(std::string_view policy_json) { json_call(lls_agent_set_policy, policy_json); }
    /// Counts tokens with a HuggingFace tokenizer.json from now on.
    void set_tokenizer(std::string_view path) { json_call(lls_agent_set_tokenizer, path); }
    /// Back to the built-in token estimate.
    void clear_token_counter() {
        detail::call([&](lls_error **err) { return lls_agent_clear_token_counter(get(), err); });
    }

    /// Adds a session prefix listener in its general form (answers a JSON array of messages).
    void add_prefix_listener(Callback fn) {
        detail::register_callback(std::move(fn), [&](auto f, void *ud, auto fr, lls_error **e) {
            return lls_agent_add_prefix_listener(get(), f, ud, fr, e);
        });
    }
    /// Adds a prefix listener: receives `{"rest","instance","turn"}`, returns the extended
    /// JSON array of messages (throw to fail).
    void add_prefix_listener(std::function<std::string(std::string_view)> fn) {
        add_prefix_listener(detail::returning(std::move(fn)));
    }

    /// Adds a pre-step listener in its general form (answer `null`).
    void add_pre_step_listener(Callback fn) {
        detail::register_callback(std::move(fn), [&](auto f, void *ud, auto fr, lls_error **e) {
            return lls_agent_add_pre_step_listener(get(), f, ud, fr, e);
        });
    }
    /// Adds a pre-step hook: receives `{"prefix","system","tools","turn","step"}` (throw to
    /// fail the request).
    void add_pre_step_listener(std::function<void(std::string_view)> fn) {
        if (!fn) {
            throw std::invalid_argument("llmsession: an empty std::function callback");
        }
        add_pre_step_listener(Callback([fn = std::move(fn)](std::string_view in, Reply &r) {
            fn(in);
            r.complete("null");
        }));
    }

    /// Sets the summariser in its general form: it receives `{"request","provider","model",
    /// "maxTokens","digest","sharedMessages","prefixLen"}` and answers `{"text","usage"?,
    /// "provider"?,"model"?,"truncated"?}`, synchronously or later through its Reply.
    void set_summariser(Callback fn) {
        detail::register_callback(std::move(fn), [&](auto f, void *ud, auto fr, lls_error **e) {
            return lls_agent_set_summariser(get(), f, ud, fr, e);
        });
    }
    /// Sets a summariser that returns its answer JSON.
    void set_summariser(std::function<std::string(std::string_view)> fn) {
        set_summariser(detail::returning(std::move(fn)));
    }
    /// Sets a summariser that returns a future of its answer JSON (e.g. from std::async); the
    /// library call waits for it (cancellable through the operation's Cancel).
    void set_summariser(std::function<std::future<std::string>(std::string_view)> fn) {
        set_summariser(detail::from_future(std::move(fn)));
    }

    /// Sets a host token counter in its general form (answers a count or `{"tokens": n}`).
    void set_token_counter(Callback fn) {
        detail::register_callback(std::move(fn), [&](auto f, void *ud, auto fr, lls_error **e) {
            return lls_agent_set_token_counter(get(), f, ud, fr, e);
        });
    }
    /// Sets a token counter: receives one item (`{"kind":"system"|"tools"|"message",...}`)
    /// and returns its token count.
    void set_token_counter(std::function<std::uint64_t(std::string_view)> fn) {
        if (!fn) {
            throw std::invalid_argument("llmsession: an empty std::function callback");
        }
        set_token_counter(Callback([fn = std::move(fn)](std::string_view in, Reply &r) {
            r.complete(std::to_string(fn(in)));
        }));
    }

    /// Opens a turn with a user message; returns the turn number.
    std::uint64_t start_turn(std::string_view message_json) {
        std::uint64_t turn = 0;
        detail::call([&](lls_error **err) {
            return lls_agent_start_turn(get(), detail::ptr(message_json), message_json.size(),
                                        &turn, err);
        });
        return turn;
    }

    /// Builds the next request; returns its envelope JSON, the library's buffer itself (no
    /// copy; `std::string s = agent.next_request();` makes one).
    OwnedString next_request(const Cancel *cancel = nullptr) {
        char *out = nullptr;
        std::size_t len = 0;
        detail::call([&](lls_error **err) {
            return lls_agent_next_request(get(), detail::cancel_ptr(cancel), &out, &len, err);
        });
        return OwnedString(out, len);
    }
    /// As above, with a cancel token.
    OwnedString next_request(const Cancel &cancel) { return next_request(&cancel); }

    /// Describes the last request built (`prefixLen`, `sharedMessages`, `digest`, ...).
    std::string request_info() const { return str(lls_agent_request_info); }

    /// The last request's `prefixLen` (how many leading messages are the session prefix), the
    /// number `render` takes; read from `request_info()`.
    std::size_t prefix_len() const {
        std::string info = request_info();
        static constexpr std::string_view key = "\"prefixLen\":";
        std::size_t at = info.find(key);
        if (at == std::string::npos) {
            throw std::runtime_error("llmsession: request_info has no prefixLen: " + info);
        }
        return static_cast<std::size_t>(std::stoull(info.substr(at + key.size())));
    }

    /// Gives the agent a provider body format for `next_body` and `record_body`: `"openai"`,
    /// `"openai-responses"`, `"anthropic"`, `"gemini"` or `"gemini-interactions"`, with render options JSON as for
    /// `render_with_options` except `prefixLen`, which is the agent's own (empty: the defaults).
    /// Each history message is then rendered once and reused. Setting it again replaces it;
    /// a failed call leaves the renderer as it was.
    void set_renderer(std::string_view renderer, std::string_view options_json = {}) {
        detail::call([&](lls_error **err) {
            return lls_agent_set_renderer(get(), detail::ptr(renderer), renderer.size(),
                                          detail::opt_ptr(options_json), options_json.size(),
                                          err);
        });
    }

    /// Builds the next request exactly as `next_request` does (logged and checked the same
    /// way) and returns the provider body ready to POST, the library's buffer itself (no
    /// copy), with what the request is. Throws Error with `LLS_ERR_OUT_OF_ORDER` when no
    /// renderer was set, `LLS_ERR_INVALID_INPUT` for a history the renderer cannot render
    /// (nothing is logged then).
    Body next_body(const Cancel *cancel = nullptr) {
        char *out = nullptr;
        std::size_t len = 0;
        lls_request_info info{};
        detail::call([&](lls_error **err) {
            return lls_agent_next_body(get(), detail::cancel_ptr(cancel), &out, &len, &info,
                                       err);
        });
        OwnedString body(out, len);
        return Body{std::move(body), RequestInfo::from(info)};
    }
    /// As above, with a cancel token.
    Body next_body(const Cancel &cancel) { return next_body(&cancel); }

    /// The envelope of the last request this agent built (by `next_body` or `next_request`):
    /// the logged bytes whose digest `RequestInfo::digest` is, written again on demand. Throws
    /// Error with `LLS_ERR_OUT_OF_ORDER` before any request.
    OwnedString last_envelope() const {
        char *out = nullptr;
        std::size_t len = 0;
        detail::call([&](lls_error **err) {
            return lls_agent_last_envelope(get(), &out, &len, err);
        });
        return OwnedString(out, len);
    }

    /// Records the provider's raw, non-streamed response body for the open step, parsed once
    /// with the renderer's format. Throws Error: `LLS_ERR_OUT_OF_ORDER` (no renderer, no open
    /// step), `LLS_ERR_MALFORMED_JSON`, `LLS_ERR_INVALID_INPUT` (a body of another format or
    /// without a message), `LLS_ERR_INVALID_UTF8`; a failed call changes nothing.
    Recorded record_body(std::string_view body) {
        lls_recorded_info info{};
        detail::call([&](lls_error **err) {
            return lls_agent_record_body_info(get(), detail::ptr(body), body.size(), &info, err);
        });
        return Recorded::of(info);
    }

    /// Records the response a stream accumulated, at its end: the stream is finished as
    /// `Stream::finish(partial)` finishes it (and refuses further bytes, even when this
    /// throws). Its format must be the agent's renderer when one is set
    /// (`LLS_ERR_INVALID_INPUT`, detail field `stream`).
    Recorded record_stream(Stream &stream, bool partial = false);

    /// Records the provider's response `{"message","usage"?,"finishReason"?}` (what
    /// `parse_response` returns); returns the message's seq.
    std::uint64_t record_response(std::string_view response_json) {
        std::uint64_t seq = 0;
        detail::call([&](lls_error **err) {
            return lls_agent_record_response(get(), detail::ptr(response_json),
                                             response_json.size(), &seq, err);
        });
        return seq;
    }

    /// Records a tool result `{"callId","content"|"text","isError"?}`; returns how many results
    /// were written to the log.
    std::size_t record_tool_result(std::string_view result_json) {
        std::size_t written = 0;
        detail::call([&](lls_error **err) {
            return lls_agent_record_tool_result(get(), detail::ptr(result_json),
                                                result_json.size(), &written, err);
        });
        return written;
    }

    /// Adds host context (a user message); returns its seq, or nothing when deferred.
    std::optional<std::uint64_t> inject(std::string_view message_json) {
        std::uint64_t seq = 0;
        detail::call([&](lls_error **err) {
            return lls_agent_inject(get(), detail::ptr(message_json), message_json.size(), &seq,
                                    err);
        });
        if (seq == LLS_SEQ_NONE) {
            return std::nullopt;
        }
        return seq;
    }

    /// Records a provider failure `{"message","overflow"?}`; true when the request should be
    /// asked for again (an overflow that was compacted).
    bool provider_error(std::string_view error_json, const Cancel *cancel = nullptr) {
        std::int32_t retry = 0;
        detail::call([&](lls_error **err) {
            return lls_agent_provider_error(get(), detail::ptr(error_json), error_json.size(),
                                            detail::cancel_ptr(cancel), &retry, err);
        });
        return retry != 0;
    }

    /// Ends the open turn (`"completed"`, `"aborted"`, `"error"`, ...).
    void end_turn(std::string_view reason = "completed") {
        detail::call([&](lls_error **err) {
            return lls_agent_end_turn(get(), detail::ptr(reason), reason.size(), err);
        });
    }

    /// Compacts now; `opts_json` `{"span"?: [start, end]}` (empty: the head region). Returns
    /// `{"outcome","span","seqs","request",...}`.
    std::string compact(std::string_view opts_json = {}, const Cancel *cancel = nullptr) {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_agent_compact(get(), detail::opt_ptr(opts_json), opts_json.size(),
                                     detail::cancel_ptr(cancel), out, len, err);
        });
    }

    /// Native compaction (docs/cpp.md, "Native compaction"; ABI 2 minor 6): builds a request of
    /// the route's own compaction (Anthropic's on-demand compaction, OpenAI's
    /// `/responses/compact`) over the whole history and logs its start. JSON `{"format",
    /// "endpoint", "betas", "envelope", "body", "digest", "span", "seqs", "messageCount",
    /// "sharedMessages"}`: POST `body` to `endpoint` with the `anthropic-beta` flags in `betas`.
    std::string begin_native_compaction() {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_agent_native_compaction_begin(get(), out, len, err);
        });
    }

    /// Records the provider's raw answer to the native compaction request in flight: JSON
    /// `{"outcome": "landed" | "failed", "format", "span", "seqs", "error"?, "stopReason"?}`.
    std::string record_native_compaction(std::string_view body) {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_agent_native_compaction_record(get(), body.data(), body.size(), out, len,
                                                      err);
        });
    }

    /// Reports that the native compaction request in flight failed (`why`); JSON as for
    /// `record_native_compaction`.
    std::string fail_native_compaction(std::string_view why = {}) {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_agent_native_compaction_fail(get(), detail::opt_ptr(why), why.size(), out,
                                                    len, err);
        });
    }

    /// Asks the cache clock what to do now about the provider's cache (docs/caching.md, "The
    /// cache clock"), from the session's log: `opts_json` `{"now"?, "prices"?, "cacheRules"?,
    /// "returnModel"?, "marginMs"?, "tierBilling"?, "compaction"?, "record"?, "keepWarmBudget"?,
    /// "keepWarmTiers"?}` (empty: every
    /// default). Returns `{"decision", "tier"?, "reason", "warmUntil"?, "nextDecisionAt"?,
    /// "options", "state", "recorded"?, ...}`: `"keep-warm"` → `keepalive_body`, `"compact"` →
    /// `compact_idle`, `"tier"` → the render option `cacheTtl`; ask again at `nextDecisionAt`.
    /// A bad option throws Error with `LLS_ERR_INVALID_INPUT` naming the field.
    std::string cache_clock(std::string_view opts_json = {}) {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_agent_cache_clock(get(), detail::opt_ptr(opts_json), opts_json.size(), out,
                                         len, err);
        });
    }

    /// The keep-warm request the cache clock decided, as the provider body: the last
    /// conversation request again, every cacheable byte the same, its output limit at the
    /// provider's minimum (`info.purpose` is `Purpose::keepalive`); when the decision named a
    /// longer `tier`, its cache marks carry that tier's TTL. Send it, then record the
    /// answer with `record_body` (it never enters the history).
    Body keepalive_body() {
        char *out = nullptr;
        std::size_t len = 0;
        lls_request_info info{};
        detail::call([&](lls_error **err) { return lls_agent_keepalive_body(get(), &out, &len, &info, err); });
        OwnedString body(out, len);
        return Body{std::move(body), RequestInfo::from(info)};
    }

    /// The compaction the cache clock decided (`"compact"`): `compact` with
    /// `{"trigger":"idle"}`. Throws Error with `LLS_ERR_OUT_OF_ORDER` without that decision.
    std::string compact_idle(const Cancel *cancel = nullptr) { return compact(R"({"trigger":"idle"})", cancel); }

    /// Measures the prompt the next request would carry, as JSON.
    std::string measure() {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_agent_measure(get(), out, len, err);
        });
    }
    /// Statistics of this instance, as JSON.
    std::string stats() const { return str(lls_agent_stats); }
    /// The frozen session prefix (JSON array), or `null` before it was composed.
    std::string prefix() const { return str(lls_agent_prefix); }

    /// Disposes the instance (also from inside its own callbacks); idempotent.
    void dispose() {
        detail::call([&](lls_error **err) { return lls_agent_dispose(get(), err); });
    }

    /// Spawns a child agent from one of this agent's open tool calls, or at a turn boundary
    /// (`lls_agent_spawn`; `opts_json` `{"callId"?, "directive", "placeholder"?, "id"?,
    /// "durability"?, "path"?, "url"?, "cacheTtl"?, "maxTurns"?}`). Its first request extends
    /// this agent's last one; it keeps this agent's model, tools and system. Drive it from a
    /// thread (or `std::async`) of its own, then `finish_child` it. Defined after `Child`.
    Child spawn(std::string_view opts_json);

    /// Ends `child`'s open turn and records its answer as this agent's result of the call it
    /// answers (`lls_agent_finish_child`; `opts_json` `{"error"?}`); returns `{"child",
    /// "callId"?, "answer", "isError", "recorded"}`. Children may finish from their own
    /// threads, in any order: results are logged in call order.
    std::string finish_child(Agent &child, std::string_view opts_json = {}) {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_agent_finish_child(get(), child.get(), detail::opt_ptr(opts_json),
                                          opts_json.size(), out, len, err);
        });
    }

    /// An agent over `session` that sends what its last request carried (`lls_agent_new`
    /// without `config`): a child woken in another process. `opts_json` `{"checkRequests"?,
    /// "policy"?, "tokenizer"?}`.
    static Agent wake(const Session &session, std::string_view opts_json = "{}") {
        return Agent(session, opts_json);
    }

    /// The C handle (still owned by this object).
    lls_agent *get() const { return detail::require(h_.get(), "llmsession::Agent"); }
    /// Gives up ownership of the C handle.
    lls_agent *release() noexcept { return h_.release(); }
    /// Whether this object holds an agent.
    explicit operator bool() const noexcept { return h_.get() != nullptr; }

private:
    void json_call(lls_status (*fn)(lls_agent *, const char *, std::size_t, lls_error **),
                   std::string_view json) {
        detail::call(
            [&](lls_error **err) { return fn(get(), detail::ptr(json), json.size(), err); });
    }

    std::string str(lls_status (*fn)(const lls_agent *, char **, std::size_t *,
                                     lls_error **)) const {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return fn(get(), out, len, err);
        });
    }

    detail::Owned<lls_agent, lls_agent_free> h_;
};

/// A child agent and its session (`Agent::spawn`). Destroy the agent before the session (the
/// members are in that order of destruction).
struct Child {
    Session session;
    Agent agent;
};

inline Child Agent::spawn(std::string_view opts_json) {
    lls_session *s = nullptr;
    lls_agent *a = nullptr;
    detail::call([&](lls_error **err) {
        return lls_agent_spawn(get(), detail::ptr(opts_json), opts_json.size(), &s, &a, err);
    });
    return Child{Session(s), Agent(a)};
}

/// Verifies a stored JSONL log without opening it; returns what was checked, as JSON.
inline std::string verify_file(std::string_view path) {
    check_abi();
    return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
        return lls_verify_file(detail::ptr(path), path.size(), out, len, err);
    });
}

/// One streamed provider response (`lls_stream`): feed it the raw bytes of the event stream as
/// they arrive, in any chunking; take the deltas for display; `finish()` gives
/// `{"message","usage"?,"finishReason"?}`, what `parse_response` gives for the non-streamed
/// body, for `Agent::record_response` as it is. Formats: `"openai"` (chat completion chunks),
/// `"openai-responses"`, `"anthropic"`, `"gemini"`, `"gemini-interactions"`. Move-only; calls on one stream are
/// serialised by the library.
class Stream {
public:
    /// A stream accumulator for one response in `format`.
    explicit Stream(std::string_view format) {
        check_abi();
        lls_stream *p = nullptr;
        detail::call([&](lls_error **err) { return lls_stream_new(detail::ptr(format), format.size(), &p, err); });
        h_.reset(p);
    }

    /// Feeds the next bytes. Throws `Error` for a malformed event or the provider's error event
    /// (`detail()` has `"stream":"malformed"` or `"provider-error"`, with `providerError` and
    /// `overflow`); once it threw, every later call throws the same.
    void feed(std::string_view bytes) { feed(bytes.data(), bytes.size()); }
    /// Feeds `len` bytes at `data`.
    void feed(const void *data, std::size_t len) {
        static const char empty = 0;
        const char *p = len ? static_cast<const char *>(data) : &empty;
        detail::call([&](lls_error **err) { return lls_stream_feed(get(), p, len, err); });
    }
    /// Feeds bytes: `stream << chunk`.
    Stream &operator<<(std::string_view bytes) {
        feed(bytes);
        return *this;
    }

    /// The next delta as JSON (`{"type","index","text"?,"id"?,"name"?,"arguments"?}`), or no
    /// value when every delta so far was taken.
    std::optional<std::string> next_delta() {
        char *out = nullptr;
        std::size_t len = 0;
        detail::call([&](lls_error **err) { return lls_stream_next_delta(get(), &out, &len, err); });
        if (out == nullptr) {
            return std::nullopt;
        }
        return detail::take_string(out, len);
    }

    /// Calls `f(delta_json)` for every delta not taken yet.
    template <class F> void for_each_delta(F &&f) {
        while (auto d = next_delta()) {
            f(*d);
        }
    }

    /// Ends the stream and returns the response. Throws for a stream that failed or ended
    /// before its terminal event (`"stream":"incomplete"`), unless `partial`: then the message
    /// so far, with `"finishReason":"incomplete"`.
    std::string finish(bool partial = false) {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_stream_finish(get(), partial, out, len, err);
        });
    }

    /// The provider body rebuilt so far, in the non-streamed shape.
    std::string body() const {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_stream_body(get(), out, len, err);
        });
    }

    /// The C handle (still owned by this object).
    lls_stream *get() const { return detail::require(h_.get(), "llmsession::Stream"); }

private:
    detail::Owned<lls_stream, lls_stream_free> h_;
};

inline Recorded Agent::record_stream(Stream &stream, bool partial) {
    lls_recorded_info info{};
    detail::call([&](lls_error **err) {
        return lls_agent_record_stream_info(get(), stream.get(), partial, &info, err);
    });
    return Recorded::of(info);
}

/// Renders a request envelope into a provider body (`"openai"`, `"openai-responses"`,
/// `"anthropic"`, `"gemini"` or `"gemini-interactions"`).
inline std::string render(std::string_view renderer, std::string_view envelope_json,
                          std::size_t prefix_len) {
    check_abi();
    return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
        return lls_render(detail::ptr(renderer), renderer.size(), detail::ptr(envelope_json),
                          envelope_json.size(), prefix_len, out, len, err);
    });
}

/// Renders a request envelope with render options as JSON (`lls_render_with_options`):
/// `{"prefixLen"?, "promptCacheKey"?: true | false | "key", "promptCacheRetention"?,
/// "cacheTtl"?: "5m" | "1h", "promptCacheOptions"?: {"mode"?, "ttl"?}, "promptCacheBreakpoints"?:
/// bool}`; empty: the defaults.
inline std::string render_with_options(std::string_view renderer, std::string_view envelope_json,
                                       std::string_view options_json = {}) {
    check_abi();
    return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
        return lls_render_with_options(detail::ptr(renderer), renderer.size(),
                                       detail::ptr(envelope_json), envelope_json.size(),
                                       detail::opt_ptr(options_json), options_json.size(), out,
                                       len, err);
    });
}

/// Explains a stored JSONL log without opening it (as `Session::explain`).
inline std::string explain_file(std::string_view path, std::string_view opts_json = {}) {
    check_abi();
    return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
        return lls_explain_file(detail::ptr(path), path.size(), detail::opt_ptr(opts_json),
                                opts_json.size(), out, len, err);
    });
}

/// A recorded session that answers a host's requests (`lls_replay`): `answer(envelope)` returns
/// the recorded answer as JSON when the envelope is the recorded request, byte for byte, and
/// throws an `Error` (status `LLS_ERR_RECONSTRUCTION`, detail `component`, `index`, ...) naming
/// the first divergence otherwise. Lets a host test its agent loop offline. Move-only.
class Replay {
public:
    /// Replays a stored JSONL log (read without opening it as a session).
    static Replay open_file(std::string_view path) {
        check_abi();
        lls_replay *p = nullptr;
        detail::call([&](lls_error **err) { return lls_replay_open_file(detail::ptr(path), path.size(), &p, err); });
        return Replay(p);
    }
    /// Replays a session's log as it is now.
    static Replay of(const Session &session) {
        lls_replay *p = nullptr;
        detail::call([&](lls_error **err) { return lls_replay_new(session.get(), &p, err); });
        return Replay(p);
    }
    /// The recorded answer to a request envelope, as JSON.
    std::string answer(std::string_view envelope_json) {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_replay_answer(get(), detail::ptr(envelope_json), envelope_json.size(), out,
                                     len, err);
        });
    }
    /// `{"sessionId","requests","answered","next"?}`.
    std::string info() const {
        return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
            return lls_replay_info(get(), out, len, err);
        });
    }
    /// The C handle (still owned by this object).
    lls_replay *get() const { return detail::require(h_.get(), "llmsession::Replay"); }
    /// Adopts a C handle (freed by this object).
    explicit Replay(lls_replay *adopt) noexcept : h_(adopt) {}

private:
    detail::Owned<lls_replay, lls_replay_free> h_;
};

/// Parses a provider's response body (`"openai"`, `"openai-responses"`, `"anthropic"` or
/// `"gemini"`) into `{"message","usage"?,"finishReason"?}`, which `Agent::record_response`
/// takes as it is. For a streamed response use `Stream`.
inline std::string parse_response(std::string_view renderer, std::string_view body_json) {
    check_abi();
    return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
        return lls_parse_response(detail::ptr(renderer), renderer.size(), detail::ptr(body_json),
                                  body_json.size(), out, len, err);
    });
}

/// One tool call of an assistant message: the id its result names (`callId`), the tool's name
/// and the arguments as the model wrote them (JSON text, not parsed).
struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;
};

/// The tool calls in `json`, in the order the model made them (`lls_tool_calls_parse`): an
/// assistant message, a response `{"message",...}` (what `parse_response` and `Stream::finish`
/// give), an event, or an array of these (`Session::events(seq, seq + 1)` for the seq
/// `Agent::record_body` returns). Throws `Error` (`LLS_ERR_INVALID_INPUT`, detail `field`) for
/// anything else or an invalid message. Since ABI minor 3.
inline std::vector<ToolCall> tool_calls(std::string_view json) {
    check_abi();
    lls_tool_calls *p = nullptr;
    detail::call([&](lls_error **err) { return lls_tool_calls_parse(detail::ptr(json), json.size(), &p, err); });
    detail::Owned<lls_tool_calls, lls_tool_calls_free> calls(p);
    std::size_t n = 0;
    detail::call([&](lls_error **err) { return lls_tool_calls_count(calls.get(), &n, err); });
    std::vector<ToolCall> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; i++) {
        const char *id = nullptr, *name = nullptr, *arguments = nullptr;
        std::size_t id_len = 0, name_len = 0, arguments_len = 0;
        detail::call([&](lls_error **err) {
            return lls_tool_calls_get(calls.get(), i, &id, &id_len, &name, &name_len, &arguments,
                                      &arguments_len, err);
        });
        out.push_back({std::string(id, id_len), std::string(name, name_len), std::string(arguments, arguments_len)});
    }
    return out;
}

/// Maps a provider's usage object (`"openai"`, `"llama.cpp"`, `"deepseek"`,
/// `"openai-responses"`, `"anthropic"`, `"gemini"`) into the library's usage JSON.
inline std::string usage_from_provider(std::string_view provider, std::string_view usage_json) {
    check_abi();
    return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
        return lls_usage_from_provider(detail::ptr(provider), provider.size(),
                                       detail::ptr(usage_json), usage_json.size(), out, len, err);
    });
}

/// Whether a provider error (HTTP status and body) says the prompt did not fit the context
/// window; pass it as `overflow` to `Agent::provider_error`.
inline bool is_context_overflow(std::uint16_t status, std::string_view body) {
    check_abi();
    return lls_is_context_overflow(status, detail::ptr(body), body.size());
}

/// Runs `fn` exactly as the library runs its callbacks (`lls_callback_invoke`) and returns its
/// answer: a self-test of the trampolines.
inline std::string invoke_callback(Callback fn, std::string_view input_json,
                                   const Cancel *cancel = nullptr) {
    check_abi();
    void *ud = detail::Trampoline::box(std::move(fn));
    return detail::call_string([&](char **out, std::size_t *len, lls_error **err) {
        return lls_callback_invoke(&detail::Trampoline::run, ud, &detail::Trampoline::free,
                                   detail::ptr(input_json), input_json.size(),
                                   detail::cancel_ptr(cancel), out, len, err);
    });
}

// ---------------------------------------------------------------------------------------------
// The observer hook (docs/observe.md): what the library did on its own, with levels.

/// How much an Observation matters (`LLS_LEVEL_*`).
enum class Level : std::int32_t {
    debug = LLS_LEVEL_DEBUG, ///< detail of the library's decisions
    info = LLS_LEVEL_INFO,   ///< something the library did on its own, as designed
    warn = LLS_LEVEL_WARN,   ///< something went wrong and was handled
    error = LLS_LEVEL_ERROR, ///< something failed and was not made good
};

/// The wire name of a level: "debug", "info", "warn" or "error".
inline const char *level_name(Level level) noexcept {
    switch (level) {
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    }
    return "unknown";
}

/// One thing the library did on its own (a torn log tail cut, a writer refused, an automatic
/// compaction that failed, ...); docs/observe.md lists every kind and its fields.
struct Observation {
    std::string kind;       ///< stable kebab-case name, e.g. "log-cut"
    Level level;            ///< how much it matters
    std::string message;    ///< one sentence for a human
    std::string session_id; ///< the session it concerns (empty when not known)
    std::string json;       ///< the whole observation as JSON, the kind's fields included
};

/// An observer: runs synchronously on the thread whose library call caused the event (so on
/// any thread that calls into the library, possibly several at once). It must return quickly
/// and must not call into llmsession. An exception it throws is caught and dropped.
using Observer = std::function<void(const Observation &)>;

namespace detail {

/// The string value of `"key":"..."` in the library's observation JSON, unescaped (empty when
/// absent). The library writes the common keys first and escapes strings as JSON does.
inline std::string observation_string(std::string_view json, std::string_view key) {
    std::string needle = "\"" + std::string(key) + "\":\"";
    std::size_t at = json.find(needle);
    if (at == std::string_view::npos) {
        return {};
    }
    std::string out;
    auto put = [&out](std::uint32_t c) {
        if (c < 0x80) {
            out += static_cast<char>(c);
        } else if (c < 0x800) {
            out += static_cast<char>(0xC0 | (c >> 6));
            out += static_cast<char>(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            out += static_cast<char>(0xE0 | (c >> 12));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (c & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (c >> 18));
            out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (c & 0x3F));
        }
    };
    auto hex4 = [&json](std::size_t i, std::uint32_t &v) {
        if (i + 4 > json.size()) {
            return false;
        }
        v = 0;
        for (std::size_t k = i; k < i + 4; k++) {
            char h = json[k];
            v <<= 4;
            if (h >= '0' && h <= '9') v |= static_cast<std::uint32_t>(h - '0');
            else if (h >= 'a' && h <= 'f') v |= static_cast<std::uint32_t>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') v |= static_cast<std::uint32_t>(h - 'A' + 10);
            else return false;
        }
        return true;
    };
    for (std::size_t i = at + needle.size(); i < json.size(); i++) {
        char c = json[i];
        if (c == '"') {
            break;
        }
        if (c != '\\' || i + 1 >= json.size()) {
            out += c;
            continue;
        }
        char e = json[++i];
        switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
            std::uint32_t u = 0;
            if (!hex4(i + 1, u)) {
                return out;
            }
            i += 4;
            std::uint32_t lo = 0;
            if (u >= 0xD800 && u < 0xDC00 && i + 2 < json.size() && json[i + 1] == '\\' &&
                json[i + 2] == 'u' && hex4(i + 3, lo) && lo >= 0xDC00 && lo < 0xE000) {
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            put(u);
            break;
        }
        default: out += e; // \" \\ \/
        }
    }
    return out;
}

struct ObserverBox {
    static void run(void *ud, std::int32_t level, const char *json, std::size_t len) noexcept {
        try {
            std::string_view text(json, len);
            Observation o{observation_string(text, "kind"), static_cast<Level>(level),
                          observation_string(text, "message"),
                          observation_string(text, "sessionId"), std::string(text)};
            (*static_cast<Observer *>(ud))(o);
        } catch (...) {
            // An observer's exception must not cross the C boundary: dropped.
        }
    }
    static void free(void *ud) noexcept { delete static_cast<Observer *>(ud); }
};

} // namespace detail

/// Sets the process-wide observer: from now on `fn` receives what the library does on its own
/// at `min_level` or above. An empty `fn` clears it (the default: the library reports nothing).
/// One observer at a time: setting one replaces the one before it (which is destroyed once no
/// call to it is running). Throws Error for a level out of range. Never call it from inside an
/// observer.
inline void set_observer(Observer fn, Level min_level = Level::info) {
    check_abi();
    lls_error *err = nullptr;
    lls_status st;
    if (!fn) {
        st = lls_set_observer(nullptr, nullptr, nullptr, static_cast<std::int32_t>(min_level), &err);
    } else {
        // The library owns the box from here on, and deletes it even when the call fails.
        auto *box = new Observer(std::move(fn));
        st = lls_set_observer(&detail::ObserverBox::run, box, &detail::ObserverBox::free,
                              static_cast<std::int32_t>(min_level), &err);
    }
    if (st != LLS_OK) {
        detail::throw_error(st, err);
    }
}

/// Clears the process-wide observer (the library reports nothing again).
inline void clear_observer() { set_observer(Observer{}); }

} // namespace llmsession

#endif /* LLMSESSION_HPP */
