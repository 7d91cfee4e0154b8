// Trains lenet5 on Fashion-MNIST with Crumb as an installed library: find_package(Crumb) and the target
// Crumb::crumb (CMakeLists.txt next to this file).
//   train_lenet5 [steps, default 300] [Fashion-MNIST folder, default data::default_data_dir()]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/base/error.h"
#include "engine/data/idx.h"
#include "engine/data/loader.h"
#include "engine/graph/autograd.h"
#include "engine/optim/optimizer.h"
#include "engine/train/model_registry.h"
#include "engine/train/scheduler.h"

using namespace crumb;

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const std::string dir = argc > 2 ? argv[2] : data::default_data_dir();
  const int batch = 64;
  const uint64_t seed = 1;

  const data::Dataset train_set = data::load_mnist_split(dir, "train");
  const data::Dataset test_set = data::load_mnist_split(dir, "t10k");
  std::printf("data: %s, %d training and %d test images\n", dir.c_str(), train_set.count, test_set.count);

  // The model's forward graph and loss, its backward, the parameters and the passes compiled for
  // micro-batches of the whole batch.
  Graph g = models::build("lenet5");  // ModelSpec's default: 1x28x28 images, 10 classes, as Fashion-MNIST
  build_backward(g);
  ParamStore params(g);
  params.init(seed);
  Arena arena;
  Scheduler sched(g, params, arena, batch);
  OptimizerConfig sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  const std::unique_ptr<Optimizer> opt = make_optimizer(params, sgd);

  data::Loader loader(train_set, batch, data::kFashionMnistNorm, /*shuffle=*/true, seed, /*drop_last=*/true);
  int epoch = 0;
  loader.start_epoch(epoch);
  double loss_sum = 0;
  long long correct = 0, seen = 0;
  for (int step = 1; step <= steps; ++step) {
    data::Batch b;
    while (!loader.next(b)) loader.start_epoch(++epoch);
    const BatchResult r = sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size);
    opt->step();
    loss_sum += r.loss_sum;
    correct += r.correct;
    seen += b.size;
    if (step % 100 == 0 || step == steps) {
      std::printf("step %d: train loss %.4f, accuracy %.3f\n", step, loss_sum / seen, double(correct) / seen);
      loss_sum = 0;
      correct = seen = 0;
    }
  }

  data::Loader test_loader(test_set, batch, data::kFashionMnistNorm, /*shuffle=*/false, seed);
  test_loader.start_epoch(0);
  double test_loss = 0;
  long long test_correct = 0;
  for (data::Batch b; test_loader.next(b);) {
    const BatchResult r = sched.evaluate({{"x", b.x}, {"y", b.y}}, b.size);
    test_loss += r.loss_sum;
    test_correct += r.correct;
  }
  std::printf("test: loss %.4f, accuracy %.3f\n", test_loss / test_set.count, double(test_correct) / test_set.count);
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "train_lenet5: %s\n", e.what());
  return 1;
}
