// Token files: the input's bytes as a file, opened in every data.format (auto, llmc, raw_u16). A
// file that opens is read to its last token and range-checked.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/config_enums.h"
#include "data/token_file.h"
#include "fuzz_scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = strata::fuzz::write_scratch("tokens.bin", data, size);
  for (strata::TokenFormat format : {strata::TokenFormat::auto_detect, strata::TokenFormat::llmc,
                                     strata::TokenFormat::raw_u16}) {
    auto f = strata::TokenFile::open(path, format);
    if (!f.ok()) continue;
    if (f->size() <= 0 || f->format() == strata::TokenFormat::auto_detect) {
      std::fprintf(stderr, "token file opened with %lld tokens, format auto\n",
                   static_cast<long long>(f->size()));
      std::abort();
    }
    uint32_t sum = 0;
    for (int64_t i = 0; i < f->size(); ++i) {
      auto t = f->token(i);
      if (!t.ok()) {  // the scratch file does not change under the reader
        std::fprintf(stderr, "token %lld unreadable: %s\n", static_cast<long long>(i),
                     t.status().message().c_str());
        std::abort();
      }
      sum += static_cast<uint32_t>(*t);
    }
    (void)strata::check_token_range(*f, 256 + (sum & 1));
  }
  return 0;
}
