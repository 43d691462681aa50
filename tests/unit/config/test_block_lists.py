"""Lists of config blocks (config/base.py): a field ``list[Block]`` is built, checked, saved,
rebased and overridden item by item like any block, its errors naming ``key[i].sub``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tether.config import from_dict, load_config, rebase_paths, replace, to_dict
from tether.config.base import check_keys, merge_override, option
from tether.common.errors import ConfigError


@dataclass(frozen=True)
class Item:
    name: str = option("", "Name.")
    size: int = option(1, "Size.", ge=1)
    path: str | None = option(None, "A path.", path=True)

    def validate(self) -> None:
        if not self.name:
            raise ConfigError("an item needs a name")


@dataclass(frozen=True)
class Tree:
    items: list[Item] = option(factory=list, help="Items.")
    plain: list[str] = option(factory=list, help="Strings.", path=True)


def test_items_are_built_and_validated_as_blocks():
    tree = from_dict(Tree, {"items": [{"name": "a"}, {"name": "b", "size": 3}]})
    assert tree.items == [Item("a"), Item("b", 3)]
    with pytest.raises(ConfigError, match="an item needs a name"):
        from_dict(Tree, {"items": [{"size": 2}]})


def test_errors_name_the_item_and_its_key():
    with pytest.raises(ConfigError, match=r"'items\[1\]\.size' = 0: must be >= 1"):
        from_dict(Tree, {"items": [{"name": "a"}, {"name": "b", "size": 0}]})
    with pytest.raises(ConfigError, match=r"'items\[0\]\.sise'.*Did you mean 'items\[0\]\.size'"):
        check_keys(Tree, {"items": [{"name": "a", "sise": 2}]})
    with pytest.raises(ConfigError, match=r"'items\[0\]' = 'a': expected a mapping of sub-keys \(name, size, path\)"):
        from_dict(Tree, {"items": ["a"]})


def test_a_built_item_is_accepted_and_checked_again():
    assert from_dict(Tree, {"items": [Item("a", 2)]}).items == [Item("a", 2)]


def test_to_dict_gives_plain_dicts_and_round_trips():
    tree = from_dict(Tree, {"items": [{"name": "a"}], "plain": ["x"]})
    data = to_dict(tree)
    assert data == {"items": [{"name": "a", "size": 1, "path": None}], "plain": ["x"]}
    assert from_dict(Tree, data) == tree


def test_paths_inside_items_are_rebased(tmp_path):
    (tmp_path / "here").mkdir()
    data = {"items": [{"name": "a", "path": "here"}, {"name": "b", "path": "elsewhere"}], "plain": ["here"]}
    out = rebase_paths(Tree, data, tmp_path)
    assert [i["path"] for i in out["items"]] == [str(tmp_path / "here"), "elsewhere"]
    assert out["plain"] == [str(tmp_path / "here")]


def test_an_override_reaches_an_item_by_its_index():
    data = {"items": [{"name": "a"}, {"name": "b"}]}
    merge_override(data, ["items[1]", "size"], 5)
    merge_override(data, ["items[0]"], {"name": "z"})
    assert data == {"items": [{"name": "z"}, {"name": "b", "size": 5}]}
    with pytest.raises(ConfigError, match=r"'items' holds 2 item\(s\), so there is no item \[2\]"):
        merge_override(data, ["items[2]", "size"], 1)
    with pytest.raises(ConfigError, match=r"'plain\[0\]' = 'x' is not a mapping"):
        merge_override({"plain": ["x"]}, ["plain[0]", "size"], 1)


def test_replace_by_index_leaves_the_original_config_alone():
    tree = load_config(Tree, None, ["items=[{name: a}]", "plain=[p, q]"])
    other = replace(tree, {"items[0].size": 4, "plain[1]": "r"})
    assert other.items == [Item("a", 4)] and other.plain == ["p", "r"]
    assert tree.items == [Item("a", 1)] and tree.plain == ["p", "q"]
