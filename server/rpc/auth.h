// SPDX-License-Identifier: Apache-2.0
// Authentication of vmspace calls: bearer tokens from a token file, and mutual TLS.
//
// Token file (vmspaced --token-file): one token per line, "TOKEN TENANT [admin]",
// fields separated by blanks; '#' starts a comment; blank lines are ignored. TOKEN is
// any run of non-blank characters (use at least 128 random bits, e.g.
// `openssl rand -hex 16`), TENANT is [A-Za-z0-9._-]{1,64}; "admin" gives the role that
// may list and destroy every tenant's spaces and list every tenant's files. A token
// may appear once. The file is read at start-up (an error is fatal) and again on
// SIGHUP (an error keeps the previous table and is logged).
//
// Policy (Authenticate): a call with "authorization: Bearer <token>" metadata is the
// token's tenant, or UNAUTHENTICATED if the token is unknown; without that metadata,
// under mutual TLS (--tls-client-ca) the call is the tenant named by its client
// certificate's subject CN (never admin), else UNAUTHENTICATED. With neither a token
// file nor mutual TLS every call is tenant "" with the admin role (the open daemon, as
// before tenants). The service authenticates every vmspace.v1.VmSpace call; gRPC health
// and server reflection (the public schema) stay open; /metrics has no authentication
// (daemon totals only, no ids or labels: bind it to loopback or a private network).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include <absl/synchronization/mutex.h>
#include <grpcpp/server_context.h>

#include "rpc/errors.h"

namespace vmspace::rpc {

/// Who makes a call: the tenant owning what it creates, and whether it has the admin role.
struct Caller {
  std::string tenant;
  bool admin = false;
};

/// A parsed token file: token -> caller.
using TokenTable = std::unordered_map<std::string, Caller>;

/// Parses the text of a token file (format above). Returns false with *err naming the
/// line ("line 3: ...") on the first malformed line or duplicate token.
bool ParseTokenFile(const std::string& text, TokenTable* out, std::string* err);

/// The daemon's authentication state. Thread-safe: Authenticate takes mu_ for read,
/// Reload takes it for write only to swap the table.
class Authenticator {
 public:
  /// `token_file` "" = no tokens; `mtls` = client certificates are verified (their CN
  /// names the tenant). Call Reload() once before serving when token_file is set.
  Authenticator(std::string token_file, bool mtls)
      : token_file_(std::move(token_file)), mtls_(mtls) {}

  /// (Re)reads the token file. False with *err set (file unreadable or malformed; the
  /// previous table stays); true and *tokens = the number of tokens otherwise.
  bool Reload(std::string* err, size_t* tokens);

  /// Whether calls are authenticated at all (a token file or mutual TLS).
  bool enabled() const { return !token_file_.empty() || mtls_; }
  const std::string& token_file() const { return token_file_; }

  /// The caller of `ctx`'s call (policy above), or UNAUTHENTICATED with a message that
  /// says what is missing or wrong (never echoing the token).
  OpStatus Authenticate(const grpc::ServerContext& ctx, Caller* caller) const;

 private:
  const std::string token_file_;
  const bool mtls_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const TokenTable> table_ ABSL_GUARDED_BY(mu_) = std::make_shared<TokenTable>();
};

}  // namespace vmspace::rpc
