// Which nets a solver trains and tests (solver_nets.hpp): Caffe's InitTrainNet and
// InitTestNets, with errors that name the fields to change.
#include "lamina/solver_nets.hpp"

#include <glog/logging.h>

#include <optional>

#include "lamina/common.hpp"
#include "lamina/io.hpp"
#include "lamina/net_state.hpp"
#include "lamina/solver_config.hpp"
#include "lamina/upgrade_v1.hpp"

namespace lamina {
namespace {

// The general net (net or net_param), when there is one, and where it came from.
struct GeneralNet {
  NetParameter param;
  std::string source;
  std::string origin;
};

class NetFields {
 public:
  NetFields(const SolverParameter& p, const std::string& solver_path, const std::string& base)
      : p_(p), solver_path_(solver_path), base_(base) {}

  // "solver.prototxt:3: " for a field, or "solver: " without a file.
  std::string at(const char* field, int index = -1) const {
    const std::string where = field_location(solver_path_, p_, field, index);
    return (where.empty() ? std::string("solver") : where) + ": ";
  }

  SolverNet read(const std::string& path, const std::string& origin) const {
    const std::string resolved = resolve_path(path, base_);
    return SolverNet{read_net_parameter(resolved), resolved, origin + " '" + resolved + "'"};
  }

  // A net written in the solver, upgraded from Caffe's V1 syntax as a net file is when read
  // (io.hpp); field names it.
  static SolverNet written_here(const NetParameter& param, const std::string& field) {
    return SolverNet{upgrade_v1_net(param, field), {}, field};
  }

  SolverNets resolve(const std::optional<GeneralNet>& given) const {
    SolverNets nets;
    const std::optional<GeneralNet> general = given ? given : own_general_net();
    nets.train = train_net(general, given.has_value());
    test_nets(general, nets.tests);
    return nets;
  }

 private:
  std::optional<GeneralNet> own_general_net() const {
    if (!p_.has_net_param() && !p_.has_net()) return {};
    SolverNet net = p_.has_net_param() ? written_here(p_.net_param(), "net_param")
                                       : read(p_.net(), "net file");
    return GeneralNet{std::move(net.param), net.source, net.origin};
  }

  // given: the general net was handed to the solver (replacing net and net_param).
  SolverNet train_net(const std::optional<GeneralNet>& general, bool given) const {
    const char* kFields = "net, net_param, train_net or train_net_param";
    std::string named;
    int count = 0;
    for (const auto& [has, field] : {std::pair{p_.has_net() && !given, "net"},
                                     {p_.has_net_param() && !given, "net_param"},
                                     {p_.has_train_net(), "train_net"},
                                     {p_.has_train_net_param(), "train_net_param"}}) {
      if (!has) continue;
      ++count;
      named += (named.empty() ? "" : " and ") + std::string(field);
    }
    const char* second = p_.has_train_net_param() ? "train_net_param" : "train_net";
    if (given) {
      LAMINA_REQUIRE(count == 0, at(second), "the solver names its train net in ", named,
                     " but a net was also given to it (", general->origin, "); give the "
                     "train net once");
    } else {
      LAMINA_REQUIRE(count > 0, at("net"), "the solver names no net; give its train net in "
                     "one of ", kFields, " (net: \"net.prototxt\" holds the TRAIN and TEST "
                     "phases in one file)");
      LAMINA_REQUIRE(count == 1, at(second), "the solver names its train net ", count,
                     " times (", named, "); give exactly one of ", kFields);
    }
    SolverNet train;
    if (general) {
      train = SolverNet{general->param, general->source, general->origin};
    } else if (p_.has_train_net_param()) {
      train = written_here(p_.train_net_param(), "train_net_param");
    } else {
      train = read(p_.train_net(), "train_net file");
    }
    LAMINA_REQUIRE(!p_.train_state().has_phase() || p_.train_state().phase() == TRAIN,
                   at("train_state"), "train_state sets phase: ",
                   Phase_Name(p_.train_state().phase()), "; the train net is built in phase "
                   "TRAIN: leave phase out of train_state (it chooses the level and stages)");
    set_state(train, TRAIN, p_.has_train_state() ? &p_.train_state() : nullptr);
    LOG(INFO) << "Train net from " << train.origin << " (" << state_string(train.param.state())
              << ")";
    return train;
  }

