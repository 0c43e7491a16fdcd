#include <nlohmann/json.hpp>

#include "gpufeed/error.h"
#include "gpufeed/loader.h"

namespace gpufeed {

double LoaderStats::ConsumerWaitFraction() const {
  const int64_t total = consumer_wait_ns + consumer_step_ns;
  return total > 0 ? static_cast<double>(consumer_wait_ns) / static_cast<double>(total) : 0.0;
}

double LoaderStats::GpuBusyFraction() const {
  const int64_t total = gpu_busy_ns + gpu_idle_ns;
  if (gpu_steps == 0 || total <= 0) return -1;
  return static_cast<double>(gpu_busy_ns) / static_cast<double>(total);
}

std::string LoaderStats::ToJson() const {
  const auto seconds = [](int64_t ns) { return static_cast<double>(ns) * 1e-9; };
  nlohmann::json j = {
      {"batches", batches},
      {"samples", samples},
      {"bytes", bytes},
      {"read_s", seconds(read_ns)},
      {"transform_s", seconds(transform_ns)},
      {"copy_s", seconds(copy_ns)},
      {"buffer_wait_s", seconds(buffer_wait_ns)},
      {"queue_wait_s", seconds(queue_wait_ns)},
      {"consumer_wait_s", seconds(consumer_wait_ns)},
      {"consumer_step_s", seconds(consumer_step_ns)},
      {"first_batch_s", seconds(first_batch_ns)},
      {"wall_s", seconds(wall_ns)},
      {"consumer_wait_fraction", ConsumerWaitFraction()},
      {"workers", workers},
      {"prefetch", prefetch},
      {"buffers", buffers},
      {"buffers_allocated", buffers_allocated},
      {"tuning_log", tuning_log},
      {"buffer_bytes", buffer_bytes},
      {"device", device},
      {"gpu_event_steps", gpu_steps},
      {"gpu_busy_s", seconds(gpu_busy_ns)},
      {"gpu_idle_s", seconds(gpu_idle_ns)},
      {"gpu_drained_steps", gpu_drained_steps},
  };
  // null, not a number, when nothing was measured: no stream was named, or the measured steps
  // add up to no time at all.
  const double gpu_busy = GpuBusyFraction();
  j["gpu_busy_fraction"] = gpu_busy >= 0 ? nlohmann::json(gpu_busy) : nlohmann::json();
  return j.dump();
}

std::string LoaderState::ToJson() const {
  nlohmann::json j = {{"epoch", epoch}, {"batch", batch},           {"seed", seed},
                      {"rank", rank},   {"world_size", world_size}, {"batch_size", batch_size}};
  return j.dump();
}

LoaderState LoaderState::FromJson(std::string_view json) {
  try {
    const auto j = nlohmann::json::parse(json);
    LoaderState s;
    s.epoch = j.at("epoch").get<int64_t>();
    s.batch = j.at("batch").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.rank = j.at("rank").get<int>();
    s.world_size = j.at("world_size").get<int>();
    s.batch_size = j.at("batch_size").get<int64_t>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("malformed loader state: ") + e.what() +
                    " (expected {\"epoch\", \"batch\", \"seed\", \"rank\", \"world_size\", "
                    "\"batch_size\"})");
  }
}

}  // namespace gpufeed
