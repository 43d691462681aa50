"""Config machinery: unknown keys, type/range errors, presets + overrides, --help coverage."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from tether.config import (
    DPOConfig,
    GenRMConfig,
    KTOConfig,
    ORPOConfig,
    RLConfig,
    RewardModelConfig,
    SFTConfig,
    SimPOConfig,
    describe,
    from_dict,
    load_config,
    replace,
    save_config,
    to_dict,
)
from tether.config.base import _is_config, _hints, parse_override
from tether.common.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "configs" / "demo"
REFERENCE_PPO = ROOT / "configs" / "reference" / "ppo.yaml"
STAGES = [SFTConfig, RewardModelConfig, RLConfig, DPOConfig, SimPOConfig, ORPOConfig, KTOConfig]

SFT_MIN = ["model.name_or_path=m", "data.train=t.jsonl"]
PPO_MIN = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]"]


def sft(*overrides, path=None):
    return load_config(SFTConfig, path, [*SFT_MIN, *overrides])


def ppo(*overrides, path=None):
    return load_config(RLConfig, path, [*PPO_MIN, *overrides])


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# -- unknown keys --------------------------------------------------------------------------
def test_unknown_top_level_key_names_key_and_suggestion():
    msg = error_of(sft, "epoch=2")
    assert "'epoch'" in msg
    assert "Did you mean 'epochs'" in msg


def test_unknown_nested_key_suggests_dotted_path():
    msg = error_of(sft, "optim.lrr=1")
    assert "'optim.lrr'" in msg
    assert "Did you mean 'optim.lr'" in msg


def test_unknown_deeply_nested_ppo_key():
    msg = error_of(ppo, "kl.cofe=0.1")
    assert "'kl.cofe'" in msg and "'kl.coef'" in msg


def test_unknown_section_suggests_section():
    msg = error_of(sft, "optimm.lr=1")
    assert "'optimm'" in msg and "'optim'" in msg


def test_unknown_key_without_close_match_lists_valid_keys():
    msg = error_of(sft, "optim.zzzzzz=1")
    assert "Did you mean" not in msg
    assert "lr" in msg and "batch_size" in msg


def test_unknown_key_in_yaml_preset(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: {name_or_path: m}\ndata: {train: t}\noptim: {lrr: 0.1}\n")
    msg = error_of(load_config, SFTConfig, path)
    assert "'optim.lrr'" in msg and "'optim.lr'" in msg


# -- types, ranges, choices ----------------------------------------------------------------
@pytest.mark.parametrize(
    "override, key, value, constraint",
    [
        ("optim.lr=abc", "optim.lr", "'abc'", "number"),
        ("optim.batch_size=2.5", "optim.batch_size", "2.5", "integer"),
        ("run.progress=7", "run.progress", "7", "true or false"),
        ("optim.lr=true", "optim.lr", "True", "number"),
        ("model.name_or_path=[a]", "model.name_or_path", "['a']", "string"),
        ("max_steps=1.5", "max_steps", "1.5", "int"),
    ],
)
def test_bad_type_names_key_value_and_expected(override, key, value, constraint):
    msg = error_of(sft, override)
    assert f"'{key}'" in msg and value in msg and constraint in msg


@pytest.mark.parametrize(
    "override, key, constraint",
    [
        ("optim.lr=-1", "optim.lr", "> 0"),
        ("optim.lr=0", "optim.lr", "> 0"),
        ("optim.beta1=1", "optim.beta1", "< 1"),
        ("optim.min_lr_ratio=1.5", "optim.min_lr_ratio", "<= 1"),
        ("run.log_every=0", "run.log_every", ">= 1"),
        ("optim.max_grad_norm=-0.5", "optim.max_grad_norm", "> 0"),
        ("data.max_length=1", "data.max_length", ">= 2"),
    ],
)
def test_out_of_range_names_key_value_and_bound(override, key, constraint):
    msg = error_of(sft, override)
    value = override.split("=", 1)[1]
    assert f"'{key}'" in msg and value in msg and constraint in msg


def test_boundary_values_are_accepted():
    cfg = sft("optim.min_lr_ratio=1", "optim.beta1=0", "optim.max_grad_norm=null", "data.max_length=2")
    assert cfg.optim.min_lr_ratio == 1.0 and cfg.optim.beta1 == 0.0
    assert cfg.optim.max_grad_norm is None


def test_literal_choice_error_lists_choices():
    msg = error_of(sft, "optim.schedule=cosin")
    assert "'optim.schedule'" in msg and "'cosin'" in msg
    for choice in ("cosine", "linear", "constant"):
        assert choice in msg


def test_ppo_literal_choice_error():
    msg = error_of(ppo, "kl.estimator=k4")
    assert "'kl.estimator'" in msg and "k1" in msg and "k3" in msg


def test_int_is_accepted_for_float_and_converted():
    cfg = sft("optim.lr=1", "epochs=2")
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert isinstance(cfg.epochs, float)


def test_section_given_a_scalar_is_an_error():
    msg = error_of(sft, "optim=3")
    assert "'optim'" in msg and "mapping" in msg


def test_required_fields_are_reported():
    assert "model.name_or_path" in error_of(load_config, SFTConfig, None, ["data.train=t"])
    assert "data.train" in error_of(load_config, SFTConfig, None, ["model.name_or_path=m"])
    assert "reward" in error_of(load_config, RLConfig, None, ["model.name_or_path=m", "prompts=p"])


def test_reward_models_and_callable_are_exclusive():
    msg = error_of(ppo, "reward.callable=mod:fn")
    assert "reward.models" in msg and "reward.callable" in msg


@pytest.mark.parametrize("bad", ["abc", [1, 2], 3])
def test_from_dict_rejects_non_mapping_with_config_error(bad):
    with pytest.raises(ConfigError, match="mapping"):
        from_dict(SFTConfig, bad)


# -- batch divisibility -------------------------------------------------------------------
def test_grad_accum_must_divide_batch():
    msg = error_of(sft, "optim.batch_size=10", "optim.grad_accum_steps=3")
    assert "optim.grad_accum_steps" in msg and "optim.batch_size" in msg and "10" in msg
    assert sft("optim.batch_size=12", "optim.grad_accum_steps=3").optim.grad_accum_steps == 3


def test_ppo_minibatch_must_divide_rollout_batch():
    msg = error_of(ppo, "rollout.batch_size=16", "rl.minibatch_size=6")
    assert "rl.minibatch_size" in msg and "rollout.batch_size" in msg and "16" in msg
    assert ppo("rollout.batch_size=16", "rl.minibatch_size=8").rl.minibatch_size == 8


def test_ppo_grad_accum_must_divide_minibatch():
    msg = error_of(ppo, "rollout.batch_size=16", "rl.minibatch_size=8", "rl.grad_accum_steps=3")
    assert "rl.grad_accum_steps" in msg and "rl.minibatch_size" in msg


# -- override parsing and precedence ------------------------------------------------------
def test_parse_override_values():
    assert parse_override("x=[a,b]") == (["x"], ["a", "b"])
    assert parse_override("a.b=null") == (["a", "b"], None)
    assert parse_override("a.b.c=3") == (["a", "b", "c"], 3)
    assert parse_override("a=0.5") == (["a"], 0.5)
    assert parse_override("a=x=y") == (["a"], "x=y")
    assert parse_override("a=") == (["a"], "")
    assert parse_override("a=0\x1f") == (["a"], 0.0)  # a number with a control character Python strips


@pytest.mark.parametrize("text", ["noequals", "=3", "a..b=1", ".a=1", "a.=1"])
def test_parse_override_rejects_malformed(text):
    with pytest.raises(ConfigError):
        parse_override(text)


def test_override_scientific_notation_is_a_float():
    assert parse_override("a.b=1e-4") == (["a", "b"], 1e-4)
    assert sft("optim.lr=1e-4").optim.lr == pytest.approx(1e-4)


def test_override_list_and_null_reach_config():
    cfg = ppo("reward.models=[a,b]", "reward.clip=null", "ppo.value_clip=null", "reference=ref")
    assert cfg.reward.models == ["a", "b"]
    assert cfg.reward.clip is None and cfg.ppo.value_clip is None
    assert cfg.reference == "ref"
    assert ppo("reference=null").reference is None


def test_preset_then_overrides_precedence(tmp_path):
    path = tmp_path / "preset.yaml"
    path.write_text(
        "model: {name_or_path: from_yaml}\ndata: {train: t.jsonl, max_length: 99}\n"
        "optim: {lr: 0.5, batch_size: 8}\n"
    )
    base = load_config(SFTConfig, path)
    assert base.optim.lr == 0.5 and base.data.max_length == 99 and base.model.name_or_path == "from_yaml"
    assert base.optim.weight_decay == 0.0  # untouched default
    cfg = load_config(SFTConfig, path, ["optim.lr=0.25", "model.name_or_path=cli", "optim.lr=0.125"])
    assert cfg.optim.lr == 0.125  # later override wins
    assert cfg.model.name_or_path == "cli"
    assert cfg.optim.batch_size == 8 and cfg.data.max_length == 99  # siblings kept from the YAML


def test_missing_and_invalid_yaml_files(tmp_path):
    assert "does not exist" in error_of(load_config, SFTConfig, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n")
    assert "not valid YAML" in error_of(load_config, SFTConfig, bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    assert "mapping" in error_of(load_config, SFTConfig, lst)


def test_config_is_frozen_and_replace_revalidates():
    cfg = sft()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 3.0  # type: ignore[misc]
    new = replace(cfg, {"optim.lr": 0.01, "run.seed": 5})
    assert new.optim.lr == 0.01 and new.run.seed == 5 and cfg.optim.lr != 0.01
    assert "optim.lr" in error_of(replace, cfg, {"optim.lr": -1.0})
    assert "optim.lrr" in error_of(replace, cfg, {"optim.lrr": 1.0})


def test_save_then_load_round_trips(tmp_path):
    cfg = ppo("reward.models=[a,b]", "kl.controller=adaptive", "rollout.temperature=0.7")
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(RLConfig, tmp_path / "c.yaml") == cfg
    assert to_dict(load_config(RLConfig, tmp_path / "c.yaml")) == to_dict(cfg)


# -- describe / help ----------------------------------------------------------------------
def _leaves(cls, prefix=""):
    out = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if _is_config(hints[f.name]):
            out.extend(_leaves(hints[f.name], prefix + f.name + "."))
        else:
            out.append(prefix + f.name)
    return out


@pytest.mark.parametrize("cls", STAGES, ids=lambda c: c.__name__)
def test_describe_covers_every_leaf_with_help(cls):
    rows = describe(cls)
    keys = [key for key, _, _ in rows]
    assert keys == _leaves(cls)
    assert len(set(keys)) == len(keys)
    missing = [key for key, _, help_text in rows if not help_text.strip()]
    assert missing == []
    # Every key in the description is a settable override (round trip through load_config).
    assert set(_flatten(to_dict(_valid(cls)))) == set(keys)


@pytest.mark.parametrize("cls", STAGES, ids=lambda c: c.__name__)
def test_every_section_has_help(cls):
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if _is_config(hints[f.name]):
            assert f.metadata.get("help", "").strip(), f.name


def test_describe_defaults_are_the_dataclass_defaults():
    rows = {key: default for key, default, _ in describe(RLConfig)}
    assert rows["kl.coef"] == repr(0.05)
    assert rows["reward.models"] == repr([])
    assert rows["ppo.value_clip"] == repr(0.2)


def _valid(cls):
    over = PPO_MIN if cls is RLConfig else SFT_MIN  # the pair stages read data.train as SFT and the RM do
    return load_config(cls, None, over)


def _flatten(d, prefix=""):
    """Dotted keys of a config dict; a mapping-valued option (an empty ``{}``) is a leaf."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, prefix + k + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):  # reward.terms[i].key
            for i, x in enumerate(v):
                out.update(_flatten(x, f"{prefix}{k}[{i}]."))
        else:
            out[prefix + k] = v
    return out


