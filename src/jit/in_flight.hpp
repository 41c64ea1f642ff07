// In-process deduplication of concurrent computations: callers asking for the same key at the same
// time share one computation instead of each running it. InFlight is not a cache: once a
// computation has finished (with a value or an exception) its entry is dropped, so the caller keeps
// results in its own cache and re-checks that cache before (or inside) the computation.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace tileops::jit {

template <class Key, class Value, class Hash = std::hash<Key>>
class InFlight {
public:
    InFlight() = default;
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

    // Returns fn()'s value. The first caller for a key runs fn; callers that arrive while it runs
    // wait for it and get the same value (a copy), or its exception rethrown. The map's mutex is
    // held only to find or insert the key's entry, never while fn runs, so different keys compute
    // in parallel. A failed computation is forgotten: the next call for the key runs fn again.
    // fn must not ask, directly or indirectly, for the key it is computing (that would wait forever).
    template <class Fn>
    Value get_or_compute(const Key& key, Fn&& fn) {
        static_assert(std::is_convertible_v<std::invoke_result_t<Fn&>, Value>,
                      "InFlight::get_or_compute: fn() must return something convertible to Value");
        std::promise<Value> promise;
        std::shared_future<Value> future;
        bool owner = false;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = entries_.find(key);
            if (it != entries_.end()) {
                ++it->second.waiters;
                future = it->second.future;
            } else {
                entries_.emplace(key, Entry{promise.get_future().share(), 0});
                owner = true;
            }
        }
        if (!owner) return future.get();  // blocks until the owner finishes; rethrows its exception

        try {
            Value value = fn();
            promise.set_value(value);
            // Set the value before dropping the entry, so that a caller arriving in between still
            // shares this result instead of starting a second computation.
            erase(key);
            return value;
        } catch (...) {
            // Drop the entry first, so that any call made after this failure is visible retries,
            // then hand the exception to the callers already waiting.
            erase(key);
            promise.set_exception(std::current_exception());
            throw;
        }
    }

    // Number of computations running now.
    std::size_t size() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return entries_.size();
    }

    // Number of callers waiting for the running computation of `key` (0 when none runs).
    std::size_t waiters(const Key& key) const {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = entries_.find(key);
        return it == entries_.end() ? 0 : it->second.waiters;
    }

private:
    struct Entry {
        std::shared_future<Value> future;
        std::size_t waiters;
    };

    void erase(const Key& key) noexcept {
        try {
            std::lock_guard<std::mutex> lock(mutex_);
            entries_.erase(key);
        } catch (...) {
            // lock() can only fail on a broken mutex; nothing sensible is left to do.
        }
    }

    mutable std::mutex mutex_;
    std::unordered_map<Key, Entry, Hash> entries_;
};

}  // namespace tileops::jit
