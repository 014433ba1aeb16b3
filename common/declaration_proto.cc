#include "common/declaration_proto.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

static_assert(static_cast<int>(DType::kFloat32) == proto::DTYPE_FLOAT32);
static_assert(static_cast<int>(InitializerSpec::Kind::kZeros) ==
              proto::Initializer::ZEROS);
static_assert(static_cast<int>(InitializerSpec::Kind::kConstant) ==
              proto::Initializer::CONSTANT);
static_assert(static_cast<int>(InitializerSpec::Kind::kUniform) ==
              proto::Initializer::UNIFORM);
static_assert(static_cast<int>(InitializerSpec::Kind::kNormal) ==
              proto::Initializer::NORMAL);
static_assert(static_cast<int>(InitializerSpec::Kind::kGlorotUniform) ==
              proto::Initializer::GLOROT_UNIFORM);
static_assert(static_cast<int>(InitializerSpec::Kind::kFromRank0) ==
              proto::Initializer::FROM_RANK0);
static_assert(static_cast<int>(OptimizerKind::kSgd) ==
              proto::OptimizerDeclaration::SGD);
static_assert(static_cast<int>(OptimizerKind::kAdam) ==
              proto::OptimizerDeclaration::ADAM);

}  // namespace

void ModelSpecToProto(const ModelSpec& model, proto::ModelDeclaration* out) {
  out->Clear();
  out->set_seed(model.seed);
  for (const TensorSpec& t : model.tensors) {
    proto::TensorDeclaration* d = out->add_tensors();
    d->set_name(t.name);
    d->set_dtype(static_cast<proto::DType>(t.dtype));
    d->mutable_shape()->Assign(t.shape.begin(), t.shape.end());
    d->set_no_weight_decay(!t.weight_decay);
    d->set_assigned(t.assigned);
    const InitializerSpec& i = t.initializer;
    proto::Initializer* p = d->mutable_initializer();
    p->set_kind(static_cast<proto::Initializer::Kind>(i.kind));
    p->set_value(i.value);
    p->set_low(i.low);
    p->set_high(i.high);
    p->set_mean(i.mean);
    p->set_stddev(i.stddev);
    p->set_fan_in(i.fan_in);
    p->set_fan_out(i.fan_out);
  }
  if (model.optimizer.has_value()) {
    const OptimizerSpec& o = *model.optimizer;
    proto::OptimizerDeclaration* p = out->mutable_optimizer();
    p->set_kind(static_cast<proto::OptimizerDeclaration::Kind>(o.kind));
    p->set_learning_rate(o.learning_rate);
    p->set_momentum(o.momentum);
    p->set_weight_decay(o.weight_decay);
    p->set_beta1(o.beta1);
    p->set_beta2(o.beta2);
    p->set_epsilon(o.epsilon);
  }
}

absl::StatusOr<ModelSpec> ModelSpecFromProto(
    const proto::ModelDeclaration& declaration) {
  ModelSpec model;
  model.seed = declaration.seed();
  model.tensors.reserve(declaration.tensors_size());
  for (int id = 0; id < declaration.tensors_size(); ++id) {
    const proto::TensorDeclaration& d = declaration.tensors(id);
    TensorSpec t;
    t.name = d.name();
    if (d.dtype() != proto::DTYPE_FLOAT32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", id, " \"", d.name(), "\": dtype ",
          static_cast<int>(d.dtype()), " is not supported; only float32 is"));
    }
    t.dtype = DType::kFloat32;
    t.shape.assign(d.shape().begin(), d.shape().end());
    t.weight_decay = !d.no_weight_decay();
    t.assigned = d.assigned();
    const proto::Initializer& p = d.initializer();
    if (!proto::Initializer::Kind_IsValid(p.kind())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", id, " \"", d.name(),
                       "\": unknown initializer kind ", p.kind()));
    }
    InitializerSpec& i = t.initializer;
    i.kind = static_cast<InitializerSpec::Kind>(p.kind());
    i.value = p.value();
    i.low = p.low();
    i.high = p.high();
    i.mean = p.mean();
    i.stddev = p.stddev();
    i.fan_in = p.fan_in();
    i.fan_out = p.fan_out();
    model.tensors.push_back(std::move(t));
  }
  if (declaration.has_optimizer()) {
    const proto::OptimizerDeclaration& p = declaration.optimizer();
    if (p.kind() != proto::OptimizerDeclaration::SGD &&
        p.kind() != proto::OptimizerDeclaration::ADAM) {
      return absl::InvalidArgumentError(
          absl::StrCat("the declared optimizer's kind ", p.kind(),
                       " is not one the servers implement (sgd, adam)"));
    }
    OptimizerSpec& o = model.optimizer.emplace();
    o.kind = static_cast<OptimizerKind>(p.kind());
    o.learning_rate = p.learning_rate();
    o.momentum = p.momentum();
    o.weight_decay = p.weight_decay();
    o.beta1 = p.beta1();
    o.beta2 = p.beta2();
    o.epsilon = p.epsilon();
  }
  return model;
}

}  // namespace ps
