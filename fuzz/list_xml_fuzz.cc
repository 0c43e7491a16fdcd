// libFuzzer target: the XML an S3 store answers with (ListObjectsV2 pages, error bodies). What
// it accepts must keep its bounds (objects per page, text per element); anything else is
// Error(kCorruptData), and the never-throwing helpers never throw.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gpufeed/error.h"
#include "remote/list_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  try {
    const gpufeed::remote::ListPage page = gpufeed::remote::ParseListObjectsV2(xml, "fuzz/");
    if (page.objects.size() > gpufeed::remote::kMaxListedPerPage) __builtin_trap();
    if (page.truncated && page.next_token.empty()) __builtin_trap();
    for (const auto& o : page.objects) {
      if (o.key.size() > gpufeed::remote::kMaxXmlText) __builtin_trap();
    }
  } catch (const gpufeed::Error& e) {
    if (e.code() != gpufeed::ErrorCode::kCorruptData) __builtin_trap();
  }
  (void)gpufeed::remote::XmlElementText(xml, "Code");
  (void)gpufeed::remote::UnquoteEtag(xml);
  return 0;
}
