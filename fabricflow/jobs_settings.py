"""``processors.jobs``: where job membership comes from (the inventory file, Kubernetes or Slurm).

Kept beside :mod:`fabricflow.settings` (which nests it) so that module stays readable; docs/inventory.md,
"Live jobs from Kubernetes or Slurm", explains each source.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

__all__ = ["JobsSettings", "KubernetesJobsSettings", "SlurmJobsSettings"]

_CFG = ConfigDict(extra="forbid", frozen=True)


class KubernetesJobsSettings(BaseModel):
    """Pods of a job, through the official Kubernetes client (list, then watch)."""

    model_config = _CFG
    job_label: str = Field(
        "batch.kubernetes.io/job-name", min_length=1,
        description="Pod label whose value names the job (e.g. training.kubeflow.org/job-name, "
        "batch.kubernetes.io/job-name, or any); pods without it are ignored",
    )
    namespace: str | None = Field(None, description="Watch pods of this namespace only (none = all namespaces: needs a ClusterRole)")
    kubeconfig: str | None = Field(
        None, description="kubeconfig file; none = in-cluster service account when running in a pod, else ~/.kube/config",
    )
    context: str | None = Field(None, description="kubeconfig context (none = its current context)")
    pod_addresses: bool = Field(True, description="Pod IPs of running pods become addresses of their node (hostNetwork pods use the node's)")
    watch_timeout_s: int = Field(300, ge=10, le=3600, description="Server-side timeout of one watch request; it is resumed from the last resourceVersion")


class SlurmJobsSettings(BaseModel):
    """Slurm jobs, polled from ``squeue --json``, ``scontrol show job --json`` or slurmrestd."""

    model_config = _CFG
    mode: Literal["squeue", "scontrol", "rest"] = Field("squeue", description="squeue --json, scontrol show job --json, or slurmrestd over HTTP (rest)")
    command: str | None = Field(None, description="Path of squeue / scontrol (none = found on PATH)")
    url: str | None = Field(None, description="slurmrestd base URL for mode rest, e.g. http://slurmctld:6820")
    api_version: str = Field("v0.0.40", pattern=r"^v\d+\.\d+\.\d+$", description="slurmrestd API version (path /slurm/<version>/jobs)")
    user: str | None = Field(None, description="slurmrestd user name (header X-SLURM-USER-NAME)")
    token: SecretStr | None = Field(None, description="slurmrestd JWT (header X-SLURM-USER-TOKEN; never logged)")
    token_file: str | None = Field(None, description="File holding the slurmrestd JWT, re-read at every poll (instead of token)")
    poll_s: float = Field(15.0, ge=1, description="Poll interval")
    timeout_s: float = Field(10.0, gt=0, description="Timeout of one poll (command or HTTP request)")
    job_naming: Literal["name-id", "name", "id"] = Field(
        "name-id", description="Job name in the inventory: name-id (train-4412; Slurm names repeat), name, or id",
    )

    @model_validator(mode="after")
    def _rest_needs_url(self) -> SlurmJobsSettings:
        if self.mode == "rest" and not self.url:
            raise ValueError("processors.jobs.slurm.url is required with mode rest")
        if self.token is not None and self.token_file:
            raise ValueError("give processors.jobs.slurm.token or token_file, not both")
        return self


class JobsSettings(BaseModel):
    """Where job membership comes from: ``file`` (the inventory's ``jobs:``), ``kubernetes`` or ``slurm``."""

    model_config = _CFG
    source: Literal["file", "kubernetes", "slurm"] = Field(
        "file", description="Job membership source: file (the inventory's jobs:), kubernetes or slurm (replace the file's jobs:)",
    )
    keep_ended_s: float = Field(86_400.0, ge=0, description="Keep ended memberships this long (late flows are still attributed)")
    backoff_max_s: float = Field(60.0, ge=1, description="Longest wait between reconnects to an unreachable scheduler API")
    kubernetes: KubernetesJobsSettings = Field(default_factory=KubernetesJobsSettings)
    slurm: SlurmJobsSettings = Field(default_factory=SlurmJobsSettings)
