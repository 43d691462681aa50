"""How a role method is dispatched when its role runs on several workers: the one declaration
every placement reads (:mod:`tether.placement.data_parallel`, :mod:`tether.placement.ray_placement`).

A method says what its batch is, with a decorator on its definition:

- ``@rows``: the first argument is a batch of rows (a :class:`~tether.types.Rollout`, or
  anything :func:`tether.distributed.shard.shard_rows` splits); each worker gets its share of
  the rows and the results are joined back in row order (log-probs, values, scores);
- ``@prompts``: the first two arguments are the prompts (token ids and texts) of a generation
  call; each worker samples its share, with its own random stream, inside the trained model's
  gathered weights, and the rollouts are joined in order (:func:`tether.rollout.base.concat_rollouts`:
  every per-row field, an episode's ``action_mask``, ``token_rewards`` and ``episodes`` included);
- ``@asks``: a generation call answered later (a sampling worker's request): the prompts (first
  two arguments) are split as for ``@prompts``, each worker keeping its own random stream, and
  nothing comes back;
- ``@answers``: what an ``@asks`` call sampled: each worker returns its share and the shares are
  joined in order;
- no decorator (:data:`ALL`): the call goes to every worker with the same arguments and the
  first worker's answer is returned (updates, checkpoints, state: data-parallel engines agree).

The prompts of a ``@prompts`` or ``@asks`` call may come with **prompt-aligned keyword
arguments** (:data:`PROMPT_ALIGNED`: a list with one entry per prompt, as an episode engine's
prompt ``rows``): every placement splits them with the prompts, each worker getting the entries
of its own share, through the one function :func:`split_prompts`. Any other argument goes whole
to every worker.

The declaration lives on the method, not in a placement's table, so a new role method that
reads rows is split by every placement without touching placement code. This module imports
nothing: generation engines (below roles in the layer order) and roles both use it.
"""

from __future__ import annotations

from collections.abc import Callable

ROWS, PROMPTS, ASKS, ANSWERS, ALL = "rows", "prompts", "asks", "answers", "all"
KINDS = (ROWS, PROMPTS, ASKS, ANSWERS, ALL)
ATTRIBUTE = "__tether_dispatch__"


def _declare(kind: str) -> Callable:
    def mark(fn: Callable) -> Callable:
        setattr(fn, ATTRIBUTE, kind)
        return fn

    mark.__name__ = kind
    return mark


#: Split by rows (first argument), results joined in row order.
rows = _declare(ROWS)
#: A generation call: the prompts (first two arguments) split, the rollouts joined.
prompts = _declare(PROMPTS)
#: A generation call answered later: the prompts (first two arguments) split, nothing returned.
asks = _declare(ASKS)
#: The answer to an ``@asks`` call: each worker's share, joined in order.
answers = _declare(ANSWERS)


#: Keyword arguments of a ``@prompts`` or ``@asks`` call that hold one entry per prompt: split with the
#: prompts (an episode engine's prompt ``rows``: each episode starts from its own row).
PROMPT_ALIGNED = ("rows",)


def split_prompts(share: Callable[[list], list], prompt_ids: list, prompts: list,
                  kwargs: dict) -> tuple[list, list, dict]:
    """A worker's share of a ``@prompts`` or ``@asks`` call: ``share`` (a function from a list with
    one entry per prompt to this worker's entries) applied to the prompt ids, the texts and every
    prompt-aligned keyword argument given (:data:`PROMPT_ALIGNED`; None is left alone); the other
    keyword arguments as they are. A prompt-aligned list of another length is refused."""
    out = dict(kwargs)
    for key in PROMPT_ALIGNED:
        value = kwargs.get(key)
        if value is None:
            continue
        if len(value) != len(prompt_ids):
            raise ValueError(f"{key}= holds {len(value)} entries for {len(prompt_ids)} prompts: a prompt-aligned "
                             "argument needs one per prompt")
        out[key] = share(list(value))
    return share(prompt_ids), share(prompts), out


def dispatch_of(target: object, method: str) -> str:
    """The declared dispatch of ``target.method``: :data:`ROWS`, :data:`PROMPTS` or :data:`ALL`
    (no declaration, or no such method)."""
    fn = getattr(type(target), method, None)
    if fn is None:
        fn = getattr(target, method, None)
    fn = getattr(fn, "__func__", fn)  # a classmethod or a bound method: the function's mark
    return getattr(fn, ATTRIBUTE, ALL)


def declarations(roles: dict[str, object]) -> dict[str, dict[str, str]]:
    """Role name -> {method: kind} for every declared public method of each role (methods that
    go to every worker are left out): what a Ray worker reports to its driver, which holds no
    role objects."""
    out: dict[str, dict[str, str]] = {}
    for name, target in roles.items():
        declared = {}
        for attr in dir(type(target)):
            if attr.startswith("_"):
                continue
            kind = dispatch_of(target, attr)
            if kind != ALL:
                declared[attr] = kind
        out[name] = declared
    return out
