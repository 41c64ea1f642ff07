#include "util/json_keys.hpp"

#include <set>

#include <nlohmann/json.hpp>

namespace tileops::util {
namespace {

class Scanner final : public nlohmann::json_sax<nlohmann::json> {
public:
    JsonScan found;

    bool null() override { return value(); }
    bool boolean(bool) override { return value(); }
    bool number_integer(number_integer_t) override { return value(); }
    bool number_unsigned(number_unsigned_t) override { return value(); }
    bool number_float(number_float_t, const string_t&) override { return value(); }
    bool string(string_t&) override { return value(); }
    bool binary(binary_t&) override { return value(); }
    bool start_object(std::size_t) override {
        value();
        open_.push_back(Container{false});
        return true;
    }
    bool key(string_t& key) override {
        Container& object = open_.back();
        object.key = key;
        if (!object.keys.insert(key).second && !object.reported) {
            object.reported = true;
            found.repeated.push_back({key.substr(0, 64), place()});
        }
        return true;
    }
    bool end_object() override { return close(); }
    bool start_array(std::size_t) override {
        value();
        open_.push_back(Container{true});
        return true;
    }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

private:
    struct Container {
        bool array = false;
        size_t items = 0;             // a list's values so far
        std::string key;              // an object's latest key
        std::set<std::string> keys;   // an object's keys so far
        bool reported = false;
    };

    bool value() {
        ++found.values;
        if (!open_.empty() && open_.back().array) ++open_.back().items;
        return true;
    }
    bool close() {
        open_.pop_back();
        return true;
    }
    // The innermost object's place: each enclosing container's key or index.
    std::vector<std::string> place() const {
        std::vector<std::string> where;
        for (size_t i = 0; i + 1 < open_.size(); ++i)
            where.push_back(open_[i].array ? std::to_string(open_[i].items - 1) : open_[i].key);
        return where;
    }

    std::vector<Container> open_;
};

}  // namespace

JsonScan scan_json(std::string_view text) {
    Scanner scanner;
    nlohmann::json::sax_parse(text.begin(), text.end(), &scanner);
    return std::move(scanner.found);
}

int first_control_character(std::string_view text) {
    for (const char c : text)
        if (const auto code = static_cast<unsigned char>(c); code < 0x20 || code == 0x7f) return code;
    return -1;
}

}  // namespace tileops::util
