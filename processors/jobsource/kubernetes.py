"""Pods of jobs from the Kubernetes API, through the official client: list, then watch from its resourceVersion.

The loop: list the pods that carry the job label (a complete view: :meth:`Feed.relist`), then watch from the
list's ``resourceVersion`` with bookmarks, each request bounded by ``watch_timeout_s`` and resumed from the
last version seen. ``410 Gone`` (the version is too old) re-lists; any other failure is reported in one line
and retried after a backoff (1, 2, 4 ... ``backoff_max_s`` seconds), re-listing. Events go through the pure
:func:`~processors.logic.enrich.inventory.schedulers.pod_holding`, with the pods as the API's JSON.

Authentication: ``kubeconfig`` (and ``context``) when set; else the pod's service account when running in a
cluster (``KUBERNETES_SERVICE_HOST``); else ``~/.kube/config``. RBAC: ``get``/``list``/``watch`` on ``pods``.
"""

from __future__ import annotations

import json
import os
import threading
import time

from fabricflow.jobs_settings import KubernetesJobsSettings
from processors.logic.enrich.inventory.schedulers import SchedulerDocError, pod_end_ms, pod_holding, pod_key

from .feed import Feed, backoff_delays

__all__ = ["KubernetesSource"]

HTTP_GONE = 410


def _one_line(e: BaseException) -> str:
    from kubernetes.client.rest import ApiException

    from urllib3.exceptions import MaxRetryError

    if isinstance(e, ApiException):
        return f"Kubernetes API answered {e.status} {(e.reason or '').strip()}".strip()
    if isinstance(e, MaxRetryError):  # urllib3 gave up: say where and why in short
        why = str(e.reason).rsplit("): ", 1)[-1].rstrip(")\"'")
        return f"Kubernetes API {e.pool.scheme}://{e.pool.host}:{e.pool.port} unreachable: {why}"
    text = (str(e).splitlines() or [""])[0].strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class KubernetesSource:
    """List and watch pods; ``run(feed, stop)`` until ``stop`` is set."""

    def __init__(self, settings: KubernetesJobsSettings, backoff_max_s: float = 60.0):
        self.settings = settings
        self.backoff_max_s = backoff_max_s
        self.resource_version: str | None = None

    def api(self):
        """A ``CoreV1Api`` configured as the settings say (raises on a bad kubeconfig)."""
        from kubernetes import client, config

        conf = client.Configuration()
        s = self.settings
        if s.kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_kube_config(config_file=s.kubeconfig, context=s.context, client_configuration=conf)
        else:
            config.load_incluster_config(client_configuration=conf)
        return client.CoreV1Api(client.ApiClient(conf))

    def _list(self, api, **kw):
        s = self.settings
        kw.update(label_selector=s.job_label, _preload_content=False)
        if s.namespace:
            return api.list_namespaced_pod(s.namespace, **kw)
        return api.list_pod_for_all_namespaces(**kw)

    def _watch_fn(self, api):
        return api.list_namespaced_pod if self.settings.namespace else api.list_pod_for_all_namespaces

    def relist(self, api, feed: Feed) -> None:
        """One list: every labelled pod (a complete view), and the version to watch from."""
        resp = self._list(api, _request_timeout=self.settings.watch_timeout_s)
        doc = json.loads(resp.data)
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            raise SchedulerDocError("the pod list is not a PodList (no 'items')")
        now_ms = int(time.time() * 1000)
        holdings = [h for pod in doc["items"] if (h := pod_holding(pod, self.settings.job_label, now_ms))]
        self.resource_version = (doc.get("metadata") or {}).get("resourceVersion")
        feed.relist(holdings)

    def watch_once(self, api, feed: Feed, stop: threading.Event) -> None:
        """One watch request from ``resource_version`` until the server closes it (or ``stop``)."""
        from kubernetes import watch

        w = watch.Watch()
        kw = dict(label_selector=self.settings.job_label, allow_watch_bookmarks=True,
                  timeout_seconds=self.settings.watch_timeout_s, resource_version=self.resource_version,
                  _request_timeout=self.settings.watch_timeout_s + 30)
        args = (self.settings.namespace,) if self.settings.namespace else ()
        for event in w.stream(self._watch_fn(api), *args, **kw):
            self.apply_event(event, feed)
            if stop.is_set():
                w.stop()
                break

    def apply_event(self, event: dict, feed: Feed) -> None:
        """One watch event to the feed: ``type`` and ``raw_object`` (the object as the API's JSON; the client's
        ``deserialize=False`` is not used: its ERROR handling needs the deserialized form)."""
        kind = event.get("type")
        obj = event.get("raw_object", event.get("object")) or {}
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            feed.event("BOOKMARK")
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            raise SchedulerDocError(f"unexpected watch event type {kind!r}")
        now_ms = int(time.time() * 1000)
        holding = pod_holding(obj, self.settings.job_label, now_ms)
        if kind == "DELETED":
            if holding is not None:  # what it was (its start, should the watch have missed it), then its end
                feed.upsert(holding, None)
            feed.end(pod_key(obj), pod_end_ms(obj, now_ms), kind)
        elif holding is not None:
            feed.upsert(holding, kind)
        else:  # a pod that holds nothing (pending, unbound, or its label removed): whatever it held has ended
            feed.end(pod_key(obj), now_ms, kind)
        self.resource_version = rv or self.resource_version

    def run(self, feed: Feed, stop: threading.Event) -> None:
        """List, then watch; re-list after 410 Gone and after every failure (with a backoff)."""
        from kubernetes.client.rest import ApiException

        delays = backoff_delays(self.backoff_max_s)
        api = None
        need_list = True
        while not stop.is_set():
            try:
                if api is None:
                    api = self.api()
                if need_list:
                    self.relist(api, feed)
                    need_list = False
                    delays = backoff_delays(self.backoff_max_s)
                self.watch_once(api, feed, stop)
                feed.restart("closed")  # the server ended the request (timeout): resume from the last version
            except ApiException as e:
                if e.status == HTTP_GONE:
                    feed.restart("expired")
                    need_list = True
                    continue
                feed.error(_one_line(e))
                feed.restart("error")
                need_list = True
                stop.wait(next(delays))
            except Exception as e:  # unreachable API, bad kubeconfig, a malformed answer: retry, keep the last view
                feed.error(_one_line(e))
                feed.restart("error")
                need_list = True
                if api is None or isinstance(e, OSError | ValueError):
                    api = None  # e.g. a kubeconfig fixed in place, or a token rotated
                stop.wait(next(delays))
