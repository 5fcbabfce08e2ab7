"""Settings from a config file and the environment, every validation, and the sizing and runtime
settings reaching the profile; the CLI commands that need no cluster. Expected values by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from autoscaler.cli import main
from autoscaler.core.observation import RSyncView
from autoscaler.core.resources import Resources
from autoscaler.core.sizing import PLATFORMS, Load, size
from autoscaler.kube.targets import TARGETS, TargetOptions
from autoscaler.service.settings import (
    CONFIG_FILE_ENV,
    Settings,
    SettingsError,
    load_settings,
    markdown_table,
)
from tests.fake_api import FakeApi


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os  # noqa: PLC0415 - the names to clear are only known at run time

    for name in [n for n in os.environ if n.startswith("OBJCOUNT_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv(CONFIG_FILE_ENV, raising=False)


def _set(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_a_config_file_is_read_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("mode: cluster\ntarget: recommend\nplatform: autopilot-bursting\nworkers: 2\n")
    monkeypatch.setenv("OBJCOUNT_TARGET", "in-place")
    settings = load_settings(str(config))
    assert (settings.mode, settings.target, settings.platform, settings.workers) == (
        "cluster",
        "in-place",
        "autopilot-bursting",
        2,
    )


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"config file .*nope.yaml: not found"):
        load_settings(str(tmp_path / "nope.yaml"))


def test_an_unknown_key_in_the_config_file_is_named(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("mode: cluster\nscale_down_dealy_seconds: 5\n")
    with pytest.raises(SettingsError, match="scale_down_dealy_seconds"):
        load_settings(str(config))


def test_every_cross_field_problem_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {
            "OBJCOUNT_MIN_MIB": "512",
            "OBJCOUNT_MAX_MIB": "256",
            "OBJCOUNT_PLATFORM": "autopilot",
            "OBJCOUNT_NO_CPU_LIMIT": "true",
            "OBJCOUNT_NO_MEMORY_LIMIT": "true",
        },
    )
    with pytest.raises(SettingsError) as raised:
        load_settings()
    message = str(raised.value)
    for expected in (
        "rsync_name: required in sidecar mode",
        "min_mib (512) is larger than max_mib (256)",
        "no_cpu_limit: Autopilot without bursting",
        "no_memory_limit: Autopilot without bursting",
    ):
        assert expected in message


def test_sizing_settings_reach_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(
        monkeypatch,
        {
            "OBJCOUNT_MODE": "cluster",
            "OBJCOUNT_PLATFORM": "standard",
            "OBJCOUNT_PRESET": "fitted",
            "OBJCOUNT_BASE_MIB": "100",
            "OBJCOUNT_MIB_PER_OBJECT": "0.5",
            "OBJCOUNT_STEP_MIB": "64",
            "OBJCOUNT_MIN_MIB": "128",
            "OBJCOUNT_CPU_M_PER_MIB": "2",
            "OBJCOUNT_CPU_MIN_M": "10",
            "OBJCOUNT_CPU_STEP_M": "5",
            "OBJCOUNT_MEMORY_LIMIT_FACTOR": "2",
            "OBJCOUNT_NO_CPU_LIMIT": "true",
            "OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": "30",
            "OBJCOUNT_MAX_RESTARTS_PER_HOUR": "2",
        },
    )
    settings = load_settings()
    # 100 objects: 100 + 0.5 x 100 = 150 -> 192 MiB (64 MiB steps); CPU 2 x 192 = 384 -> 385m (5m steps);
    # memory limit 2 x 192 = 384 MiB; no CPU limit.
    assert size(Load(100), settings.profile()) == Resources(385, 192, None, 384)
    # 0 objects: 100 MiB -> 128 MiB (the minimum, on the 64 MiB grid); CPU 2 x 128 = 256 -> 260m.
    assert size(Load(0), settings.profile()) == Resources(260, 128, None, 256)
    hysteresis = settings.hysteresis()
    assert (hysteresis.scale_down_delay_s, hysteresis.max_restarts_per_hour) == (30, 2)
    monkeypatch.setenv("OBJCOUNT_NO_MEMORY_LIMIT", "true")
    assert size(Load(100), load_settings().profile()) == Resources(385, 192, None, None)


def test_cli_recommend_defaults_to_size_aware_on_an_assumed_api_surface(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["recommend", "--objects", "0"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert (
        f"API surface: no kubeconfig found ({tmp_path / 'no-kubeconfig'}); the preset assumes 500"
        in captured.err
    )
    # 96 MiB + 0.5237 MiB x (500 assumed resource types - 73) = 319.6 -> 320 MiB on the 32 MiB grid, no
    # memory limit; CPU 32m + 0.052m x 0 objects = 32m, no CPU limit.
    assert "reconciler: requests 32m/320Mi, limits none/none" in out


def test_cli_recommend_shows_the_fitted_minimum(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--objects", "0", "--preset", "fitted"]) == 0
    out = capsys.readouterr().out
    assert "(min 198Mi, max 65536Mi)" in out
    # 0 objects: 198 MiB -> 224 MiB on the 32 MiB grid, CPU 218.75 -> 219m.
    assert "reconciler: requests 219m/224Mi, limits 219m/224Mi" in out


def test_cli_recommend_reads_a_source_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
    secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"
    (tmp_path / "a.yaml").write_text("---\n".join([configmap] * 3 + [secret]))
    (tmp_path / "notes.md").write_text("not read")
    assert main(["recommend", "--source", str(tmp_path), "--preset", "fitted"]) == 0
    out = capsys.readouterr().out
    assert f"source {tmp_path}: 4 objects in 1 files (ConfigMap 3, Secret 1)" in out
    # The fitted preset sizes by the count alone: 198 + 0.174 x 4 = 198.7 -> 224 MiB.
    assert "profile fitted/standard: 4 objects, 1 KiB of manifests" in out
    assert "reconciler: requests 219m/224Mi, limits 219m/224Mi" in out


def test_cli_recommend_size_aware_on_a_given_api_surface(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["recommend", "--objects", "1000", "--preset", "size-aware", "--api-resources", "173"]
    assert main(args) == 0
    out = capsys.readouterr().out
    # Kinds, bytes and templates not known: 0.1183 MiB, 2 KiB (x 0.0082 MiB) and 360 Pod-template path
    # steps (x 0.0002928 MiB) per object; 94 resource types above the 79 measured on, 0.5237 MiB each:
    # 96 + 118.3 + 16.4 + 105.408 + 49.2278 = 385.3358 -> 416 MiB.
    assert "0.5237 x 94 API resources beyond 79 (served)" in out
    assert "0.0002928 x 360000 path steps of Pod templates (assumed)" in out
    assert "-> 416Mi" in out


@pytest.mark.parametrize("problem", ["missing", "invalid"])
def test_cli_recommend_refuses_an_unreadable_source(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, problem: str
) -> None:
    if problem == "invalid":
        (tmp_path / "bad.yaml").write_text("kind: [unclosed\n")
    source = tmp_path / "nope" if problem == "missing" else tmp_path
    assert main(["recommend", "--source", str(source)]) == 2
    assert (
        "not a directory" if problem == "missing" else "Config Sync rejects the source: KNV2001 bad.yaml"
    ) in capsys.readouterr().err


def test_cli_recommend_refuses_a_negative_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--objects", "-1"]) == 2
    assert "--objects must be 0 or more" in capsys.readouterr().err


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out == "0.1.0\n"


# ----- the registries: a new target or platform is covered by being in them ---------------------------------
@pytest.mark.parametrize("name", list(TARGETS))
def test_every_target_in_the_registry_is_a_setting_and_builds_itself(name: str) -> None:
    settings = Settings(mode="cluster", target=name)
    target = TARGETS[settings.target].build(FakeApi(), TargetOptions())
    assert target.name == name
    view = RSyncView.of({"metadata": {"name": "root-sync"}})
    assert target.declared(view) is None, "an RSync without an override"
    assert f"`{name}`" in markdown_table()


@pytest.mark.parametrize("name", list(PLATFORMS))
def test_every_platform_in_the_registry_is_a_setting_and_a_cli_choice(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = Settings(mode="cluster", platform=name).profile()
    assert profile.platform is PLATFORMS[name]
    assert (profile.others_cpu_m, profile.others_memory_mib) == (
        PLATFORMS[name].others_cpu_m,
        PLATFORMS[name].others_memory_mib,
    )
    assert main(["recommend", "--objects", "100", "--profile", name]) == 0
    assert f"/{name}: 100 objects" in capsys.readouterr().out


@pytest.mark.parametrize("field", ["target", "platform", "preset"])
def test_a_name_outside_the_registry_is_refused_with_the_known_ones(field: str) -> None:
    with pytest.raises(ValidationError, match="known: "):
        Settings(mode="cluster", **{field: "mainframe"})  # type: ignore[arg-type]
