// SPDX-License-Identifier: Apache-2.0
// The interceptors of every call, and the status of a request that did not parse.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

namespace vmspace::rpc {

/// The interceptors of every call (ServerBuilder::experimental().SetInterceptorCreators):
/// a request that could not be parsed is answered INVALID_ARGUMENT "the request message
/// of <method> could not be parsed ..." instead of gRPC's INTERNAL with an empty
/// message (GenericDeserialize's InitializationErrorString(), empty for proto3).
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> ServiceInterceptors();

/// The answer to a request message of `method` ("/vmspace.v1.VmSpace/Batch") that did
/// not parse: INVALID_ARGUMENT naming the method.
grpc::Status ParseError(std::string_view method);

}  // namespace vmspace::rpc
