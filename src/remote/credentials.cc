// The credential and region chain: options, environment, shared credentials and config files.
#include "remote/credentials.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed::remote {
namespace {

std::string NonEmpty(const EnvLookup& env, const char* name) {
  std::optional<std::string> v = env(name);
  return v ? std::string(Trim(*v)) : std::string();
}

// One of the two AWS files, read (or not) with the section this profile uses in it.
struct ProfileFile {
  std::string path;     // as shown in messages
  std::string section;  // "default", "x" or "profile x"
  bool exists = false;
  std::map<std::string, std::string> values;  // empty when the section is absent
  bool has_section = false;

  std::string Where() const { return fmt::format("{} [{}]", path, section); }
  std::string Get(const std::string& key) const {
    auto it = values.find(key);
    return it == values.end() ? std::string() : it->second;
  }
};

std::string ExpandHome(const std::string& path, const EnvLookup& env) {
  if (path.starts_with("~/")) return NonEmpty(env, "HOME") + path.substr(1);
  return path;
}

ProfileFile ReadProfile(const EnvLookup& env, const char* override_var, const char* default_path,
                        std::string section) {
  ProfileFile f;
  std::string path = NonEmpty(env, override_var);
  if (path.empty()) path = default_path;
  f.path = path;
  f.section = std::move(section);
  std::ifstream in(ExpandHome(path, env));
  if (!in) return f;
  f.exists = true;
  std::stringstream text;
  text << in.rdbuf();
  IniFile ini = ParseIni(text.str());
  auto it = ini.find(f.section);
  if (it != ini.end()) {
    f.has_section = true;
    f.values = std::move(it->second);
  }
  return f;
}

std::string FileState(const ProfileFile& f) {
  if (!f.exists) return "no such file";
  if (!f.has_section) return "no such profile";
  return "no aws_access_key_id/aws_secret_access_key";
}

// Fills the credentials from `f` when it holds both keys.
bool TakeKeys(const ProfileFile& f, S3Config* config) {
  const std::string key = f.Get("aws_access_key_id");
  const std::string secret = f.Get("aws_secret_access_key");
  if (key.empty() || secret.empty()) return false;
  config->access_key = key;
  config->secret_key = secret;
  config->session_token = f.Get("aws_session_token");
  config->credentials_source = f.Where();
  return true;
}

void ResolveCredentials(const RemoteOptions& options, const EnvLookup& env,
                        const ProfileFile& creds, const ProfileFile& conf, S3Config* config) {
  std::vector<std::string> looked;
  // boto3: a profile named explicitly wins over the environment's keys.
  if (options.profile.empty()) {
    const std::string key = NonEmpty(env, "AWS_ACCESS_KEY_ID");
    const std::string secret = NonEmpty(env, "AWS_SECRET_ACCESS_KEY");
    if (!key.empty() && !secret.empty()) {
      config->access_key = key;
      config->secret_key = secret;
      config->session_token = NonEmpty(env, "AWS_SESSION_TOKEN");
      config->credentials_source = "environment";
      return;
    }
    looked.push_back(fmt::format("$AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY ({})",
                                 key.empty() && secret.empty() ? "unset" : "only one set"));
  }
  if (TakeKeys(creds, config) || TakeKeys(conf, config)) return;
  looked.push_back(fmt::format("{} ({})", creds.Where(), FileState(creds)));
  looked.push_back(fmt::format("{} ({})", conf.Where(), FileState(conf)));
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("no S3 credentials found; looked at: {}. Set $AWS_ACCESS_KEY_ID and "
                          "$AWS_SECRET_ACCESS_KEY, write them to the credentials file, or "
                          "read a public bucket with anonymous=true",
                          fmt::join(looked, "; ")));
}

}  // namespace

std::optional<std::string> ProcessEnv(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

IniFile ParseIni(std::string_view text) {
  IniFile out;
  std::map<std::string, std::string>* section = nullptr;
  for (std::string_view raw : Split(text, '\n')) {
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    if (!raw.empty() && (raw.front() == ' ' || raw.front() == '\t')) continue;  // nested
    const std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      const size_t close = line.find(']');
      if (close == std::string_view::npos) {
        section = nullptr;
        continue;
      }
      section = &out[std::string(Trim(line.substr(1, close - 1)))];
      continue;
    }
    const size_t eq = line.find('=');
    if (section == nullptr || eq == std::string_view::npos) continue;
    (*section)[std::string(Trim(line.substr(0, eq)))] = std::string(Trim(line.substr(eq + 1)));
  }
  return out;
}

S3Config ResolveS3Config(const RemoteOptions& options, const EnvLookup& env) {
  std::string profile = options.profile;
  const bool named = !profile.empty() || !NonEmpty(env, "AWS_PROFILE").empty();
  if (profile.empty()) profile = NonEmpty(env, "AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const ProfileFile creds =
      ReadProfile(env, "AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials", profile);
  const ProfileFile conf = ReadProfile(env, "AWS_CONFIG_FILE", "~/.aws/config",
                                       profile == "default" ? profile : "profile " + profile);
  if (named && profile != "default" && !creds.has_section && !conf.has_section) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("AWS profile '{}' is in neither {} ({}) nor {} ({})", profile,
                            creds.path, creds.exists ? "no such section" : "no such file",
                            conf.path, conf.exists ? "no such section" : "no such file"));
  }
  S3Config config;
  config.endpoint = options.endpoint;
  if (config.endpoint.empty()) config.endpoint = NonEmpty(env, "AWS_ENDPOINT_URL_S3");
  if (config.endpoint.empty()) config.endpoint = NonEmpty(env, "AWS_ENDPOINT_URL");
  if (config.endpoint.empty()) config.endpoint = conf.Get("endpoint_url");
  config.region = options.region;
  if (config.region.empty()) config.region = NonEmpty(env, "AWS_REGION");
  if (config.region.empty()) config.region = NonEmpty(env, "AWS_DEFAULT_REGION");
  if (config.region.empty()) config.region = conf.Get("region");
  // An anonymous request to a custom endpoint is neither signed nor addressed by region.
  if (config.region.empty() && !(options.anonymous && !config.endpoint.empty())) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("no AWS region set; looked at: the region option, $AWS_REGION, "
                    "$AWS_DEFAULT_REGION, {}. Set one of them",
                    conf.Where() + " region (" + (conf.exists ? "unset" : "no such file") + ")"));
  }
  if (options.anonymous) {
    config.anonymous = true;
    config.credentials_source = "anonymous";
    return config;
  }
  ResolveCredentials(options, env, creds, conf, &config);
  return config;
}

}  // namespace gpufeed::remote