  void test_nets(const std::optional<GeneralNet>& general, std::vector<SolverNet>& out) const {
    const int named = p_.test_net_param_size() + p_.test_net_size();
    const int iters = p_.test_iter_size();
    if (!general) {
      LAMINA_REQUIRE(iters == named || named > 0 || iters == 0, at("test_iter"), "test_iter is "
                     "given but the solver names no test net: with train_net or "
                     "train_net_param, name the test nets in test_net or test_net_param (or "
                     "give the net in net, whose TEST phase is then tested)");
      LAMINA_REQUIRE(iters == named, at("test_iter"), "test_iter has ", iters, " value(s) for ",
                     named, " test net(s) (", p_.test_net_param_size(), " test_net_param, ",
                     p_.test_net_size(), " test_net); give one test_iter per test net, in "
                     "that order");
    } else {
      LAMINA_REQUIRE(iters >= named, at("test_iter"), "test_iter has ", iters, " value(s) for ",
                     named, " test net(s) (", p_.test_net_param_size(), " test_net_param, ",
                     p_.test_net_size(), " test_net); give one test_iter per test net, in "
                     "that order (each test_iter after those tests the general net once more)");
    }
    for (int i = 0; i < p_.test_net_param_size(); ++i)
      out.push_back(written_here(p_.test_net_param(i), "test_net_param #" + std::to_string(i)));
    for (int i = 0; i < p_.test_net_size(); ++i)
      out.push_back(read(p_.test_net(i), "test_net file"));
    while (general && int(out.size()) < iters)
      out.push_back(SolverNet{general->param, general->source, general->origin});
    LAMINA_REQUIRE(p_.test_state_size() == 0 || p_.test_state_size() == int(out.size()),
                   at("test_state"), "test_state is given ", p_.test_state_size(), " time(s) for ",
                   out.size(), " test net(s); give none, or one per test net in the order of "
                   "test_iter (test_net_param first, then test_net, then the general net)");
    for (size_t i = 0; i < out.size(); ++i) {
      const NetState* state = p_.test_state_size() ? &p_.test_state(int(i)) : nullptr;
      set_state(out[i], state ? state->phase() : TEST, state);
      LOG(INFO) << "Test net #" << i << " from " << out[i].origin << " ("
                << state_string(out[i].param.state()) << ")";
    }
  }

  // The net's state: `phase`, with the solver's level and stages merged over the file's.
  // A phase in the file's own state must be that one. (Net itself replaces a differing one,
  // as Caffe's Net does; Caffe's solver would instead let the file's phase win over its
  // default, which builds a "train" net in TEST: refused here.)
  void set_state(SolverNet& net, Phase phase, const NetState* solver) const {
    const NetState& own = net.param.state();
    LAMINA_REQUIRE(!own.has_phase() || own.phase() == phase, net.source.empty() ? net.origin
                                                                                : net.source,
                   ": the net sets state { phase: ", Phase_Name(own.phase()), " } but the "
                   "solver builds it in phase ", Phase_Name(phase), " (", net.origin, "); leave "
                   "phase out of the net's state (train_state and test_state choose the level "
                   "and stages)");
    NetState state = merged_state(phase, own, solver);
    *net.param.mutable_state() = std::move(state);
  }

  const SolverParameter& p_;
  const std::string& solver_path_;
  const std::string& base_;
};

}  // namespace

SolverNets solver_nets(const SolverParameter& p, const std::string& solver_path) {
  return NetFields(p, solver_path, solver_path).resolve(std::nullopt);
}

SolverNets solver_nets(const SolverParameter& p, const NetParameter& net,
                       const std::string& source) {
  const std::string origin = source.empty() ? "the net given" : "net '" + source + "'";
  return NetFields(p, {}, source).resolve(GeneralNet{upgrade_v1_net(net, source), source, origin});
}

}  // namespace lamina
