#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Validates the deployment files without a container engine or a cluster (ctest
deploy.validate). Usage: validate_deploy.py BUILD_DIR

- compose: `docker-compose config` (Debian's docker-compose 1.29) accepts
  deploy/compose.yaml, every file it mounts exists, the bench waits for a healthy daemon.
- Dockerfile: the build stage installs only packages of deploy/install-deps.sh; the run
  stage installs every package that owns a shared library of the built vmspaced and
  vmspace (ldd + dpkg -S on this machine, which is Debian 12 like the image); the
  daemon listens on 0.0.0.0, runs as a non-root user, the HEALTHCHECK runs
  `vmspace health`; .dockerignore lets in what the Dockerfile copies.
- Prometheus: `promtool check config` of deploy/prometheus/prometheus.yml (which loads
  the rules).
- Kubernetes: `kubectl kustomize deploy/k8s` with Debian's kubectl (kubernetes-client),
  every core object checked against the Kubernetes API schema of Debian's
  python3-kubernetes (22.6: API 1.22, which predates the gRPC probe field; that one
  field is checked by hand), and the cross-references: Service <-> StatefulSet <->
  ServiceMonitor <-> PDB selectors and ports, the memory limit above --max-memory-bytes
  (with at least 128 Mi of headroom) above --max-frame-bytes, terminationGracePeriodSeconds
  vs --shutdown-grace-ms, the PrometheusRule up to date; the image set in one place
  (kustomization `images:`, a pinned tag, imagePullPolicy IfNotPresent); the ServiceMonitor
  and PrometheusRule labelled `release` for kube-prometheus-stack's selectors.
"""
import glob
import os
import re
import shlex
import subprocess
import sys

import yaml
from kubernetes.client import models as k8s

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)
    return cond


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


# ---- compose ----

def validate_compose():
    r = run(["docker-compose", "-f", os.path.join(DEPLOY, "compose.yaml"), "--profile", "bench", "config"])
    if not check(r.returncode == 0, f"docker-compose config failed: {r.stderr.strip()}"):
        return
    cfg = yaml.safe_load(r.stdout)
    svcs = cfg["services"]
    check(set(svcs) == {"vmspaced", "prometheus", "grafana", "bench"}, f"compose services: {sorted(svcs)}")
    for name, s in svcs.items():
        for v in s.get("volumes", []):
            src = v["source"] if isinstance(v, dict) else v.split(":")[0]
            check(os.path.exists(src), f"compose {name}: mounted path {src} does not exist")
    with open(os.path.join(DEPLOY, "k8s", "kustomization.yaml")) as f:
        (img,) = yaml.safe_load(f)["images"]
    check(svcs["vmspaced"]["image"] == svcs["bench"]["image"] == f"{img['newName']}:{img['newTag']}",
          f"compose builds {svcs['vmspaced']['image']}, deploy/k8s names {img['newName']}:{img['newTag']}")
    check(svcs["bench"]["depends_on"]["vmspaced"]["condition"] == "service_healthy",
          "compose bench must wait for the daemon's health check")
    ports = {str(p.get("target")) for p in svcs["vmspaced"]["ports"]} if isinstance(
        svcs["vmspaced"]["ports"][0], dict) else {p.split(":")[-1] for p in svcs["vmspaced"]["ports"]}
    check(ports == {"50051", "9464"}, f"compose vmspaced ports {ports}")
    with open(os.path.join(DEPLOY, "prometheus", "prometheus.yml")) as f:
        prom = yaml.safe_load(f)
    targets = [t for j in prom["scrape_configs"] if j["job_name"] == "vmspaced"
               for sc in j["static_configs"] for t in sc["targets"]]
    check(targets == ["vmspaced:9464"], f"prometheus.yml scrapes {targets}, want the compose service vmspaced:9464")


# ---- Dockerfile ----

def install_deps_packages():
    with open(os.path.join(DEPLOY, "install-deps.sh")) as f:
        text = f.read()
    body = re.search(r"PKGS=\((.*?)\n\)", text, re.S).group(1)
    return {w for line in body.splitlines() for w in line.split("#")[0].split()}


def dockerfile_stages():
    with open(os.path.join(DEPLOY, "Dockerfile")) as f:
        text = f.read().replace("\\\n", " ")
    stages, cur = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word == "FROM":
            cur = {"from": rest, "lines": []}
            stages.append(cur)
        cur["lines"].append((word, rest))
    return stages


def apt_packages(stage):
    pkgs = set()
    for word, rest in stage["lines"]:
        if word == "RUN" and "apt-get install" in rest:
            cmd = rest.split("apt-get install", 1)[1].split("&&")[0]
            pkgs |= {w for w in shlex.split(cmd) if not w.startswith("-")}
    return pkgs


def library_packages(binaries):
    """Debian packages owning the shared libraries of `binaries` (ldd, dpkg -S)."""
    libs = set()
    for b in binaries:
        r = run(["ldd", b])
        check(r.returncode == 0, f"ldd {b}: {r.stderr}")
        libs |= {os.path.realpath(m) for m in re.findall(r"=> (/\S+)", r.stdout)}
    pkgs = set()
    for lib in sorted(libs):
        r = run(["dpkg", "-S", lib])
        if r.returncode != 0 and lib.startswith("/usr/"):  # merged /usr: dpkg knows /lib/...
            r = run(["dpkg", "-S", lib[4:]])
        if check(r.returncode == 0, f"dpkg -S {lib}: no package owns it"):
            pkgs.add(r.stdout.split(":")[0])
    return pkgs


def validate_dockerfile(build_dir):
    stages = dockerfile_stages()
    check(len(stages) == 2 and stages[0]["from"].startswith("debian:bookworm ")
          and stages[1]["from"] == "debian:bookworm-slim", f"stages: {[s['from'] for s in stages]}")
    build, runtime = stages
    extra = apt_packages(build) - install_deps_packages() - {"ca-certificates"}
    check(not extra, f"Dockerfile build stage installs packages deploy/install-deps.sh does not: {sorted(extra)}")
    # bookworm-slim has these (Priority: required, or apt's own dependencies).
    base = {"libc6", "libgcc-s1", "zlib1g", "libstdc++6"}
    needed = library_packages([os.path.join(build_dir, "server", "vmspaced"),
                               os.path.join(build_dir, "client", "vmspace")])
    missing = needed - apt_packages(runtime) - base
    check(not missing, f"Dockerfile run stage lacks the libraries' packages {sorted(missing)}")
    words = dict((w, r) for w, r in runtime["lines"])
    check(words.get("USER", "").split(":")[0] not in ("", "0", "root"), "the image must run as a non-root user")
    check("--listen=0.0.0.0:50051" in words.get("ENTRYPOINT", "") and
          "--metrics-listen=0.0.0.0:9464" in words.get("ENTRYPOINT", ""), "ENTRYPOINT must listen on 0.0.0.0")
    check(set(words.get("EXPOSE", "").split()) == {"50051", "9464"}, "EXPOSE 50051 9464")
    check('"health"' in words.get("HEALTHCHECK", ""), "HEALTHCHECK must run `vmspace ... health`")
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        allowed = {l[1:].rstrip("/") for l in f.read().split() if l.startswith("!")}
    for w, r in build["lines"]:
        if w == "COPY":
            src = r.split()[0]
            check(src in allowed, f".dockerignore excludes {src}, which the Dockerfile copies")


# ---- Prometheus ----

def validate_prometheus():
    r = run(["promtool", "check", "config", os.path.join(DEPLOY, "prometheus", "prometheus.yml")])
    check(r.returncode == 0 and "SUCCESS" in r.stdout + r.stderr, f"promtool check config: {r.stdout}{r.stderr}")


# ---- Kubernetes ----

def debian_kubectl():
    r = run(["dpkg-query", "-S", "/usr/bin/kubectl"])
    if r.returncode == 0 and r.stdout.startswith("kubernetes-client:"):
        return "/usr/bin/kubectl"
    unpacked = "/opt/vmspace-tools/kubernetes-client/usr/bin/kubectl"
    return unpacked if os.access(unpacked, os.X_OK) else None


def schema_errors(value, type_name, path):
    """Differences between `value` and the python3-kubernetes model `type_name`."""
    out = []
    if value is None:  # null is the same as absent
        return out
    if type_name.startswith("list["):
        if not isinstance(value, list):
            return [f"{path}: want a list"]
        for i, v in enumerate(value):
            out += schema_errors(v, type_name[5:-1], f"{path}[{i}]")
        return out
    if type_name.startswith("dict("):
        if not isinstance(value, dict):
            return [f"{path}: want a map"]
        inner = type_name[type_name.index(",") + 1:-1].strip()
        for key, v in value.items():
            out += schema_errors(v, inner, f"{path}.{key}")
        return out
    scalar = {"str": str, "bool": bool, "int": int, "float": (int, float), "datetime": str}
    if type_name in scalar:
        ok = isinstance(value, scalar[type_name]) and not (type_name == "int" and isinstance(value, bool))
        return [] if ok else [f"{path}: want {type_name}, got {value!r}"]
    if type_name == "object":  # IntOrString, Quantity, free-form
        return []
    cls = getattr(k8s, type_name)
    if not isinstance(value, dict):
        return [f"{path}: want a {type_name} object"]
    fields = {json: attr for attr, json in cls.attribute_map.items()}
    for key, v in value.items():
        if key not in fields:
            out.append(f"{path}.{key}: no such field in {type_name}")
        else:
            out += schema_errors(v, cls.openapi_types[fields[key]], f"{path}.{key}")
    return out


MODELS = {("v1", "Namespace"): "V1Namespace", ("v1", "Service"): "V1Service",
          ("apps/v1", "StatefulSet"): "V1StatefulSet", ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget"}
GRPC_PROBE_FIELDS = {"port": int, "service": str}  # core/v1 GRPCAction (Kubernetes 1.24+)


def validate_schema(doc):
    """Schema errors of one object; gRPC probes are taken out and checked by hand."""
    model = MODELS.get((doc["apiVersion"], doc["kind"]))
    if model is None:
        return [f"{doc['kind']}: no offline schema"]
    errs = []
    doc = yaml.safe_load(yaml.safe_dump(doc))  # a copy to take the grpc probes out of
    for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            g = c.get(probe, {}).pop("grpc", None)
            if g is not None:
                for key, v in g.items():
                    if not isinstance(v, GRPC_PROBE_FIELDS.get(key, ())):
                        errs.append(f"{probe}.grpc.{key}: not a GRPCAction field of its type")
                if "port" not in g:
                    errs.append(f"{probe}.grpc.port is required")
    return errs + schema_errors(doc, model, doc["kind"])


def flag_value(args, name):
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


MEMORY_HEADROOM_MIB = 128  # the limit above --max-memory-bytes: binary, stacks, allocator slack, gRPC's buffers


def memory_problems(args, limit_mib):
    """What is wrong with the container's memory flags against its limit (MiB)."""
    out = []
    mem = flag_value(args, "max-memory-bytes")
    if mem is None:
        return ["--max-memory-bytes is not set: its default (8 GiB) lies above the memory limit, "
                "the OOM killer would answer before the budget"]
    mem_mib = int(mem) / (1 << 20)
    if not mem_mib + MEMORY_HEADROOM_MIB <= limit_mib:
        out.append(f"--max-memory-bytes ({mem_mib:g} Mi) must stay {MEMORY_HEADROOM_MIB} Mi below the memory limit "
                   f"({limit_mib} Mi)")
    if int(mem) == 0:
        out.append("--max-memory-bytes=0 (unlimited): the OOM killer would answer before the budget")
    frame = flag_value(args, "max-frame-bytes")
    if frame is not None and int(frame) > int(mem):
        out.append(f"--max-frame-bytes ({frame}) above --max-memory-bytes ({mem})")
    return out


def mebibytes(q):
    m = re.fullmatch(r"(\d+)(Mi|Gi)", q)
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


def validate_k8s():
    kubectl = debian_kubectl()
    if not check(kubectl, "Debian's kubectl not found: run deploy/install-deps.sh"):
        return
    r = run([kubectl, "kustomize", os.path.join(DEPLOY, "k8s")])
    if not check(r.returncode == 0, f"kubectl kustomize deploy/k8s: {r.stderr}"):
        return
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    by_kind = {d["kind"]: d for d in docs}
    check(sorted(by_kind) == ["Namespace", "PodDisruptionBudget", "PrometheusRule", "Service",
                              "ServiceMonitor", "StatefulSet"], f"kinds {sorted(by_kind)}")
    for d in docs:
        check(d["metadata"].get("namespace", "vmspace") == "vmspace", f"{d['kind']} namespace")
        if (d["apiVersion"], d["kind"]) in MODELS:
            for e in validate_schema(d):
                errors.append(f"schema: {e}")
    # The validator itself must catch a misspelt field.
    bad = yaml.safe_load(yaml.safe_dump(by_kind["StatefulSet"]))
    bad["spec"]["replica"] = 3
    check(any("spec.replica: no such field" in e for e in validate_schema(bad)),
          "the schema check did not reject a misspelt field (spec.replica)")

    sts, svc, pdb, sm = (by_kind[k] for k in ("StatefulSet", "Service", "PodDisruptionBudget", "ServiceMonitor"))
    pod = sts["spec"]["template"]
    labels = pod["metadata"]["labels"]
    match = lambda sel: all(labels.get(k) == v for k, v in sel.items())
    check(svc["spec"].get("clusterIP") == "None", "the governing Service must be headless")
    check(sts["spec"]["serviceName"] == svc["metadata"]["name"], "StatefulSet serviceName != Service")
    check(match(svc["spec"]["selector"]), "Service selector does not select the pods")
    check(match(pdb["spec"]["selector"]["matchLabels"]), "PDB does not select the pods")
    check(all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items()),
          "ServiceMonitor does not select the Service")
    svc_ports = {p["name"] for p in svc["spec"]["ports"]}
    check(all(e["port"] in svc_ports for e in sm["spec"]["endpoints"]), "ServiceMonitor port not in the Service")
    check(sts["spec"]["replicas"] >= 2 and pdb["spec"].get("maxUnavailable") == 1, "replicas / PDB")
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports == {"grpc": 50051, "metrics": 9464}, f"container ports {ports}")
    for probe in ("readinessProbe", "livenessProbe"):
        check(c[probe].get("grpc", {}).get("port") == ports["grpc"], f"{probe} must be a gRPC probe of port 50051")
    check(c["readinessProbe"]["grpc"].get("service") == "vmspace.v1.VmSpace", "readiness: service vmspace.v1.VmSpace")
    args = c["args"]
    check(flag_value(args, "shard") == "hostname", "--shard=hostname (the pod ordinal is the shard)")
    frame_mib = int(flag_value(args, "max-frame-bytes")) // (1 << 20)
    res = c["resources"]
    lim, req = mebibytes(res["limits"]["memory"]), mebibytes(res["requests"]["memory"])
    check(lim == req, "memory request != limit (frames are committed memory)")
    check(frame_mib + 128 <= lim <= frame_mib + 512,
          f"memory limit {lim} Mi does not match --max-frame-bytes ({frame_mib} Mi + 128..512 Mi)")
    for e in memory_problems(args, lim):
        errors.append(e)
    # The check itself rejects the default budget and one at the limit.
    check(memory_problems([a for a in args if not a.startswith("--max-memory-bytes=")], lim) and
          memory_problems([f"--max-memory-bytes={lim << 20}"], lim), "memory_problems accepts a budget at the limit")
    with open(os.path.join(DEPLOY, "k8s", "kustomization.yaml")) as f:
        (img,) = yaml.safe_load(f)["images"]
    check(c["image"] == f"{img['newName']}:{img['newTag']}" and img["newTag"] != "latest",
          f"image {c['image']}: want kustomization images: newName:newTag with a pinned tag")
    check(c.get("imagePullPolicy") == "IfNotPresent", "imagePullPolicy must be IfNotPresent (no published image)")
    rule = by_kind["PrometheusRule"]
    release = sm["metadata"]["labels"].get("release")
    check(release and rule["metadata"]["labels"].get("release") == release,
          "ServiceMonitor and PrometheusRule need the same `release` label (kube-prometheus-stack selects on it)")
    grace_ms = int(flag_value(args, "shutdown-grace-ms"))
    check(pod["spec"]["terminationGracePeriodSeconds"] * 1000 >= grace_ms + 2000,
          "terminationGracePeriodSeconds must exceed --shutdown-grace-ms + 2 s (drain, metrics close)")
    sc = pod["spec"]["securityContext"]
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == 10001, "pods run as the image's user 10001")
    r = run(["/usr/bin/python3", os.path.join(DEPLOY, "k8s", "gen-prometheusrule.py"), "--check"])
    check(r.returncode == 0, f"PrometheusRule: {r.stderr.strip()}")


def main():
    build_dir = os.path.abspath(sys.argv[1])
    validate_compose()
    validate_dockerfile(build_dir)
    validate_prometheus()
    validate_k8s()
    for e in errors:
        print("FAIL:", e)
    print("validate_deploy:", "ok" if not errors else f"{len(errors)} problem(s)")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