# -- shipped presets ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, cls", [("sft", SFTConfig), ("rm", RewardModelConfig), ("ppo", RLConfig), ("dpo", DPOConfig),
                  ("simpo", SimPOConfig), ("orpo", ORPOConfig), ("kto", KTOConfig), ("genrm", GenRMConfig),
                  ("rloo_objectives", RLConfig), ("ppo_objectives", RLConfig), ("distill", RLConfig)]
)
def test_demo_presets_load(name, cls):
    cfg = load_config(cls, DEMO / f"{name}.yaml")
    assert cfg.run.out.startswith("runs/demo")
    raw = yaml.safe_load((DEMO / f"{name}.yaml").read_text())
    # Every value written in the preset survived into the config.
    flat = _flatten(to_dict(cfg))
    for key, value in _flatten(raw).items():
        assert flat[key] == value, key


def test_reference_ppo_without_required_fields_is_a_clear_error():
    msg = error_of(load_config, RLConfig, REFERENCE_PPO)
    assert "model.name_or_path" in msg and "empty" in msg
    msg = error_of(load_config, RLConfig, REFERENCE_PPO, ["model.name_or_path=sft"])
    assert "reward.models" in msg
    msg = error_of(load_config, RLConfig, REFERENCE_PPO, ["model.name_or_path=sft", "reward.models=[rm]"])
    assert "prompts" in msg


