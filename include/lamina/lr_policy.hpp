// Learning-rate policies (Caffe's lr_policy): the rate at an iteration as a function of the
// SolverParameter alone, so that a schedule can be computed and tested without a net.
//
//   fixed      base_lr
//   step       base_lr * gamma ^ floor(iter / stepsize)
//   multistep  base_lr * gamma ^ (how many stepvalue are <= iter)
//   exp        base_lr * gamma ^ iter
//   inv        base_lr * (1 + gamma * iter) ^ -power
//   poly       base_lr * (1 - min(iter, max_iter) / max_iter) ^ power
//   sigmoid    base_lr / (1 + exp(-gamma * (iter - stepsize)))
//   cosine     base_lr * (1 + cos(pi * min(iter, max_iter) / max_iter)) / 2
//
// Every policy is monotonic in iter. The ranges each field must lie in are checked by
// check_solver_parameter (solver_config.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lamina/lamina.pb.h"
#include "lamina/step_state.hpp"

namespace lamina {

// "fixed, step, multistep, exp, inv, poly, sigmoid or cosine", for messages.
extern const char* const kLrPolicyNames;

// The policy an lr_policy value names; nullopt when it names none.
std::optional<LrPolicy> find_lr_policy(const std::string& name);

// The SolverParameter fields a policy reads (beside base_lr).
struct LrPolicyFields {
  bool gamma = false, power = false, stepsize = false, stepvalue = false, max_iter = false;
};
LrPolicyFields lr_policy_fields(LrPolicy policy);

// The learning rate at iteration iter (0 is the first), in double. Throws an Error for an
// unknown lr_policy; other values are taken as they are (check them first).
double learning_rate(const SolverParameter& p, int64_t iter);

// The schedule p describes, as a backend evaluates it (step_state.hpp). Its stepvalues point
// into p, which must outlive it; a solver copies them to backend memory. Throws an Error for
// an unknown lr_policy.
LrSchedule lr_schedule(const SolverParameter& p);

}  // namespace lamina
