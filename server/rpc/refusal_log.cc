#include "server/rpc/refusal_log.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace server {

bool RefusalLog::ShouldLog(const std::string& peer, const std::string& cause, absl::Time now) {
  absl::MutexLock lock(&mu_);
  const auto key = std::make_pair(peer, cause);
  auto it = last_.find(key);
  if (it != last_.end() && now - it->second < window_) return false;
  if (it == last_.end() && last_.size() >= max_entries_) {
    // Bounded: forget what is past its window; if everything is recent, the oldest.
    for (auto e = last_.begin(); e != last_.end();) e = now - e->second >= window_ ? last_.erase(e) : std::next(e);
    if (last_.size() >= max_entries_) {
      auto oldest = last_.begin();
      for (auto e = last_.begin(); e != last_.end(); ++e) {
        if (e->second < oldest->second) oldest = e;
      }
      last_.erase(oldest);
    }
  }
  last_[key] = now;
  return true;
}

std::optional<std::string> RefusalLog::Line(absl::string_view what, const std::string& peer, absl::StatusCode code,
                                            const std::string& message, absl::Time now) {
  const std::string host = PeerHost(peer);
  const std::string cause = absl::StrCat(absl::StatusCodeToString(code), ": ", message.substr(0, 200));
  if (!ShouldLog(host, cause, now)) return std::nullopt;
  return absl::StrCat("refused ", what, " from ", host, ": ", cause, " (logged once a minute per cause and peer)");
}

std::string PeerHost(const std::string& peer) {
  std::string p = peer;
  for (const char* scheme : {"ipv4:", "ipv6:", "unix:"}) {
    if (absl::StartsWith(p, scheme)) p = p.substr(std::string(scheme).size());
  }
  const size_t colon = p.rfind(':');
  if (colon != std::string::npos && colon > 0 && p.find(':') != colon && p[0] != '[') return p;  // bare IPv6
  return colon == std::string::npos ? p : p.substr(0, colon);
}

}  // namespace server
}  // namespace omnilearn
