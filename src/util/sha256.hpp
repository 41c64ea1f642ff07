// SHA-256, used for content hashes: template hashes, kernel cache keys, database entries.
// Collisions must be practically impossible because a cache key decides which cubin runs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tileops::util {

class Sha256 {
public:
    Sha256();
    Sha256& update(std::string_view data);
    // Adds a length-prefixed field, so ("ab","c") and ("a","bc") hash differently.
    Sha256& field(std::string_view data);
    std::array<uint8_t, 32> digest();
    std::string hex_digest();

private:
    void compress(const uint8_t* block);
    std::array<uint32_t, 8> state_;
    std::array<uint8_t, 64> buffer_{};
    uint64_t total_bytes_ = 0;
    size_t buffered_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace tileops::util
