"""A stand-in for a real Kubernetes API server (which cannot run here), over real HTTP.

It keeps state like the real one (ConfigMaps, Secrets, PersistentVolumeClaims, NetworkPolicies,
Volcano Jobs, pods, PodGroups, nodes, DaemonSets), answers with the real status codes and Status bodies, and streams pod logs
with chunked transfer encoding. The test plays kubelet and Volcano controller through
its methods: create pods, write log chunks, restart or recreate containers. Pod exec is a real
websocket (Kubernetes' channel protocol, v4): what `exec_output[pod]` yields goes out as
stdout frames, as long as the client reads.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from tests.kubernetes.api_validation import claim_problem, policy_problem, secret_problem

CORE = (r"/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>configmaps|secrets|pods|persistentvolumeclaims|events"
        r"|serviceaccounts|services)")
VOLCANO = r"/apis/batch\.volcano\.sh/v1alpha1/namespaces/(?P<ns>[^/]+)/(?P<res>jobs)"
PODGROUPS = r"/apis/scheduling\.volcano\.sh/v1beta1/namespaces/(?P<ns>[^/]+)/(?P<res>podgroups)"
NETWORKING = r"/apis/networking\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/(?P<res>networkpolicies)"
RBAC = r"/apis/rbac\.authorization\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/(?P<res>roles|rolebindings)"
APPS = r"/apis/apps/v1/namespaces/(?P<ns>[^/]+)/(?P<res>deployments)"
GROUP_OF = {"jobs": "batch.volcano.sh", "podgroups": "scheduling.volcano.sh", "networkpolicies": "networking.k8s.io",
            "roles": "rbac.authorization.k8s.io", "rolebindings": "rbac.authorization.k8s.io", "deployments": "apps"}
VOLCANO_RESOURCES = ("jobs", "podgroups")
CLUSTER_LISTS = {"/api/v1/nodes": ("nodes", "", "NodeList", "v1"),  # path -> resource, group, kind, version
                 "/apis/apps/v1/daemonsets": ("daemonsets", "apps", "DaemonSetList", "apps/v1")}


def rfc3339nano(ns: int) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9))
    frac = f"{ns % 10**9:09d}".rstrip("0")
    return f"{stamp}.{frac}Z" if frac else f"{stamp}Z"


@dataclass
class LogBuffer:
    """The output of one container incarnation: chunks with the time they were written."""

    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    ended: bool = False


class FakeKubeAPI:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.nodes: list[dict] = []
        self.daemonsets: list[dict] = []  # every namespace's (the network plugin's among them)
        self.logs: dict[tuple[str, str, int], LogBuffer] = {}
        self.volcano_installed = True
        self.queues = {"default", "geotrain"}
        self.namespaces: dict[str, dict[str, str]] = {"default": {}}  # name -> labels
        self.forbidden: set[tuple[str, str]] = set()  # (HTTP method, resource)
        self.requests: list[tuple[str, str, dict]] = []
        self.init_logs: dict[tuple[str, str, int], bytes] = {}  # (pod, init container, run) -> output
        self.exec_output: dict[str, Iterable[bytes]] = {}  # pod -> the stdout chunks its exec writes
        self.execs: list[tuple[str, dict[str, list[str]]]] = []  # (pod, query) of each exec
        self.exec_sent: dict[str, int] = {}  # pod -> stdout bytes sent before the stream ended
        self.patches: list[tuple[str, str, object]] = []  # (node, Content-Type, body) of each Node PATCH
        # Volcano's syncJob makes a job's deleted pod again (same name, new uid, Pending); on for the
        # watcher's tests, where nothing else plays the controller
        self.replace_deleted_pods = False
        self.authorizations: list[str] = []  # the Authorization header of each request, in order
        self.cond = threading.Condition()
        self.closed = False
        self._server: ThreadingHTTPServer | None = None

    # lifecycle -------------------------------------------------------------------
    def start(self, tls: "ssl.SSLContext | None" = None) -> str:
        """Serve on loopback; with `tls` (a server context) over HTTPS, as a real API server does."""
        api = self

        class Handler(_Handler):
            fake = api

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"{'https' if tls else 'http'}://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    # the test plays kubelet and the Volcano controller ---------------------------
    def jobs(self) -> list[dict]:
        return [o for (res, _, _), o in self.objects.items() if res == "jobs"]

    def set_job_phase(self, name: str, phase: str, ns: str = "default") -> None:
        with self.cond:
            self.objects[("jobs", ns, name)]["status"] = {"state": {"phase": phase}}

    def add_pod(self, job: str, task: str, index: int, ns: str = "default",
                running: bool = True, scheduled_message: str = "") -> str:
        name = f"{job}-{task}-{index}"
        pod = {"metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                            "labels": {"volcano.sh/job-name": job, "volcano.sh/task-spec": task}},
               "status": {"phase": "Pending", "containerStatuses": [
                   {"name": "trainer", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}}
        if scheduled_message:
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                            "reason": "Unschedulable", "message": scheduled_message}]
        with self.cond:
            self.objects[("pods", ns, name)] = pod
        if running:
            self.start_container(name, ns)
        return name

    def pull_image(self, name: str, node: str, image: str, ns: str = "default",
                   at: float | None = None) -> None:
        """Kubelet on `node` starts pulling the pod's image: a `Pulling` event, container waiting."""
        with self.cond:
            pod = self._pod(name, ns)
            pod.setdefault("spec", {})["nodeName"] = node
            pod["status"].pop("conditions", None)
        self.add_event(name, "Pulling", f'Pulling image "{image}"', ns=ns, at=at)

    def finish_pull(self, name: str, image: str, ns: str = "default") -> None:
        """The image is on the node now; the container is being created."""
        with self.cond:
            status = self._pod(name, ns)["status"]["containerStatuses"][0]
            status["state"] = {"waiting": {"reason": "ContainerCreating"}}
        self.add_event(name, "Pulled", f'Successfully pulled image "{image}" in 1m2.5s', ns=ns)

    def fail_pull(self, name: str, reason: str, message: str, ns: str = "default") -> None:
        """The pull failed (ErrImagePull, then ImagePullBackOff), as kubelet reports it."""
        with self.cond:
            status = self._pod(name, ns)["status"]["containerStatuses"][0]
            status["state"] = {"waiting": {"reason": reason, "message": message}}
        self.add_event(name, "Failed", f"Error: {reason}", kind="Warning", ns=ns)

    def add_event(self, pod: str, reason: str, message: str, kind: str = "Normal",
                  ns: str = "default", at: float | None = None) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at if at is not None else time.time()))
        name = f"{pod}.{uuid.uuid4().hex[:12]}"
        with self.cond:
            self.objects[("events", ns, name)] = {
                "metadata": {"name": name, "namespace": ns}, "reason": reason, "message": message,
                "type": kind, "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns},
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}

    def init_pod(self, name: str, node: str, containers: tuple[str, ...] = ("cache-owner", "install-deps"),
                 ns: str = "default") -> None:
        """The pod is on `node` with init containers to run: each waits (PodInitializing), and so
        does the trainer, the pod Pending (kubelet's initContainerStatuses)."""
        with self.cond:
            pod = self._pod(name, ns)
            pod.setdefault("spec", {})["nodeName"] = node
            pod["status"].pop("conditions", None)
            pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}
            pod["status"]["initContainerStatuses"] = [
                {"name": c, "restartCount": 0, "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}}
                for c in containers]

    def _init(self, name: str, container: str, ns: str) -> dict:
        return next(s for s in self._pod(name, ns)["status"]["initContainerStatuses"] if s["name"] == container)

    def run_init(self, name: str, container: str, ns: str = "default") -> None:
        with self.cond:
            self._init(name, container, ns)["state"] = {"running": {"startedAt": rfc3339nano(time.time_ns())}}

    def end_init(self, name: str, container: str, exit_code: int, output: bytes = b"", message: str = "",
                 ns: str = "default") -> None:
        """The init container exits: done (0), or failed and kept for another run after a back-off
        (restartPolicy OnFailure: waiting CrashLoopBackOff, the failed run in lastState, the
        restart counted). `message`: what FallbackToLogsOnError put in the termination message."""
        with self.cond:
            status = self._init(name, container, ns)
            self.init_logs[(name, container, status["restartCount"])] = output
            terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                          **({"message": message} if message else {})}
            if exit_code == 0:
                status.update(state={"terminated": terminated}, ready=True)
            else:
                status.update(state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting "
                                                  f"failed container={container}"}},
                              lastState={"terminated": terminated}, restartCount=status["restartCount"] + 1)

    def _pod(self, name: str, ns: str) -> dict:
        return self.objects[("pods", ns, name)]

    def start_container(self, name: str, ns: str = "default") -> None:
        with self.cond:
            pod = self._pod(name, ns)
            status = pod["status"]["containerStatuses"][0]
            status["state"] = {"running": {"startedAt": rfc3339nano(time.time_ns())}}
            pod["status"]["phase"] = "Running"
            pod["status"].pop("conditions", None)
            self.logs[(name, pod["metadata"]["uid"], status["restartCount"])] = LogBuffer()
            self.cond.notify_all()

    def _current(self, name: str, ns: str) -> tuple[dict, LogBuffer]:
        pod = self._pod(name, ns)
        status = pod["status"]["containerStatuses"][0]
        return status, self.logs[(name, pod["metadata"]["uid"], status["restartCount"])]

    def write_log(self, name: str, data: bytes, ns: str = "default") -> None:
        with self.cond:
            self._current(name, ns)[1].chunks.append((time.time_ns(), data))
            self.cond.notify_all()

    def end_container(self, name: str, exit_code: int, ns: str = "default", reason: str = "",
                      message: str = "", finished_at: str = "") -> None:
        """The container exits and the pod with it (as kubelet reports a pod it does not restart:
        an eviction, node loss, or restartPolicy Never); the terminated state carries `reason`
        (Error, OOMKilled), `message` (the termination message) and `finished_at` when given."""
        with self.cond:
            status, buffer = self._current(name, ns)
            buffer.ended = True
            terminated = {"exitCode": exit_code, **({"reason": reason} if reason else {}),
                          **({"message": message} if message else {}),
                          **({"finishedAt": finished_at} if finished_at else {})}
            status["state"] = {"terminated": terminated}
            self._pod(name, ns)["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            self.cond.notify_all()

    def restart_container(self, name: str, ns: str = "default", reason: str = "", exit_code: int = 1) -> None:
        """The container crashed and kubelet started it again in the same pod (restartPolicy OnFailure)."""
        with self.cond:
            status, buffer = self._current(name, ns)
            buffer.ended = True
            status["lastState"] = {"terminated": {"exitCode": exit_code, **({"reason": reason} if reason else {})}}
            status["restartCount"] += 1
            self.cond.notify_all()
        self.start_container(name, ns)

    def recreate_pod(self, name: str, ns: str = "default") -> None:
        """Volcano's RestartJob: the pod is deleted and made again, same name, new uid."""
        with self.cond:
            old = self.objects.pop(("pods", ns, name))
            self._current_buffer_of(old).ended = True
            self.cond.notify_all()
        labels = old["metadata"]["labels"]
        index = int(name.rsplit("-", 1)[1])
        self.add_pod(labels["volcano.sh/job-name"], labels["volcano.sh/task-spec"], index, ns)

    def _current_buffer_of(self, pod: dict) -> LogBuffer:
        status = pod["status"]["containerStatuses"][0]
        return self.logs[(pod["metadata"]["name"], pod["metadata"]["uid"], status["restartCount"])]

    def delete_pods_of(self, job: str, ns: str) -> None:
        with self.cond:
            for key, obj in list(self.objects.items()):
                if key[0] == "pods" and obj["metadata"]["labels"].get("volcano.sh/job-name") == job:
                    del self.objects[key]
            for (pod, _, _), buffer in self.logs.items():
                if pod.startswith(job + "-"):
                    buffer.ended = True
            self.cond.notify_all()


def _matches(obj: dict, selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    pairs = [p.split("=", 1) for p in selector.split(",") if p]
    return all(labels.get(k) == v for k, v in pairs)


def _fields_match(obj: dict, selector: str) -> bool:
    """`a.b=value,c=value` field selectors (equality only, as events are listed with)."""
    for term in filter(None, selector.split(",")):
        path, _, want = term.partition("=")
        value = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if str(value) != want:
            return False
    return True


WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 1.3


def _frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """One unmasked server-to-client websocket frame (RFC 6455 5.2): binary, or close."""
    size = len(payload)
    length = bytes([size]) if size < 126 else (bytes([126]) + size.to_bytes(2, "big") if size < 1 << 16
                                                else bytes([127]) + size.to_bytes(8, "big"))
    return bytes([0x80 | opcode]) + length + payload


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeKubeAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    # plumbing ------------------------------------------------------------------------
    def _send(self, code: int, body) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if not isinstance(body, bytes) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _exec(self, pod: str, query: dict[str, list[str]]) -> None:
        """Upgrade to a websocket (RFC 6455 4.2.2), send the pod's stdout on channel 1, then close."""
        self.fake.execs.append((pod, query))
        accept = base64.b64encode(hashlib.sha1(
            (self.headers.get("Sec-WebSocket-Key", "") + WEBSOCKET_GUID).encode()).digest()).decode()
        self.send_response(101)
        for name, value in (("Upgrade", "websocket"), ("Connection", "Upgrade"),
                            ("Sec-WebSocket-Accept", accept), ("Sec-WebSocket-Protocol", "v4.channel.k8s.io")):
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        sent = 0
        try:
            for chunk in self.fake.exec_output.get(pod, ()):
                self.wfile.write(_frame(b"\x01" + chunk))
                sent += len(chunk)
            self.wfile.write(_frame(b"", opcode=0x8))
            self.wfile.flush()
        except OSError:
            pass  # the client closed the stream
        finally:
            self.fake.exec_sent[pod] = sent


    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        self.body = json.loads(self.rfile.read(length) or b"{}")  # read always: keep-alive
        self.fake.requests.append((method, url.path, query))
        self.fake.authorizations.append(self.headers.get("Authorization", ""))
        path = url.path
        pod_exec = re.fullmatch(r"/api/v1/namespaces/[^/]+/pods/([^/]+)/exec", path)
        if pod_exec and method == "GET":
            return self._exec(pod_exec[1], parse_qs(url.query))
        if path == "/apis/batch.volcano.sh/v1alpha1" and method == "GET":
            return self._discovery()
        if path in CLUSTER_LISTS:
            return self._cluster_list(*CLUSTER_LISTS[path])
        node = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
        if node and method in ("GET", "PATCH"):
            return self._node(method, node[1])
        namespace = re.fullmatch(r"/api/v1/namespaces/([^/]+)", path)
        if namespace and method == "GET":
            return self._namespace(namespace[1])
        queue = re.fullmatch(r"/apis/scheduling\.volcano\.sh/v1beta1/queues/([^/]+)", path)
        if queue and self.fake.volcano_installed:
            found = queue[1] in self.fake.queues
            return self._send(200 if found else 404,
                              {"metadata": {"name": queue[1]}} if found else
                              _status(404, "NotFound", f'queues.scheduling.volcano.sh "{queue[1]}" not found'))
        for pattern in (CORE, VOLCANO, PODGROUPS, NETWORKING, RBAC, APPS):
            match = re.fullmatch(pattern + r"(?:/(?P<name>[^/]+))?(?P<log>/log)?", path)
            if match:
                return self._resource(method, match["res"], match["ns"], match["name"],
                                      bool(match["log"]), query)
        self._send(404, b"404 page not found")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    # API ---------------------------------------------------------------------------
    def _discovery(self) -> None:
        if not self.fake.volcano_installed:
            return self._send(404, b"404 page not found")
        self._send(200, {"kind": "APIResourceList", "apiVersion": "v1",
                         "groupVersion": "batch.volcano.sh/v1alpha1",
                         "resources": [{"name": "jobs", "singularName": "job", "namespaced": True,
                                        "kind": "Job", "verbs": ["create", "delete", "get", "list"]}]})

    def _cluster_list(self, res: str, group: str, kind: str, version: str) -> None:
        """GET a cluster-scoped list (nodes, every namespace's DaemonSets); 403 when forbidden."""
        if ("GET", res) in self.fake.forbidden:
            return self._send(403, _status(403, "Forbidden", f'{res}{"." + group if group else ""} is forbidden: '
                                           f'User "dev" cannot list resource "{res}" in API group "{group}" at the '
                                           "cluster scope"))
        self._send(200, {"kind": kind, "apiVersion": version, "metadata": {}, "items": getattr(self.fake, res)})

    def _node(self, method: str, name: str) -> None:
        """GET or PATCH one Node (`kubectl cordon`'s strategic merge patch of spec: a null removes the field).
        The list is replaced, never changed in place: tests share their NODES."""
        found = [n for n in self.fake.nodes if n["metadata"]["name"] == name]
        if not found:
            return self._send(404, _status(404, "NotFound", f'nodes "{name}" not found'))
        if method == "GET":
            return self._send(200, {"kind": "Node", "apiVersion": "v1", **found[0]})
        kind = self.headers.get("Content-Type", "")
        self.fake.patches.append((name, kind, self.body))
        if kind not in ("application/strategic-merge-patch+json", "application/merge-patch+json"):
            return self._send(415, _status(415, "UnsupportedMediaType", f"the server does not support {kind!r}"))
        if not isinstance(self.body, dict) or set(self.body) - {"spec"}:
            return self._send(422, _status(422, "Invalid", "the stand-in patches only a Node's spec"))
        spec = {**(found[0].get("spec") or {}), **(self.body.get("spec") or {})}
        patched = {**found[0], "spec": {k: v for k, v in spec.items() if v is not None}}
        with self.fake.cond:
            self.fake.nodes = [patched if n is found[0] else n for n in self.fake.nodes]
        self._send(200, {"kind": "Node", "apiVersion": "v1", **patched})

    def _namespace(self, name: str) -> None:
        """GET one namespace: its labels carry the Pod Security levels."""
        if ("GET", "namespaces") in self.fake.forbidden:
            return self._send(403, _status(403, "Forbidden", f'namespaces "{name}" is forbidden: User "dev" '
                                           'cannot get resource "namespaces" in API group "" at the cluster scope'))
        if name not in self.fake.namespaces:
            return self._send(404, _status(404, "NotFound", f'namespaces "{name}" not found'))
        self._send(200, {"kind": "Namespace", "apiVersion": "v1",
                         "metadata": {"name": name, "labels": dict(self.fake.namespaces[name])},
                         "status": {"phase": "Active"}})

    def _resource(self, method: str, res: str, ns: str, name: str | None, log: bool, query: dict) -> None:
        fake = self.fake
        if res in VOLCANO_RESOURCES and not fake.volcano_installed:
            return self._send(404, b"404 page not found")
        if (method, res) in fake.forbidden:
            verb = {"POST": "create", "GET": "get" if name else "list", "DELETE": "delete", "PUT": "update"}[method]
            group = GROUP_OF.get(res, "")
            return self._send(403, _status(403, "Forbidden", f'{res}{"." + group if group else ""} is '
                                           f'forbidden: User "dev" cannot {verb} resource "{res}" in API '
                                           f'group "{group}" in the namespace "{ns}"'))
        if log:
            return self._log(ns, name, query)
        key = (res, ns, name)
        with fake.cond:
            if method == "POST":
                obj = self.body
                key = (res, ns, obj["metadata"]["name"])
                if key in fake.objects:
                    return self._send(409, _status(409, "AlreadyExists",
                                                   f'{res} "{key[2]}" already exists'))
                check = {"persistentvolumeclaims": claim_problem, "networkpolicies": policy_problem,
                         "secrets": secret_problem}.get(res)
                invalid = check(obj) if check else ""
                if invalid:
                    return self._send(422, _status(422, "Invalid", f'{obj.get("kind")} '
                                                   f'"{key[2]}" is invalid: {invalid}'))
                if res == "persistentvolumeclaims":
                    obj["status"] = {"phase": "Pending"}  # bound later by a provisioner
                obj["metadata"].update(uid=str(uuid.uuid4()), resourceVersion="1", namespace=ns)
                fake.objects[key] = obj
                return self._send(201, obj)
            if name is None:
                items = [o for (r, n, _), o in sorted(fake.objects.items())
                         if r == res and n == ns and _matches(o, query.get("labelSelector", ""))
                         and _fields_match(o, query.get("fieldSelector", ""))]
                meta: dict = {}
                if int(query.get("limit") or 0) and len(items) > int(query["limit"]):  # a first page only
                    items, meta = items[:int(query["limit"])], {"continue": "more", "remainingItemCount": 1}
                return self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items})
            if key not in fake.objects:
                return self._send(404, _status(404, "NotFound", f'{res} "{name}" not found'))
            if method == "DELETE":
                want = ((self.body.get("preconditions") or {}).get("uid"))
                if want and want != fake.objects[key]["metadata"].get("uid"):
                    return self._send(409, _status(409, "Conflict", f'Precondition failed: UID in precondition: '
                                                   f'{want}, UID in object meta: {fake.objects[key]["metadata"].get("uid")}'))
                obj = fake.objects.pop(key)
                if res == "jobs":
                    fake.delete_pods_of(name, ns)
                job = (obj["metadata"].get("labels") or {}).get("volcano.sh/job-name")
                if res == "pods" and fake.replace_deleted_pods and ("jobs", ns, job) in fake.objects:
                    index = int(name.rsplit("-", 1)[1])  # Volcano's PodNameFmt: <job>-<task>-<index>
                    fake.add_pod(job, obj["metadata"]["labels"]["volcano.sh/task-spec"], index, ns, running=False)
                return self._send(200, obj)
            if method == "PUT":
                stored = fake.objects[key]
                if self.body.get("metadata", {}).get("resourceVersion") != stored["metadata"].get("resourceVersion"):
                    return self._send(409, _status(409, "Conflict", f'Operation cannot be fulfilled on {res} "{name}": '
                                                   "the object has been modified; please apply your changes to the "
                                                   "latest version and try again"))
                obj = self.body
                obj["metadata"].update(uid=stored["metadata"]["uid"], namespace=ns,
                                       resourceVersion=str(int(stored["metadata"]["resourceVersion"]) + 1))
                fake.objects[key] = obj
                return self._send(200, obj)
            return self._send(200, fake.objects[key])

    def _log(self, ns: str, name: str, query: dict) -> None:
        fake = self.fake
        with fake.cond:
            pod = fake.objects.get(("pods", ns, name))
            if pod is None:
                return self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
            status = pod["status"]["containerStatuses"][0]
            init = {s["name"]: s for s in pod["status"].get("initContainerStatuses") or []}
            if query.get("container") in init:  # a tail of an init container's output
                run = init[query["container"]]["restartCount"] - (1 if query.get("previous") == "true" else 0)
                output = fake.init_logs.get((name, query["container"], run))
                if output is None:
                    return self._send(400, _status(400, "BadRequest", "previous terminated container "
                                                   f'"{query["container"]}" in pod "{name}" not found'))
                return self._send(200, b"".join(output.splitlines(keepends=True)[-int(query.get("tailLines") or 0):]))
            restarts = status["restartCount"] - (1 if query.get("previous") == "true" else 0)
            buffer = fake.logs.get((name, pod["metadata"]["uid"], restarts))
        if buffer is None:
            return self._send(400, _status(400, "BadRequest", f'container "trainer" in pod "{name}" '
                                           "is waiting to start" if restarts >= 0 else
                                           "previous terminated container not found"))
        follow, stamps = query.get("follow") == "true", query.get("timestamps") == "true"
        since = int(query["sinceSeconds"]) if "sinceSeconds" in query else None
        if "tailLines" in query and not follow:
            with fake.cond:
                text = b"".join(data for _, data in buffer.chunks)
            lines = text.splitlines(keepends=True)[-int(query["tailLines"]):]
            limit = int(query.get("limitBytes") or 0) or None  # the kubelet cuts the tail's output
            return self._send(200, b"".join(lines)[:limit])
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent, line_start = 0, True
        while True:
            with fake.cond:
                while follow and sent >= len(buffer.chunks) and not buffer.ended and not fake.closed:
                    fake.cond.wait(0.2)
                new, sent = buffer.chunks[sent:], len(buffer.chunks)
                done = not follow or buffer.ended or fake.closed
            for at, data in new:
                if since is not None and at < time.time_ns() - since * 10**9:
                    continue
                if stamps:
                    data, line_start = _stamp(data, at, line_start)
                self._chunk(data)
            if done:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return


def _stamp(data: bytes, at: int, line_start: bool) -> tuple[bytes, bool]:
    """Prefix each line that starts in `data` with its RFC3339Nano time, as kubelet does."""
    out = b""
    for piece in data.splitlines(keepends=True):
        if line_start:
            out += rfc3339nano(at).encode() + b" "
        out += piece
        line_start = piece.endswith(b"\n")
    return out, line_start
