// Checks of a SolverParameter, field by field, in the order a reader of the solver file would
// fix them: names, numbers that are not finite, the learning rate and its policy, the update
// rule's fields, then the run (iterations, tests, seed, device, snapshots).
#include "lamina/solver_config.hpp"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "lamina/common.hpp"
#include "lamina/io.hpp"
#include "lamina/lr_policy.hpp"
#include "lamina/step_state.hpp"

namespace lamina {
namespace {

namespace pb = google::protobuf;

// Drops the parser's messages: the file was parsed once already and a line is only a hint.
class QuietCollector : public pb::io::ErrorCollector {
 public:
  void AddError(int, pb::io::ColumnNumber, const std::string&) override {}
};

constexpr UpdateRule kRules[] = {UpdateRule::kSGD,     UpdateRule::kNesterov,
                                  UpdateRule::kAdam,    UpdateRule::kAdamW,
                                  UpdateRule::kRMSProp, UpdateRule::kAdaGrad,
                                  UpdateRule::kAdaDelta};

std::optional<UpdateRule> find_solver_type(const std::string& type) {
  for (UpdateRule rule : kRules)
    if (type == solver_type_name(rule)) return rule;
  return std::nullopt;
}

// The rule of Caffe's older enum field solver_type.
UpdateRule rule_of_enum(SolverParameter::SolverType type) {
  switch (type) {
    case SolverParameter::NESTEROV: return UpdateRule::kNesterov;
    case SolverParameter::ADAGRAD: return UpdateRule::kAdaGrad;
    case SolverParameter::RMSPROP: return UpdateRule::kRMSProp;
    case SolverParameter::ADADELTA: return UpdateRule::kAdaDelta;
    case SolverParameter::ADAM: return UpdateRule::kAdam;
    default: return UpdateRule::kSGD;
  }
}

// Refusals of one SolverParameter, each prefixed with where its field is written.
class Checker {
 public:
  Checker(const SolverParameter& p, const std::string& source) : p_(p), source_(source) {}

  // index: which value of a repeated field.
  template <class... Args>
  [[noreturn]] void refuse_at(const std::string& field, int index, const Args&... args) const {
    const std::string where = field_location(source_, p_, field, index);
    if (where.empty()) fail(args...);
    fail(where, ": ", args...);
  }
  template <class... Args>
  [[noreturn]] void refuse(const std::string& field, const Args&... args) const {
    refuse_at(field, -1, args...);
  }
  template <class... Args>
  void require(bool ok, const std::string& field, const Args&... args) const {
    if (!ok) refuse(field, args...);
  }
  // A decay factor: in [0, 1) (written so that NaN fails too).
  void unit_interval(const char* field, float value, const char* meaning) const {
    require(value >= 0 && value < 1, field, field, " is ", value, "; it must be in [0, 1) (",
            meaning, ")");
  }

