"""Sizing policies side by side on the real reconciler, in one run: every policy on its own RootSync, all
at the same time, so they share one timeline and one machine.

    python -m profiles.policies_real [--policies ours-sidecar,...] [--scale 1] [--hold-scale 1]
                                     [--out profiles/out/policies-real] [--phase-timeout 1200]
                                     [--phases "grow 1,grow 2,big commit,prune"] [--git-period SECONDS]
                                     [--platform standard|autopilot]

On the local stack with a real node (Kubernetes v1.37.2, the default release; `OBJCOUNT_KUBERNETES_VERSION`
names another pinned one): Config Sync (v1.25.0, the default release) built from its pinned
source, every container of its reconciler Pods real (the reconciler, git-sync v4.4.2, the otel-agent), run
by the kubelet with containerd; the real metrics-server; the real VPA v1.8.1 (`controlplane.vpa`). Each
policy gets a RootSync of its own repository; the same commits go to each at the same moment (each
repository's objects in namespaces of their own, so the RootSyncs never manage the same object). The
timeline (`PHASES`): an empty commit, two commits that grow (500 ConfigMaps; 1,000 and 250 Deployments), a
big commit (2,000 ConfigMaps, 1,000 Deployments, 1,000 objects of the platform mix), a prune (100
ConfigMaps), and a growth (1,000 ConfigMaps, 500 Deployments) on a busy node: a Pod of the sandbox's
pause image requests all the node's CPU but 300m for that phase (`controlplane.filler`); each followed
by a hold long enough for VPA's recommender and updater (each loops every minute) to learn and act.
`--scale` multiplies the counts, `--hold-scale` the holds. Each phase's commit time is kept in
`run.json` (`committed_at_s`, seconds of the traces' clock). git-sync fetches each commit on its next
poll, every 15 s (Config Sync's default), or every `--git-period` seconds (each RootSync's
`spec.git.period`): a phase's seconds to synced include that wait.

Policies (`POLICIES`), each installed as a user would:
- ours, sidecar: the README's sidecar install (our webhook adds the sidecar to the reconciler Pod and
  sizes it at admission), its shipped settings (in place); the webhook's `objectSelector` narrowed to
  this policy's RootSync (as a user trying it on one RSync does), so the others' Pods run without it;
- ours, cluster mode: the README's cluster install, shipped settings (in place): the controller's
  Deployment (two replicas, one acting), `OBJCOUNT_INVENTORY_SELECTOR` naming this policy's inventory,
  and its webhook (sizing at admission only) under names of its own (`-cluster`: the sidecar install's
  runs beside it), its `objectSelector` narrowed to this policy's RootSync;
- VPA as deployed: VPA's `deploy/` manifests as released (recommender, updater, admission-controller with
  their flags), and a VerticalPodAutoscaler as a user writes it for Config Sync: the reconciler
  Deployment as its target, `InPlaceOrRecreate`, the reconciler container controlled, the others off;
- VPA tuned: the same VPA object with what a user tuning it for a one-replica reconciler sets: its
  `updatePolicy.minReplicas: 1` (the updater leaves workloads of fewer than `--min-replicas`, 2, alone),
  a second recommender (`--recommender-name=tuned`, named in the object's `spec.recommenders`) with the
  flags of `TUNED_RECOMMENDER` (a lower starting minimum, histories that decay in an hour, not a day),
  and the updater's flag `TUNED_UPDATER` (apply a recommendation within the bounds after 2 minutes, not
  12 hours), which leaves "VPA as deployed" as the released flags do (see `TUNED_UPDATER`);
- VPA with our recommender: VPA's updater and admission-controller as above, applying what we recommend
  (target `vpa`): a controller like the in-place one with `OBJCOUNT_TARGET=vpa` (and manifests/vpa's
  RBAC and guard) writes the recommendation of a VerticalPodAutoscaler like the tuned one's that names our
  recommender (`objcount`) in `spec.recommenders`; VPA's own recommenders leave it alone. The updater's
  loop stays the released minute, the latency VPA adds to each of our sizes;
- static Standard: Config Sync's template (200Mi request, no memory limit);
- static Autopilot: request = limit = 512Mi (its override).

`--platform autopilot` plays the cluster as GKE Autopilot without bursting, where a limit equals its
request and a size below the working set is an OOM kill (`real_runs.mark_autopilot`, PLAYED BY US: an
Autopilot webhook configuration by name, no webhook in it; Autopilot's own admission is not played).
Config Sync then gives every reconciler Pod its own Autopilot defaults (the reconciler 700m / 512Mi,
each container's limit equal to its request), ours detects Autopilot as shipped (limits equal to
requests, the Pod's minimums, its CPU ratio and rounding, our sidecar counted in the Pod). The policies
(`AUTOPILOT_POLICIES`): ours as a sidecar, ours in cluster mode, static Autopilot (Config Sync's
default memory, 512Mi with its limit) and VPA tuned (`controlledValues: RequestsAndLimits`: the limit
follows the request), the last two with the reconciler's CPU at 250m, not 700m, so the four Pods fit
this 2-core node (`real_runs.AUTOPILOT_CPU_OVERRIDE`). The default phases leave out the busy node, a
node of Standard whose CPU others hold.

A sampler lists the reconciler Pods every second: each reconciler container's memory request and limit
(as the kubelet applied them, `status.containerStatuses[].resources`, else the spec), its working set
(the kubelet's cgroup, read on the node), restarts, OOM kills, the Pod's resize conditions. Every 10 s the
kubelet's summary API gives the working set of each policy's own components (ours: the sidecar, the
webhook, the controllers; VPA's recommenders, updater and admission-controller); their requests come from
their Pods.

Results in `--out`: `policies-real.csv` (one row per policy), `own-components.csv`, `traces/<slug>.csv`
(the per-second samples), `policies-real.md` and `policies-real.png`, `run.json` (provenance). Beside
each policy's reserved MiB-h, the limit no policy can beat: a clairvoyant reserving, at every second,
the peak working set of the next 5 minutes of that policy's own trace on the 32 MiB grid.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import copy
import itertools
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from controlplane import vpa
from controlplane.autoscaler_install import (
    CLUSTER_MANIFESTS,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_NAME,
    kustomization_objects,
    trust_webhook,
)
from controlplane.configsync_build import VERSION
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync, running_config_sync_on_node
from controlplane.filler import NAMESPACE as FILLER_NAMESPACE
from controlplane.filler import fill_the_nodes_cpu
from controlplane.metrics_server import install_metrics_server
from controlplane.resources import create_or_replace
from controlplane.seed import install_crds
from controlplane.status_checks import synced
from inventory.core.ids import INVENTORY_ID_LABEL, RSyncKey, reconciler_name
from inventory.kube import kubeapi
from profiles.real_runs import (
    AUTOPILOT_CPU_OVERRIDE,
    CLUSTER_WEBHOOK,
    JSON,
    OURS_AS_RECOMMENDER,
    POLICIES,
    TUNED_RECOMMENDER,
    TUNED_UPDATER,
    VPA_CONTROLLER,
    OwnSample,
    Policy,
    Sample,
    Sampler,
    component_of,
    in_place_resizes,
    install_vpa_for,
    integral_mib_hours,
    mark_autopilot,
    new_pods,
    now,
    own_cost_of,
    own_costs,
    peak_above_request,
    policies_served,
    read_trace,
    resize_episodes,
    resize_state,
    restarts_and_kills,
    save_component_logs,
    vpa_object,
    write_rows,
)
from profiles.real_runs import provenance as shared_provenance
from profiles.reconciler_memory import WIDGET_CRD, manifests

# What moved to profiles.real_runs stays importable from here (the tests, profiles.replay).
__all__ = [
    "POLICIES",
    "OwnSample",
    "Phase",
    "Sample",
    "clairvoyant_mib_hours",
    "component_of",
    "in_place_resizes",
    "integral_mib_hours",
    "new_pods",
    "own_cost_of",
    "own_costs",
    "peak_above_request",
    "read_trace",
    "resize_episodes",
    "resize_state",
    "restarts_and_kills",
    "save_logs",
]


# ----- the timeline -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Phase:
    name: str
    objects: dict[str, int]  # per shape (profiles.reconciler_memory), in the commit
    hold_s: float  # after every RootSync has synced it (or the phase timed out)
    busy: bool = False  # committed on a node whose CPU others request but for BUSY_LEAVE_M, till its end

    def files(self, prefix: str, scale: float) -> dict[str, str]:
        """The commit's files: one per shape, its objects in namespaces named after `prefix`."""
        return {
            f"{shape}.yaml": manifests(shape, max(1, round(count * scale)), f"{prefix}-{shape}")
            for shape, count in self.objects.items()
        }


