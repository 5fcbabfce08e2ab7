"""The service's settings: one documented object, from environment variables (`OBJCOUNT_<NAME>`) and an
optional YAML file (`OBJCOUNT_CONFIG_FILE`, or `objcount run --config FILE`); the environment wins.

Built in `main()`, never at import. Invalid settings are reported all at once (exit code 2).

    python -m autoscaler.service.settings     # the Markdown table of every setting (docs/settings.md, tested)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator, Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from autoscaler.core.calibration import Margin
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.sizing import DEFAULT_PRESET, PLATFORMS, PRESETS, Profile, Sizing
from autoscaler.kube.targets import TARGETS
from inventory.core.ids import RECONCILER_NAMESPACE, ROOT_SYNC_NAMESPACE, RSyncKey

ENV_PREFIX = "OBJCOUNT_"
CONFIG_FILE_ENV = "OBJCOUNT_CONFIG_FILE"


DETECT = ""  # the platform setting's "find out at start"


def _one_of(registry: Mapping[str, object], what: str) -> AfterValidator:
    """A name that must be in `registry` (settings, the CLI and the README take their choices from the
    registries, so adding an entry there is all it takes)."""

    def check(value: str) -> str:
        if value not in registry:
            raise ValueError(f"unknown {what} {value!r} (known: {', '.join(registry)})")
        return value

    return AfterValidator(check)


def _choices(registry: Mapping[str, object]) -> dict[str, Any]:
    return {"choices": list(registry)}


def _presets_give(constant: str) -> str:
    """What each preset sets `constant` to, for a description (read from the presets, so it cannot drift
    from them): `preset: 32` where all agree, else `fitted: 198, prototype: 128, size-aware: 96`."""
    values = {name: getattr(sizing, constant) for name, sizing in PRESETS.items()}
    shown = {name: "none" if value is None else f"{float(value):g}" for name, value in values.items()}
    if len(set(shown.values())) == 1:
        return f"preset: {next(iter(shown.values()))}"
    return ", ".join(f"{name}: {value}" for name, value in shown.items())


class Settings(BaseSettings):
    """Every setting of the service. Field descriptions are the documentation (docs/settings.md)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    # ----- what to manage ---------------------------------------------------------------------------
    mode: Literal["sidecar", "cluster", "webhook"] = Field(
        "sidecar",
        description="`sidecar`: manage the RSync of the reconciler pod it runs in. `cluster`: manage every RSync whose inventory matches `inventory_selector`. `webhook`: serve the admission webhook that adds the sidecar to reconciler Pods and sizes new ones (nothing else).",
    )
    rsync_kind: Literal["RootSync", "RepoSync"] = Field(
        "RootSync", description="Sidecar mode: kind of the RSync to manage."
    )
    rsync_name: str = Field("", description="Sidecar mode: name of the RSync to manage (required there).")
    rsync_namespace: str = Field(
        ROOT_SYNC_NAMESPACE, description="Sidecar mode: namespace of the RSync to manage."
    )
    inventory_selector: str = Field(
        "",
        description="Cluster mode: label selector of the inventories to manage; an RSync is managed once its inventory matches (default: `app.kubernetes.io/managed-by=configmanagement.gke.io`, every RSync, one without an inventory yet too).",
    )
    watch_namespace: str = Field("", description="Cluster mode: only this namespace (default: all).")
    reconciler_namespace: str = Field(
        RECONCILER_NAMESPACE, description="Namespace of the reconciler Deployments and pods."
    )
    # ----- how to apply -----------------------------------------------------------------------------
    target: Annotated[str, _one_of(TARGETS, "target")] = Field(
        "in-place",
        description="How a decision is applied: "
        + "; ".join(f"`{name}`: {kind.description}" for name, kind in TARGETS.items())
        + ".",
        json_schema_extra=_choices(TARGETS),
    )
    vpa_recommender: str = Field(
        "objcount",
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Target `vpa`: the recommender name a reconciler's VerticalPodAutoscaler names in `spec.recommenders` for us to write its recommendation (VPAs naming another, or none, are left alone).",
    )
    vpa_create: bool = Field(
        False,
        description="Target `vpa`: create a VerticalPodAutoscaler naming our recommender for a reconciler none aims at (needs `create` on verticalpodautoscalers: manifests/vpa/create). Off: only VPAs the user made are written to.",
    )
    platform: Annotated[str, _one_of({DETECT: None, **PLATFORMS}, "platform")] = Field(
        DETECT,
        description="Pod-level rules to satisfy: GKE Standard, Autopilot, or Autopilot with bursting. Empty: detected at start as Config Sync's reconciler-manager does (Autopilot's own mutating webhook configurations; bursting from GKE 1.30.2-gke.1394000); a sidecar is told by the webhook that adds it.",
        json_schema_extra=_choices(PLATFORMS),
    )
    preset: Annotated[str, _one_of(PRESETS, "preset")] = Field(
        DEFAULT_PRESET,
        json_schema_extra=_choices(PRESETS),
        description="Sizing preset: `fitted` (198 MiB + 0.174 MiB per object, fitted to others' measurements of Deployments on GKE, with a margin), `size-aware` (objects, their manifests' KiB and the API surface, fitted to the real Config Sync v1.22.0 reconciler, checked on v1.24.3's and v1.25.0's: BENCHMARKS.md) or `prototype` (128 MiB + 0.2 MiB per object); the settings below override single constants of it.",
    )
    base_mib: float | None = Field(
        None,
        ge=0,
        description=f"Memory for an empty inventory, MiB ({_presets_give('base_mib')}).",
    )
    mib_per_object: float | None = Field(
        None,
        gt=0,
        le=100,
        description=f"Memory per object, MiB ({_presets_give('mib_per_object')}; size-aware: objects of no known kind).",
    )
    mib_per_kib: float | None = Field(
        None,
        ge=0,
        le=100,
        description="Memory per KiB of the source's manifests, MiB (size-aware presets; 0 in count-only ones).",
    )
    assumed_kib_per_object: float | None = Field(
        None,
        ge=0,
        le=1536,
        description="KiB per object assumed when only a count is known (no source read: cluster mode).",
    )
    step_mib: int | None = Field(
        None,
        ge=1,
        le=4096,
        description=f"Memory is rounded up to a multiple of this, MiB ({_presets_give('step_mib')}).",
    )
    min_mib: int | None = Field(None, ge=1, description=f"Smallest memory, MiB ({_presets_give('min_mib')}).")
    max_mib: int | None = Field(
        None, ge=1, le=110 * 1024, description=f"Largest memory, MiB ({_presets_give('max_mib')})."
    )
    cpu_m_per_mib: float | None = Field(
        None,
        ge=0,
        le=100,
        description="CPU per MiB of memory, millicores (fitted and prototype: 1000/1024; size-aware: 0).",
    )
    cpu_base_m: float | None = Field(
        None, ge=0, le=100_000, description="CPU for no object, millicores (size-aware: measured; others: 0)."
    )
    cpu_m_per_object: float | None = Field(
        None, ge=0, le=100, description="CPU per object, millicores (size-aware: measured; others: 0)."
    )
    cpu_min_m: int | None = Field(
        None, ge=1, description=f"Smallest CPU, millicores ({_presets_give('cpu_min_m')})."
    )
    cpu_step_m: int | None = Field(
        None,
        ge=1,
        le=1000,
        description=f"CPU is rounded up to a multiple of this, millicores ({_presets_give('cpu_step_m')}).",
    )
    memory_limit_factor: float | None = Field(
        None,
        ge=1,
        le=10,
        description=f"Memory limit = request x this ({_presets_give('memory_limit_factor')}; Autopilot forces 1).",
    )
    cpu_limit_factor: float | None = Field(
        None,
        ge=1,
        le=100,
        description=f"CPU limit = request x this ({_presets_give('cpu_limit_factor')}; Autopilot forces 1).",
    )
    no_cpu_limit: bool = Field(
        False, description="Leave the CPU limit unset (not on Autopilot without bursting)."
    )
    no_memory_limit: bool = Field(
        False,
        description="Leave the memory limit unset, as Config Sync's Standard default does (not on Autopilot without bursting). Without a limit the reconciler is never OOM-killed by its own limit, only by the node.",
    )
    others_cpu_m: int | None = Field(
        None,
        ge=0,
        description="CPU requests of the pod's other containers, millicores (default: on Autopilot, read from the reconciler Pod, else its Deployment, else git-sync + otel-agent; unused on Standard).",
    )
    others_memory_mib: int | None = Field(
        None,
        ge=0,
        description="Memory requests of the pod's other containers, MiB (default: read like `others_cpu_m`).",
    )
    # ----- when -------------------------------------------------------------------------------------
    scale_down_delay_seconds: float = Field(
        600,
        ge=0,
        le=7 * 86400,
        description="A lower target must hold this long, counted from the inventory's last change, before a "
        "scale-down that rolls the reconciler out (targets `rsync-override`, `deployment`; `vpa` unless "
        "its VPA's updateMode is InPlaceOrRecreate).",
    )
    in_place_scale_down_delay_seconds: float = Field(
        120,
        ge=0,
        le=7 * 86400,
        description="The same for target `in-place`, and `vpa` where the VPA's updateMode is "
        "InPlaceOrRecreate, where it is shorter than `scale_down_delay_seconds` "
        "(nothing restarts; a resize that falls back to a rollout is still capped by "
        "`max_restarts_per_hour`), counted from the inventory's last change (in the reconciler's steady "
        "state: `steady_scale_down_delay_seconds`).",
    )
    steady_scale_down_delay_seconds: float = Field(
        0,
        ge=0,
        le=7 * 86400,
        description="In the steady state (in place, the reconciler's commit synced, the size following its "
        "working set's largest of the last two minutes plus the margin, the sync's tail left out: its first "
        "30 s, up to 150 s while the working set stays at the sync's level), "
        "a lower size waits this long counted from the steady state's start instead of "
        "`in_place_scale_down_delay_seconds`; 0: lowered as soon as the working set says so.",
    )
    max_restarts_per_hour: int = Field(
        6, ge=0, le=1000, description="Scale-downs stop when this many restarts were caused in the last hour."
    )
    resync_interval_seconds: float = Field(
        300, ge=5, le=86400, description="Every RSync is reconciled at least this often."
    )
    oom_quiet_seconds: float = Field(
        7 * 86400,
        ge=60,
        le=365 * 86400,
        description="After an OOM kill of a reconciler, its RSync keeps a memory floor (`objcount.dev/oom-floor`: max(limit x 1.5, limit + 128 MiB)) until this long passes without another kill.",
    )
    calibration_interval_seconds: float = Field(
        10,
        ge=0,
        le=3600,
        description="How often the reconcilers' working sets are read from the metrics API (`metrics.k8s.io`, metrics-server) to calibrate each RSync's size (`objcount.dev/calibration`); 0: never (the model alone). Without the metrics API nothing is calibrated. metrics-server scrapes every 15-60 s by default; reading more often than it scrapes costs requests and learns nothing.",
    )
    calibration_margin: float = Field(
        0.25,
        ge=0,
        le=4,
        description="Calibration: a size is never below the largest working set seen while the reconciler syncs its commit times (1 + this), nor below it plus `calibration_margin_mib` (the metrics API samples the working set; the peak between samples is not seen).",
    )
    calibration_margin_mib: int = Field(
        0,
        ge=0,
        le=65536,
        description="Calibration: the least MiB added to the largest working set seen (the size is then rounded up to the sizing step).",
    )
    events: bool = Field(
        True,
        description="Write a Kubernetes Event (`events.k8s.io/v1`, reporting controller `objcount.dev/autoscaler`) on the RSync for each decision that changes or holds its reconciler's size; repeats are aggregated into an event series. Needs `create` and `patch` of `events` (the shipped RBAC has them).",
    )
    workers: int = Field(
        8,
        ge=1,
        le=64,
        description="Cluster mode: reconciles run in parallel (never two for the same RSync; a sidecar runs one). 8: at 1,000 RSyncs and 23 changes a second, 4 left a lag p99 of 2.5 s, 8 one of 0.83 s at the same memory (BENCHMARKS.md, one run each).",
    )
    misfire_grace_seconds: float = Field(
        30,
        ge=1,
        le=3600,
        description="A scheduled job late by more than this is skipped (the next one runs).",
    )
    # ----- inputs -----------------------------------------------------------------------------------
    source_root: Path = Field(
        Path("/repo"),
        description="Sidecar mode: the reconciler's shared volume (`source/rev`, `hydrated/rev`).",
    )
    sync_dir: str | None = Field(
        None,
        description="Sidecar mode: directory of the manifests inside the source (default: the RSync's `spec.git.dir`, `spec.oci.dir`).",
    )
    source_poll_seconds: float = Field(
        1.0, gt=0, le=600, description="How often the `rev` link is checked for a new commit."
    )
    counts_in_status: bool = Field(
        False,
        description="Write the counts to `status.source.objectCount` and `status.sync.objectCount` instead of our annotations. Only for a Config Sync whose RSync status defines them: v1.22.0, v1.24.3 and v1.25.0 do not, and their reconcilers' status writes would erase them. Where the API server drops them, the counts go to the annotations anyway. Needs `patch` on `rootsyncs/status` and `reposyncs/status`, which the shipped ClusterRole does not grant and the shipped admission policy refuses (SECURITY.md).",
    )
    watch_timeout_seconds: int = Field(
        300, ge=10, le=3600, description="Server-side timeout of each watch request (it is then resumed)."
    )
    watch_inactivity_seconds: float = Field(
        90,
        ge=5,
        le=3600,
        description="A watch silent this long is reconnected (bookmarks arrive about every minute).",
    )
    # ----- cluster mode leader election ---------------------------------------------------------------
    leader_election: bool = Field(True, description="Cluster mode: only the holder of a Lease acts.")
    lease_name: str = Field("objcount-autoscaler", description="Cluster mode: name of the Lease.")
    lease_namespace: str = Field(RECONCILER_NAMESPACE, description="Cluster mode: namespace of the Lease.")
    lease_duration_seconds: float = Field(
        15, ge=2, le=600, description="A leader that has not renewed for this long is replaced."
    )
    identity: str = Field(
        "",
        description="This replica's name: in the Lease, and the Events' reporting instance; a sidecar's, its "
        "Pod's (it sizes nothing once that Pod is deleted). Default: the host name.",
    )
    # ----- webhook mode -------------------------------------------------------------------------------
    webhook_port: int = Field(9443, ge=1, le=65535, description="Webhook mode: port of `/mutate` (HTTPS).")
    webhook_cert_dir: Path = Field(
        Path("/etc/objcount/tls"),
        description="Webhook mode: directory with `tls.crt` and `tls.key` (a TLS Secret mounted there; reloaded when they change).",
    )
    sidecar_template: Path = Field(
        Path("/etc/objcount/sidecar/sidecar.yaml"),
        description="Webhook mode: the sidecar to add (`container:` and its `volumes:`).",
    )
    webhook_sidecar: bool = Field(
        True,
        description="Webhook mode: add the sidecar of `sidecar_template` to reconciler Pods (the sidecar install; the cluster install's webhook only sizes).",
    )
    webhook_sizing: bool = Field(
        True,
        description="Webhook mode: start each new reconciler Pod at the size published for a new Pod of its RSync sized in place (`objcount.dev/start-resources`, the size of a whole sync; from an older version, `objcount.dev/applied-resources`; through `objcount.dev/target: in-place`), read from a watch of RootSyncs and RepoSyncs; any doubt leaves the template's size.",
    )
    # ----- endpoints and logs -------------------------------------------------------------------------
    bind_address: str = Field("0.0.0.0", description="Address the HTTP endpoints listen on.")
    metrics_port: int = Field(9464, ge=1, le=65535, description="Port of `/metrics` (Prometheus).")
    health_port: int = Field(
        8081, ge=1, le=65535, description="Port of `/healthz` and `/readyz` (may equal `metrics_port`)."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    log_format: Literal["json", "text"] = Field(
        "json", description="Log format: one JSON object per line, or text."
    )
    kubeconfig: str | None = Field(
        None, description="Kubeconfig file (default: in-cluster credentials, else `$KUBECONFIG`)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        problems = []
        if self.mode == "sidecar" and not self.rsync_name:
            problems.append("rsync_name: required in sidecar mode (the RSync this reconciler pod belongs to)")
        if self.min_mib is not None and self.max_mib is not None and self.min_mib > self.max_mib:
            problems.append(f"min_mib ({self.min_mib}) is larger than max_mib ({self.max_mib})")
        for name in ("no_cpu_limit", "no_memory_limit"):
            if getattr(self, name) and self.platform == "autopilot":
                problems.append(f"{name}: Autopilot without bursting forces limits equal to requests")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # A file given to load_settings is in the model config; the environment's is read here.
        config_file = settings_cls.model_config.get("yaml_file") or os.environ.get(CONFIG_FILE_ENV)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)

    # ----- what the rest of the service needs ---------------------------------------------------------
    @property
    def rsync(self) -> RSyncKey:
        return RSyncKey(self.rsync_kind, self.rsync_namespace, self.rsync_name)

    def profile(self) -> Profile:
        preset = PRESETS[self.preset]
        overrides: dict[str, Any] = {}
        for name in (
            "base_mib",
            "mib_per_object",
            "mib_per_kib",
            "assumed_kib_per_object",
            "cpu_m_per_mib",
            "cpu_base_m",
            "cpu_m_per_object",
            "memory_limit_factor",
            "cpu_limit_factor",
        ):
            value = getattr(self, name)
            if value is not None:
                overrides[name] = Fraction(str(value))
        for name in ("step_mib", "min_mib", "max_mib", "cpu_min_m", "cpu_step_m"):
            value = getattr(self, name)
            if value is not None:
                overrides[name] = value
        if self.no_cpu_limit:
            overrides["cpu_limit_factor"] = None
        if self.no_memory_limit:
            overrides["memory_limit_factor"] = None
        sizing = Sizing(**{**preset.__dict__, **overrides})
        if self.platform == DETECT:  # a programming error: main detects it before anything is sized
            raise ValueError("the platform is not known yet: detect it first (autoscaler.service.main)")
        platform = PLATFORMS[self.platform]
        return Profile(
            sizing,
            platform,
            platform.others_cpu_m if self.others_cpu_m is None else self.others_cpu_m,
            platform.others_memory_mib if self.others_memory_mib is None else self.others_memory_mib,
        )

    def margin(self) -> Margin:
        return Margin(Fraction(str(self.calibration_margin)), self.calibration_margin_mib)

    def hysteresis(self) -> Hysteresis:
        return Hysteresis(
            self.scale_down_delay_seconds,
            self.max_restarts_per_hour,
            self.oom_quiet_seconds,
            self.in_place_scale_down_delay_seconds,
            self.steady_scale_down_delay_seconds,
        )


class SettingsError(Exception):
    """Invalid settings; the message lists every problem, one per line."""


def load_settings(config_file: str | None = None) -> Settings:
    """The settings, from `config_file` (else $OBJCOUNT_CONFIG_FILE) and the environment; the process
    environment is left as it is."""
    settings_cls: type[Settings] = Settings
    if config_file:
        if not Path(config_file).is_file():
            raise SettingsError(f"config file {config_file}: not found")
        config = SettingsConfigDict(**{**Settings.model_config, "yaml_file": config_file})
        settings_cls = cast(type[Settings], type("Settings", (Settings,), {"model_config": config}))
    try:
        return settings_cls()
    except ValidationError as error:
        raise SettingsError(describe(error)) from None


def describe(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "settings"
        env = f" ({ENV_PREFIX}{where.upper()})" if problem["loc"] else ""
        message = problem["msg"].removeprefix("Value error, ")
        lines.append(
            f"  - {where}{env}: {message}; got {problem.get('input')!r}"
            if problem["loc"]
            else f"  - {message}"
        )
    return f"invalid settings ({len(lines)} problem{'s' if len(lines) > 1 else ''}):\n" + "\n".join(lines)


def markdown_table() -> str:
    rows = ["| setting | environment variable | type | default | meaning |", "|---|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        annotation = str(field.annotation).replace("typing.", "").replace("pathlib.", "").replace("|", "or")
        annotation = annotation.replace("<class '", "").replace("'>", "")
        extra = field.json_schema_extra
        choices = extra.get("choices") if isinstance(extra, dict) else None
        if isinstance(choices, list):
            annotation = " or ".join(f"`{choice}`" for choice in choices)
        default = "(none)" if field.default in (None, "") else f"`{field.default}`"
        description = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{name}` | `{ENV_PREFIX}{name.upper()}` | {annotation} | {default} | {description} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
