// Error types thrown by tileops. Every failure is a tileops::Error (or a subclass) whose message
// names what was wrong: the op and argument, the driver call and its status, the NVRTC log, the
// file and field of a bad database.
#pragma once

#include <stdexcept>
#include <string>

#include "tileops/export.hpp"

namespace tileops {

class TILEOPS_EXPORT Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A caller passed a problem or argument the op cannot run (shape, dtype, pointer, stride).
class TILEOPS_EXPORT InvalidArgument : public Error {
public:
    using Error::Error;
};

// The operation is valid in general but not on this device/arch or in this build.
class TILEOPS_EXPORT Unsupported : public Error {
public:
    using Error::Error;
};

// A CUDA driver API call failed. Carries the status code and its name.
class TILEOPS_EXPORT DriverError : public Error {
public:
    DriverError(int status, std::string status_name, const std::string& message)
        : Error(message), status_(status), status_name_(std::move(status_name)) {}
    int status() const noexcept { return status_; }
    const std::string& status_name() const noexcept { return status_name_; }

private:
    int status_;
    std::string status_name_;
};

// NVRTC failed: either an API error or a compilation that ran and failed (log() holds the log).
class TILEOPS_EXPORT CompileError : public Error {
public:
    CompileError(const std::string& message, std::string log)
        : Error(message), log_(std::move(log)) {}
    const std::string& log() const noexcept { return log_; }

private:
    std::string log_;
};

// A kernel was not in the cache and the runtime was told never to compile (TILEOPS_NO_COMPILE).
class TILEOPS_EXPORT CacheMiss : public Error {
public:
    using Error::Error;
};

// A file (tuning database, cache entry) could not be read, parsed or written.
class TILEOPS_EXPORT FileError : public Error {
public:
    using Error::Error;
};

}  // namespace tileops