# ConfigMaps, then Deployments beside them, then a big commit with the platform mix (Namespaces, RBAC,
# Services, ...; profiles.platform) too, then a prune, then a growth on a node whose CPU is mostly requested
# by another Pod (a busy node: a size asking more CPU than is left waits, Deferred, or goes Pending). The
# holds leave VPA's recommender and updater (each loops every minute) several loops after each commit.
PHASES = (
    Phase("start", {}, 300),
    Phase("grow 1", {"configmaps": 500}, 300),
    Phase("grow 2", {"configmaps": 1000, "deployments": 250}, 300),
    Phase("big commit", {"configmaps": 2000, "deployments": 1000, "mix": 1000}, 600),
    Phase("prune", {"configmaps": 100}, 900),
    Phase("busy node", {"configmaps": 1000, "deployments": 500}, 300, busy=True),
)
# On the busy node, what the filler Pod leaves unrequested of the node's CPU (millicores).
BUSY_LEAVE_M = 300
PLATFORMS = ("standard", "autopilot")  # as played here (`--platform`; the module's docstring)


# ----- the policies (profiles.real_runs) ---------------------------------------------------------------
VPA_MANIFESTS = CLUSTER_MANIFESTS.parent / "vpa"
WEBHOOKS = kubeapi.Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration"
)


