#include "lamina/lr_policy.hpp"

#include "lamina/common.hpp"

namespace lamina {

const char* const kLrPolicyNames = "fixed, step, multistep, exp, inv, poly, sigmoid or cosine";

std::optional<LrPolicy> find_lr_policy(const std::string& name) {
  if (name == "fixed") return LrPolicy::kFixed;
  if (name == "step") return LrPolicy::kStep;
  if (name == "multistep") return LrPolicy::kMultistep;
  if (name == "exp") return LrPolicy::kExp;
  if (name == "inv") return LrPolicy::kInv;
  if (name == "poly") return LrPolicy::kPoly;
  if (name == "sigmoid") return LrPolicy::kSigmoid;
  if (name == "cosine") return LrPolicy::kCosine;
  return std::nullopt;
}

LrPolicyFields lr_policy_fields(LrPolicy policy) {
  LrPolicyFields uses;
  switch (policy) {
    case LrPolicy::kFixed: break;
    case LrPolicy::kStep: uses.gamma = uses.stepsize = true; break;
    case LrPolicy::kMultistep: uses.gamma = uses.stepvalue = true; break;
    case LrPolicy::kExp: uses.gamma = true; break;
    case LrPolicy::kInv: uses.gamma = uses.power = true; break;
    case LrPolicy::kPoly: uses.power = uses.max_iter = true; break;
    case LrPolicy::kSigmoid: uses.gamma = uses.stepsize = true; break;
    case LrPolicy::kCosine: uses.max_iter = true; break;
  }
  return uses;
}

LrSchedule lr_schedule(const SolverParameter& p) {
  const std::optional<LrPolicy> policy = find_lr_policy(p.lr_policy());
  if (!policy) fail("lr_policy '", p.lr_policy(), "' is unknown; use ", kLrPolicyNames);
  LrSchedule s;
  s.policy = *policy;
  s.base_lr = p.base_lr();
  s.gamma = p.gamma();
  s.power = p.power();
  s.stepsize = p.stepsize();
  s.max_iter = p.max_iter();
  s.num_stepvalues = p.stepvalue_size();
  s.stepvalues = p.stepvalue().data();
  return s;
}

double learning_rate(const SolverParameter& p, int64_t iter) {
  return schedule_rate(lr_schedule(p), iter);
}

}  // namespace lamina
