// The one error type of the simulator's data-path models (src/kernels/sim/model/*.h).
// A model function that meets input the hardware would reject (or that the model does not cover)
// throws pe_sim::ModelError naming the problem and the fix; the engine turns it into a report naming
// the thread and the source line. Host C++ only: NVRTC never sees this folder.
#pragma once
#include <cstdint>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace pe_sim {

struct ModelError {
  std::string what;
};

// printf-style message -> thrown ModelError
[[noreturn]] inline void model_fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] inline void model_fail(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw ModelError{std::string(buf)};
}

}  // namespace pe_sim
