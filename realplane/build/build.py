"""Build the real plane's binaries from the Go module proxy into a cache keyed by the pins.

    python -m realplane.build            # build what is missing (nothing, in seconds, if the pins are unchanged)
    python -m realplane.build --force    # rebuild into the same key
    python -m realplane.build --repin    # rewrite realplane/build/go/*/go.mod and go.sum from realplane/build/pins.toml
    python -m realplane.build --repin karpenter-oldest   # only that module's

Everything comes from the Go module proxy through `go` itself, checked against the go.sum files
committed here; nothing else is downloaded. docs/realplane.md says what is built and why.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from realplane.build import pins

# Kubernetes' go.mod replaces each staging module (k8s.io/api, k8s.io/apiserver, ...) with a local
# directory, which Go ignores in a dependency; our module replaces each with its published twin
# k8s.io/<name> v0.<minor>.<patch>.
_STAGING = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/src/\S+\s*$", re.M)
_REPLACE_LOCAL = re.compile(r"=>\s*\.{1,2}/")


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOFLAGS="-buildvcs=false",  # our module sits in a git work tree whose state is not the build's
        GOTOOLCHAIN="local",  # never fetch a toolchain: the go directive must fit the local go
        GOWORK="off",
        CGO_ENABLED="0",  # static binaries, and no C compiler in the build
    )
    return env


def _go(args: list[str], cwd: Path, capture: bool = False) -> str:
    go = shutil.which("go") or "go"
    done = subprocess.run(  # noqa: S603 (our own argv, no shell)
        [go, *args], cwd=cwd, env=_go_env(), check=False, text=True, capture_output=capture
    )
    if done.returncode != 0:
        detail = (done.stderr or "").strip()[-4000:] if capture else ""
        raise SystemExit(f"realplane.build: `go {' '.join(args)}` failed in {cwd} (exit {done.returncode})\n{detail}")
    return done.stdout or ""


def _ldflags(module: pins.GoModule, pinned: dict[str, dict[str, str]]) -> str:
    flags = ["-s", "-w"]
    if module.name == "kube":
        version = pinned["kubernetes"]["version"]
        major, minor = version.lstrip("v").split(".")[:2]
        base = "k8s.io/component-base/version"
        flags += [
            f"-X {base}.gitVersion={version}",
            f"-X {base}.gitMajor={major}",
            f"-X {base}.gitMinor={minor}",
            f"-X {base}.gitTreeState=clean",
        ]
    if module.name in ("karpenter", "karpenter-oldest"):
        flags.append(f"-X sigs.k8s.io/karpenter/pkg/operator.Version={pinned[module.name]['version']}")
    if module.name == "jobset":
        flags.append(f"-X sigs.k8s.io/jobset/pkg/version.GitVersion={pinned['jobset']['version']}")
    return " ".join(flags)


def _modules_of(module: pins.GoModule) -> list[str]:
    """The pins.toml sections whose module this Go module requires."""
    return {
        "kube": ["kubernetes", "etcd"],
        "kwok": ["kwok"],
        "karpenter": ["karpenter"],
        "jobset": ["jobset"],
        "karpenter-oldest": ["karpenter-oldest"],
    }[module.name]


def _all_modules() -> list[pins.GoModule]:
    return [module for pin_set in pins.SETS for module in pin_set.modules]


def _required(go_mod: str, path: str) -> str | None:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(path)}\s+(v\S+)", go_mod, re.M)
    return match.group(1) if match else None


def check_go_mods() -> None:
    """Fail in one line if a go.mod does not require what pins.toml says (someone edited one, not the other)."""
    pinned = pins.load_pins()
    for module in _all_modules():
        go_mod = (module.path / "go.mod").read_text()
        for section in _modules_of(module):
            want = pinned[section]
            have = _required(go_mod, want["module"])
            if have != want["version"]:
                raise SystemExit(
                    f"realplane.build: {module.path / 'go.mod'} requires {want['module']} {have}, "
                    f"pins.toml says {want['version']}: run `python -m realplane.build --repin`"
                )


def _download_mod(module_path: str, version: str, cwd: Path) -> str:
    info = json.loads(_go(["mod", "download", "-json", f"{module_path}@{version}"], cwd, capture=True))
    return Path(info["GoMod"]).read_text()


def repin(only: list[str] | None = None) -> None:
    """Rewrite each go.mod (or those of the modules named) from pins.toml and let `go mod tidy` write its go.sum."""
    pinned = pins.load_pins()
    for module in _all_modules():
        if only and module.name not in only:
            continue
        here = module.path
        go_mod = here / "go.mod"
        for stale in (go_mod, here / "go.sum"):
            stale.unlink(missing_ok=True)
        sections = _modules_of(module)
        lines = [f"module gpuwarden/realplane/{module.name}", "", "go 1.25.0", ""]
        lines.append("require (")
        lines += [f"\t{pinned[s]['module']} {pinned[s]['version']}" for s in sections]
        lines.append(")")
        main = pinned[sections[0]]
        upstream = _download_mod(main["module"], main["version"], pins.GO_DIR)
        if section_is_kubernetes := sections[0] == "kubernetes":
            staging_version = "v0." + main["version"].split(".", 1)[1]
            lines += ["", "replace ("]
            lines += [f"\t{name} => {name} {staging_version}" for name in sorted(_STAGING.findall(upstream))]
            lines.append(")")
        if not section_is_kubernetes and _REPLACE_LOCAL.search(upstream):
            raise SystemExit(f"realplane.build: {main['module']} {main['version']} replaces modules with local paths")
        tools = [p for p in module.binaries.values() if not p.startswith("gpuwarden/")]
        if tools:
            lines += ["", "tool (", *[f"\t{p}" for p in tools], ")"]
        go_mod.write_text("\n".join(lines) + "\n")
        _go(["mod", "tidy"], here)
        for section in sections:
            want = pinned[section]
            have = _go(["list", "-m", "-f", "{{.Version}}", want["module"]], here, capture=True).strip()
            if have != want["version"]:
                raise SystemExit(
                    f"realplane.build: in {module.name}, {want['module']} resolves to {have}, not the pinned "
                    f"{want['version']} (another pin requires a newer one)"
                )
        print(f"realplane.build: {go_mod.relative_to(pins.ROOT)} rewritten", flush=True)


def _module_dir(module: pins.GoModule, section: str) -> Path:
    """Where the pinned module of ``section`` sits in the module cache, downloaded if it is not there."""
    path = pins.load_pins()[section]["module"]
    source = Path(_go(["list", "-m", "-f", "{{.Dir}}", path], module.path, capture=True).strip())
    if not source.is_dir():  # not in the module cache yet (warm binaries, fresh cache)
        _go(["mod", "download", path], module.path)
        source = Path(_go(["list", "-m", "-f", "{{.Dir}}", path], module.path, capture=True).strip())
    return source


def _copy_share(pin_set: pins.PinSet) -> None:
    """Copy KWOK's stages, Karpenter's and JobSet's CRDs and JobSet's webhook configurations out of
    the pinned modules (the set's ``share``)."""
    dest = pins.share_dir(pin_set)
    tmp = dest.parent / f"share.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for folder, (module_name, patterns) in pin_set.share.items():
        module = next(m for m in pin_set.modules if m.name == module_name)
        source = _module_dir(module, module_name)
        (tmp / folder).mkdir(parents=True, exist_ok=True)
        for pattern in patterns:
            found = sorted(source.glob(pattern))
            if not found:
                raise SystemExit(f"realplane.build: {source.name} has no {pattern}")
            for file in found:
                shutil.copyfile(file, tmp / folder / file.name)
    (tmp / "COMPLETE").write_text("")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def _overlay_flags(module: pins.GoModule, work: Path) -> list[str]:
    """For a module that replaces files of the pinned module with ours (pins.GoModule.overlay): a
    copy of the pinned module (taken from the module cache, so checked against our go.sum) with
    our files in it, and a go.mod beside the build that replaces the module with that copy.
    `go build -overlay` cannot do it: it refuses files under GOMODCACHE."""
    if not module.overlay:
        return []
    section = _modules_of(module)[0]
    source = _module_dir(module, section)
    copy = work / module.name
    shutil.rmtree(copy, ignore_errors=True)
    for file in source.rglob("*"):
        if file.is_file():  # file by file: the module cache's read-only modes are not copied
            target = copy / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
    for inside, ours in module.overlay.items():
        if not (copy / inside).is_file():
            raise SystemExit(f"realplane.build: {source.name} has no {inside} to replace")
        shutil.copyfile(ours, copy / inside)
    go_mod = work / f"go-{module.name}.mod"
    replace = f"\nreplace {pins.load_pins()[section]['module']} => {copy}\n"
    go_mod.write_text((module.path / "go.mod").read_text() + replace)
    shutil.copyfile(module.path / "go.sum", go_mod.with_suffix(".sum"))
    return [f"-modfile={go_mod}"]


def _build_set(pin_set: pins.PinSet, force: bool) -> Path:
    dest = pins.bin_dir(pin_set)
    if not force and not pins.missing_binaries(pin_set):
        if not pins.share_complete(pin_set):
            _copy_share(pin_set)
        print(f"realplane.build: {pin_set.name} up to date ({dest})", flush=True)
        return dest
    pinned = pins.load_pins()
    version = _go(["version"], pins.GO_DIR, capture=True).strip()
    tmp = dest.parent / f"bin.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    work = dest.parent / f"src.partial-{os.getpid()}"  # the copies an overlay builds from, removed after
    seconds: dict[str, float] = {}
    for module in pin_set.modules:
        started = time.monotonic()
        names = list(module.binaries)
        # One `go build` per module: its packages compile once and its links run in parallel.
        out = str(tmp / names[0]) if len(names) == 1 else str(tmp) + os.sep
        print(f"realplane.build: building {', '.join(names)} ({module.name} module)", flush=True)
        flags = ["-trimpath", f"-ldflags={_ldflags(module, pinned)}", *_overlay_flags(module, work)]
        _go(["build", *flags, "-o", out, *module.binaries.values()], module.path)
        seconds[module.name] = round(time.monotonic() - started, 1)
        print(f"realplane.build: {module.name} built in {seconds[module.name]} s", flush=True)
    own = {section: pinned[section] for section in pin_set.sections}
    info = {"go": version, "set": pin_set.name, "pins": own, "seconds": seconds, "key": pins.cache_key(pin_set)}
    (tmp / "BUILDINFO.json").write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    _copy_share(pin_set)
    print(f"realplane.build: built {len(pin_set.binaries)} binaries in {dest}", flush=True)
    return dest


def build(force: bool = False) -> list[Path]:
    """Each set of pins (pins.SETS) built into its own key's folder, unless already there."""
    check_go_mods()
    return [_build_set(pin_set, force) for pin_set in pins.SETS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m realplane.build", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repin",
        nargs="*",
        metavar="MODULE",
        help="rewrite go.mod/go.sum from pins.toml, of every module or those named (needs the proxy)",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the cache has the binaries")
    args = parser.parse_args(argv)
    if shutil.which("go") is None:
        print("realplane.build: `go` is not on PATH (the real plane is built with the Go toolchain)", file=sys.stderr)
        return 2
    if args.repin is not None:
        repin(args.repin)
        return 0
    build(force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