 private:
  const SolverParameter& p_;
  const std::string& source_;
};

// Every float or double field that is set holds a finite number.
void check_finite_numbers(const Checker& c, const SolverParameter& p) {
  const pb::Reflection* reflection = p.GetReflection();
  const pb::Descriptor* descriptor = p.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    const bool is_float = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_FLOAT;
    if (!is_float && field->cpp_type() != pb::FieldDescriptor::CPPTYPE_DOUBLE) continue;
    const int n = field->is_repeated() ? reflection->FieldSize(p, field)
                                       : int(reflection->HasField(p, field));
    for (int k = 0; k < n; ++k) {
      const double value =
          field->is_repeated()
              ? (is_float ? reflection->GetRepeatedFloat(p, field, k)
                          : reflection->GetRepeatedDouble(p, field, k))
              : (is_float ? reflection->GetFloat(p, field) : reflection->GetDouble(p, field));
      if (!std::isfinite(value))
        c.refuse_at(field->name(), field->is_repeated() ? k : -1, field->name(), " is ", value,
                    "; it must be a finite number",
                    std::isinf(value) && is_float ? " (a float holds at most about 3.4e38)" : "");
    }
  }
}

// lr_policy, base_lr and the fields the policy reads.
void check_learning_rate(const Checker& c, const SolverParameter& p) {
  c.require(p.has_base_lr(), "base_lr", "base_lr is not set; give the learning rate "
            "(base_lr: 0.01)");
  c.require(p.base_lr() > 0, "base_lr", "base_lr is ", p.base_lr(), "; it must be > 0");

  const std::string& name = p.lr_policy();
  const std::optional<LrPolicy> policy = find_lr_policy(name);
  if (!policy) c.refuse("lr_policy", "lr_policy '", name, "' is unknown; use ", kLrPolicyNames);
  const LrPolicyFields uses = lr_policy_fields(*policy);
  auto need = [&](bool used, bool set, const char* field) {
    if (used && !set) c.refuse("lr_policy", "lr_policy '", name, "' needs ", field);
    if (!used && set) c.refuse(field, field, " is set but lr_policy '", name, "' does not use it");
  };
  need(uses.gamma, p.has_gamma(), "gamma");
  need(uses.power, p.has_power(), "power");
  need(uses.stepsize, p.has_stepsize(), "stepsize");
  need(uses.stepvalue, p.stepvalue_size() > 0, "stepvalue");
  if (uses.max_iter)
    c.require(p.max_iter() > 0, "max_iter", "lr_policy '", name, "' needs max_iter > 0, where "
              "its schedule ends; got ", p.max_iter());
  if (uses.stepsize)
    c.require(p.stepsize() > 0, "stepsize", "stepsize is ", p.stepsize(), "; it must be > 0");
  for (int i = 0; i < p.stepvalue_size(); ++i) {
    if (p.stepvalue(i) < 0)
      c.refuse_at("stepvalue", i, "stepvalue ", p.stepvalue(i), " is negative; give the "
                  "iterations where the rate drops, each >= 0");
    if (i > 0 && p.stepvalue(i) <= p.stepvalue(i - 1))
      c.refuse_at("stepvalue", i, "stepvalue must increase; got ", p.stepvalue(i - 1), " then ",
                  p.stepvalue(i));
  }

  switch (*policy) {
    case LrPolicy::kStep:
    case LrPolicy::kMultistep:
    case LrPolicy::kExp:
      c.require(p.gamma() > 0, "gamma", "gamma is ", p.gamma(), "; lr_policy '", name,
                "' multiplies the rate by gamma, which must be > 0 (0.1 divides it by 10)");
      break;
    case LrPolicy::kInv:
      c.require(p.gamma() > 0, "gamma", "gamma is ", p.gamma(), "; lr_policy 'inv' (base_lr * "
                "(1 + gamma * iter) ^ -power) needs gamma > 0");
      break;
    case LrPolicy::kSigmoid:
      c.require(p.gamma() != 0, "gamma", "gamma is 0, which keeps lr_policy 'sigmoid' at "
                "base_lr / 2; use gamma < 0 to decay around stepsize, > 0 to rise");
      break;
    default:
      break;
  }
  if (*policy == LrPolicy::kInv || *policy == LrPolicy::kPoly)
    c.require(p.power() > 0, "power", "power is ", p.power(), "; lr_policy '", name,
              "' decays the rate only for power > 0");
}

// A rate that grows (gamma > 1) must stay a finite float up to max_iter. Every policy is
// monotonic, so the first iteration where it overflows is found by bisection.
void check_rate_stays_finite(const Checker& c, const SolverParameter& p) {
  auto finite_at = [&](int64_t it) {
    return std::abs(learning_rate(p, it)) <= std::numeric_limits<float>::max();  // false for NaN
  };
  const int64_t last = std::max(p.max_iter(), 0);
  if (finite_at(last) && finite_at(0)) return;
  int64_t bad = 0;
  if (finite_at(0)) {
    int64_t good = 0;
    bad = last;
    while (bad - good > 1) {
      const int64_t mid = good + (bad - good) / 2;
      (finite_at(mid) ? good : bad) = mid;
    }
  }
  c.refuse("gamma", "gamma is ", p.gamma(), ": lr_policy '", p.lr_policy(), "' makes the "
           "learning rate overflow a float at iteration ", bad, " (max_iter is ", p.max_iter(),
           "); use gamma <= 1, or fewer iterations");
}

// The fields of the update rule: momentum, momentum2, rms_decay, delta, weight decay, clipping.
void check_rule_fields(const Checker& c, const SolverParameter& p, UpdateRule rule) {
  const bool adam = rule == UpdateRule::kAdam || rule == UpdateRule::kAdamW;
  const bool sgd = rule == UpdateRule::kSGD || rule == UpdateRule::kNesterov;
  const std::string type = solver_type_name(rule);
  if (sgd || adam) {
    c.unit_interval("momentum", p.momentum(),
                    adam ? "Adam's beta1" : "the fraction of the last step kept");
  } else if (rule == UpdateRule::kAdaDelta) {
    c.unit_interval("momentum", p.momentum(), "AdaDelta's decay of its two averages, "
                    "typically 0.95");
  } else if (p.has_momentum() && p.momentum() != 0) {
    // Caffe requires momentum 0 for RMSProp and AdaGrad; accept that and nothing else.
    if (rule == UpdateRule::kRMSProp)
      c.refuse("momentum", "momentum is ", p.momentum(), " but RMSProp takes no momentum: its "
               "decay is rms_decay; remove momentum (or set it to 0) and set rms_decay");
    c.refuse("momentum", "momentum is ", p.momentum(), " but solver type ", type,
             " does not use it; remove momentum (or set it to 0)");
  }
  if (p.has_momentum2() && !adam)
    c.refuse("momentum2", "momentum2 is set but solver type ", type, " does not use it");
  if (adam) c.unit_interval("momentum2", p.momentum2(), "Adam's beta2");
  if (p.has_rms_decay() && rule != UpdateRule::kRMSProp)
    c.refuse("rms_decay", "rms_decay is set but solver type ", type, " does not use it");
  if (rule == UpdateRule::kRMSProp) c.unit_interval("rms_decay", p.rms_decay(), "RMSProp's decay");
  if (p.has_delta() && sgd)
    c.refuse("delta", "delta is set but solver type ", type, " does not use it");
  if (!sgd)
    c.require(p.delta() > 0, "delta", "delta is ", p.delta(), "; it must be > 0 (the epsilon "
              "that keeps ", type, "'s denominator from 0)");

  c.require(p.weight_decay() >= 0, "weight_decay", "weight_decay is ", p.weight_decay(),
            "; it must be >= 0");
  c.require(p.regularization_type() == "L2" || p.regularization_type() == "L1",
            "regularization_type", "regularization_type '", p.regularization_type(),
            "' is unknown; use L2 or L1");
  if (p.has_clip_gradients())
    c.require(p.clip_gradients() >= 0, "clip_gradients", "clip_gradients is ",
              p.clip_gradients(), "; give the global L2 norm above which gradients are scaled "
              "down (> 0), or leave clip_gradients out (or 0) for no clipping");
}

// Iterations, tests, seed, device and snapshots.
void check_run_fields(const Checker& c, const SolverParameter& p, const std::string& source,
                      TestRunner tests) {
  c.require(p.iter_size() >= 1, "iter_size", "iter_size must be >= 1, got ", p.iter_size());
  c.require(p.average_loss() >= 1, "average_loss", "average_loss must be >= 1, got ",
            p.average_loss());
  c.require(p.display() >= 0, "display", "display must be >= 0 (0: no display), got ",
            p.display());
  c.require(p.max_iter() >= 0, "max_iter", "max_iter must be >= 0, got ", p.max_iter());

  // How many test_iter values there are for how many test nets: solver_nets.hpp.
  for (int i = 0; i < p.test_iter_size(); ++i)
    if (p.test_iter(i) <= 0)
      c.refuse_at("test_iter", i, "test_iter must be > 0, got ", p.test_iter(i));
  c.require(p.test_interval() >= 0, "test_interval", "test_interval must be >= 0, got ",
            p.test_interval());
  if (p.test_interval() > 0 && p.test_iter_size() == 0)
    c.refuse("test_interval", "test_interval is ", p.test_interval(), ": give test_iter, the "
             "number of test batches");
  if (p.test_iter_size() > 0 && p.test_interval() == 0 && tests == TestRunner::kSolve)
    c.refuse_at("test_iter", 0, "test_iter is set but no test_interval says when to test; give "
                "test_interval (iterations between tests), or remove test_iter");
  if (p.has_test_initialization())
    c.require(p.test_interval() > 0, "test_initialization",
              "test_initialization is set but no test_interval says when to test");

  c.require(p.loss_scale() >= kSmallestLossScale, "loss_scale", "loss_scale is ",
            p.loss_scale(), "; give the scale (at least 2^-24, 5.96e-08) FP16 training starts "
            "its loss gradient at (65536 when left out)");
  c.require(p.loss_scale_growth_interval() >= 1, "loss_scale_growth_interval",
            "loss_scale_growth_interval is ", p.loss_scale_growth_interval(), "; give the "
            "number (>= 1) of finite iterations in a row after which FP16 training doubles "
            "its loss scale (2000 when left out)");
  c.require(p.gradient_bucket_mb() > 0, "gradient_bucket_mb", "gradient_bucket_mb is ",
            p.gradient_bucket_mb(), "; give the size in megabytes (> 0) of the gradient "
            "buckets the workers of a data-parallel job sum while backward runs");
  if (p.has_random_seed())
    c.require(p.random_seed() >= 0, "random_seed", "random_seed is ", p.random_seed(),
              "; give a seed >= 0, or leave random_seed out to draw one (it is logged)");
  c.require(p.device_id() >= 0, "device_id", "device_id is ", p.device_id(),
            "; give a CUDA device number >= 0");
  if (p.has_device_id())
    c.require(p.solver_mode() == SolverParameter::GPU, "device_id", "device_id is set but "
              "solver_mode is CPU; set solver_mode: GPU");

  c.require(p.snapshot() >= 0, "snapshot", "snapshot must be >= 0 (0: no periodic snapshots), "
            "got ", p.snapshot());
  c.require(!p.snapshot_diff(), "snapshot_diff", "snapshot_diff is true, but Lamina's snapshots "
            "do not store gradients (each iteration computes them anew, so a resumed run "
            "does not need them); remove snapshot_diff");
  if (!p.snapshot_prefix().empty()) return;
  if (p.has_snapshot_prefix() && (p.snapshot() > 0 || p.snapshot_after_train())) {
    const std::string asked = p.snapshot() > 0
        ? "snapshot is " + std::to_string(p.snapshot())
        : std::string("snapshot_after_train is true") +
              (p.has_snapshot_after_train() ? "" : " (the default)");
    std::error_code error;
    const std::string fallback =
        std::string("beside the solver file, named after it") +
        (std::filesystem::is_regular_file(source, error)
             ? " (" + std::filesystem::path(source).replace_extension().string() +
                   "_iter_N.{lamina,solverstate})"
             : "");
    c.refuse("snapshot_prefix", "snapshot_prefix is \"\" but ", asked, ", which asks for "
             "snapshots; leave snapshot_prefix out and lamina train writes them ", fallback,
             ", or give a prefix (\"dir/name\"), or set snapshot: 0 and snapshot_after_train: "
             "false to write none");
  }
  if (p.snapshot() > 0)
    c.refuse("snapshot", "snapshot is ", p.snapshot(), " but snapshot_prefix is not set; say "
             "where snapshots go (snapshot_prefix: \"dir/name\")");
}

}  // namespace