def test_reference_ppo_loads_with_overrides():
    cfg = load_config(RLConfig, REFERENCE_PPO, ["model.name_or_path=sft", "prompts=p", "reward.models=[rm]"])
    assert cfg.kl.coef == 0.05 and cfg.rollout.temperature == 0.7
    assert cfg.rl.minibatch_size == cfg.rollout.batch_size
    assert cfg.reward.models == ["rm"] and cfg.critic.init == "reward"


def test_unknown_key_is_reported_before_bad_values():
    # A typo deep in the tree is named even when an earlier sibling's value is also wrong.
    msg = error_of(load_config, SFTConfig, None, ["optim.lr=-1", "run.seeed=1", *SFT_MIN])
    assert "'run.seeed'" in msg and "'run.seed'" in msg


def test_ratio_tolerance_is_raised_to_bf16_rounding_level_only_under_autocast():
    from tether.config import RLConfig, load_config

    fp32 = load_config(RLConfig, None, [*PPO_MIN, "rl.ratio_tolerance=0.001"])
    bf16 = load_config(RLConfig, None, [*PPO_MIN, "rl.ratio_tolerance=0.001", "run.precision=bf16"])
    loose = load_config(RLConfig, None, [*PPO_MIN, "rl.ratio_tolerance=0.3", "run.precision=bf16"])
    assert fp32.ratio_tolerance == 0.001
    assert bf16.ratio_tolerance == 0.1
    assert loose.ratio_tolerance == 0.3


