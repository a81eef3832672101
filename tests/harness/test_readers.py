"""The bounded reader (harness/readers.py): what it refuses, in one line, and what it still reads."""
import os

import pytest

from harness import readers


def _refused(fn, *args, words: str) -> None:
    with pytest.raises(readers.FileError) as err:
        fn(*args)
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_only_a_regular_file_within_its_size_is_read(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)                                     # reading it would block forever
    _refused(readers.read_text, fifo, "trace", 100, words="is not a regular file")
    _refused(readers.read_text, "/dev/zero", "trace", 100, words="is not a regular file")
    _refused(readers.read_text, tmp_path, "trace", 100, words="is not a regular file")
    big = tmp_path / "big"
    big.write_text("x" * 101)
    _refused(readers.read_text, big, "trace", 100, words="larger than 100 bytes")
    bad = tmp_path / "bad"
    bad.write_bytes(b"\xff\xfe")
    _refused(readers.read_text, bad, "trace", 100, words="not UTF-8")
    _refused(readers.read_text, tmp_path / "none", "trace", 100, words="cannot be read")


@pytest.mark.parametrize("text, words", [
    ("a: 1\nb: 2\na: 3\n", "line 3: key 'a' is given twice in one mapping (first on line 1)"),
    ("x: " + "[" * 40 + "]" * 40, "nested too deeply"),
    ("".join(f"k{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else 1}]\n" for i in range(9)), "aliases are expanded"),
    ("a: !!python/object/apply:os.system [true]", "not valid YAML"),
    ("a: \x07", "not valid YAML"),
])
def test_yaml_that_would_mislead_or_exhaust_is_refused(text, words):
    _refused(readers.parse_yaml, text, "y", words=words)


def test_yaml_keeps_what_yaml_means():
    assert readers.parse_yaml("base: &b {rate: 1mbit, delay: 5ms}\nw1:\n  <<: *b\n  rate: 2mbit\n", "y") == \
        {"base": {"rate": "1mbit", "delay": "5ms"}, "w1": {"rate": "2mbit", "delay": "5ms"}}   # a merge may override
    deep = readers.parse_yaml("a: " + "[" * 30 + "]" * 30, "y")["a"]     # 31 levels: within the limit
    for _ in range(29):
        deep = deep[0]
    assert deep == []
    assert readers.parse_yaml("", "y") is None


def test_an_output_path_is_checked_before_anything_is_written(tmp_path):
    (tmp_path / "f").write_text("x")
    _refused(readers.check_output, tmp_path / "no" / "x.csv", "out", words="does not exist")
    _refused(readers.check_output, tmp_path / "f" / "x.csv", "out", words="is not a folder")
    _refused(readers.check_output, tmp_path, "out", words="it is a folder")
    _refused(readers.check_output_dir, tmp_path / "f" / "figs", "--figures", words="is not a folder")
    assert readers.check_output_dir(tmp_path / "new" / "figs", "--figures") == tmp_path / "new" / "figs"
    assert readers.write_text(tmp_path / "ok.txt", "hi", "out").read_text() == "hi"
