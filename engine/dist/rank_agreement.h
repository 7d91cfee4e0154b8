// What the ranks of a data-parallel run agree on before they train: the same settings (a digest each
// rank compares with rank 0's) and the same starting weights (rank 0's).
#pragma once
#include <string>

#include "engine/dist/communicator.h"
#include "engine/run/params.h"

namespace crumb {

// Every rank starts from rank 0's weights and state (its load or resume, or its initialisation).
void broadcast_weights(Communicator& comm, ParamStore& params);

// Every rank compares `digest` (what it was started with: "key=value" lines, JSON fields) against rank 0's
// before the first collective that depends on it: a mismatch is one error on every rank, saying on each
// what differs (and a clean exit), never a crash or runs that drift apart.
void check_ranks_agree(Communicator& comm, const std::string& digest);

}  // namespace crumb