def test_rebase_paths_makes_existing_relative_inputs_absolute(tmp_path):
    """--resume from another directory: relative inputs are found where the run started."""
    from tether.config import rebase_paths

    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "prompts.jsonl").write_text("{}\n")
    (tmp_path / "rm").mkdir()
    data = {"model": {"name_or_path": "Qwen/Qwen2.5-0.5B"}, "prompts": "task/prompts.jsonl",
            "reward": {"models": ["rm", "missing-rm"], "callable": None},
            "run": {"out": "runs/x"}, "eval": {"prompts": str(tmp_path / "task" / "prompts.jsonl")}}
    out = rebase_paths(RLConfig, data, tmp_path)
    assert out["prompts"] == str(tmp_path / "task" / "prompts.jsonl")
    assert out["reward"]["models"] == [str(tmp_path / "rm"), "missing-rm"]  # missing: left alone
    assert out["model"]["name_or_path"] == "Qwen/Qwen2.5-0.5B"  # a hub id: left alone
    assert out["run"]["out"] == "runs/x"  # not an input path
    assert out["eval"]["prompts"] == data["eval"]["prompts"]  # already absolute
    assert data["prompts"] == "task/prompts.jsonl"  # the input dict is not changed


def test_moved_keys_keep_working_with_a_notice(caplog):
    """Keys that moved (CPU speedups into cpu:, bf16 into run.precision) still work."""
    base = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]"]
    with caplog.at_level("WARNING", logger="tether.config"):
        cfg = load_config(RLConfig, None, [*base, "ppo.autocast=bf16", "ppo.linear_backend=aten",
                                            "ppo.parallel_roles=false", "run.retain_memory=false",
                                            "ppo.balance_roles=false"])
    assert cfg.run.precision == "bf16" and cfg.cpu.linear_backend == "aten"
    assert cfg.cpu.parallel_roles is False and cfg.cpu.retain_memory is False
    assert "'ppo.autocast' is now 'run.precision'" in caplog.text
    assert "'ppo.balance_roles' was removed" in caplog.text
    assert load_config(RLConfig, None, [*base, "ppo.autocast=none"]).run.precision == "fp32"
    with pytest.raises(ConfigError, match="'ppo.autocast' \\(now 'run.precision'\\) = 'fp16'"):
        load_config(RLConfig, None, [*base, "ppo.autocast=fp16"])
    with pytest.raises(ConfigError, match="moved to 'cpu.linear_backend', and both are given"):
        load_config(RLConfig, None, [*base, "ppo.linear_backend=aten", "cpu.linear_backend=onednn"])
    sft = load_config(SFTConfig, None, ["model.name_or_path=m", "data.train=t.jsonl", "run.retain_memory=false"])
    assert sft.cpu.retain_memory is False


