"""From `helm install` to a running job: the chart refuses to install without a
storage root (no default reaches every node), and the commands its NOTES print
name what the chart created and lead to a job the operator accepts, launched as
the manifest they apply — each command run here as far as it runs without a
cluster: the manifest edits and the Secret copy by the shell, `--set` by Helm's
parser, the manifest through the CRD's schema, the operator's policy with the
options the chart gives it, and its driver pod builder."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml
from lockgate.operator.driver_pod import Cluster, Launch, driver_pod
from lockgate.operator.job_policy import JobPolicy, check_job
from lockgate.operator.naming import JobNames
from lockgate.operator.spec import parse_spec

from tests.helm.chart import CHART, NAMESPACE, RELEASE, REPO, find, installable, operator_args, render_files
from tests.helm.test_chart import _parse_operator_args
from tests.operator.test_crd import _schema

NOTES = "lockgate/templates/NOTES.txt"


def test_installing_with_the_default_values_fails_naming_the_storage_root_to_set() -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render_files(None)
    message = str(refused.value)
    assert "operator.checkpointStorage is required" in message
    assert "--set operator.checkpointStorage=s3://BUCKET/lockgate" in message, "what to do"
    assert "ReadWriteMany" in message, "file:// only on a volume every pod shares"


def test_letting_every_job_name_its_storage_needs_no_root() -> None:
    objects = _objects(render_files({"operator": {"allowCustomStorageRoots": True}}))
    args = _parse_operator_args(operator_args(objects))
    assert (args.checkpoint_storage, args.allow_custom_storage_roots) == (None, True)


def test_a_storage_root_that_is_no_url_is_refused_naming_the_value() -> None:
    with pytest.raises(helm.HelmValuesError, match="/operator/checkpointStorage"):
        helm.Chart.load(CHART).validate_schema({"operator": {"checkpointStorage": "lockgate-demo/lockgate"}})


def _objects(manifests: dict[str, str]) -> list[dict[str, Any]]:
    return [
        o for path, text in manifests.items() if path.endswith(".yaml") for o in yaml.safe_load_all(text) if o
    ]


def _merged(values: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """`values` with `more` set over them, as `helm upgrade --reuse-values --set` merges them."""
    merged = dict(values)
    for key, value in more.items():
        old = merged.get(key)
        merged[key] = _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def _commands(notes: str) -> list[str]:
    """The NOTES' commands: the indented lines that start with a command, with their continuations."""
    commands: list[str] = []
    continued = False
    for line in notes.splitlines():
        text = line.strip()
        if continued:
            commands[-1] += " " + text.removesuffix("\\").strip()
        elif line.startswith("    ") and re.match(r"(kubectl|docker|kind|helm|sed) ", text):
            commands.append(text.removesuffix("\\").strip())
        continued = text.endswith("\\")
    return commands


def _one(commands: list[str], pattern: str) -> re.Match[str]:
    (match,) = [m for command in commands if (m := re.fullmatch(pattern, command))]
    return match


