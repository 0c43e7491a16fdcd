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
  // Keeps at least `connections` idle connections in the cache. Left to libcurl, the cache
  // holds 4 per easy handle still added: as a batch's last transfers finish, the connections
  // of the first ones are closed, and the next batch connects again.
  void KeepConnections(int connections) {
    if (connections <= kept_) return;
    kept_ = connections;
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(kept_));
  }
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
  int kept_ = 0;  // CURLMOPT_MAXCONNECTS set so far (0: libcurl's default)
};

ThreadHandles& Handles() {
  SharedCache();
  thread_local ThreadHandles handles;
  return handles;
}

}  // namespace

// A counting semaphore of requests in flight to one host. A thread whose requests wait for a
// slot while its own are in flight sleeps in curl_multi_poll: a slot another thread frees
// wakes it (curl_multi_wakeup), so the slot is not left idle until the poll times out.
class HttpClient::Slots {
 public:
  explicit Slots(int n) : free_(n) {}
  void Acquire() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  // Takes a slot, or registers `multi` to be woken when one is freed.
  bool TryAcquireOrWake(CURLM* multi) {
    std::lock_guard lock(mu_);
    if (free_ > 0) {
      --free_;
      return true;
    }
    if (std::find(waiters_.begin(), waiters_.end(), multi) == waiters_.end()) {
      waiters_.push_back(multi);
    }
    return false;
  }
  // Called before `multi` may go away (the end of its Run).
  void Forget(CURLM* multi) {
    std::lock_guard lock(mu_);
    std::erase(waiters_, multi);
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      ++free_;
      // Under the lock: a multi handle is never woken after its Run forgot it.
      for (CURLM* m : waiters_) curl_multi_wakeup(m);
      waiters_.clear();
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
  std::vector<CURLM*> waiters_;
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
  HttpClient::Slots* host = nullptr;   // the request slots of its URL's host
  HttpClient::Slots* slots = nullptr;  // set while in flight
  CURL* easy = nullptr;
  bool done = false;
};

}  // namespace

// One Run: its transfers in this thread's multi handle, started as their backoff allows and
// slots free up. The destructor takes every transfer still in flight out (an exception
// leaves nothing in the multi handle and no slot held).
class HttpClient::RunLoop {
 public:
  RunLoop(const HttpClient& client, std::span<const HttpRequest> requests,
          std::span<HttpResult> results, const std::function<void(size_t)>& on_done)
      : client_(client),
        handles_(Handles()),
        multi_(handles_.multi()),
        calls_(requests.size()),
        on_done_(on_done) {
    // A host takes at most max_requests at once from this thread: as many stay open for the
    // next call.
    handles_.KeepConnections(client.options_.max_requests);
    if (on_done_) ready_.reserve(requests.size());
    const Clock::time_point now = Clock::now();
    std::string last_host;
    HttpClient::Slots* last_slots = nullptr;
    for (size_t i = 0; i < requests.size(); ++i) {
      calls_[i].transfer =
          std::make_unique<Transfer>(requests[i], results[i], client.options_, *client.stats_, now);
      // A batch's requests mostly go to one host: its slots are looked up once.
      std::string host = UrlHost(requests[i].url);
      if (last_slots == nullptr || host != last_host) {
        last_slots = &client.SlotsFor(host);
        last_host = std::move(host);
      }
      calls_[i].host = last_slots;
    }
  }
  ~RunLoop() {
    for (Running& c : calls_) {
      if (c.easy != nullptr) Stop(c);
    }
    HttpClient::Slots* forgotten = nullptr;
    for (Running& c : calls_) {
      if (c.host != forgotten) c.host->Forget(multi_);
      forgotten = c.host;
    }
  }

