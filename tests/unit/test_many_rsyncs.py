"""The pure parts of many RSyncs on the real node, worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inventory.core.ids import RSyncKey
from profiles.many_rsyncs import (
    ADDED_FILE,
    IDLE,
    NOT_SYNCED,
    PHASES,
    REJECTED,
    InventorySample,
    NodeSample,
    Peaks,
    RSyncRecord,
    Workload,
    count_changes,
    count_events,
    node_record,
    node_sample,
    node_table,
    objects_namespace,
    percentile,
    phase_files,
    raises,
    reaction_times,
    read_sources,
    report,
    resolve_counts,
    rsync_keys,
    rsync_record,
    rsync_table,
    seconds_or_outcome,
    slug,
    sources_by_slug,
    split,
    sync_outcome,
    timeline,
    with_removals,
)
from profiles.real_runs import OwnSample, Sample, write_rows

ROOT = RSyncKey("RootSync", "config-management-system", "many-root-01")
REPO = RSyncKey("RepoSync", "many-tenant-01", "repo-sync")
COMMIT_ALL, GROW, BIG, PRUNE = PHASES


def sample(
    t: float,
    pod: str = "p1",
    container: str = "c1",
    *,
    working_set: float | None = 50.0,
    request: float | None = 200.0,
    limit: float | None = None,
    restarts: int = 0,
    kills: int = 0,
    resize: str = "",
) -> Sample:
    return Sample(t, pod, container, working_set, request, limit, restarts, kills, resize)


def test_n_rsyncs_are_a_quarter_rootsyncs_at_least_one_and_the_rest_reposyncs() -> None:
    assert split(20) == (5, 15)
    assert split(8) == (2, 6)
    assert split(7) == (1, 6)
    assert split(3) == (1, 2)
    assert split(1) == (1, 0)


def test_the_counts_asked_for_by_the_options() -> None:
    assert resolve_counts(None, None, None, None) == (5, 15)  # the default 20, split
    assert resolve_counts(3, None, None, None) == (1, 2)
    assert resolve_counts(10, 3, None, None) == (3, 7)
    assert resolve_counts(10, None, 4, None) == (6, 4)
    assert resolve_counts(None, 2, 4, None) == (2, 4)
    assert resolve_counts(None, 3, None, None) == (3, 0)
    assert resolve_counts(None, None, None, 6) == (1, 5)  # one RSync per source directory
    assert resolve_counts(None, 2, None, 6) == (2, 4)


@pytest.mark.parametrize(
    ("rsyncs", "rootsyncs", "reposyncs", "sources", "said"),
    [
        (5, 2, 2, None, "2 RootSyncs and 2 RepoSyncs are not 5 RSyncs"),
        (None, 0, 0, None, "no such split: 0 RootSyncs and 0 RepoSyncs"),
        (4, None, None, 6, "4 RSyncs for 6 source directories"),
        (3, 5, None, None, "no such split: 5 RootSyncs and -2 RepoSyncs"),
    ],
)
def test_counts_that_disagree_are_refused(
    rsyncs: int | None, rootsyncs: int | None, reposyncs: int | None, sources: int | None, said: str
) -> None:
    with pytest.raises(ValueError, match=said):
        resolve_counts(rsyncs, rootsyncs, reposyncs, sources)


def test_the_rootsyncs_come_first_then_one_reposync_per_tenant_namespace() -> None:
    assert rsync_keys(2, 2) == [
        ROOT,
        RSyncKey("RootSync", "config-management-system", "many-root-02"),
        REPO,
        RSyncKey("RepoSync", "many-tenant-02", "repo-sync"),
    ]
    assert [slug(k) for k in rsync_keys(2, 2)] == [
        "many-root-01",
        "many-root-02",
        "many-tenant-01",
        "many-tenant-02",
    ]
    # A RepoSync may manage its own namespace only; a RootSync's objects go in one it creates.
    assert objects_namespace(REPO, "deployments") == "many-tenant-01"
    assert objects_namespace(ROOT, "deployments") == "many-root-01-deployments"


def _documents(text: str, kind: str) -> int:
    return text.count(f"\nkind: {kind}\n")


def test_the_synthetic_timeline_commits_all_grows_commits_big_on_one_and_prunes_all() -> None:
    work = Workload("deployments", 10)
    first = phase_files(COMMIT_ALL, 0, ROOT, work)
    assert first is not None
    assert list(first) == ["deployments.yaml"]
    assert _documents(first["deployments.yaml"], "Deployment") == 10
    assert "namespace: many-root-01-deployments\n" in first["deployments.yaml"]
    assert "replicas: 0" in first["deployments.yaml"]
    grown = phase_files(GROW, 1, REPO, work)
    assert grown is not None
    assert _documents(grown["deployments.yaml"], "Deployment") == 20
    assert "namespace: many-tenant-01\n" in grown["deployments.yaml"]
    big = phase_files(BIG, 0, ROOT, work)
    assert big is not None
    assert _documents(big["deployments.yaml"], "Deployment") == 50
    assert phase_files(BIG, 1, REPO, work) is None, "the others stay idle"
    pruned = phase_files(PRUNE, 1, REPO, work)
    assert pruned is not None
    assert _documents(pruned["deployments.yaml"], "Deployment") == 1  # a tenth of 10
    few = phase_files(PRUNE, 0, ROOT, Workload("configmaps", 3))
    assert few is not None
    assert _documents(few["configmaps.yaml"], "ConfigMap") == 1, "a tenth of 3 rounds to 0: at least one"


def test_a_source_directory_is_committed_as_it_is_with_the_phases_objects_added() -> None:
    source = {"a.yaml": "kind: Thing\n", "sub/b.yaml": "not: yaml: at all"}
    work = Workload("configmaps", 10, {"many-tenant-01": source})
    assert phase_files(COMMIT_ALL, 1, REPO, work) == source
    grown = phase_files(GROW, 1, REPO, work)
    assert grown is not None
    assert set(grown) == {"a.yaml", "sub/b.yaml", ADDED_FILE}
    assert _documents(grown[ADDED_FILE], "ConfigMap") == 10
    assert "namespace: many-tenant-01\n" in grown[ADDED_FILE]
    assert phase_files(PRUNE, 1, REPO, work) == source, "the additions pruned: the directory alone"
    big_work = Workload("configmaps", 10, {"many-root-01": source})
    big = phase_files(BIG, 0, ROOT, big_work)
    assert big is not None
    assert _documents(big[ADDED_FILE], "ConfigMap") == 40


def test_a_timeline_of_some_phases_with_a_big_commit_of_its_own_size() -> None:
    """One RSync's cost beside others (issue 61, item 3): the first commit, then a big commit of 2,000
    objects on the first RSync alone (with --sources: its directory and 2,000 added); unknown phases are
    refused, naming the known ones."""
    assert timeline(None, 200, None) == PHASES
    first, big = timeline(["big commit", "commit all"], 200, 2000)
    assert (first, big.name, big.first_only) == (COMMIT_ALL, "big commit", True)
    files = phase_files(big, 0, ROOT, Workload("deployments", 200))
    assert files is not None
    assert _documents(files["deployments.yaml"], "Deployment") == 2000
    assert phase_files(big, 1, REPO, Workload("deployments", 200)) is None
    source = {"a.yaml": "kind: Thing\n"}
    added = phase_files(big, 0, ROOT, Workload("configmaps", 200, {"many-root-01": source}))
    assert added is not None
    assert _documents(added[ADDED_FILE], "ConfigMap") == 2000
    with pytest.raises(ValueError, match=r"unknown phases \[.grown.\].*commit all, grow, big commit"):
        timeline(["grown"], 200, None)


def test_a_commit_removes_what_the_last_had_and_this_one_lacks() -> None:
    assert with_removals({"a": "1"}, {"a": "0", "b": "2"}) == {"a": "1", "b": None}
    assert with_removals({"a": "1"}, {}) == {"a": "1"}


def test_a_commit_is_synced_rejected_or_neither() -> None:
    def rsync(**status: object) -> dict[str, object]:
        return {"status": status}

    done = rsync(source={"commit": "A"}, sync={"commit": "A"}, lastSyncedCommit="A")
    assert sync_outcome(done, "A") == "synced"
    assert sync_outcome(done, "B") is None, "another commit synced"
    parse_error = {"code": "KNV1021", "errorMessage": "unknown kind"}
    refused = rsync(
        source={"commit": "B", "errors": [parse_error]}, sync={"commit": "A"}, lastSyncedCommit="A"
    )
    assert sync_outcome(refused, "B") == REJECTED
    summarized = rsync(source={"commit": "B", "errorSummary": {"totalCount": 2}}, sync={"commit": "A"})
    assert sync_outcome(summarized, "B") == REJECTED
    rendering = rsync(source={"commit": "B"}, rendering={"commit": "B", "errors": [parse_error]})
    assert sync_outcome(rendering, "B") == REJECTED
    older = rsync(source={"commit": "A", "errors": [parse_error]}, sync={"commit": "A"})
    assert sync_outcome(older, "B") is None, "errors of an older commit say nothing of this one"
    retrying = rsync(
        source={"commit": "B"}, sync={"commit": "B", "errors": [parse_error]}, lastSyncedCommit="A"
    )
    assert sync_outcome(retrying, "B") is None, "the sync stage's errors are retried"
    assert sync_outcome({}, "A") is None
    assert seconds_or_outcome("synced", 12.345) == 12.3
    assert seconds_or_outcome(REJECTED, 12.345) == REJECTED
    assert seconds_or_outcome(None, 900.0) == NOT_SYNCED


def test_the_node_sums_each_seconds_reconcilers() -> None:
    samples = [
        sample(10.0, request=200, limit=None, working_set=50),
        sample(10.0, "p2", "c2", request=128, limit=256, working_set=40),
        sample(10.0, "", "", request=None, limit=None, working_set=None),  # no Pod yet
    ]
    assert node_sample(10.0, samples) == NodeSample(10.0, 328.0, 256.0, 90.0, 2)


def test_count_changes_skip_a_missing_inventory() -> None:
    counts = [
        InventorySample(0, "r", None),
        InventorySample(1, "r", 5),
        InventorySample(2, "r", 5),
        InventorySample(3, "r", None),  # the list failed: not a change
        InventorySample(4, "r", 8),
        InventorySample(5, "r", 8),
        InventorySample(6, "r", 3),
    ]
    assert count_changes(counts) == [4, 6]


def test_raises_are_rises_of_the_applied_memory_request() -> None:
    samples = [
        sample(0, request=200, limit=None),
        sample(1, request=200, limit=None),
        sample(2, "", "", request=None, limit=None),  # between Pods
        sample(3, "p2", "c2", request=256, limit=256),  # a new Pod at a larger size
        sample(4, "p2", "c2", request=256, limit=512),  # the limit alone: no raise of the request
        sample(5, "p2", "c2", request=128, limit=256),  # lowered in place: not a raise
        sample(6, "p2", "c2", request=160, limit=256),  # raised in place
    ]
    assert raises(samples) == [3, 6]


def test_a_reaction_is_the_first_resize_after_a_count_change_and_before_the_next() -> None:
    # 10 s: resized at 12 (2 s; the one at 14 is not another reaction); 20 s: nothing before 30;
    # 30 s: resized at 35 (5 s). The resize at 5 s came before any change.
    assert reaction_times([10, 20, 30], [5, 12, 14, 35]) == ([2.0, 5.0], 1)
    assert reaction_times([], [5]) == ([], 0)
    assert reaction_times([10], []) == ([], 1)


def test_an_rsyncs_counts_change_at_its_commits_and_its_inventorys_changes() -> None:
    # A commit read ahead of the inventory: the resize at 62 s answers the commit at 59 s (3 s), not the
    # inventory's change at 62.2 s; the commit at 202 s is answered at 203.4 s, before its inventory
    # changed at 209 s, which nothing answers.
    events = count_events([59.0, 202.0], [9.9, 62.2, 209.0])
    assert events == [9.9, 59.0, 62.2, 202.0, 209.0]
    assert reaction_times(events, [5.6, 62.0, 203.4]) == ([3.0, 1.4], 3)
    assert count_events([5.0], [5.0]) == [5.0], "one change seen both ways"


def test_percentiles_are_nearest_rank() -> None:
    values = [10.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0]
    assert percentile(values, 50) == 5.0  # the 5th of 10
    assert percentile(values, 99) == 10.0  # the 10th: ceil(9.9)
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def test_peaks_keep_the_largest_reading() -> None:
    peaks = Peaks().with_reading(100.0, None)
    assert peaks == Peaks(100.0, None)
    assert peaks.with_reading(90.0, 80.0) == Peaks(100.0, 80.0)
    assert peaks.with_reading(None, None) == peaks


def _record(**changes: object) -> RSyncRecord:
    values: dict[str, object] = {
        "rsync": "RepoSync/many-tenant-01/repo-sync",
        "peak_working_set_mib": 71.4,
        "cgroup_peak_mib": 80.2,
        "resident_peak_mib": 64.0,
        "request_min_mib": 128.0,
        "request_max_mib": 160.0,
        "limit_min_mib": None,
        "limit_max_mib": None,
        "oom_kills": 0,
        "restarts": 0,
        "new_pods": 0,
        "in_place_resizes": 2,
        "seconds_to_synced": [12.3, 30.0, IDLE, NOT_SYNCED],
        "reactions_s": [2.0, 5.0],
        "unanswered_changes": 1,
    }
    return RSyncRecord(**(values | changes))  # type: ignore[arg-type]


def test_an_rsyncs_record_from_its_samples() -> None:
    samples = [
        sample(0, working_set=30, request=200),
        sample(10, working_set=70, request=256, limit=256),  # resized in place at 10 s
        sample(20, working_set=60, request=256, limit=256, restarts=1, kills=1),
        sample(30, "", "", working_set=None, request=None),
        sample(40, "p2", "c2", working_set=20, request=128, limit=256),  # a new Pod
    ]
    counts = [InventorySample(0, "r", 0), InventorySample(9, "r", 200), InventorySample(35, "r", 20)]
    # Counts changed at 8 s (a commit), 9 s (the inventory), 33 s (a commit), 35 s (the inventory); the
    # size rose at 10 s and fell at 40 s (the new Pod). The raise answers the latest change before it,
    # 9 -> 10 s; the commits (the inventory changed before any raise) and 35 s (a lower size) are not.
    record = rsync_record(
        REPO, samples, counts=counts, peaks=Peaks(80.0, 75.5), seconds=[12.3, IDLE], commits=[8.0, 33.0]
    )
    assert record == RSyncRecord(
        "RepoSync/many-tenant-01/repo-sync",
        70.0,
        80.0,
        75.5,
        128.0,
        256.0,
        256.0,
        256.0,  # the first sample had no limit: the extent of the limits there were
        1,
        1,
        1,
        1,
        [12.3, IDLE],
        [1.0],
        3,
    )


def test_the_seconds_an_rsync_waits_for_room_and_runs_above_its_request() -> None:
    """Each sample's state holds until the next: deferred from 10 to 25 s (15 s); its working set above
    its request from 15 to 25 s (10 s); the last sample ends the run and counts nothing."""
    samples = [
        sample(0, working_set=100, request=200),
        sample(10, working_set=150, request=200, resize="Deferred"),
        sample(15, working_set=260, request=200, resize="Deferred"),
        sample(20, working_set=300, request=200, resize="Deferred"),
        sample(25, working_set=300, request=384),
        sample(30, working_set=400, request=384, resize="Deferred"),
    ]
    record = rsync_record(ROOT, samples, counts=[], peaks=Peaks(), seconds=[1.0], commits=[])
    assert (record.waiting_for_room_s, record.above_request_s) == (15.0, 10.0)
    assert "| 15 | 10 |" in rsync_table([record], [COMMIT_ALL])


def test_the_nodes_record_sums_integrates_and_takes_percentiles_over_every_rsync() -> None:
    # 360 MiB requested for 1,800 s and 720 for 1,800 s: 180 + 360 MiB-h; used 100 then 300: 50 + 150.
    node = [NodeSample(0, 360, 0, 100, 3), NodeSample(1800, 720, 0, 300, 3), NodeSample(3600, 360, 0, 80, 3)]
    records = [_record(reactions_s=[2.0, 5.0], unanswered_changes=1), _record(reactions_s=[1.0], oom_kills=1)]
    own = {"objcount-webhook": (10.0, 5.0), "objcount sidecar": (2.5, 1.0)}
    made = node_record(
        "ours, sidecar",
        [ROOT, REPO, RSyncKey("RepoSync", "many-tenant-02", "repo-sync")],
        records=records,
        node=node,
        own=own,
        allocatable_mib=7800.0,
    )
    assert (made.rootsyncs, made.reposyncs) == (1, 2)
    assert (made.peak_requested_mib, made.peak_used_mib) == (720, 300)
    assert made.requested_mib_h == pytest.approx(540.0)
    assert made.used_mib_h == pytest.approx(200.0)
    assert (made.own_requested_mib_h, made.own_working_set_mib_h) == (12.5, 6.0)
    # Reactions 1, 2, 5: p50 the 2nd (ceil 1.5), p99 the 3rd (ceil 2.97).
    assert (made.reaction_p50_s, made.reaction_p99_s, made.reactions) == (2.0, 5.0, 3)
    assert (made.unanswered_changes, made.oom_kills, made.restarts) == (2, 1, 0)
    assert made.duration_s == 3600.0


def test_the_tables_say_each_rsync_and_the_node() -> None:
    table = rsync_table([_record()])
    header, rule, row = table.strip().split("\n")
    assert "to synced, s (commit all / grow / big commit / prune all)" in header
    assert rule.count("|") == header.count("|")
    assert row == (
        "| RepoSync/many-tenant-01/repo-sync | 71 | 80 | 64 | 128-160 | none | 0 | 0 | 0 | 2 | "
        "12 / 30 / idle / not synced | 2 (1) | 0 | 0 |"
    )
    node = node_record("static Standard", [ROOT], records=[], node=[], own={}, allocatable_mib=None)
    lines = node_table(node).strip().split("\n")
    assert len(lines) == 3
    assert (
        lines[2]
        == "| static Standard | 1 / 0 | - | 0 | 0 | 0.00 / 0.00 | 0.00 / 0.00 | - / - (0, 0) | 0 | 0 |"
    )


def test_sources_are_read_one_sub_directory_per_rsync_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b" / "nested").mkdir(parents=True)
    (tmp_path / "b" / "nested" / "cm.yaml").write_text("kind: ConfigMap\n")
    (tmp_path / "b" / "bad.bin").write_bytes(b"\xff\xfeok")
    (tmp_path / "a" / ".git").mkdir(parents=True)
    (tmp_path / "a" / ".git" / "HEAD").write_text("ref\n")
    (tmp_path / "a" / "ns.yaml").write_text("kind: Namespace\n")
    (tmp_path / "loose.yaml").write_text("not a directory: not a source\n")
    sources = read_sources(tmp_path)
    assert sources == {
        "a": {"ns.yaml": "kind: Namespace\n"},
        "b": {"bad.bin": "\ufffd\ufffdok", "nested/cm.yaml": "kind: ConfigMap\n"},
    }
    assert sources_by_slug([ROOT, REPO], sources) == {
        "many-root-01": sources["a"],
        "many-tenant-01": sources["b"],
    }


def test_a_finished_run_is_reported_again_from_what_it_saved(tmp_path: Path) -> None:
    """`--report DIR`: the records computed again from the saved traces, inventories, commit times,
    peaks and seconds are the ones the run computed."""
    samples = [sample(0, request=128), sample(5, request=160, working_set=170), sample(9, request=160)]
    counts = [InventorySample(0, "many-root-01", 0), InventorySample(4, "many-root-01", 200)]
    node = [NodeSample(0, 128, 0, 50, 1), NodeSample(9, 160, 0, 60, 1)]
    own = [
        OwnSample(0, "objcount sidecar", "p1", 30.0, 64.0, 1.5),
        OwnSample(9, "objcount sidecar", "p1", 31.0, 64.0, 2.0),
    ]
    made = rsync_record(
        ROOT, samples, counts=counts, peaks=Peaks(171.0, 190.0), seconds=[7.0, IDLE], commits=[3.0]
    )
    write_rows(tmp_path / "traces" / "many-root-01.csv", samples)
    write_rows(tmp_path / "inventory-counts.csv", counts)
    write_rows(tmp_path / "node-trace.csv", node)
    write_rows(tmp_path / "own-components.csv", own)
    write_rows(tmp_path / "many-rsyncs.csv", [made])
    details = {
        "policy": "ours, sidecar",
        "rsyncs": [{"kind": "RootSync", "namespace": ROOT.namespace, "name": ROOT.name}],
        "phases": [
            {"name": p.name, "synthetic": p.synthetic, "added": p.added, "first_only": p.first_only}
            for p in (COMMIT_ALL, BIG)
        ],
        "allocatable_mib": 1000.0,
        "each_committed_at_s": {"many-root-01": [3.0]},
    }
    (tmp_path / "run.json").write_text(json.dumps(details))
    records, reported, phases, own_read = report(tmp_path)
    assert own_read == own
    assert records == [made]
    assert (made.reactions_s, made.above_request_s) == ([1.0], 4.0)  # 4 -> 5 s; 170 > 160 from 5 to 9 s
    assert phases == (COMMIT_ALL, BIG)
    assert (reported.policy, reported.allocatable_mib, reported.reactions) == ("ours, sidecar", 1000.0, 1)
