#!/usr/bin/python3
"""Offline checks of the deploy files that cannot run here (Kubernetes, the container,
systemd's environment files): structure and cross-references, and every flag they pass
exists in the built binaries. Prints what it checked; exits 1 naming every problem.

    check_deploy.py --server BIN --worker BIN --deploy DIR --packages FILE
"""

import argparse
import re
import shlex
import subprocess
import sys

import yaml

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def flags_of(binary):
    text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"^\s+--([a-z_0-9]+) \(", text, re.M))


def check_flags(where, text, known, binary_name):
    for flag in re.findall(r"(?<![\w-])--([a-z_0-9]+)", text):
        if flag not in known:
            problem(where, f"--{flag} is not a flag of {binary_name}")


def load_k8s(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    for d in docs:
        for field in ("apiVersion", "kind", "metadata"):
            if field not in d:
                problem(path, f"a document without {field}")
        if "name" not in d.get("metadata", {}):
            problem(path, f"a {d.get('kind')} without metadata.name")
    return docs


def pod_checks(where, workload, claims):
    spec = workload["spec"]
    template = spec["template"]
    labels = template["metadata"].get("labels", {})
    selector = spec.get("selector", {}).get("matchLabels")
    if selector is not None and any(labels.get(k) != v for k, v in selector.items()):
        problem(where, f"selector {selector} does not match the pod labels {labels}")
    pod = template["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for t in spec.get("volumeClaimTemplates", []):  # a StatefulSet's volume per pod
        volumes[t["metadata"]["name"]] = {"name": t["metadata"]["name"], "persistentVolumeClaim": {}}
    ports = {}
    for c in pod["containers"]:
        for p in c.get("ports", []):
            ports[p.get("name")] = p["containerPort"]
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                problem(where, f"volumeMount {m['name']} names no volume")
        for probe in ("readinessProbe", "livenessProbe"):
            if probe not in c:
                problem(where, f"container {c['name']} has no {probe}")
                continue
            port = c[probe].get("httpGet", {}).get("port")
            if isinstance(port, str) and port not in ports:
                problem(where, f"{probe} uses port '{port}', not a container port")
    for v in volumes.values():
        claim = v.get("persistentVolumeClaim", {}).get("claimName")
        if claim is not None and claim not in claims:
            problem(where, f"volume {v['name']} claims {claim}, which no manifest defines")
    annotations = template["metadata"].get("annotations", {})
    if annotations.get("prometheus.io/scrape") == "true" and \
            int(annotations.get("prometheus.io/port", 0)) not in ports.values():
        problem(where, f"the scrape port {annotations.get('prometheus.io/port')} is not a container port")
    ctx = pod.get("securityContext", {})
    if not ctx.get("runAsNonRoot"):
        problem(where, "the pod may run as root (securityContext.runAsNonRoot)")
    return labels, ports, pod


def check_persistent(where, pod, args, flags):
    """Each of `flags` is given and names a path on a persistent volume of the pod."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = [m["mountPath"] for m in pod["containers"][0].get("volumeMounts", [])
              if m["name"] not in volumes or "persistentVolumeClaim" in volumes[m["name"]]]
    for flag in flags:
        value = re.search(flag + r"=(\S+)", args)
        if not value or not any(value.group(1).startswith(mp + "/") for mp in mounts):
            problem(where, f"{flag} is not on the persistent volume")


def check_beside_workers(where, pod):
    """A server's pod prefers a worker's node and no other server's: a server per worker host."""
    affinity = pod.get("affinity", {})
    near = affinity.get("podAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])
    apart = affinity.get("podAntiAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])
    if not any(t["podAffinityTerm"]["labelSelector"].get("matchLabels", {}).get("role") == "worker" and
               t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname" for t in near):
        problem(where, "no pod affinity to the workers' nodes: the servers would not sit beside the workers")
    if not any(t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname" for t in apart):
        problem(where, "no anti-affinity between servers: two could share one node's link")


def check_sharded(path, server_flags, workers):
    """The sharded job's manifest: the coordinator keeps the Service the workers dial, every
    server reads OMNILEARN_SHARDS from the ConfigMap and keeps its checkpoints on a volume of
    its own (the shards' from the StatefulSet's claim template), the StatefulSet runs
    OMNILEARN_SHARDS - 1 shard servers that name the coordinator's Service and advertise
    their pods' names through the headless Service; a server beside every worker (as many
    slices as workers, pod affinity)."""
    docs = {(x["kind"], x["metadata"]["name"]): x for x in load_k8s(path)}
    claims = {name for kind, name in docs if kind == "PersistentVolumeClaim"}
    where = "k8s/sharded.yaml"
    config = docs.get(("ConfigMap", "omnilearn-shards"), {}).get("data", {})
    shards = int(config.get("OMNILEARN_SHARDS", 0))
    if shards < 2:
        problem(where, f"OMNILEARN_SHARDS is {config.get('OMNILEARN_SHARDS')}, not a count of at least 2")
    if shards != workers:
        problem(where, f"OMNILEARN_SHARDS is {shards}, not the workers' {workers}: a server beside every worker")
    coordinator, shard_set = docs.get(("Deployment", "omnilearn-server")), docs.get(("StatefulSet", "omnilearn-shard"))
    if coordinator is None or shard_set is None:
        problem(where, "no coordinator Deployment omnilearn-server or no StatefulSet omnilearn-shard")
        return
    args = {}
    for name, workload in (("coordinator", coordinator), ("shard", shard_set)):
        labels, ports, pod = pod_checks(f"{where} {name}", workload, claims)
        check_beside_workers(f"{where} {name}", pod)
        c = pod["containers"][0]
        args[name] = " ".join(c["args"])
        check_flags(f"{where} {name}", args[name], server_flags, "omnilearn_server")
        if "--shards=$(OMNILEARN_SHARDS)" not in args[name] or \
                {"configMapRef": {"name": "omnilearn-shards"}} not in c.get("envFrom", []):
            problem(where, f"the {name} does not take --shards from the ConfigMap's OMNILEARN_SHARDS")
        check_persistent(f"{where} {name}", pod, args[name],
                         ("--checkpoint_dir", "--export") if name == "coordinator" else ("--checkpoint_dir",))
        # The next job on the same servers, as server.yaml's one server does; a shard takes
        # it from the coordinator (the flag is the coordinator's).
        if ("--reset_when_done" in args[name]) != (name == "coordinator"):
            problem(where, f"--reset_when_done belongs to the coordinator alone (the {name} "
                           f"{'lacks' if name == 'coordinator' else 'passes'} it)")
    for name in ("coordinator", "shard"):
        if "--peer_token_file=/etc/omnilearn-peer/token" not in args[name]:
            problem(where, f"the {name} has no --peer_token_file: it listens beyond loopback and would refuse to start")
    if shard_set["spec"].get("replicas") != shards - 1:
        problem(where, f"the StatefulSet runs {shard_set['spec'].get('replicas')} shards, not OMNILEARN_SHARDS - 1")
    headless = docs.get(("Service", shard_set["spec"].get("serviceName")))
    if headless is None or headless["spec"].get("clusterIP") != "None":
        problem(where, "the StatefulSet's serviceName is no headless Service")
    service = docs.get(("Service", "omnilearn-server"))
    port = service and service["spec"]["ports"][0]["port"]
    if f"--coordinator=omnilearn-server:{port}" not in args["shard"]:
        problem(where, "the shards' --coordinator is not the coordinator's Service")
    if f"--advertise=omnilearn-server:{port}" not in args["coordinator"]:
        problem(where, "the coordinator does not advertise its Service")
    if f"--advertise=$(POD_NAME).{shard_set['spec'].get('serviceName')}:" not in args["shard"]:
        problem(where, "the shards do not advertise their pods' names under the headless Service")
    print(f"k8s/sharded.yaml: {len(docs)} objects; {shards} shards, flags, Services and the ConfigMap cross-checked")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--deploy", required=True)
    ap.add_argument("--packages", required=True, help="deploy/runtime-packages.sh output for the binaries")
    a = ap.parse_args()
    server_flags, worker_flags = flags_of(a.server), flags_of(a.worker)
    if len(server_flags) < 20 or len(worker_flags) < 20:
        sys.exit("cannot read the binaries' flags from --help")
    d = a.deploy

    # ---- Kubernetes
    docs = []
    for name in ("server.yaml", "workers.yaml"):
        docs += [(f"k8s/{name}", x) for x in load_k8s(f"{d}/k8s/{name}")]
    claims = {x["metadata"]["name"] for _, x in docs if x["kind"] == "PersistentVolumeClaim"}
    services = [(w, x) for w, x in docs if x["kind"] == "Service"]
    server_pod = None
    for where, x in docs:
        if x["kind"] not in ("Deployment", "Job"):
            continue
        labels, ports, pod = pod_checks(f"{where} {x['kind']}", x, claims)
        args = " ".join(pod["containers"][0].get("command", []) + pod["containers"][0].get("args", []))
        if x["kind"] == "Deployment":
            server_pod = (labels, ports, args)
            check_flags(where, " ".join(pod["containers"][0]["args"]), server_flags, "omnilearn_server")
            check_persistent(where, pod, args, ("--checkpoint_dir", "--export", "--summary_json"))
        else:
            check_flags(where, args, worker_flags, "omnilearn_worker")
            if x["spec"].get("completions") != x["spec"].get("parallelism"):
                problem(where, "completions and parallelism differ")
            server = re.search(r"--server=([\w.-]+):(\d+)", args)
            svc = [s for _, s in services if s["metadata"]["name"] == (server.group(1) if server else None)]
            if not svc:
                problem(where, "--server names no Service of the manifests")
            elif int(server.group(2)) not in [p["port"] for p in svc[0]["spec"]["ports"]]:
                problem(where, f"--server port {server.group(2)} is not a port of the Service")
            num = re.search(r"--num_workers=(\d+)", server_pod[2] if server_pod else "")
            if num and int(num.group(1)) != x["spec"]["completions"]:
                problem(where, f"completions {x['spec']['completions']} != the server's --num_workers {num.group(1)}")
    for where, s in services:
        if server_pod is None or any(server_pod[0].get(k) != v for k, v in s["spec"]["selector"].items()):
            problem(where, f"the Service selector {s['spec']['selector']} selects no server pod")
        for p in s["spec"]["ports"]:
            if p["targetPort"] not in server_pod[1]:
                problem(where, f"targetPort {p['targetPort']} is not a server container port")
    print(f"k8s: {len(docs)} objects; selectors, ports, probes, volumes, claims and flags cross-checked")

    job = next(x for _, x in docs if x["kind"] == "Job")
    check_sharded(f"{d}/k8s/sharded.yaml", server_flags, job["spec"]["completions"])

    # ---- systemd environment files: their flags exist
    for env, flags, binary in (("server.env", server_flags, "omnilearn_server"),
                               ("worker.env", worker_flags, "omnilearn_worker"),
                               ("worker-0.env", worker_flags, "omnilearn_worker")):
        text = "\n".join(l for l in open(f"{d}/systemd/{env}") if not l.startswith("#"))
        check_flags(f"systemd/{env}", text, flags, binary)
    for unit, flags, binary in (("omnilearn-server.service", server_flags, "omnilearn_server"),
                                ("omnilearn-worker@.service", worker_flags, "omnilearn_worker")):
        text = open(f"{d}/systemd/{unit}").read()
        exec_line = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
        check_flags(f"systemd/{unit}", exec_line, flags, binary)
        loaded = set(re.findall(r"^LoadCredential=([\w]+):", text, re.M))
        used = set(re.findall(r"%d/(\w+)", exec_line))
        if used != loaded:
            problem(f"systemd/{unit}", f"credentials used {sorted(used)} != loaded {sorted(loaded)}")
    print("systemd: environment files' and ExecStart flags exist; credentials loaded = credentials used")

    # ---- Containerfile
    text = open(f"{d}/Containerfile").read()
    if "runtime-packages.sh" not in text or "$(cat /tmp/runtime-packages.txt)" not in text:
        problem("Containerfile", "the runtime packages are not derived from the binaries")
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    if not user or user[-1].split(":")[0] in ("0", "root"):
        problem("Containerfile", "the image does not run as a non-root user")
    cmd = re.search(r"^CMD\s+(\[.*?\])\s*$", text, re.M | re.S)
    if not cmd:
        problem("Containerfile", "no CMD")
    else:
        words = yaml.safe_load(cmd.group(1).replace("\\\n", " "))
        if words[0] != "omnilearn_server":
            problem("Containerfile", f"CMD runs {words[0]}")
        check_flags("Containerfile CMD", " ".join(words[1:]), server_flags, "omnilearn_server")
        exposed = set(re.findall(r"\d+", " ".join(re.findall(r"^EXPOSE\s+(.*)$", text, re.M))))
        for flag in ("port", "metrics_port"):
            value = re.search(fr"--{flag}=(\d+)", " ".join(words))
            if value and value.group(1) not in exposed:
                problem("Containerfile", f"--{flag}={value.group(1)} is not EXPOSEd")
    packages = open(a.packages).read().split()
    for must in ("libtorch1.13", "libgrpc++1.51", "libprotobuf32", "libcivetweb1"):
        if must not in packages:
            problem("runtime-packages.sh", f"{must} missing from {packages}")
    unknown = [p for p in packages
               if subprocess.run(["apt-cache", "show", p], capture_output=True).returncode != 0]
    if unknown:
        problem("runtime-packages.sh", f"not in Debian's archive: {unknown}")
    print(f"Containerfile: non-root user, CMD flags exist, ports exposed; runtime packages: {' '.join(packages)}")

    for p in problems:
        print("PROBLEM:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
