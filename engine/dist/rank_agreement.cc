#include "engine/dist/rank_agreement.h"

#include "engine/base/error.h"

namespace crumb {

void broadcast_weights(Communicator& comm, ParamStore& params) {
  comm.broadcast_host(params.data_block(), params.bytes());
  const Graph& g = params.graph();
  for (ValueId v : g.states())
    comm.broadcast_host(params.state(v), static_cast<std::size_t>(g.value(v).count(1)) * dtype_size(g.value(v).dtype));
  params.to_device();
}

namespace {

// The first item where two digests differ, as "<this> where rank 0 has <that>".
std::string first_difference(const std::string& mine, const std::string& lead) {
  std::size_t i = 0;
  while (i < mine.size() && i < lead.size() && mine[i] == lead[i]) ++i;
  auto item = [&](const std::string& d) {
    // The JSON field or line around the first differing character.
    const std::size_t from = d.find_last_of(",{\n", i == 0 ? 0 : i - 1);
    const std::size_t to = d.find_first_of(",}\n", i);
    return d.substr(from == std::string::npos ? 0 : from + 1, to == std::string::npos ? std::string::npos : to - from - 1);
  };
  return item(mine) + " where rank 0 has " + item(lead);
}

}  // namespace

void check_ranks_agree(Communicator& comm, const std::string& digest) {
  double size = static_cast<double>(digest.size());
  comm.broadcast_host(&size, sizeof size);
  std::string lead(static_cast<std::size_t>(size), '\0');
  if (comm.rank() == 0) lead = digest;
  comm.broadcast_host(lead.data(), lead.size());
  double differ = lead != digest ? 1 : 0;
  comm.sum_host(&differ, 1);
  if (differ == 0) return;
  comm.fail_together();
  CRUMB_CHECK(lead == digest, "rank ", comm.rank(), " of ", comm.size(), " was started with other settings than rank 0: ",
              first_difference(digest, lead), " (every rank must be given the same flags and data)");
  CRUMB_FAIL(static_cast<int>(differ), " of ", comm.size(), " ranks were started with other settings than rank 0 ",
             "(every rank must be given the same flags and data; each says what differs)");
}

}  // namespace crumb
