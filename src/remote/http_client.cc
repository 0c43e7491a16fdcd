// HttpClient: the multi-handle loop, per-host request slots, and the handles each thread keeps.
#include "remote/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <array>
#include <thread>
#include <vector>

#include "gpufeed/error.h"
#include "remote/transfer.h"
#include "remote/uri.h"

namespace gpufeed::remote {
namespace {

// The process's CURLSH: the DNS cache and TLS sessions, locked per kind of data. Never freed:
// the handles of threads that outlive static destruction still point at it.
CURLSH* SharedCache() {
  static CURLSH* share = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    static std::array<std::mutex, CURL_LOCK_DATA_LAST> locks;
    CURLSH* s = curl_share_init();
    curl_share_setopt(
        s, CURLSHOPT_LOCKFUNC,
        +[](CURL*, curl_lock_data data, curl_lock_access, void*) { locks[data].lock(); });
    curl_share_setopt(
        s, CURLSHOPT_UNLOCKFUNC, +[](CURL*, curl_lock_data data, void*) { locks[data].unlock(); });
    curl_share_setopt(s, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(s, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    return s;
  }();
  return share;
}

// One thread's multi handle (its connection cache keeps connections alive between calls)
// and idle easy handles.
class ThreadHandles {
 public:
  ThreadHandles() : multi_(curl_multi_init()) {
    if (multi_ == nullptr) throw Error(ErrorCode::kIo, "curl_multi_init failed");
  }
  ~ThreadHandles() {
    for (CURL* e : idle_) curl_easy_cleanup(e);
    curl_multi_cleanup(multi_);
  }
  CURLM* multi() const { return multi_; }
  CURL* Take() {
    CURL* e = nullptr;
    if (!idle_.empty()) {
      e = idle_.back();
      idle_.pop_back();
      curl_easy_reset(e);  // keeps the connection and the share
    } else {
      e = curl_easy_init();
      if (e == nullptr) throw Error(ErrorCode::kIo, "curl_easy_init failed");
      curl_easy_setopt(e, CURLOPT_SHARE, SharedCache());
    }
    return e;
  }
  void Give(CURL* e) { idle_.push_back(e); }

 private:
  CURLM* multi_;
  std::vector<CURL*> idle_;
};

ThreadHandles& Handles() {
  SharedCache();
  thread_local ThreadHandles handles;
  return handles;
}

}  // namespace

// A counting semaphore of requests in flight to one host.
class HttpClient::Slots {
 public:
  explicit Slots(int n) : free_(n) {}
  void Acquire() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  bool TryAcquire() {
    std::lock_guard lock(mu_);
    if (free_ == 0) return false;
    --free_;
    return true;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

HttpClient::HttpClient(ClientOptions options, std::shared_ptr<StatsRecorder> stats)
    : options_(options), stats_(std::move(stats)) {}

HttpClient::~HttpClient() = default;

HttpClient::Slots& HttpClient::SlotsFor(const std::string& host) const {
  std::lock_guard lock(mu_);
  auto& slots = slots_[host];
  if (!slots) slots = std::make_unique<Slots>(options_.max_requests);
  return *slots;
}

namespace {

struct Running {
  std::unique_ptr<Transfer> transfer;
  HttpClient::Slots* slots = nullptr;  // set while in flight
  CURL* easy = nullptr;
  bool done = false;
};

}  // namespace

void HttpClient::Run(std::span<const HttpRequest> requests, std::span<HttpResult> results) const {
  ThreadHandles& handles = Handles();
  CURLM* multi = handles.multi();
  std::vector<Running> calls(requests.size());
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    calls[i].transfer =
        std::make_unique<Transfer>(requests[i], results[i], options_, *stats_, start);
  }
  size_t active = 0, done = 0;
  auto stop_flight = [&](Running& c) {
    curl_multi_remove_handle(multi, c.easy);
    handles.Give(c.easy);
    c.easy = nullptr;
    stats_->LeaveFlight();  // before the slot is free, so max_in_flight never passes the cap
    c.slots->Release();
    c.slots = nullptr;
    --active;
  };
  // On any exception (bad_alloc), nothing stays in the multi handle or holds a slot.
  struct Cleanup {
    std::vector<Running>& calls;
    decltype(stop_flight)& stop;
    ~Cleanup() {
      for (Running& c : calls) {
        if (c.easy != nullptr) stop(c);
      }
    }
  } cleanup{calls, stop_flight};

  while (done < calls.size()) {
    Clock::time_point now = Clock::now();
    Clock::time_point next_wake = Clock::time_point::max();
    bool waiting_for_slot = false;
    for (Running& c : calls) {
      if (c.done || c.easy != nullptr) continue;
      if (c.transfer->next_at() > now) {
        next_wake = std::min(next_wake, c.transfer->next_at());
        continue;
      }
      Slots& slots = SlotsFor(UrlHost(c.transfer->request().url));
      // Block for a slot only while holding none, so two callers never wait on each other.
      if (active == 0) {
        slots.Acquire();
      } else if (!slots.TryAcquire()) {
        waiting_for_slot = true;
        continue;
      }
      c.slots = &slots;
      c.easy = handles.Take();
      c.transfer->StartAttempt(c.easy, Clock::now());
      curl_easy_setopt(c.easy, CURLOPT_PRIVATE, &c);
      curl_multi_add_handle(multi, c.easy);
      stats_->EnterFlight();
      ++active;
    }
    if (active == 0) {
      std::this_thread::sleep_until(next_wake);
      continue;
    }
    int running = 0;
    curl_multi_perform(multi, &running);
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Running* c = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &c);
      const CURLcode code = msg->data.result;
      stop_flight(*c);
      if (c->transfer->FinishAttempt(code, Clock::now())) {
        c->done = true;
        ++done;
      }
    }
    if (done == calls.size()) break;
    int timeout_ms = waiting_for_slot ? 5 : 1000;
    now = Clock::now();
    next_wake = Clock::time_point::max();
    for (const Running& c : calls) {
      if (!c.done && c.easy == nullptr) next_wake = std::min(next_wake, c.transfer->next_at());
    }
    if (next_wake != Clock::time_point::max()) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(wait, 0, timeout_ms));
    }
    curl_multi_poll(multi, nullptr, 0, timeout_ms, nullptr);
  }
}

}  // namespace gpufeed::remote