  void Run() {
    while (done_ < calls_.size() || handed_ < ready_.size()) {
      const bool waiting_for_slot = StartDue();
      bool finished_some = false;
      if (active_ > 0) {
        int running = 0;
        curl_multi_perform(multi_, &running);
        finished_some = Drain();
      }
      // One answer handed over per pass: the transfers move on between two (what arrived
      // meanwhile is taken in, a freed slot starts the next request).
      if (handed_ < ready_.size()) {
        on_done_(ready_[handed_++]);
        continue;
      }
      if (done_ == calls_.size()) break;
      if (active_ == 0) {
        std::this_thread::sleep_until(NextWake());
        continue;
      }
      // A finished attempt freed its slot: the next request starts now, not after the poll.
      if (finished_some && waiting_for_slot) continue;
      // A slot freed by another thread wakes the poll; the bound is a second line of defence.
      int timeout_ms = waiting_for_slot ? 50 : 1000;
      if (const Clock::time_point wake = NextWake(true); wake != Clock::time_point::max()) {
        const auto wait =
            std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(wait, 0, timeout_ms));
      }
      curl_multi_poll(multi_, nullptr, 0, timeout_ms, nullptr);
    }
  }

 private:
  // Starts every transfer whose time has come and that gets a slot; true when one is due
  // but its host has no free slot.
  bool StartDue() {
    const Clock::time_point now = Clock::now();
    bool waiting_for_slot = false;
    const Slots* full = nullptr;  // a host found without a free slot in this pass
    for (Running& c : calls_) {
      if (c.done || c.easy != nullptr || c.transfer->next_at() > now) continue;
      Slots& slots = *c.host;
      if (&slots == full) continue;
      // Block for a slot only while holding none, so two callers never wait on each other.
      if (active_ == 0) {
        slots.Acquire();
      } else if (!slots.TryAcquireOrWake(multi_)) {
        waiting_for_slot = true;
        full = &slots;
        continue;
      }
      c.slots = &slots;
      c.easy = handles_.Take();
      c.transfer->StartAttempt(c.easy, Clock::now());
      curl_easy_setopt(c.easy, CURLOPT_PRIVATE, &c);
      curl_multi_add_handle(multi_, c.easy);
      client_.stats_->EnterFlight();
      ++active_;
    }
    return waiting_for_slot;
  }

  // Takes the finished attempts out; each is done or scheduled for its retry. True when
  // there was one.
  bool Drain() {
    bool any = false;
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Running* c = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &c);
      const CURLcode code = msg->data.result;
      Stop(*c);
      any = true;
      if (c->transfer->FinishAttempt(code, Clock::now())) {
        c->done = true;
        ++done_;
        if (on_done_) ready_.push_back(static_cast<size_t>(c - calls_.data()));
      }
    }
    return any;
  }

  // When the next request not in flight is due; with `future_only`, the next whose backoff
  // has not ended (one already due waits for a slot, whose release wakes the poll).
  Clock::time_point NextWake(bool future_only = false) const {
    const Clock::time_point now = Clock::now();
    Clock::time_point wake = Clock::time_point::max();
    for (const Running& c : calls_) {
      if (c.done || c.easy != nullptr) continue;
      if (future_only && c.transfer->next_at() <= now) continue;
      wake = std::min(wake, c.transfer->next_at());
    }
    return wake;
  }

  void Stop(Running& c) {
    curl_multi_remove_handle(multi_, c.easy);
    handles_.Give(c.easy);
    c.easy = nullptr;
    client_.stats_->LeaveFlight();  // before the slot is free: max_in_flight stays in the cap
    c.slots->Release();
    c.slots = nullptr;
    --active_;
  }

  const HttpClient& client_;
  ThreadHandles& handles_;
  CURLM* multi_;
  std::vector<Running> calls_;
  size_t active_ = 0;
  size_t done_ = 0;
  const std::function<void(size_t)>& on_done_;
  std::vector<size_t> ready_;  // done requests in the order they finished, for on_done_
  size_t handed_ = 0;          // how many of ready_ on_done_ has had
};

void HttpClient::Run(std::span<const HttpRequest> requests, std::span<HttpResult> results,
                     const std::function<void(size_t)>& on_done) const {
  RunLoop(*this, requests, results, on_done).Run();
}

}  // namespace gpufeed::remote
