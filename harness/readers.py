"""Bounded reading and writing of the files a user hands the harness (traces, profiles, presets,
grids) and of the files its commands write: the limits every reader shares, in one place.

A file given by a user is read only when it is a regular file within ``max_bytes`` (a FIFO would
hang the reader, ``/dev/zero`` never ends), as UTF-8 text. YAML goes through :func:`load_yaml`:
PyYAML's safe loader with three limits PyYAML does not have, so that a document's cost follows
its size and never its shape:

* nesting deeper than ``MAX_YAML_DEPTH`` is refused (PyYAML composes nested collections by
  recursion: 5000 brackets were a RecursionError traceback);
* a mapping that repeats a key is refused, naming the line (PyYAML keeps the last value in
  silence: ``rate: 10mbit`` then ``rate: 20mbit`` ran at 20 Mbit/s). Keys a merge (``<<``) brings
  in may be overridden, as YAML means them to be;
* more than ``MAX_YAML_NODES`` nodes once aliases are expanded is refused (an alias is a
  reference: nine levels of nine aliases are 387 million nodes to anything that walks the
  document, from a file of a few hundred bytes).

Every failure is :class:`FileError`, a ValueError whose message is one line naming the file (and
the line where there is one); the CLI prints it and exits 2.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_YAML_BYTES = 1 << 20       # profiles, presets and grids are a few hundred bytes to a few KB
MAX_YAML_DEPTH = 32            # the deepest shipped document nests 4 levels (a profile's burst_loss)
MAX_YAML_NODES = 100_000       # scalars + collections, aliases expanded


class FileError(ValueError):
    """A file that cannot be read or written as asked; str() is one line naming the file."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def read_text(path: str | Path, what: str, max_bytes: int) -> str:
    """The file's text: a regular file of at most ``max_bytes`` bytes, UTF-8. ``what`` names it in
    the message (``--grid``, ``profile``, ``trace``)."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise FileError(f"{what}: {str(path)!r} is not a regular file")
        if info.st_size > max_bytes:
            raise FileError(f"{what}: {str(path)!r} is larger than {max_bytes} bytes ({info.st_size})")
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)       # a file that grew since the stat is still bounded
    except OSError as err:
        raise FileError(f"{what}: {str(path)!r} cannot be read ({err.strerror or type(err).__name__})") from None
    if len(data) > max_bytes:
        raise FileError(f"{what}: {str(path)!r} is larger than {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FileError(f"{what}: {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start})") from None


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting and repeated keys (see the module docstring)."""

    def compose_node(self, parent, index):
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"line {mark.line + 1}: nested too deeply (more than {MAX_YAML_DEPTH} levels)")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        first = f" (first on line {seen[key]})" if seen[key] != line else ""
                        raise yaml.YAMLError(f"line {line}: key {_quote(key)} is given twice in one mapping{first}")
                    seen[key] = line
                except TypeError:
                    continue                     # an unhashable key: the constructor names it below
        return super().construct_mapping(node, deep=deep)


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes below ``node`` counted with every alias expanded (memoised per node: linear in the file)."""
    key = id(node)
    if key not in memo:
        memo[key] = 0                            # a recursive alias counts once, not forever
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(_expanded_size(n, memo) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
        else:
            total = 1
        memo[key] = min(total, MAX_YAML_NODES + 1)
    return memo[key]


def parse_yaml(text: str, where: str) -> Any:
    """One YAML document parsed with the limits above; FileError naming ``where`` otherwise."""
    loader = None
    try:
        loader = _BoundedLoader(text)           # its reader refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_YAML_NODES:
            raise FileError(f"{where}: more than {MAX_YAML_NODES} YAML nodes once its aliases are expanded")
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        first = _one_line(err) or type(err).__name__
        raise FileError(f"{where}: not valid YAML ({first[:300]})") from None
    except RecursionError:     # the depth limit above stops the composer first; this is the backstop
        raise FileError(f"{where}: nested too deeply to be read") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: str | Path, what: str, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """A YAML file read by `read_text` and parsed by `parse_yaml`."""
    return parse_yaml(read_text(path, what, max_bytes), f"{what}: {str(path)!r}")


def check_output(path: str | Path, what: str) -> Path:
    """``path`` as a file a command may write: its folder exists and is a writable folder, and
    ``path`` itself is not a folder. FileError (one line) otherwise, before anything is computed."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        reason = "does not exist" if not folder.exists() else "is not a folder"
        raise FileError(f"{what}: cannot write {str(path)!r}: its folder {str(folder)!r} {reason}")
    if path.is_dir():
        raise FileError(f"{what}: cannot write {str(path)!r}: it is a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FileError(f"{what}: cannot write {str(path)!r}: its folder is not writable")
    return path


def check_output_dir(path: str | Path, what: str) -> Path:
    """``path`` as a folder a command may create and fill: it is a writable folder, or the nearest
    folder above it that exists is one. FileError (one line) otherwise."""
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise FileError(f"{what}: cannot write into {str(path)!r}: {str(probe)!r} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise FileError(f"{what}: cannot write into {str(path)!r}: {str(probe)!r} is not writable")
    return path


def write_text(path: str | Path, text: str, what: str) -> Path:
    """``text`` written to ``path`` (checked by `check_output` first); FileError on any OSError."""
    path = check_output(path, what)
    try:
        path.write_text(text)
    except OSError as err:
        raise FileError(f"{what}: cannot write {str(path)!r} ({err.strerror or type(err).__name__})") from None
    return path
