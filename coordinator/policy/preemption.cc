#include "coordinator/policy/preemption.h"

#include <algorithm>

namespace dtrain::coordinator {

std::vector<std::string> ChoosePreemptions(int32_t priority, int64_t needed, int64_t available,
                                           std::vector<PreemptionCandidate> candidates) {
  if (available >= needed) return {};
  candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                  [priority](const PreemptionCandidate& c) {
                                    return c.priority >= priority || c.workers <= 0;
                                  }),
                   candidates.end());
  std::sort(candidates.begin(), candidates.end(),
            [](const PreemptionCandidate& a, const PreemptionCandidate& b) {
              if (a.priority != b.priority) return a.priority < b.priority;
              if (a.started != b.started) return a.started > b.started;
              return a.job_id < b.job_id;
            });
  std::vector<const PreemptionCandidate*> chosen;
  int64_t freed = available;
  for (const PreemptionCandidate& c : candidates) {
    if (freed >= needed) break;
    chosen.push_back(&c);
    freed += c.workers;
  }
  if (freed < needed) return {};
  // The last one chosen may make earlier, smaller ones unnecessary: keep those running.
  for (auto it = chosen.end(); it != chosen.begin();) {
    --it;
    if (freed - (*it)->workers >= needed) {
      freed -= (*it)->workers;
      it = chosen.erase(it);
    }
  }
  std::vector<std::string> ids;
  for (const PreemptionCandidate* c : chosen) ids.push_back(c->job_id);
  return ids;
}

}  // namespace dtrain::coordinator
