"""Reading a `StreamingJob` manifest for `lockgate run job.yaml`: the same file
`kubectl apply` takes, checked by the same model the operator reads it with."""

from __future__ import annotations

from pathlib import Path

import yaml
from lockgate.runtime.spec.errors import SpecError
from lockgate.runtime.spec.model import KIND, StreamingJobManifest, read_manifest


class ManifestError(ValueError):
    """The manifest is not a StreamingJob Lockgate can run; the message says where."""


class DuplicateKeyError(ValueError):
    """A mapping names a key twice: YAML loaders keep the last, kubectl refuses it."""


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type hints
    """PyYAML's safe loader, refusing a mapping that names a key twice: the same file
    must not mean one thing here and be refused by `kubectl apply`."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        first_line: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: merged keys are overridden by design
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                earlier = first_line.get(key)
            except TypeError:
                continue  # an unhashable key: the constructor below refuses it
            first_line.setdefault(key, line)
            if earlier is not None:  # also on the same line: `{a: 1, a: 2}`
                raise DuplicateKeyError(
                    f"line {line}: key {key!r} is given twice (first on line {earlier}); YAML readers keep "
                    "the last and kubectl refuses the file: keep one"
                )
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def load_manifest(path: Path) -> StreamingJobManifest:
    try:
        document = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # a safe loader's subclass
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"{path}: cannot be read: {error}") from None
    except DuplicateKeyError as error:
        raise ManifestError(f"{path}: {error}") from None
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: a manifest is a mapping (kind, metadata, spec); got {document!r}")
    if document.get("kind") != KIND:
        raise ManifestError(f"{path}: kind is {document.get('kind')!r}; lockgate run takes a {KIND}")
    try:
        return read_manifest(document)
    except SpecError as error:
        raise ManifestError(f"{path}: {error}") from None
