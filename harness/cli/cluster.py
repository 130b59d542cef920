"""The machine's side of kind: ``kdrill doctor``, ``kdrill images`` and ``kdrill cluster``, and what
every kind run needs first (Docker answering, the images built, a checked platform profile)."""

from __future__ import annotations

import argparse
import sys
import textwrap

import yaml

import harness.cli.doctor as doctor
from harness.cli.refusals import Refused
from harness.core import workers
from harness.core.text import escaped
from harness.kube import images
from harness.kube.health import unhealthy
from harness.kube.images import ON_REQUEST, Build, BuildError, build_for, image_sizes, releases
from harness.kube.providers import ProviderError
from harness.kube.providers.kind import (
    KindProvider,
    cluster_name_of,
    cluster_name_problem,
    config_path,
    offset_host_ports,
)
from harness.kube.session_lock import ClusterBusy, SessionLock
from harness.platform.profile import PlatformProfile, ProfileError, check_cluster_name, load


def cmd_doctor(args: argparse.Namespace) -> int:
    """Every prerequisite check, with how to fix each that fails; exit 1 when a required one fails."""
    problems = 0
    for check in doctor.checks():
        mark = "ok  " if check.ok else "FAIL" if check.required else "note"
        # A detail may quote the environment (KDRILL_STATE_DIR): escaped, it cannot rewrite the terminal.
        print(f"{mark} {check.name}: {escaped(check.detail)}")
        if not check.ok:
            problems += check.required
            print(textwrap.indent(f"fix: {escaped(check.fix)}", "       "))
    return 1 if problems else 0


def require_docker() -> None:
    """Docker must answer before anything that uses it. Raises SystemExit with one line saying
    why not and how to start (or install) it."""
    problem = doctor.docker_problem()
    if problem:
        raise SystemExit(problem)


def build_images(targets: list[str] | None = None) -> None:
    """Every image a kind cluster needs (or ``targets``: harness.kube.images.ON_REQUEST), building what
    is missing with progress lines and the estimated time left (one line when all is built).
    Raises SystemExit naming what failed: the build impossible here (what to install), or the
    failed step and its log file."""
    try:
        images.ensure_built(progress=lambda line: print(line, flush=True), targets=targets)
    except BuildError as exc:
        raise SystemExit(f"kdrill: {exc}") from None


def platform_profile(directory: str | None, configs: list[str] = ()) -> PlatformProfile | None:
    """The checked platform profile of ``--platform`` (None without one), checked also for the
    cluster name it makes from each kind config of ``configs`` (check_platform_names). Raises
    SystemExit with the profile's file, field, expected and got."""
    if directory is None:
        return None
    if not directory.strip():  # an unset variable in `--platform "$DIR"`: not "no profile"
        raise SystemExit("kdrill: platform profile: --platform: expected a profile directory (holding platform.yaml), "
                         "got an empty value (leave --platform out for none)")
    try:
        profile = load(directory)
    except ProfileError as exc:
        raise SystemExit(f"kdrill: platform profile: {exc}") from None
    check_platform_names(profile, configs)
    return profile


def kind_target(config: str, profile: PlatformProfile | None, cluster_name: str | None, clusters: int = 1) -> str:
    """The kind cluster a run uses, as its header names it: the config, the cluster's name (given,
    else the config's, with the profile's name after it; with ``clusters`` > 1, each worker's,
    harness.core.workers.cluster_name) and the platform profile with its hash. Raises ProviderError
    for a config kind cannot read, Refused for a worker's cluster name kind would refuse."""
    name = cluster_name or cluster_name_of(config_path(config))
    if profile is not None:
        name = cluster_name or profile.cluster_name(name)
    if clusters > 1:
        names = [workers.cluster_name(name, f"gw{i}") for i in range(clusters)]
        problem = next(filter(None, map(cluster_name_problem, names)), None)
        if problem:
            raise Refused(f"kdrill: the parallel clusters' names: {problem}")
        name = f"{', '.join(names)} in parallel"
    if profile is None:
        return f"kind config {config}, cluster {name}"
    return (f"kind config {config}, cluster {name}, platform profile "
            f"{profile.name}" + (f" (sha256 {profile.hash})" if profile.hash else ""))


def check_platform_names(profile: PlatformProfile, configs) -> None:
    """Raises SystemExit when ``profile`` on one of ``configs`` would name another config's
    cluster (harness.platform.profile.check_cluster_name)."""
    try:
        for config in configs:
            check_cluster_name(profile, config)
    except ProfileError as exc:
        raise SystemExit(f"kdrill: platform profile: {exc}") from None


def prepare_kind(build: bool = True) -> None:
    """What every kind run needs first: Docker answering and, when ``build``, the images
    (build_images). Raises SystemExit as require_docker and build_images do."""
    require_docker()
    if build:
        build_images()


