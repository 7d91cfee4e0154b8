// What the memory strategy (engine/strategy/memory_strategy.h) predicts step times from: each node's kernel time,
// measured on this machine by running the training pass at a small micro-batch and at half of it, and the
// bandwidth of copies between the device and the host pool, measured with the same copy queue swapping uses.
// A kernel's time is a fixed part (starting its threads, setting up its loops: what the node costs whatever
// the samples) plus a part linear in the micro-batch size, the two found from the two timings; scaling the
// whole time linearly instead counts the fixed part m / measured_batch times, which on resnet20 at 4 samples
// scaled to 8 predicted the step 9% high (docs/memory.md). A recomputed node costs what its original did.
#pragma once
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "engine/graph/graph.h"

namespace crumb {

struct CostModel {
  int measured_batch = 0;
  std::unordered_map<std::string, double> node_seconds;  // by node name, at measured_batch samples
  // The part of node_seconds that does not scale with the samples (0 where absent): at m samples a node takes
  // fixed + (node_seconds - fixed) * m / measured_batch.
  std::unordered_map<std::string, double> fixed_seconds;
  // The nodes whose node_seconds were measured running their lean variant (Node::lean): measured within a
  // budget that only the lean plan fits (memory_strategy.cc, measure_within).
  std::unordered_set<std::string> measured_lean;
  double seconds_per_byte = 0;                           // a copy to or from the host pool
  // Whether copies overlap the kernels (Backend::copies_overlap): on a GPU the copy engines run beside the
  // SMs; on the CPU the copy thread takes a core and memory bandwidth from the kernels' threads, so a
  // copy's time adds to the step.
  bool copies_overlap = true;
  // A lean step (Node::lean: its slices of samples one after another on one thread instead of side by
  // side) takes this many times the time of the step that is not lean: the kernels' threads, at most 8
  // slices. Not measured.
  double lean_slowdown = 1;

  // Seconds of node n at a micro-batch of m samples: its own measured time, or for a node a memory
  // strategy added, the time of the node it recomputes (a copy or a wait: 0; they are simulated); times
  // lean_slowdown where n is lean and was measured not lean, divided by it where the reverse.
  double seconds(const Node& n, int m) const;
  // The training pass of g at m samples, simulated: nodes one after another, copies one after another
  // on their own queue (or, where copies do not overlap, in line with the nodes), a wait holding the nodes
  // until its copy is done. Returns the seconds of a step.
  double simulate(const Graph& g, int m) const;
};

// The samples measure_costs times g's micro-batch of m at: Backend::timing_batch() (8 on the CPU, 32 on a
// GPU), or more where the largest step's operands (its inputs and outputs) would still fit the device's
// cache (Backend::cache_bytes) there: at m they come from memory, and a time measured in the cache and
// scaled predicted ResNet-50 at 64x64, m = 64, 43% short (docs/memory.md); at most m.
int timing_batch(const Graph& g, int m, Device device, int index = 0);

// Runs g's training pass (g must have its backward) at timing_batch(g, m) samples once to warm up, then three
// timed runs at that batch and three at half of it (where it is 2 or more) in turn, keeping each node's
// median at each (the sum of each node's fastest fell 4-5% short of a whole pass: a pass is not every
// node's best moment at once; docs/memory.md), and splits each node's time into its fixed and linear parts; then copies of 16 MiB each way, fastest of three. It allocates
// what a run of g in memory at that micro-batch does without the optimizer state and the loader (the
// parameters and their gradients, the arena, the inputs), freed before the copies' 32 MiB: a caller
// that keeps within a budget checks that plan first (engine/strategy/memory_strategy.cc).
CostModel measure_costs(const Graph& g, int m, Device device, int index = 0);

// own, g's costs, made comparable with `measured`, the costs of `reference` (another form of the same
// model: the unfused graph of a fused one) measured at another moment: each node of g that reference
// has too (same name, op, lean flag and operand shapes) takes reference's time, and g's other nodes are
// scaled by how much faster or slower the shared nodes ran in own than in measured (the machine's load
// between the two measurements). Without it, on 2 cores under a parallel ctest, the unfused graph measured
// so much faster than the fused one that its least plan beat the fused graph's in-memory plan on time and
// the frontier of the two was one point. Both must be at the same batch.
CostModel align_costs(const Graph& g, CostModel own, const Graph& reference, const CostModel& measured);

// A model that measures nothing: each node's floating-point work (OpDef::flops) at 100 GFLOP/s plus the
// bytes it reads and writes at 10 GB/s, copies at 10 GB/s. Coarse, and the same on every run and machine:
// what decides whether a budget can be met (engine/strategy/memory_strategy.h), so that the answer never
// depends on timings.
CostModel estimate_costs(const Graph& g, int m);

}  // namespace crumb