# The policies of a run on Autopilot: there Config Sync's Standard default and VPA as deployed (which never
# resizes a one-replica reconciler) are both its Autopilot default.
AUTOPILOT_POLICIES = ("ours, sidecar", "ours, cluster mode", "static Autopilot", "VPA tuned")


def key_of(policy: Policy) -> RSyncKey:
    return RSyncKey("RootSync", NAMESPACE, f"sbs-{policy.slug}")


def override_of(policy: str, platform: str) -> JSON | None:
    """The RootSync's `spec.override` a policy starts with on the platform. On Autopilot, Config Sync's
    own defaults give each Pod its memory; the Pods ours does not size get the reconciler's CPU at 250m
    (`AUTOPILOT_CPU_OVERRIDE`)."""
    if platform == "standard":
        return POLICIES[policy].override
    return None if policy.startswith("ours") else AUTOPILOT_CPU_OVERRIDE


def default_phases(platform: str) -> tuple[Phase, ...]:
    """The phases after the start a run plays unless told: on Autopilot, all but the busy node."""
    return tuple(p for p in PHASES[1:] if platform == "standard" or not p.busy)


# ----- what is measured (pure; the rest in profiles.real_runs) ---------------------------------------
CLAIRVOYANT_HORIZON_S = 300.0
CLAIRVOYANT_STEP_MIB = 32