def test_moved_rl_optimiser_keys_keep_working_with_a_notice(caplog):
    """The actor's and the critic's optimiser settings moved into optimiser blocks (optim:, critic.optim:):
    the old keys set the same values, a ppo.* key that set both models sets both (the actor's only
    under an algorithm without a critic, whose critic.* keys would be refused)."""
    with caplog.at_level("WARNING", logger="tether.config"):
        cfg = ppo("ppo.actor_lr=2e-5", "critic.lr=3e-5", "ppo.warmup_steps=7", "ppo.max_grad_norm=0.5",
                  "ppo.weight_decay=0.1")
    assert cfg.optim.lr == 2e-5 and cfg.critic.optim.lr == 3e-5
    assert cfg.optim.warmup_steps == 7 and cfg.critic.optim.warmup_steps == 7
    assert cfg.optim.max_grad_norm == 0.5 and cfg.critic.optim.max_grad_norm == 0.5
    assert cfg.optim.weight_decay == 0.1 and cfg.critic.optim.weight_decay == 0.1
    assert "'ppo.actor_lr' is now 'optim.lr'" in caplog.text
    assert "'ppo.warmup_steps' is now 'optim.warmup_steps' and 'critic.optim.warmup_steps'" in caplog.text
    grpo = ppo("algorithm=grpo", "ppo.warmup_steps=7")
    assert grpo.optim.warmup_steps == 7 and grpo.critic.optim.warmup_steps == ppo().critic.optim.warmup_steps


def test_moved_rl_optimiser_keys_under_a_shared_trunk_set_the_actors_only():
    """A shared-trunk critic is stepped by the actor's optimiser (its critic.optim.* keys but lr are
    refused): ppo.max_grad_norm=null, which set both models', sets the actor's only."""
    cfg = ppo("critic.shared_trunk=true", "ppo.max_grad_norm=null", "ppo.warmup_steps=3")
    assert cfg.optim.max_grad_norm is None and cfg.optim.warmup_steps == 3
    assert cfg.critic.optim.max_grad_norm == ppo().critic.optim.max_grad_norm


def test_moved_ray_role_keys_keep_working_with_a_notice(caplog):
    """A role's Ray resources moved under placement.ray.roles: placement.ray.actor.num_workers=2
    still sets placement.ray.roles.actor.num_workers."""
    with caplog.at_level("WARNING", logger="tether.config"):
        cfg = ppo("placement.backend=ray", "placement.ray.actor.num_workers=2")
    assert cfg.placement.ray.roles == {"actor": {"num_workers": 2}}
    assert cfg.placement.ray.resources("actor").num_workers == 2
    assert "'placement.ray.actor.num_workers' is now 'placement.ray.roles.actor.num_workers'" in caplog.text