def _shell(command: str, given: str = "") -> str:
    """What the shell prints for `command`, run in the repository's directory as the NOTES say."""
    done = subprocess.run(
        ["bash", "-c", command], check=False, input=given, cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@dataclass(frozen=True)
class Install:
    """One install: its values, what the chart rendered, what the NOTES say to run."""

    values: dict[str, Any]
    objects: list[dict[str, Any]]
    commands: list[str]
    release: str = RELEASE
    namespace: str = NAMESPACE

    @classmethod
    def of(cls, values: dict[str, Any], release: str = RELEASE, namespace: str = NAMESPACE) -> Install:
        rendered = render_files(installable(values), release=release, namespace=namespace)
        return cls(values, _objects(rendered), _commands(rendered[NOTES]), release, namespace)

    def again(self, more: dict[str, Any]) -> Install:
        """The same release upgraded with `more` set (`helm upgrade --reuse-values --set`)."""
        return Install.of(_merged(self.values, more), self.release, self.namespace)

    def operator(self) -> dict[str, Any]:
        container: dict[str, Any] = find(self.objects, "Deployment")[0]["spec"]["template"]["spec"][
            "containers"
        ][0]
        return container


INSTALLS: dict[str, tuple[dict[str, Any], str, str]] = {  # values, release, namespace
    "defaults": ({}, RELEASE, NAMESPACE),
    "watching-named-namespaces": (
        {"operator": {"watchNamespaces": ["streams", "batch"]}},
        RELEASE,
        NAMESPACE,
    ),
    "own-etcd-certificate-another-release": (
        {
            "etcd": {"bundled": {"serverSecret": "my-etcd-member"}, "tls": {"secretName": "my-etcd-client"}},
            "image": {"repository": "registry.example/lockgate", "tag": "dev"},
        },
        "streaming",
        "data-platform",
    ),
}


@pytest.fixture(params=list(INSTALLS), ids=list(INSTALLS))
def install(request: pytest.FixtureRequest) -> Install:
    return Install.of(*INSTALLS[request.param])


def _job_namespace(install: Install) -> str:
    watched = install.values.get("operator", {}).get("watchNamespaces") or ["default"]
    return str(watched[0])


def test_the_image_built_is_the_one_the_chart_runs(install: Install) -> None:
    image = install.operator()["image"]
    assert _one(install.commands, r"docker build -t (\S+) \.")[1] == image
    assert _one(install.commands, r"kind load docker-image (\S+)")[1] == image
    assert (REPO / "Dockerfile").exists()


def test_the_jobs_namespace_is_labelled_as_the_operator_requires(install: Install) -> None:
    namespace = _one(
        install.commands, r"kubectl label namespace (\S+) pod-security\.kubernetes\.io/enforce=restricted"
    )
    assert namespace[1] == _job_namespace(install)
    unrestricted = install.again({"operator": {"allowUnrestrictedNamespaces": True}})
    assert not [c for c in unrestricted.commands if c.startswith("kubectl label")]


def test_the_etcd_client_certificate_is_copied_unless_the_chart_put_it_there(install: Install) -> None:
    args = _parse_operator_args(operator_args(install.objects))
    copies = [c for c in install.commands if " get secret " in c]
    chart_copies = {s["metadata"]["namespace"] for s in find(install.objects, "Secret", args.etcd_tls_secret)}
    if _job_namespace(install) in chart_copies - {install.namespace}:
        assert copies == [], "the chart copied it into the job's namespace"
        return
    (copy,) = copies
    fetch, strip, apply = copy.split(" | ")
    assert fetch == f"kubectl -n {install.namespace} get secret {args.etcd_tls_secret} -o yaml", (
        "the Secret the operator mounts, from where it mounts it"
    )
    assert apply == f"kubectl -n {_job_namespace(install)} apply -f -"
    # What `kubectl get -o yaml` prints: the Secret as stored (the chart's, when it made
    # it), with the fields the API server adds.
    (made,) = find(install.objects, "Secret", args.etcd_tls_secret) or [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": args.etcd_tls_secret},
            "data": {"ca.crt": "Y2E="},
        }
    ]
    added = {
        "namespace": install.namespace,
        "uid": "u-1",
        "resourceVersion": "7",
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    secret = {**made, "metadata": {**made["metadata"], **added}}
    copied = yaml.safe_load(_shell(strip, yaml.safe_dump(secret)))
    assert copied["metadata"] == {k: v for k, v in made["metadata"].items() if k != "namespace"}, (
        "applied where the job runs, as a new object"
    )
    assert copied["data"] == secret["data"]


def _applied_manifest(install: Install) -> tuple[dict[str, Any], str]:
    """The manifest the NOTES apply, and the namespace they apply it in."""
    (command,) = [c for c in install.commands if c.startswith("sed ") and "examples/sums.yaml" in c]
    edit, apply = command.split(" | ")
    namespace = re.fullmatch(r"kubectl -n (\S+) apply -f -", apply)
    assert namespace is not None, apply
    return yaml.safe_load(_shell(edit)), namespace[1]


def test_the_example_applied_is_accepted_by_the_operator_as_the_chart_runs_it(install: Install) -> None:
    manifest, namespace = _applied_manifest(install)
    assert namespace == _job_namespace(install)
    jsonschema.validate(manifest, _schema())
    spec = parse_spec(manifest["spec"])
    args = _parse_operator_args(operator_args(install.objects))
    names = JobNames(namespace, manifest["metadata"]["name"])
    cluster = Cluster(args.etcd, args.checkpoint_storage, args.etcd_tls_secret, args.etcd_user is not None)
    policy = JobPolicy(
        args.allow_privileged_pods, args.allow_custom_storage_roots, args.allow_unrestricted_namespaces
    )
    check_job(spec, names, cluster, policy)  # raises SpecError naming the field it refuses
    assert manifest["spec"]["image"] == install.operator()["image"], "the image built above"
    output = manifest["spec"]["job"]["args"]["output"]
    assert output.startswith(f"{args.checkpoint_storage}/{namespace}/_output/"), (
        "in the bucket the credentials are for; `_` is in no job's name, so in no job's directory"
    )
    pod = driver_pod(names, spec, Launch(1, spec.max_parallelism or 128, "latest"), cluster)
    sources = {s["secretRef"]["name"] for s in pod["spec"]["containers"][0].get("envFrom", [])}
    created = _one(install.commands, rf"kubectl -n {namespace} create secret generic (\S+) .*")
    assert created[1] in sources, "the credentials Secret the NOTES create is the one the driver reads"
    etcd_volumes = [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v]
    assert args.etcd_tls_secret in etcd_volumes, "the certificate copied above"


def test_watching_and_rescaling_name_the_job_applied(install: Install) -> None:
    manifest, namespace = _applied_manifest(install)
    job = manifest["metadata"]["name"]
    assert f"kubectl -n {namespace} get streamingjob {job} -w" in install.commands
    assert f"kubectl -n {namespace} scale streamingjob/{job} --replicas=4" in install.commands
    assert f"kubectl -n {namespace} describe streamingjob {job}" in install.commands


def test_the_operator_is_told_how_to_get_storage_credentials_until_it_has_them(install: Install) -> None:
    secret = _one(install.commands, rf"kubectl -n {install.namespace} create secret generic (\S+) .*")[1]
    upgrade = _one(
        install.commands,
        rf"helm upgrade (\S+) helm/lockgate -n {install.namespace} --reuse-values --set '(.+)'",
    )
    assert upgrade[1] == install.release
    upgraded = install.again(helm.parse_set_string(upgrade[2]))
    assert upgraded.operator()["envFrom"] == [{"secretRef": {"name": secret}}]
    assert not [c for c in upgraded.commands if c.startswith("helm upgrade")], "nothing more to do"
    identity = {
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/lockgate"}}
    }
    assert not [c for c in install.again(identity).commands if c.startswith("helm upgrade")]


def test_the_credentials_secrets_hold_what_s3_clients_read(install: Install) -> None:
    for command in install.commands:
        if " create secret generic " in command:
            keys = re.findall(r"--from-literal=(\w+)=", command)
            assert keys == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"], command