def clairvoyant_mib_hours(samples: Sequence[Sample]) -> float:
    """The limit no policy can beat, from a policy's own trace: at each sample the peak working set of the
    next 5 minutes, rounded up to the 32 MiB grid, held until the next sample (MiB-h)."""
    times = [s.t for s in samples]
    sets = [s.working_set_mib or 0.0 for s in samples]
    total = 0.0
    for i, (a, b) in enumerate(itertools.pairwise(samples)):
        end = bisect.bisect_right(times, a.t + CLAIRVOYANT_HORIZON_S, lo=i)
        ahead = max(sets[i:end])
        total += math.ceil(ahead / CLAIRVOYANT_STEP_MIB) * CLAIRVOYANT_STEP_MIB * (b.t - a.t)
    return total / 3600


@dataclass
class Result:
    policy: str
    oom_kills: int
    restarts: int
    new_pods: int
    in_place_resizes: int
    deferred: int
    infeasible: int
    reserved_mib_h: float
    requested_mib_h: float
    peak_working_set_mib: float
    peak_above_request_mib: float
    largest_reserved_mib: float
    seconds_to_synced: list[float | None]  # per phase; None: not synced within the phase timeout
    own_requested_mib_h: float  # the policy's own components (shared ones counted whole)
    own_working_set_mib_h: float
    duration_s: float
    clairvoyant_mib_h: float = 0.0  # what a clairvoyant reserves over this policy's own trace


def result_of(
    policy: str, samples: Sequence[Sample], seconds: list[float | None], own: tuple[float, float]
) -> Result:
    restarts, kills = restarts_and_kills(samples)
    return Result(
        policy,
        kills,
        restarts,
        new_pods(samples),
        in_place_resizes(samples),
        resize_episodes(samples, "Deferred"),
        resize_episodes(samples, "Infeasible"),
        round(integral_mib_hours(samples, lambda s: s.reserved_mib), 2),
        round(integral_mib_hours(samples, lambda s: s.request_mib or 0.0), 2),
        round(max((s.working_set_mib or 0.0 for s in samples), default=0.0), 1),
        round(peak_above_request(samples), 1),
        max((s.reserved_mib for s in samples), default=0.0),
        seconds,
        round(own[0], 2),
        round(own[1], 2),
        round(samples[-1].t - samples[0].t if samples else 0.0, 1),
        round(clairvoyant_mib_hours(samples), 2),
    )


# ----- the run against the stack ------------------------------------------------------------------------


def ours_in(policies: Sequence[str]) -> bool:
    """Whether a policy runs a component of ours."""
    return any(p.startswith("ours") or POLICIES[p].vpa_recommender == OURS_AS_RECOMMENDER for p in policies)


def install_ours(cs: NodeConfigSync) -> None:
    """Ours as the README installs each form (see the module's docstring): the sidecar install, the
    cluster install (its webhook under names of its own), the controller writing VPA's recommendation.
    The webhook's certificates (a private key among them) go in the stack's sandbox, removed with it, not
    in the run's output."""
    api = cs.api
    assert api is not None
    certs = cs.stack.sandbox.work_dir / "certs"
    service = f"objcount-injector{CLUSTER_WEBHOOK}.{NAMESPACE}.svc"  # the cluster install's webhook here
    cs.install_sidecar(certs, extra_names=[f"DNS:{service}"])
    narrow_webhook(api, WEBHOOK_CONFIGURATION, POLICIES["ours, sidecar"])
    for item in kustomization_objects(CLUSTER_MANIFESTS):
        if item["kind"] == "Deployment" and item["metadata"]["name"] != WEBHOOK_NAME:
            create_or_replace(api, controller(item, POLICIES["ours, cluster mode"], {}))
            env = {"OBJCOUNT_TARGET": "vpa", "OBJCOUNT_LEADER_ELECTION": "false"}
            create_or_replace(
                api, controller(item, POLICIES["VPA with our recommender"], env, name=VPA_CONTROLLER)
            )
        elif item["kind"] in ("Deployment", "Service", "MutatingWebhookConfiguration"):
            create_or_replace(api, cluster_webhook(item))
        elif item["metadata"]["name"] != WEBHOOK_NAME:  # the webhook's account and policy: the sidecar's
            create_or_replace(api, item)
    trust_webhook(api, certs, f"{WEBHOOK_CONFIGURATION}{CLUSTER_WEBHOOK}")
    narrow_webhook(api, f"{WEBHOOK_CONFIGURATION}{CLUSTER_WEBHOOK}", POLICIES["ours, cluster mode"])
    for item in kustomization_objects(VPA_MANIFESTS):
        create_or_replace(api, item)


