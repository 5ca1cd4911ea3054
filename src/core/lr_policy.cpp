#include "lamina/lr_policy.hpp"

#include <algorithm>
#include <cmath>

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

double learning_rate(const SolverParameter& p, int64_t iter) {
  const std::optional<LrPolicy> policy = find_lr_policy(p.lr_policy());
  if (!policy) fail("lr_policy '", p.lr_policy(), "' is unknown; use ", kLrPolicyNames);
  const double base = p.base_lr();
  const double it = double(iter);
  switch (*policy) {
    case LrPolicy::kFixed:
      return base;
    case LrPolicy::kStep:
      return base * std::pow(p.gamma(), std::floor(it / p.stepsize()));
    case LrPolicy::kMultistep: {
      int passed = 0;
      while (passed < p.stepvalue_size() && iter >= p.stepvalue(passed)) ++passed;
      return base * std::pow(p.gamma(), passed);
    }
    case LrPolicy::kExp:
      return base * std::pow(p.gamma(), it);
    case LrPolicy::kInv:
      return base * std::pow(1.0 + p.gamma() * it, -p.power());
    case LrPolicy::kPoly:
      return base * std::pow(1.0 - std::min(it / p.max_iter(), 1.0), p.power());
    case LrPolicy::kSigmoid:
      return base / (1.0 + std::exp(-p.gamma() * (it - p.stepsize())));
    case LrPolicy::kCosine:
      return base * 0.5 * (1.0 + std::cos(M_PI * std::min(it / p.max_iter(), 1.0)));
  }
  fail("lr_policy '", p.lr_policy(), "' is unknown");  // unreachable: every enumerator returns
}

}  // namespace lamina
