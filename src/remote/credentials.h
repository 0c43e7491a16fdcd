// Where S3 requests go and who signs them, found as boto3 finds them: options first, then
// the environment, then ~/.aws/credentials and ~/.aws/config for the profile.
// Thread-safety: pure functions (the environment is read through the lookup passed in).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "gpufeed/remote.h"

namespace gpufeed::remote {

struct S3Config {
  bool anonymous = false;
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  // Where the credentials came from, for error messages: "environment",
  // "~/.aws/credentials [default]", "~/.aws/config [profile x]", "anonymous".
  std::string credentials_source;
  std::string region;
  std::string endpoint;  // empty: AWS's endpoint for the region
};

// The value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
std::optional<std::string> ProcessEnv(const char* name);

// Looks up region, endpoint and credentials. Throws Error(kInvalidArgument) listing every
// place it looked when the region or the credentials are missing, or when a profile named
// in the options or $AWS_PROFILE is in neither file.
S3Config ResolveS3Config(const RemoteOptions& options, const EnvLookup& env = ProcessEnv);

// An AWS ini file: section -> key -> value. Indented lines (a service's nested settings)
// are skipped; '#' and ';' start comments.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
IniFile ParseIni(std::string_view text);

}  // namespace gpufeed::remote