def narrow_webhook(api: kubeapi.KubeClient, configuration: str, policy: Policy) -> None:
    """The webhook configuration's `objectSelector` narrowed to the policy's RootSync (docs/install.md,
    "Trying it on some RSyncs first")."""
    only = {"key": "configsync.gke.io/sync-name", "operator": "In", "values": [key_of(policy).name]}
    api.patch(
        WEBHOOKS,
        None,
        configuration,
        [{"op": "add", "path": "/webhooks/0/objectSelector/matchExpressions/-", "value": only}],
        patch_type="json",
    )


def cluster_webhook(item: JSON) -> JSON:
    """One of the cluster install's webhook objects (its Deployment, Service, configuration) under names
    of its own, so it runs beside the sidecar install's: the same image, settings and certificate."""
    made: JSON = copy.deepcopy(item)
    made["metadata"]["name"] += CLUSTER_WEBHOOK
    labels = {"app.kubernetes.io/name": f"{WEBHOOK_NAME}{CLUSTER_WEBHOOK}"}
    if made["kind"] == "Deployment":
        made["spec"]["selector"] = {"matchLabels": labels}
        made["spec"]["template"]["metadata"]["labels"] = labels
    elif made["kind"] == "Service":
        made["spec"]["selector"] = labels
    else:
        made["webhooks"][0]["clientConfig"]["service"]["name"] += CLUSTER_WEBHOOK
    return made


def controller(deployment: JSON, policy: Policy, env: dict[str, str], name: str = "") -> JSON:
    """The shipped controller Deployment managing only `policy`'s inventory; with `name`, a copy of one
    replica under that name and its own Pod labels (no Lease: one replica)."""
    made: JSON = copy.deepcopy(deployment)
    selector = f"{INVENTORY_ID_LABEL}={NAMESPACE}_{key_of(policy).name}"
    container = made["spec"]["template"]["spec"]["containers"][0]
    settings = {"OBJCOUNT_INVENTORY_SELECTOR": selector, **env}
    container["env"] = [e for e in container["env"] if e["name"] not in settings] + [
        {"name": k, "value": v} for k, v in settings.items()
    ]
    if name:
        labels = {"app.kubernetes.io/name": name}
        made["metadata"]["name"] = name
        made["spec"]["replicas"] = 1
        made["spec"]["selector"] = {"matchLabels": labels}
        made["spec"]["template"]["metadata"]["labels"] = labels
    return made


def start_rsyncs(
    cs: NodeConfigSync, policies: Sequence[str], git_period_s: float | None = None, platform: str = "standard"
) -> dict[str, str]:
    """Each policy's RootSync on an empty first commit (so every reconciler starts before the timeline),
    with its override on the platform or its VPA object, fetching every `git_period_s` (None: Config
    Sync's default); the commit of each."""
    api = cs.api
    assert api is not None
    commits = {}
    for name in policies:
        policy = POLICIES[name]
        key = key_of(policy)
        commits[name] = cs.commit(key, {"start.yaml": ""})
        body = cs.rsync(key, git_period_s=git_period_s)
        override = override_of(name, platform)
        if override is not None:
            body["spec"]["override"] = override
        api.create(kubeapi.ROOTSYNC, NAMESPACE, body)
        if policy.vpa_recommender is not None:
            api.create(vpa.VPA, NAMESPACE, vpa_object(policy, key))
    return commits


