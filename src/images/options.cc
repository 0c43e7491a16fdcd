// The image options' names as Python and the CLI spell them.
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "gpufeed/error.h"
#include "gpufeed/images.h"

namespace gpufeed {

CropMode ParseCropMode(std::string_view text) {
  if (text == "random") return CropMode::kRandom;
  if (text == "center") return CropMode::kCenter;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("images: crop must be \"random\" or \"center\", got \"{}\"", text));
}

std::string_view CropModeName(CropMode mode) {
  switch (mode) {
    case CropMode::kRandom:
      return "random";
    case CropMode::kCenter:
      return "center";
  }
  return "unknown";
}

OnError ParseOnError(std::string_view text) {
  if (text == "raise") return OnError::kRaise;
  if (text == "skip") return OnError::kSkip;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("images: on_error must be \"raise\" or \"skip\", got \"{}\"", text));
}

std::string_view OnErrorName(OnError policy) {
  switch (policy) {
    case OnError::kRaise:
      return "raise";
    case OnError::kSkip:
      return "skip";
  }
  return "unknown";
}

}  // namespace gpufeed
