// libFuzzer target: the options a checkpoint records ("train.args", engine/train/options.h), read back,
// configured and resumed against themselves, and every row's value check on the raw input. Any input either
// gives settings that record to what reads back the same, or throws crumb::Error. Anything else (a crash, a
// sanitizer report, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/base/error.h"
#include "engine/train/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<crumb::Option>& table = crumb::run_options();
  for (const crumb::Option& o : table) {
    try {
      crumb::parse_value(o, text);
    } catch (const crumb::Error&) {
    }
  }
  try {
    const crumb::Settings s = crumb::settings_of_record(table, text, "fuzz input");
    const std::string record = crumb::record_of(s);
    if (crumb::record_of(crumb::settings_of_record(table, record, "its record")) != record) std::abort();
    crumb::result_settings(crumb::configure(s));
    crumb::resume_settings(table, s, s);
  } catch (const crumb::Error&) {
  }
  return 0;
}
