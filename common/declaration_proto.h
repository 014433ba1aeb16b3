#ifndef PS_COMMON_DECLARATION_PROTO_H_
#define PS_COMMON_DECLARATION_PROTO_H_

// A model declaration (common/model_spec.h) on the wire and in checkpoints
// (ps.proto.ModelDeclaration).

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "proto/parameter_server.pb.h"

namespace ps {

void ModelSpecToProto(const ModelSpec& model, proto::ModelDeclaration* out);

// InvalidArgument for a dtype, initializer or optimizer kind this build
// does not know (a newer peer's); the result is not validated
// (ValidateModelSpec).
absl::StatusOr<ModelSpec> ModelSpecFromProto(
    const proto::ModelDeclaration& declaration);

}  // namespace ps

#endif  // PS_COMMON_DECLARATION_PROTO_H_