const char* solver_type_name(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::kSGD: return "SGD";
    case UpdateRule::kNesterov: return "Nesterov";
    case UpdateRule::kAdam: return "Adam";
    case UpdateRule::kAdamW: return "AdamW";
    case UpdateRule::kRMSProp: return "RMSProp";
    case UpdateRule::kAdaGrad: return "AdaGrad";
    case UpdateRule::kAdaDelta: return "AdaDelta";
  }
  return "?";
}

UpdateRule parse_solver_type(const SolverParameter& p, const std::string& source) {
  const Checker c(p, source);
  const std::optional<UpdateRule> rule = find_solver_type(p.type());
  if (!rule)
    c.refuse("type", "solver type '", p.type(), "' is unknown; use SGD, Nesterov, Adam, "
             "AdamW, RMSProp, AdaGrad or AdaDelta");
  if (!p.has_solver_type()) return *rule;
  // Caffe's older enum: the rule when type is left out; both set must name the same rule.
  const UpdateRule old = rule_of_enum(p.solver_type());
  if (p.has_type() && *rule != old)
    c.refuse("solver_type", "solver_type is ", SolverParameter::SolverType_Name(p.solver_type()),
             " but type is '", p.type(), "'; they name different rules: keep type and remove "
             "solver_type (Caffe's older field), or make them agree");
  return old;
}

