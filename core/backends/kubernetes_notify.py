"""A Kubernetes workspace's webhook (issue 43): its address into the Secret `<job>-notify` that the
watcher's pod mounts (core.kubernetes.notify_secret), or out of it. The watcher in the cluster sends;
nothing runs on this machine. Mixed into core.backends.kubernetes.KubernetesBackend."""

from __future__ import annotations

from kubernetes import client

from core.domain.notifications import check_url
from core.errors import NotFound
from core.kubernetes.client import REQUEST_TIMEOUT, ApiError
from core.kubernetes.manifests import _metadata
from core.kubernetes.names import job_name
from core.kubernetes.notify_secret import notify_secret_name, render_notify_secret


class WatcherNotify:
    WEBHOOK_IN_CLUSTER = True  # the watcher in the cluster sends the workspace's webhook (no local command)

    def set_notify_url(self, workspace_id: str, url: str) -> None:
        """Create the Secret, or replace the address in it (the workspace's Job must exist)."""
        check_url(url)
        job = job_name(workspace_id)
        if self._job(workspace_id) is None:
            raise NotFound(f"workspace {workspace_id} has no Volcano job {job} in namespace {self.namespace}",
                           "deploy it again, or see `geotrain workspaces show ID`")
        secret = render_notify_secret(job, _metadata(workspace_id, "", self.namespace), url)
        try:
            self._create(secret)
        except ApiError as exc:
            if exc.status != 409:
                raise
            core = client.CoreV1Api(self.api)
            name = notify_secret_name(job)
            with self._errors(f"replacing Secret {name}"):
                current = core.read_namespaced_secret(name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
                secret["metadata"]["resourceVersion"] = current.metadata.resource_version
                core.replace_namespaced_secret(name, self.namespace, secret, _request_timeout=REQUEST_TIMEOUT)

    def clear_notify(self, workspace_id: str) -> None:
        self._delete_object("Secret", notify_secret_name(job_name(workspace_id)))