def cmd_images(args: argparse.Namespace) -> int:
    """Build the offline kind images (all, or the on-request TARGETs), or say which are built."""
    if args.targets and args.action == "status":
        print(f"kdrill images status: TARGET: expected none, got {args.targets[0]}", file=sys.stderr)
        return 2
    unknown = [t for t in args.targets if t not in ON_REQUEST]
    if unknown:
        print(f"kdrill images build: TARGET: expected one of {', '.join(ON_REQUEST)}, got {unknown[0]}", file=sys.stderr)
        return 2
    try:
        build = build_for(args.targets)
    except BuildError as exc:
        print(f"kdrill images build: TARGET: {exc}", file=sys.stderr)
        return 2
    require_docker()  # status reads the images' labels from Docker too
    if args.action == "status":
        for s in _status_rows(build):
            print(f"{'built' if s['built'] else 'to do':6} {s['step']:22} {s['key']}  {s['image'] or ''}")
        return 0
    if args.targets:  # e.g. gatekeeper, for the example profile clusters/platforms/gatekeeper
        build_images(args.targets)
        tags = [build.step(t).image for t in args.targets if build.step(t).image]
    else:
        build_images()
        tags = [build.node_image, build.haproxy_image, build.tags["toolbox"]]
    for tag, size in image_sizes(tags).items():
        print(f"  {tag}: {size / 1e6:.0f} MB")
    return 0


def _status_rows(build: Build) -> list[dict]:
    """The default build's steps, then each on-request release's own steps (harness.kube.images.releases)."""
    rows = build.status()
    for version in releases():
        rows += [s for s in Build(release=version).status() if s["step"].endswith(version)]
    return rows


def cmd_cluster(args: argparse.Namespace) -> int:
    """Create, delete or check a kind cluster from clusters/ (with --platform, built with that profile)."""
    profile = _refuse_cluster_options(args)
    image = _release_image(args)
    prepare_kind(build=args.action == "create")
    provider = KindProvider(args.config, name=args.name, image=image, platform=profile,
                            host_port_offset=args.host_port_offset)
    if args.action in ("create", "delete"):
        try:  # never under a session that is running drills on it
            SessionLock(provider.name).acquire()
        except ClusterBusy as exc:
            raise SystemExit(f"kdrill cluster {args.action}: {exc}") from None
    if args.action == "create":
        return _create_cluster(provider, profile)
    if args.action == "delete":
        if provider.exists():
            provider.delete()
            print(f"kind cluster {provider.name} deleted")
        return 0
    if not provider.exists():
        print(f"kind cluster {provider.name} does not exist")
        return 1
    problems = unhealthy(provider.cluster())
    platform = provider.platform_problem()
    problems += [platform] if platform else []
    print("\n".join(problems) or f"kind cluster {provider.name}: every node Ready, every kube-system pod Running"
          + (f"; platform profile {profile.name} as recorded" if profile else ""))
    return 1 if problems else 0


def _release_image(args: argparse.Namespace) -> str | None:
    """The node image of ``--kubernetes`` (None without it), built when missing and creating.
    Raises Refused for a release kdrill does not build, SystemExit when its build fails."""
    default = Build().versions["KUBERNETES_VERSION"]
    if args.kubernetes is None or args.kubernetes == default:
        return None
    if args.kubernetes not in releases():
        raise Refused(f"kdrill cluster: --kubernetes: expected one of {', '.join(releases() + [default])} "
                      f"(clusters/images/releases), got {args.kubernetes or 'an empty value'}")
    if args.name is None:
        # Another release's cluster never takes the default cluster's name (it would be reused as it is).
        args.name = f"{cluster_name_of(config_path(args.config))}-{args.kubernetes.replace('.', '-')}"
    if args.action == "create":
        require_docker()
        build_images([f"kubernetes-{args.kubernetes}"])
    return Build(release=args.kubernetes).node_image


def _refuse_cluster_options(args: argparse.Namespace) -> PlatformProfile | None:
    """``kdrill cluster``'s --name, --platform, --config and --host-port-offset, checked before Docker
    or a cluster is touched; returns the platform profile (None without one). Raises Refused, or
    SystemExit for a bad profile."""
    if args.name is not None:  # --name chooses the cluster's name instead of the config's
        problem = cluster_name_problem(args.name)
        if problem:
            raise Refused(f"kdrill cluster: --name: {problem}")
    profile = platform_profile(args.platform, [] if args.name else [args.config])
    try:  # before the images are built: a bad config or offset is refused at once
        offset_host_ports(yaml.safe_load(config_path(args.config).read_text()) or {}, args.host_port_offset)
    except ProviderError as exc:
        raise Refused(f"kdrill cluster: {exc}") from None
    return profile


def _create_cluster(provider: KindProvider, profile: PlatformProfile | None) -> int:
    """``kdrill cluster create``: reuse the cluster when it exists (refused when another version of
    the profile built it), else create it and say how long each step took. Raises SystemExit."""
    if provider.exists():
        problem = provider.platform_problem()
        if problem:
            raise SystemExit(f"kdrill cluster create: {problem}")
        print(f"kind cluster {provider.name} exists; reusing it")
    else:
        print(f"kind cluster {provider.name} created in {provider.create():.0f} s")
        if profile is not None:
            print(f"platform profile {profile.name} (sha256 {profile.hash[:12]}) installed: "
                  + ", ".join(f"{step} {seconds:.0f} s" for step, seconds in provider.platform_install_seconds.items()))
    return 0