def wait_all_synced(
    cs: NodeConfigSync, commits: dict[str, str], timeout: float, began: float
) -> dict[str, float | None]:
    """Seconds from `began` until each policy's RootSync reports its commit synced (None: not in time)."""
    api = cs.api
    assert api is not None
    seconds: dict[str, float | None] = dict.fromkeys(commits)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(v is None for v in seconds.values()):
        for name, commit in commits.items():
            if seconds[name] is not None:
                continue
            with contextlib.suppress(kubeapi.ApiError):
                rsync = api.get(kubeapi.ROOTSYNC, NAMESPACE, key_of(POLICIES[name]).name)
                if synced(rsync, commit):
                    seconds[name] = round(time.monotonic() - began, 1)
        time.sleep(1.0)
    return seconds


def play(
    cs: NodeConfigSync, policies: Sequence[str], args: argparse.Namespace, sampler: Sampler
) -> dict[str, list[float | None]]:
    seconds: dict[str, list[float | None]] = {name: [] for name in policies}
    written: set[str] = set()
    for phase in args.phases:
        with busy_node(cs, phase.busy):
            _play_phase(cs, policies, args, sampler, phase=phase, seconds=seconds, written=written)
    return seconds


@contextlib.contextmanager
def busy_node(cs: NodeConfigSync, busy: bool) -> Iterator[None]:
    """While a busy phase lasts, a filler Pod requests the node's CPU but `BUSY_LEAVE_M`."""
    if not busy:
        yield
        return
    assert cs.api is not None
    filler = fill_the_nodes_cpu(cs.api, leave_m=BUSY_LEAVE_M)
    try:
        yield
    finally:
        cs.api.delete(kubeapi.POD, FILLER_NAMESPACE, filler)


def _play_phase(
    cs: NodeConfigSync,
    policies: Sequence[str],
    args: argparse.Namespace,
    sampler: Sampler,
    *,
    phase: Phase,
    seconds: dict[str, list[float | None]],
    written: set[str],
) -> None:
    """One phase: its commit to every policy's repository (the files of the last phase it lacks deleted),
    the wait for every policy to sync it, the hold."""
    began = time.monotonic()
    sampler.committed.append((phase.name, round(sampler.now(), 2)))
    commits = {}
    files: dict[str, str | None] = {}
    for name in policies:
        files = dict(phase.files(POLICIES[name].slug, args.scale))
        commits[name] = cs.commit(key_of(POLICIES[name]), files | dict.fromkeys(written - set(files)))
    written.clear()
    written.update(files)
    print(f"{sampler.now():7.0f} s  {phase.name}: {phase.objects} x {args.scale} committed", file=sys.stderr)
    done = wait_all_synced(cs, commits, args.phase_timeout, began)
    for name in policies:
        seconds[name].append(done[name])
    print(f"{sampler.now():7.0f} s  {phase.name}: synced {done}", file=sys.stderr)
    sampler.stopping.wait(phase.hold_s * args.hold_scale)


def run(policies: list[str], args: argparse.Namespace) -> list[Result]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    began = provenance(args, policies)  # the commit and time the run starts from
    with running_config_sync_on_node() as cs:
        api = cs.api
        assert api is not None
        install_crds(api, [WIDGET_CRD])
        if args.platform == "autopilot":  # before ours starts and Config Sync sees its first RSync
            mark_autopilot(api)
        if any(POLICIES[p].vpa_recommender for p in policies) or ours_in(policies):
            install_metrics_server(cs.stack)  # VPA's recommender and our calibration read it
        install_vpa_for(cs, {r for p in policies if (r := POLICIES[p].vpa_recommender) is not None})
        if ours_in(policies):
            install_ours(cs)
        first = start_rsyncs(cs, policies, args.git_period, args.platform)
        keys = {name: key_of(POLICIES[name]) for name in policies}
        sampler = Sampler(cs, keys, samples={name: [] for name in policies})
        thread = threading.Thread(target=sampler.run, daemon=True)
        thread.start()
        started = wait_all_synced(cs, first, args.phase_timeout, time.monotonic())
        print(f"{sampler.now():7.0f} s  start: synced {started}", file=sys.stderr)
        sampler.stopping.wait(PHASES[0].hold_s * args.hold_scale)
        try:
            seconds = play(cs, policies, args, sampler)
        finally:
            sampler.stopping.set()
            thread.join(30)
            save_logs(cs, out)
    costs = own_costs(sampler.own)
    results = [
        result_of(name, sampler.samples[name], seconds[name], own_cost_of(name, costs)) for name in policies
    ]
    for name in policies:
        write_rows(out / "traces" / f"{POLICIES[name].slug}.csv", sampler.samples[name])
    write_rows(out / "own-components.csv", sampler.own)
    write_rows(out / "policies-real.csv", results)
    timeline = {"committed_at_s": dict(sampler.committed)}
    (out / "run.json").write_text(json.dumps(began | timeline | {"ended": now()}, indent=2) + "\n")
    (out / "policies-real.md").write_text(markdown(results, args.phases) + "\n" + own_table(costs))
    plot(out, policies, args.platform)
    return results