void check_solver_parameter(const SolverParameter& p, const std::string& source,
                            TestRunner tests) {
  const Checker c(p, source);
  const UpdateRule rule = parse_solver_type(p, source);
  check_finite_numbers(c, p);
  check_learning_rate(c, p);
  check_rule_fields(c, p, rule);
  check_run_fields(c, p, source, tests);
  check_rate_stays_finite(c, p);
}

std::string field_location(const std::string& path, const pb::Message& prototype,
                           const std::string& field, int index) {
  if (path.empty()) return path;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return path;  // a name, a FIFO, gone
  const pb::FieldDescriptor* descriptor = prototype.GetDescriptor()->FindFieldByName(field);
  if (!descriptor) return path;
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const Error&) {
    return path;
  }
  std::unique_ptr<pb::Message> message(prototype.New());
  pb::TextFormat::ParseInfoTree tree;
  QuietCollector quiet;
  pb::TextFormat::Parser parser;
  parser.WriteLocationsTo(&tree);
  parser.RecordErrorsTo(&quiet);
  if (!parser.ParseFromString(text, message.get())) return path;
  const int at = descriptor->is_repeated() ? std::max(index, 0) : -1;
  const pb::TextFormat::ParseLocation location = tree.GetLocation(descriptor, at);
  return location.line < 0 ? path : path + ":" + std::to_string(location.line + 1);
}

}  // namespace lamina
