// SPDX-License-Identifier: Apache-2.0
#include "rpc/interceptors.h"

#include <string>

namespace vmspace::rpc {

/// The answer to a request message that did not parse (unary: gRPC's INTERNAL with an
/// empty message, rewritten by ParseErrorInterceptor; Batch: a message of the stream).
grpc::Status ParseError(std::string_view method) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "the request message of " + std::string(method) +
                          " could not be parsed (not a valid protobuf encoding of its type; "
                          "strings must be UTF-8)");
}

namespace {

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(const char* method) : method_(method ? method : "?") {}
  // method_ lives as long as the call (ServerRpcInfo::method()).
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status st = m->GetSendStatus();
      // No handler answers INTERNAL with an empty message: that is gRPC's own answer
      // to a request it could not deserialize.
      if (st.error_code() == grpc::StatusCode::INTERNAL && st.error_message().empty())
        m->ModifySendStatus(ParseError(method_));
    }
    m->Proceed();
  }

 private:
  const char* const method_;
};

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ParseErrorInterceptor(info->method());
  }
};

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> ServiceInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> v;
  v.push_back(std::make_unique<ParseErrorInterceptorFactory>());
  return v;
}

}  // namespace vmspace::rpc
