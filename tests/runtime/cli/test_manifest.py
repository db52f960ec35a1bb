"""`lockgate run job.yaml`: the manifest is read by the operator's model of the spec,
so what the operator would refuse is refused here, before etcd or Spark start, with
the field and what it accepts in the message; what it accepts is what runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.runtime.cli.refusals import ARGS, WORD_COUNT, manifest, refusal, settings


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        (
            {"checkpointing": {"mode": "exactly_once"}},
            r"spec\.checkpointing\.mode must be one of exactly-once, at-least-once; got 'exactly_once'",
        ),
        ({"stateBackend": "leveldb"}, r"spec\.stateBackend must be one of rocksdb, heap; got 'leveldb'"),
        ({"replica": 3}, r"spec\.replica is not a field of spec \(did you mean replicas\?\)"),
        (
            {"checkpointing": {"intreval": "5s"}},
            r"spec\.checkpointing\.intreval is not a field of spec\.checkpointing \(did you mean interval\?\)",
        ),
        ({"replicas": 0}, r"spec\.replicas must be at least 1, got 0"),
        ({"replicas": -3}, r"spec\.replicas must be at least 1, got -3"),
        ({"replicas": "3"}, r"spec\.replicas must be an integer, got '3'"),
        ({"replicas": 2.5}, r"spec\.replicas must be an integer, got 2\.5"),
        ({"maxParallelism": 40000}, r"spec\.maxParallelism must be at most 32768, got 40000"),
        (
            {"replicas": 200, "maxParallelism": 128},
            r"spec\.replicas 200 exceeds spec\.maxParallelism 128: a subtask needs at least one key group",
        ),
        (
            {"checkpointing": {"interval": "soon"}},
            r"spec\.checkpointing\.interval: 'soon' is not a duration like 500ms, 10s, 1m30s or 2h \(a plain number is seconds\)",
        ),
        ({"checkpointing": {"interval": "0s"}}, r"spec\.checkpointing\.interval must be more than 0 seconds"),
        ({"checkpointing": {"retained": 0}}, r"spec\.checkpointing\.retained must be at least 1, got 0"),
        ({"checkpointing": {"incremental": "no"}}, r"spec\.checkpointing\.incremental must be true or false"),
        (
            {"job": {"entrypoint": WORD_COUNT, "args": {"count": 100}}},
            r"spec\.job\.args\.count must be a string, got 100 \(quote it",
        ),
        ({"job": {"entrypoint": "sums"}}, r"spec\.job\.entrypoint must be module:function"),
        ({"job": {"args": {}}}, r"spec\.job\.entrypoint is required"),
        (
            {"restartStrategy": {"type": "forever"}},
            r"spec\.restartStrategy\.type must be one of none, fixed-delay, exponential-backoff, failure-rate",
        ),
        (
            {"checkpointing": {"storage": "checkpoints"}},
            r"spec\.checkpointing\.storage: checkpoints: a relative path names a different directory",
        ),
        (
            {"savepoints": {"dir": "foo://bucket/x"}},
            r"spec\.savepoints\.dir: foo://bucket/x: unknown protocol 'foo'",
        ),
        ({"checkpointing": []}, r"spec\.checkpointing must be an object, got list"),
        (
            {"savepoints": {"interval": "500ms"}},
            r"spec\.savepoints\.interval must be at least 1s; got 0\.5 s",
        ),
        (
            {"savepoints": {"historyMaxAge": "0s"}},
            r"spec\.savepoints\.historyMaxAge must be more than 0 seconds",
        ),
        (
            {
                "initialSavepointPath": "file:///sp/savepoint-a",
                "job": {"entrypoint": WORD_COUNT, "importUnsignedSavepoint": "file:///sp/savepoint-b"},
            },
            r"spec\.initialSavepointPath and spec\.job\.importUnsignedSavepoint both name a savepoint",
        ),
        ({"initialSavepointPath": 7}, r"spec\.initialSavepointPath must be a string"),
        (
            {"checkpointing": {"mode": "at-least-once", "alignedCheckpointTimeout": "1s"}},
            r"spec\.checkpointing: alignedCheckpointTimeout applies to exactly-once checkpoints",
        ),
        (
            {"checkpointing": {"alignedCheckpointTimeout": "-1s"}},
            r"spec\.checkpointing\.alignedCheckpointTimeout",
        ),
    ],
)
def test_a_spec_the_operator_would_refuse_is_refused_naming_the_field(
    tmp_path: Path, spec: dict[str, object], complaint: str
) -> None:
    message = refusal(tmp_path, manifest(tmp_path, spec))
    assert str(tmp_path / "job.yaml") in message
    assert re.search(complaint, message), message


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ({"sepc": {}}, r"sepc is not a field of the manifest \(did you mean spec\?\)"),
        ({"apiVersion": "lockgate.dev/v2"}, r"apiVersion must be one of lockgate\.dev/v1alpha1"),
        ({"metadata": {"name": "a/b"}}, r"metadata\.name: 'a/b' is not a valid name"),
        ({"metadata": {"namespace": "x"}}, r"metadata\.name is required"),
        ({"kind": "Deployment"}, r"kind is 'Deployment'; lockgate run takes a StreamingJob"),
    ],
)
def test_a_manifest_the_api_server_would_refuse_is_refused_naming_the_field(
    tmp_path: Path, document: dict[str, object], complaint: str
) -> None:
    message = refusal(tmp_path, manifest(tmp_path, **document))
    assert re.search(complaint, message), message


def test_a_missing_or_unreadable_manifest_is_named(tmp_path: Path) -> None:
    assert "no such file" in refusal(tmp_path, str(tmp_path / "nothere.yaml"))
    (tmp_path / "bad.yaml").write_text("spec: [unclosed\n")
    assert "not valid YAML" in refusal(tmp_path, str(tmp_path / "bad.yaml"))


def test_flags_that_break_the_manifests_limits_are_named_with_both_sources(tmp_path: Path) -> None:
    path = manifest(tmp_path, {"maxParallelism": 128})
    message = refusal(tmp_path, path, "--parallelism", "200")
    assert "parallelism 200 (--parallelism) exceeds max parallelism 128 (spec.maxParallelism)" in message


def test_an_aligned_checkpoint_timeout_with_at_least_once_is_refused_naming_both_sources(
    tmp_path: Path,
) -> None:
    path = manifest(tmp_path, {"checkpointing": {"mode": "at-least-once"}})
    message = refusal(tmp_path, path, "--aligned-checkpoint-timeout", "1s")
    assert (
        "--aligned-checkpoint-timeout applies to exactly-once checkpoints, but spec.checkpointing.mode is "
        "at-least-once (which never aligns): drop one of them"
    ) in message


def test_what_the_manifest_sets_is_what_runs_and_flags_override_it(tmp_path: Path) -> None:
    path = manifest(
        tmp_path,
        {
            "replicas": 3,
            "maxParallelism": 64,
            "stateBackend": "heap",
            "checkpointing": {
                "interval": "500ms",
                "timeout": "2m",
                "minPause": "1s",
                "mode": "at-least-once",
                "maxConcurrent": 2,
                "tolerableFailures": 4,
                "retained": 5,
                "incremental": False,
                "storage": "file:///data/checkpoints",
            },
            "savepoints": {"dir": "file:///data/savepoints"},
            "restartStrategy": {
                "type": "failure-rate",
                "attempts": 3,
                "failureInterval": "5m",
                "delay": "2s",
            },
            "image": "lockgate:1",  # meaningful on a cluster only; accepted, unused
        },
    )
    chosen = settings(tmp_path, path, "--retained", "7")
    assert (chosen.parallelism, chosen.max_parallelism) == (3, 64)
    assert (chosen.state_backend, chosen.mode, chosen.incremental) == ("heap", "at-least-once", False)
    c = chosen.checkpoint
    assert (c.interval_s, c.timeout_s, c.min_pause_s, c.max_concurrent, c.tolerable_failures) == (
        0.5,
        120.0,
        1.0,
        2,
        4,
    )
    assert c.retained == 7, "the flag overrides the manifest"
    assert (chosen.checkpoint_dir, chosen.savepoint_dir) == (
        "file:///data/checkpoints",
        "file:///data/savepoints",
    )
    assert (
        chosen.restart_strategy().describe()
        == settings(
            tmp_path,
            WORD_COUNT,
            *ARGS,
            "--restart-strategy",
            "failure-rate",
            "--restart-attempts",
            "3",
            "--restart-failure-interval",
            "300",
            "--restart-delay",
            "2",
        )
        .restart_strategy()
        .describe()
    )
    assert (chosen.keys.namespace, chosen.keys.job) == ("default", "words")


HEAD = "apiVersion: lockgate.dev/v1alpha1\nkind: StreamingJob\n"
JOB = f"  job:\n    entrypoint: {WORD_COUNT}\n"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (
            f"{HEAD}metadata:\n  name: words\nspec:\n{JOB}  replicas: 2\n  replicas: 8\n",
            "line 9: key 'replicas' is given twice (first on line 8)",
        ),
        (
            f"{HEAD}metadata:\n  name: words\nmetadata:\n  name: other\nspec:\n{JOB}",
            "line 5: key 'metadata' is given twice (first on line 3)",
        ),
        (
            f"{HEAD}metadata:\n  name: words\nspec:\n{JOB}  sparkConf: {{spark.a: x, spark.a: y}}\n",
            "line 8: key 'spark.a' is given twice (first on line 8)",
        ),
    ],
    ids=["in the spec", "at the top", "on one line"],
)
def test_a_key_given_twice_is_refused_naming_the_key_and_line(
    tmp_path: Path, text: str, complaint: str
) -> None:
    """YAML readers keep the last of two equal keys; kubectl refuses the file. Once the
    last was used silently: `replicas: 8` ran where the author meant 2, or the reverse."""
    path = tmp_path / "job.yaml"
    path.write_text(text)
    assert (
        refusal(tmp_path, str(path))
        == f"{path}: {complaint}; YAML readers keep the last and kubectl refuses the file: keep one"
    )
