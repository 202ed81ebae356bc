// SPDX-License-Identifier: Apache-2.0
#include "rpc/auth.h"

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_split.h>

#include <fstream>
#include <sstream>
#include <vector>

namespace vmspace::rpc {

namespace {

bool ValidTenant(absl::string_view t) {
  if (t.empty() || t.size() > 64) return false;
  for (char c : t)
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

OpStatus Unauthenticated(std::string message) {
  OpStatus s;
  s.code = grpc::StatusCode::UNAUTHENTICATED;
  s.message = std::move(message);
  return s;
}

}  // namespace

bool ParseTokenFile(const std::string& text, TokenTable* out, std::string* err) {
  TokenTable table;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line_no++;
    line = line.substr(0, line.find('#'));
    const std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (f.empty()) continue;
    const std::string where = "line " + std::to_string(line_no) + ": ";
    if (f.size() < 2 || f.size() > 3 || (f.size() == 3 && f[2] != "admin")) {
      *err = where + "want \"TOKEN TENANT [admin]\"";
      return false;
    }
    if (!ValidTenant(f[1])) {
      *err = where + "tenant must be 1..64 of [A-Za-z0-9._-]";
      return false;
    }
    if (!table.emplace(std::string(f[0]), Caller{std::string(f[1]), f.size() == 3}).second) {
      *err = where + "token already given on an earlier line";
      return false;
    }
  }
  *out = std::move(table);
  return true;
}

bool Authenticator::Reload(std::string* err, size_t* tokens) {
  *tokens = 0;
  if (token_file_.empty()) return true;
  std::ifstream in(token_file_);
  if (!in) {
    *err = token_file_ + ": cannot read";
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto table = std::make_shared<TokenTable>();
  if (!ParseTokenFile(text.str(), table.get(), err)) {
    *err = token_file_ + ": " + *err;
    return false;
  }
  *tokens = table->size();
  absl::MutexLock l(&mu_);
  table_ = std::move(table);
  return true;
}

OpStatus Authenticator::Authenticate(const grpc::ServerContext& ctx, Caller* caller) const {
  if (!enabled()) {
    *caller = Caller{"", true};
    return {};
  }
  const auto& md = ctx.client_metadata();
  if (auto it = md.find("authorization"); it != md.end()) {
    const absl::string_view v(it->second.data(), it->second.size());
    if (v.size() < 7 || !absl::EqualsIgnoreCase(v.substr(0, 7), "Bearer "))
      return Unauthenticated("the authorization metadata is not \"Bearer <token>\"");
    const absl::string_view token = absl::StripAsciiWhitespace(v.substr(7));
    absl::ReaderMutexLock l(&mu_);
    if (auto t = table_->find(std::string(token)); t != table_->end()) {
      *caller = t->second;
      return {};
    }
    return Unauthenticated("unknown bearer token (not in --token-file, or removed from it)");
  }
  if (mtls_) {
    const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
    const std::vector<grpc::string_ref> cn =
        auth ? auth->FindPropertyValues("x509_common_name") : std::vector<grpc::string_ref>{};
    if (!cn.empty() && ValidTenant(absl::string_view(cn[0].data(), cn[0].size()))) {
      *caller = Caller{std::string(cn[0].data(), cn[0].size()), false};
      return {};
    }
    return Unauthenticated(
        "no bearer token and no client certificate whose subject CN is a tenant name");
  }
  return Unauthenticated(
      "missing \"authorization: Bearer <token>\" metadata (vmspace --token or $VMSPACE_TOKEN)");
}

}  // namespace vmspace::rpc
