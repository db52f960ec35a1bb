"""YAML as `kubectl apply` reads it: a mapping that names a key twice is refused,
not resolved to its last value. Its own module so that PyYAML is loaded only by
what reads YAML (`lockgate run job.yaml`), not by every run."""

from __future__ import annotations

import yaml

YAMLError = yaml.YAMLError


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


def load_yaml(text: str) -> object:
    """The document `text` holds; raises DuplicateKeyError, or YAMLError for text that is not YAML."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a safe loader's subclass
