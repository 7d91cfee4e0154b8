// batch_norm2d and group_norm as layers a user can name (engine/ops/layer.h): torch.nn.BatchNorm2d and
// torch.nn.GroupNorm, affine, BatchNorm with running statistics.
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/ops/layer.h"
#include "engine/ops/norm.h"

namespace crumb {

CRUMB_ON_LOAD {
  using F = LayerField;
  add_layer(
      Layer("batch_norm2d")
          .with_run_bn()
          .with_field(F::integer("num_features", 1, 0).stated_size())
          .with_field(F::number("eps", 1e-5))
          .with_field(F::number("momentum", 0.1))
          .with_field(F::integer("group", 1, 0).maybe().or_word("batch").from_torch("-"))
          .with_check([](const LayerAttrs& a, const std::string& where) {
            const double eps = a.number("eps"), momentum = a.number("momentum");
            CRUMB_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, where,
                        ": eps must be > 0 and momentum in [0, 1], got ", eps, " and ", momentum);
          })
          .with_build([](const LayerBuild& b) {
            check_stated_size(b, "num_features", 3);
            BatchNormAttrs a = b.run_bn;
            if (b.attrs.given("group")) a.group = b.attrs.integer("group");
            a.eps = b.attrs.number("eps");
            a.momentum = b.attrs.number("momentum");
            return nn::batch_norm2d(b.g, b.in[0], b.name, a);
          })
          .with_python("BatchNorm2d", "bn", "num_features, eps=1e-5, momentum=0.1, group=None",
                       "BatchNorm over groups of `group` samples (docs/normalization.md): None takes the run's "
                       "--bn-group,\n    \"batch\" normalises the whole batch (PyTorch's semantics, one "
                       "micro-batch).")
          .with_torch("BatchNorm2d", {},
                      {{"affine", "==", "True", "BatchNorm2d without affine or track_running_stats is not supported"},
                       {"track_running_stats", "==", "True",
                        "BatchNorm2d without affine or track_running_stats is not supported"},
                       {"momentum", "!=", "None", "(a cumulative average; give a momentum)"}}));
  add_layer(
      Layer("group_norm")
          .with_field(F::integer("num_groups", 1, 0).needed())
          .with_field(F::integer("num_channels", 1, 0).stated_size())
          .with_field(F::number("eps", 1e-5))
          .with_check([](const LayerAttrs& a, const std::string& where) {
            const int groups = a.integer("num_groups");
            CRUMB_CHECK(!a.given("num_channels") || a.integer("num_channels") % groups == 0, where, ": num_groups ",
                        groups, " does not divide num_channels ", a.integer("num_channels"));
            CRUMB_CHECK(a.number("eps") > 0, where, ": eps must be > 0, got ", a.number("eps"));
          })
          .with_build([](const LayerBuild& b) {
            check_stated_size(b, "num_channels", 3);
            const Value& x = b.g.value(b.in[0]);
            const int groups = b.attrs.integer("num_groups");
            CRUMB_CHECK(x.dims[0] % groups == 0, b.where, ": num_groups ", groups, " does not divide the ",
                        x.dims[0], " channels of its input '", x.name, "'");
            return nn::group_norm(b.g, b.in[0], groups, b.name, b.attrs.number("eps"));
          })
          .with_python("GroupNorm", "gn", "num_groups, num_channels, eps=1e-5")
          .with_torch("GroupNorm", {}, {{"affine", "==", "True", "GroupNorm without affine is not supported"}}));
}

}  // namespace crumb
