"""The real plane's build is keyed by its pins and refuses a go.mod that disagrees with them; a
plane whose binaries are missing fails in one line naming them and `make setup-real`.

Given realplane/build/pins.toml and the Go modules of realplane/build/go, when the cache key is computed,
the go.mod files are checked, or a plane is started over an empty cache, then (docs/realplane.md):
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from realplane.build import build, pins
from realplane.plane.harness import Plane, PlaneError


@pytest.fixture
def copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of realplane/ (pins.toml and go/) the module paths point at."""
    here = tmp_path / "realplane"
    shutil.copytree(pins.HERE / "go", here / "go")
    shutil.copyfile(pins.PINS_FILE, here / "pins.toml")
    monkeypatch.setattr(pins, "HERE", here)
    monkeypatch.setattr(pins, "PINS_FILE", here / "pins.toml")
    monkeypatch.setattr(pins, "GO_DIR", here / "go")
    return here


def test_the_key_is_stable_and_moves_with_a_pin(copied: Path) -> None:
    first = pins.cache_key()
    assert first == pins.cache_key()
    (copied / "pins.toml").write_text((copied / "pins.toml").read_text().replace("v0.8.0", "v0.7.0"))
    assert pins.cache_key() != first


def test_the_key_moves_with_a_go_sum(copied: Path) -> None:
    first = pins.cache_key()
    go_sum = copied / "go" / "kwok" / "go.sum"
    go_sum.write_text(go_sum.read_text() + "example.com/x v1.0.0 h1:AAAA=\n")
    assert pins.cache_key() != first


def _replace_pin(copied: Path, section: str, old: str, new: str) -> None:
    """The version line of one section of the copied pins.toml rewritten."""
    text = (copied / "pins.toml").read_text()
    head, found, tail = text.partition(f"[{section}]")
    old_line, new_line = f'version = "{old}"', f'version = "{new}"'
    assert found, section
    assert old_line in tail.split("\n[", 1)[0], section
    (copied / "pins.toml").write_text(head + found + tail.replace(old_line, new_line, 1))


def test_each_set_of_pins_has_its_own_key_moved_only_by_its_own_pins(copied: Path) -> None:
    main, oldest = pins.cache_key(pins.MAIN), pins.cache_key(pins.KARPENTER_OLDEST)
    assert main != oldest
    # a comment anywhere moves no key; the second Karpenter's pin moves its key alone
    (copied / "pins.toml").write_text("# moved\n" + (copied / "pins.toml").read_text())
    assert (pins.cache_key(pins.MAIN), pins.cache_key(pins.KARPENTER_OLDEST)) == (main, oldest)
    _replace_pin(copied, "karpenter-oldest", "v1.0.8", "v1.0.6")
    assert pins.cache_key(pins.MAIN) == main
    assert pins.cache_key(pins.KARPENTER_OLDEST) not in (oldest, main)
    # and a pin of the plane's own moves the plane's key alone
    moved = pins.cache_key(pins.KARPENTER_OLDEST)
    _replace_pin(copied, "kwok", "v0.8.0", "v0.7.0")
    assert pins.cache_key(pins.MAIN) != main
    assert pins.cache_key(pins.KARPENTER_OLDEST) == moved


def test_the_file_a_build_overlays_is_part_of_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = tmp_path / "instance_types.json"
    ours.write_text("[]")
    inside = next(iter(pins.OLDEST_MODULE.overlay))
    module = pins.GoModule(pins.OLDEST_MODULE.name, pins.OLDEST_MODULE.binaries, overlay={inside: ours})
    pin_set = pins.PinSet(pins.KARPENTER_OLDEST.name, (module,), pins.KARPENTER_OLDEST.sections, {})
    first = pins.cache_key(pin_set)
    ours.write_text('[{"name": "p5.48xlarge"}]')
    assert pins.cache_key(pin_set) != first


def test_the_committed_go_mods_require_what_the_pins_say() -> None:
    build.check_go_mods()  # raises SystemExit otherwise
    for module in (m for pin_set in pins.SETS for m in pin_set.modules):
        assert (module.path / "go.sum").is_file(), module.name


def test_a_pin_without_its_go_mod_is_refused_in_one_line(copied: Path) -> None:
    (copied / "pins.toml").write_text((copied / "pins.toml").read_text().replace("v1.14.1", "v1.14.3"))
    with pytest.raises(SystemExit) as refused:
        build.check_go_mods()
    message = str(refused.value)
    assert "\n" not in message
    assert "sigs.k8s.io/karpenter v1.14.1" in message
    assert "v1.14.3" in message
    assert "--repin" in message


def test_every_binary_is_built_by_one_module_and_named_once() -> None:
    assert len(pins.BINARIES) == len(set(pins.BINARIES)) == 7
    assert set(pins.BINARIES) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "karpenter-kwok",
        "jobset-controller",
    }
    # the second Karpenter pin's KWOK provider, in its own set's folder
    assert pins.KARPENTER_OLDEST.binaries == ("karpenter-kwok-oldest",)
    assert pins.bin_dir(pins.KARPENTER_OLDEST) != pins.bin_dir(pins.MAIN)


def test_a_plane_of_the_oldest_karpenter_names_what_of_its_set_is_not_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(pins.CACHE_ENV, str(tmp_path / "cache"))
    for name in pins.MAIN.binaries:  # the plane's own set built (stand-ins), the second Karpenter's not
        (pins.bin_dir(pins.MAIN) / name).parent.mkdir(parents=True, exist_ok=True)
        (pins.bin_dir(pins.MAIN) / name).write_text("")
        (pins.bin_dir(pins.MAIN) / name).chmod(0o755)
    (pins.share_dir(pins.MAIN)).mkdir(parents=True)
    (pins.share_dir(pins.MAIN) / "COMPLETE").write_text("")
    assert pins.not_built(pins.MAIN) is None
    message = pins.not_built(pins.MAIN, pins.KARPENTER_OLDEST)
    assert message == (
        f"real plane: karpenter-kwok-oldest not built in {pins.key_dir(pins.KARPENTER_OLDEST)} (run `make setup-real`)"
    )
    assert str(pins.binary("karpenter-kwok")).startswith(str(pins.bin_dir(pins.MAIN)))


def test_a_plane_without_its_binaries_fails_in_one_line_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(pins.CACHE_ENV, str(tmp_path / "empty-cache"))
    plane = Plane(artifacts=tmp_path / "artifacts")
    with pytest.raises(PlaneError) as failed, plane:
        pass
    message = str(failed.value)
    assert "\n" not in message
    assert re.search(r"etcd, kube-apiserver, .*karpenter-kwok, jobset-controller not built", message), message
    assert "make setup-real" in message
    assert not plane.workdir.exists()  # the temporary directory went with the failed start


def test_each_karpenter_pin_runs_its_own_karpenter_binary() -> None:
    # the plane's `karpenter` component is the set's KWOK provider, never another program of the set
    # (the main set's first binary is not Karpenter: a plane once ran etcd as its Karpenter)
    assert {pin: pins.karpenter_binary(pin_set) for pin, pin_set in pins.KARPENTERS.items()} == {
        "karpenter": "karpenter-kwok",
        "karpenter-oldest": "karpenter-kwok-oldest",
    }