def test_device_and_precision_are_validated():
    base = ["model.name_or_path=m", "data.train=t.jsonl"]
    assert load_config(SFTConfig, None, [*base, "run.device=cuda:1", "run.precision=fp16"]).run.device == "cuda:1"
    with pytest.raises(ConfigError, match="run.device"):
        load_config(SFTConfig, None, [*base, "run.device=gpu0"])
    with pytest.raises(ConfigError, match="run.precision"):
        load_config(SFTConfig, None, [*base, "run.precision=int8"])


def test_engine_logprobs_belong_to_vllm_without_filters():
    assert ppo("rollout.engine=vllm", "rollout.use_engine_logprobs=true").rollout.use_engine_logprobs
    with pytest.raises(ConfigError, match="rollout.use_engine_logprobs.*rollout.engine='lean'.*capture_logprobs"):
        ppo("rollout.use_engine_logprobs=true")
    for flt in ("rollout.top_k=5", "rollout.top_p=0.9"):
        with pytest.raises(ConfigError, match="filtered distribution"):
            ppo("rollout.engine=vllm", "rollout.use_engine_logprobs=true", flt)


def test_the_loop_keys_moved_from_ppo_to_rl_keep_working_with_a_notice(caplog, tmp_path):
    """The keys every RL algorithm reads moved from ppo: to rl:; ppo.KEY still sets rl.KEY from the
    command line, a preset and the Python API, with one notice per key. PPO's own keys stay."""
    from tether.api import resolve_config

    base = ["model.name_or_path=m", "prompts=p.jsonl", "reward.models=[r]"]
    with caplog.at_level("WARNING", logger="tether.config"):
        cfg = load_config(RLConfig, None, [*base, "ppo.iterations=3", "ppo.epochs=2", "ppo.clip=0.1",
                                           "ppo.vf_coef=0.3"])
    assert (cfg.rl.iterations, cfg.rl.epochs, cfg.rl.clip, cfg.ppo.vf_coef) == (3, 2, 0.1, 0.3)
    assert "config key 'ppo.iterations' is now 'rl.iterations' (set to 3)." in caplog.text
    assert "'ppo.vf_coef'" not in caplog.text
    preset = tmp_path / "grpo.yaml"
    preset.write_text("algorithm: grpo\nppo:\n  iterations: 5\n  minibatch_size: 16\n  gamma: 1.0\n")
    grpo = load_config(RLConfig, preset, base)
    assert (grpo.rl.iterations, grpo.rl.minibatch_size) == (5, 16)
    api = resolve_config(RLConfig, {"model.name_or_path": "m", "prompts": "p.jsonl", "reward.models": ["r"],
                                    "ppo.iterations": 4, "ppo": {"epochs": 1}})
    assert (api.rl.iterations, api.rl.epochs) == (4, 1)
    # An override wins over a preset's (or a config object's) other spelling of its key; one file, or
    # the overrides, giving both spellings is an error.
    assert load_config(RLConfig, preset, [*base, "rl.iterations=7"]).rl.iterations == 7
    assert load_config(RLConfig, DEMO / "grpo.yaml", [*base, "ppo.iterations=3"]).rl.iterations == 3
    assert resolve_config(RLConfig, api, {"ppo.iterations": 2}).rl.iterations == 2
    assert replace(api, {"ppo.epochs": 3}).rl.epochs == 3
    with pytest.raises(ConfigError, match="'ppo.iterations' moved to 'rl.iterations', and both are given"):
        load_config(RLConfig, preset, [*base, "ppo.iterations=3", "rl.iterations=4"])
    preset.write_text("ppo:\n  iterations: 5\nrl:\n  iterations: 4\n")
    with pytest.raises(ConfigError, match="'ppo.iterations' moved to 'rl.iterations', and both are given"):
        load_config(RLConfig, preset, base)
    # A moved key's inert check names its new home.
    with pytest.raises(ConfigError, match="Config key 'rl.gamma' = 0.9 is set with algorithm=grpo"):
        load_config(RLConfig, None, [*base, "algorithm=grpo", "ppo.gamma=0.9"])
