"""The job API: what `build(env)` declares, and the errors bad definitions get."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lockgate.runtime import (
    FileSink,
    GeneratorSource,
    JobDefinitionError,
    KeyedProcessFunction,
    StreamEnvironment,
)
from lockgate.runtime.api.entrypoint import JobBuildError, build_graph, load_build

from tests.jobs.wordcount import CountWords


def _source() -> GeneratorSource:
    return GeneratorSource(10)


def _sink() -> FileSink:
    return FileSink("memory://api-test/out")


def test_wordcount_graph() -> None:
    graph = build_graph("tests.jobs.wordcount:build")
    assert graph.name == "wordcount"
    assert [(v.name, v.kind, v.keyed) for v in graph.vertices] == [
        ("lines", "source", False),
        ("words", "flat_map", False),
        ("count", "process", True),
        ("out", "sink", False),
    ]
    assert [[v.name for v in chain] for chain in graph.chains()] == [
        ["lines", "words"],
        ["count", "out"],
    ]


def test_a_fan_out_stays_in_its_chain_and_a_keyed_exchange_starts_one() -> None:
    """The chains the engine runs (one thread each): the test of one definition."""
    env = StreamEnvironment("fan")
    numbers = env.source(_source(), name="numbers").map(lambda r: r["n"], name="n")
    numbers.filter(lambda n: n % 2 == 0, name="even").sink(_sink(), name="evens")
    odd = numbers.filter(lambda n: n % 2 == 1, name="odd")
    odd.key_by(lambda n: n % 3).process(CountWords(), name="count").sink(_sink(), name="counts")
    graph = env.graph()
    chains = [[v.name for v in chain] for chain in graph.chains()]
    assert chains == [["numbers", "n", "even", "evens", "odd"], ["count", "counts"]]
    assert sorted(v for chain in chains for v in chain) == sorted(v.name for v in graph.vertices)


def test_names_are_generated_when_not_given() -> None:
    env = StreamEnvironment()
    env.source(_source()).map(str).map(str).sink(_sink())
    assert [v.name for v in env.graph().vertices] == ["source-1", "map-1", "map-2", "sink-1"]


def test_process_without_key_by_is_refused_with_the_fix() -> None:
    env = StreamEnvironment()
    with pytest.raises(JobDefinitionError, match=r"process\(count\).*key_by"):
        env.source(_source()).process(CountWords(), name="count")


def test_duplicate_names_are_refused() -> None:
    env = StreamEnvironment()
    env.source(_source(), name="x").map(str, name="x").sink(_sink())
    with pytest.raises(JobDefinitionError, match=r"two vertices are named 'x' \(a source and a map\)"):
        env.graph()


def test_a_vertex_with_no_path_to_a_sink_is_refused() -> None:
    env = StreamEnvironment()
    numbers = env.source(_source(), name="numbers")
    numbers.sink(_sink(), name="out")
    numbers.map(str, name="dangling")
    with pytest.raises(JobDefinitionError, match=r"map 'dangling' leads to no sink"):
        env.graph()


def test_no_source_and_no_sink() -> None:
    with pytest.raises(JobDefinitionError, match="no source"):
        StreamEnvironment().graph()
    env = StreamEnvironment()
    env.source(_source()).map(str)
    with pytest.raises(JobDefinitionError, match="no sink"):
        env.graph()


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda env: env.source("not a source"), r"needs a Source.*str"),
        (lambda env: env.source(_source()).map(42), r"\.map\(\) needs a function, got int"),
        (lambda env: env.source(_source()).key_by(None), r"\.key_by\(\) needs a function"),
        (lambda env: env.source(_source()).sink(print), r"\.sink\(\) needs a Sink"),
        (
            lambda env: env.source(_source()).key_by(str).process(lambda v, c: v),
            r"needs a KeyedProcessFunction instance",
        ),
    ],
)
def test_wrong_arguments_name_what_was_given(declare, message) -> None:
    with pytest.raises(JobDefinitionError, match=message):
        declare(StreamEnvironment())


def test_invalid_vertex_names() -> None:
    env = StreamEnvironment()
    env.source(_source(), name="a/b").sink(_sink())
    with pytest.raises(JobDefinitionError, match=r"source name 'a/b' is not valid"):
        env.graph()


@pytest.mark.parametrize(
    ("entrypoint", "message"),
    [
        ("tests.jobs.wordcount", r"must be module:function"),
        ("no.such.module:build", r"cannot import module 'no.such.module'"),
        ("tests.jobs.wordcount:missing", r"has no 'missing'; it defines: build$"),
        ("tests.jobs.wordcount:NOT_CALLABLE", r"is a int, not a function"),
    ],
)
def test_entrypoints_that_do_not_resolve(entrypoint, message) -> None:
    with pytest.raises(JobDefinitionError, match=message):
        load_build(entrypoint)


def test_process_function_default_process_says_what_to_implement() -> None:
    class Empty(KeyedProcessFunction):
        pass

    with pytest.raises(NotImplementedError, match=r"Empty must implement process"):
        Empty().process(1, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("module", "failed", "frames"),
    [
        (
            "def _helper(env):\n    raise RuntimeError('no config')\n\n\ndef build(env):\n    _helper(env)\n",
            "failed while building its dataflow",
            ["line 6, in build", "line 2, in _helper", "RuntimeError: no config"],
        ),
        ("def build(env)\n    pass\n", "failed to import", ["line 1", "SyntaxError"]),
        (
            "import surely_not_installed_here\n",
            "failed to import",
            ["line 1, in <module>", "No module named 'surely_not_installed_here'"],
        ),
    ],
    ids=["build raises", "syntax error", "missing dependency"],
)
def test_a_job_that_fails_in_its_own_code_shows_only_its_own_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, failed: str, frames: list[str]
) -> None:
    (tmp_path / "own_failure.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "own_failure", raising=False)
    with pytest.raises(JobBuildError) as raised:
        build_graph("own_failure:build")
    message = str(raised.value)
    assert message.startswith(f"job own_failure:build {failed}:\n")
    for frame in frames:
        assert frame in message
    assert "own_failure.py" in message
    assert "lockgate/runtime/" not in message
    assert "importlib" not in message
