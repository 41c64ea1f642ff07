// A program that uses an installed tileops_jit, built by tests/install/check_install.cmake with
// find_package and with pkg-config. Without a GPU it prints the version linked, the config the
// installed (shipped) tuning database holds for a problem, and an error thrown inside the library
// and caught here by its type (so a shared library exports the exceptions' type information).
// TILEOPS_CONSUMER_DB_DIR: the database directory the package names (tileops_jit_TUNING_DB_DIR,
// or pkg-config's tuning_db_dir variable).
#include <cstdio>
#include <string>

#include <tileops/tileops.hpp>
#include <tileops/tuning_db.hpp>

int main() {
    std::printf("tileops_jit %s (headers %s)\n", tileops::version(), TILEOPS_VERSION_STRING);

    const tileops::RmsNorm op({.rows = 1024, .cols = 65536, .dtype = tileops::DType::bf16});
    const std::string db_path = std::string(TILEOPS_CONSUMER_DB_DIR) + "/h100-sxm.json";
    const tileops::TuningDb db = tileops::TuningDb::load(db_path);
    const tileops::TuningKey key{.op = "rmsnorm", .shape = {1024, 65536}, .dtype = "bf16", .arch = "sm_90a"};
    const auto found = db.nearest(key, 0.0);
    if (!found) {
        std::fprintf(stderr, "%s: no entry for %s\n", db_path.c_str(), key.to_string().c_str());
        return 1;
    }
    std::string config;
    for (const auto& [name, value] : found->first->config)
        config += (config.empty() ? "" : ", ") + name + "=" + std::to_string(value);
    std::printf("%s on sm_90a: {%s} from %s\n", op.describe().c_str(), config.c_str(), db_path.c_str());

    try {
        (void)tileops::parse_dtype("bf17");
        std::fprintf(stderr, "parse_dtype(\"bf17\") did not throw\n");
        return 1;
    } catch (const tileops::InvalidArgument& e) {
        std::printf("caught tileops::InvalidArgument: %s\n", e.what());
    }
    return 0;
}