def save_logs(cs: NodeConfigSync, out: Path) -> None:
    """The log tails of ours and VPA's components, kept with the results (what they decided and why); our
    sidecar's from the sidecar policy's reconciler Pod."""
    sidecar = f"configsync.gke.io/deployment-name={reconciler_name(key_of(POLICIES['ours, sidecar']))}"
    save_component_logs(cs, out, sidecar)


def provenance(args: argparse.Namespace, policies: Sequence[str]) -> JSON:
    return shared_provenance() | {
        "scale": args.scale,
        "hold_scale": args.hold_scale,
        "git_period_s": args.git_period,
        "platform": args.platform,
        "overrides": {name: override_of(name, args.platform) for name in policies},
        "phases": [asdict(p) for p in (PHASES[0], *args.phases)],
        "policies": {name: asdict(POLICIES[name]) for name in policies},
        "tuned_recommender": TUNED_RECOMMENDER,
        "tuned_updater": TUNED_UPDATER,
    }


# ----- results ------------------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "not synced" if value is None else f"{value:.0f}"


def markdown(results: Sequence[Result], phases: Sequence[Phase] = PHASES[1:]) -> str:
    lines = [
        "| policy | OOM kills | container restarts | new Pods | in-place resizes (Deferred / Infeasible) | "
        "reserved (MiB-h) | requested (MiB-h) | clairvoyant (MiB-h): reserved / it | "
        "largest reserved (MiB) | peak working set (MiB) | peak above request (MiB) | to synced, s ("
        + " / ".join(p.name for p in phases)
        + ") | own components: requested / working set (MiB-h) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = r.reserved_mib_h / r.clairvoyant_mib_h if r.clairvoyant_mib_h else float("nan")
        lines.append(
            f"| {r.policy} | {r.oom_kills} | {r.restarts} | {r.new_pods} | "
            f"{r.in_place_resizes} ({r.deferred} / {r.infeasible}) | {r.reserved_mib_h:.2f} | "
            f"{r.requested_mib_h:.2f} | {r.clairvoyant_mib_h:.2f}: {ratio:.2f} x | "
            f"{r.largest_reserved_mib:.0f} | {r.peak_working_set_mib:.0f} | "
            f"{r.peak_above_request_mib:.0f} | {' / '.join(_seconds(v) for v in r.seconds_to_synced)} | "
            f"{r.own_requested_mib_h:.2f} / {r.own_working_set_mib_h:.2f} |"
        )
    return "\n".join(lines) + "\n"


def own_table(costs: dict[str, tuple[float, float]]) -> str:
    lines = [
        "| component | serves | requested (MiB-h) | working set (MiB-h) |",
        "|---|---|---|---|",
    ]
    for component, (requested, used) in sorted(costs.items()):
        served = ", ".join(policies_served(component))
        lines.append(f"| {component} | {served} | {requested:.2f} | {used:.2f} |")
    return "\n".join(lines) + "\n"


def plot(out: Path, policies: Sequence[str], platform: str = "standard") -> None:
    import matplotlib  # noqa: PLC0415 - slow to import, needed only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(
        len(policies), 1, figsize=(10, 1.9 * len(policies)), sharex=True, squeeze=False
    )
    nan = float("nan")
    for axis, name in zip((row[0] for row in axes), policies, strict=True):
        trace = read_trace(out / "traces" / f"{POLICIES[name].slug}.csv")
        minutes = [s.t / 60 for s in trace]
        axis.plot(minutes, [s.working_set_mib or nan for s in trace], label="working set", color="tab:blue")
        axis.plot(minutes, [s.request_mib or nan for s in trace], label="request", color="tab:green")
        axis.plot(
            minutes, [s.limit_mib or nan for s in trace], label="limit", color="tab:red", linestyle="--"
        )
        axis.set_title(name, fontsize=8)
        axis.set_ylabel("MiB", fontsize=8)
    axes[0][0].legend(loc="upper left", fontsize=7)
    axes[-1][0].set_xlabel("minutes since the timeline began")
    figure.suptitle(
        f"Config Sync {VERSION} reconciler under each policy on {platform}, one run (local stack, real node)",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(out / "policies-real.png", dpi=80)


def main() -> None:
    # SIGTERM unwinds like Ctrl-C, so the local stack is stopped and its directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(
        prog="python -m profiles.policies_real", description=__doc__.split("\n")[0]
    )
    slugs = [policy.slug for policy in POLICIES.values()]
    parser.add_argument(
        "--policies",
        help="comma-separated, of: " + ", ".join(slugs) + " (default: all; on Autopilot, the four of "
        "AUTOPILOT_POLICIES: " + ", ".join(POLICIES[name].slug for name in AUTOPILOT_POLICIES) + ")",
    )
    parser.add_argument(
        "--platform",
        choices=PLATFORMS,
        default="standard",
        help="the platform played (the module's docstring)",
    )
    parser.add_argument("--out", type=Path, default=Path("profiles/out/policies-real"))
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the timeline's object counts")
    parser.add_argument("--hold-scale", type=float, default=1.0, help="multiplies the holds after each phase")
    parser.add_argument(
        "--phase-timeout", type=float, default=1200.0, help="seconds a commit may take to sync"
    )
    period = (
        "seconds between git-sync's fetches of each policy's repository (its RootSync's spec.git.period; "
        "default: Config Sync's 15): each phase's commit waits for the next fetch"
    )
    parser.add_argument("--git-period", type=float, metavar="SECONDS", help=period)
    names = [phase.name for phase in PHASES[1:]]
    parser.add_argument(
        "--phases",
        help="comma-separated, in order, of the phases after the start: " + ", ".join(names) + " (default: "
        "all; on Autopilot, all but the busy node)",
    )
    args = parser.parse_args()
    if args.git_period is not None and args.git_period <= 0:
        parser.error("--git-period must be positive")
    by_name = {phase.name: phase for phase in PHASES[1:]}
    phases = args.phases or ",".join(p.name for p in default_phases(args.platform))
    if unknown_phases := sorted(set(phases.split(",")) - set(by_name)):
        parser.error(f"unknown phases: {unknown_phases}")
    args.phases = [by_name[name] for name in phases.split(",")]
    allowed = list(POLICIES) if args.platform == "standard" else list(AUTOPILOT_POLICIES)
    by_slug = {POLICIES[name].slug: name for name in allowed}
    slugs = [p for p in (args.policies or ",".join(by_slug)).split(",") if p]
    if unknown := sorted(set(slugs) - set(by_slug)):
        parser.error(f"policies not run on {args.platform}: {unknown} (of {', '.join(by_slug)})")
    policies = [by_slug[slug] for slug in slugs]
    print(markdown(run(policies, args), args.phases))


if __name__ == "__main__":
    main()
