"""Property: any override list, preset file or config tree gives a config or a ConfigError, never
another exception (a traceback from inside yaml, difflib or the dataclasses)."""

from __future__ import annotations

import math
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.config import RLConfig, RewardModelConfig, SFTConfig, describe, from_dict, load_config, to_dict
from tether.common.errors import ConfigError

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STAGES = {"sft": SFTConfig, "rm": RewardModelConfig, "ppo": RLConfig}
MINIMAL = {
    "sft": ["model.name_or_path=m", "data.train=t.jsonl"],
    "rm": ["model.name_or_path=m", "data.train=t.jsonl"],
    "ppo": ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]"],
}
KEYS = {name: [key for key, _, _ in describe(cls)] for name, cls in STAGES.items()}
SECTIONS = sorted({key.split(".")[0] for keys in KEYS.values() for key in keys if "." in key})


def mutate(draw, key: str) -> str:
    """A real dotted key, unchanged or with one typo-like mutation."""
    how = draw(st.sampled_from(["same", "same", "same", "drop", "double", "upper", "extra", "parent", "dots",
                                "underscore", "junk", "prefix"]))
    if how == "same" or not key:
        return key
    i = draw(st.integers(0, len(key) - 1))
    if how == "drop":
        return key[:i] + key[i + 1:]
    if how == "double":
        return key[:i] + key[i] + key[i:]
    if how == "upper":
        return key.upper()
    if how == "extra":
        return key + "." + draw(st.sampled_from(["x", "lr", "0", "models"]))
    if how == "parent":
        return key.rsplit(".", 1)[0]
    if how == "dots":
        return key.replace(".", "..") if "." in key else "." + key
    if how == "underscore":
        return key.replace(".", "_")
    if how == "prefix":
        return draw(st.sampled_from(SECTIONS)) + "." + key
    return draw(st.text(max_size=6)) + key


YAML_ATOMS = st.sampled_from([
    "", " ", "0", "1", "-1", "2", "3", "7", "64", "0.5", "1.5", "-0.5", "1e-4", "1e400", "-1e-3", ".nan", ".inf",
    "-.inf", "true", "false", "yes", "no", "null", "~", "[]", "[a, b]", "[1, 2]", "[[1]]", "{}", "{a: 1}",
    "{lr: 0.1}", "&a [*a]", "*a", "2001-13-45", "2001-01-01", "!!int x", "!!float y", "!!binary aGk=",
    "!!python/name:os.system", "!!set {a}", "[", "{", "]", "'", '"', "a: b: c", "- a", "# c", "%YAML 1.1",
    "stop", "skip", "error", "truncate", "drop", "cosine", "k3", "reward", "loss", "adaptive", "mean_minus_std",
    "bf16", "float16", "always", "never", "auto", "runs/x", "m:f", "18446744073709551616", "9" * 30, "0x1F",
])
VALUES = st.one_of(
    YAML_ATOMS,
    st.integers(-(10**25), 10**25).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
    st.text(alphabet="[]{},:&*!|>'\"#%@`-? =.\n\t", max_size=8),
)


@st.composite
def override_lists(draw, stage: str):
    keys = KEYS[stage]
    out = list(MINIMAL[stage]) if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["real", "real", "real", "section", "random", "no_equals"]))
        if kind == "real":
            key = mutate(draw, draw(st.sampled_from(keys)))
        elif kind == "section":
            key = draw(st.sampled_from(SECTIONS + ["run.out", "reward"]))
        else:
            key = draw(st.text(max_size=10))
        if kind == "no_equals":
            out.append(key)
        else:
            out.append(f"{key}={draw(VALUES)}")
    return draw(st.permutations(out))


def leaves(tree):
    for value in tree.values():
        if isinstance(value, dict):
            yield from leaves(value)
        elif isinstance(value, list):
            yield from value
        else:
            yield value


def only_config_error(fn, *args):
    """``fn(*args)`` returns a config whose numbers are all finite, or raises a one-paragraph ConfigError."""
    try:
        cfg = fn(*args)
    except ConfigError as err:
        assert str(err).strip(), "empty error message"
        assert "\n\n" not in str(err)
        return
    for value in leaves(to_dict(cfg)):
        assert not isinstance(value, float) or math.isfinite(value), f"non-finite value accepted: {to_dict(cfg)}"


@pytest.mark.parametrize("stage", sorted(STAGES))
@SETTINGS
@given(data=st.data())
def test_random_overrides_give_a_config_or_a_config_error(stage, data):
    overrides = data.draw(override_lists(stage))
    only_config_error(load_config, STAGES[stage], None, overrides)


# A config tree as a YAML preset or a saved config.yaml holds: keys may be any YAML scalar.
tree_keys = st.one_of(st.sampled_from(SECTIONS + ["lr", "out", "models", "stage", "max_steps", "epochs"]),
                      st.text(max_size=6), st.integers(-3, 3), st.none(), st.booleans(), st.floats(allow_nan=False))
tree_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**21), 10**21) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tree_keys, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def config_trees(draw, stage: str):
    """A plausible tree (real keys with random values) with random extra or replaced branches."""
    tree: dict = {}
    for key in draw(st.lists(st.sampled_from(KEYS[stage]), max_size=6)):
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            node[part] = child = child if isinstance(child, dict) else {}
            node = child
        node[leaf] = draw(tree_values)
    for _ in range(draw(st.integers(0, 2))):
        tree[draw(tree_keys)] = draw(tree_values)
    return tree


@pytest.mark.parametrize("stage", sorted(STAGES))
@SETTINGS
@given(data=st.data())
def test_random_config_trees_give_a_config_or_a_config_error(stage, data):
    tree = data.draw(config_trees(stage) | tree_values)
    only_config_error(from_dict, STAGES[stage], tree)


PRESET_TEXT = st.one_of(
    st.text(max_size=40),
    st.lists(st.tuples(st.sampled_from(SECTIONS + ["max_steps", "optim.lr", "x"]), YAML_ATOMS), max_size=4)
    .map(lambda items: "\n".join(f"{k}: {v}" for k, v in items)),
    st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
    st.sampled_from([50, 600]).map(lambda n: "[" * n),  # deep nesting: RecursionError inside yaml
)


@SETTINGS
@given(text=PRESET_TEXT, raw=st.booleans())
def test_random_preset_files_give_a_config_or_a_config_error(text, raw):
    fd, path = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("latin-1" if raw else "utf-8", errors="replace"))
        only_config_error(load_config, SFTConfig, path, MINIMAL["sft"])
    finally:
        os.unlink(path)
