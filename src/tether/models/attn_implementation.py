"""``model.attn_implementation``: the attention every model of a stage runs, checked before any
weight is read.

transformers picks the attention kernel when a model is built (``attn_implementation`` of
``from_pretrained``). Its own failures come late or not at all: flash-attention without the
``flash_attn`` package falls back to a hub download when the ``kernels`` package is there, an
fp32 model under flash-attention fails at its first forward, and a model class without an
implementation is a ValueError deep in loading. So tether checks the choice itself, each check
where its facts are known: the package and the device with the stage's engine settings
(:func:`check_attention`, before inputs are read), the model class with the checkpoint's config
(:func:`resolve`, before its weights); a ValueError transformers still raises at load is
reworded by :func:`load_error`. Each is one paragraph naming the key.

A model class declaring an implementation does not mean the device has its kernels: flex_attention
runs forward on a CPU but has no CPU backward in torch 2.13, so a trained model would fail at its
first update, minutes in. :data:`DEVICE_GAPS` lists such gaps, one row per implementation, and
:func:`check_attention` refuses each where it applies; a gap only the backward has (flex on a CPU)
is asked of torch itself, so a torch that gains the kernel passes without a change here.
"""

from __future__ import annotations

import functools
import importlib.util
import logging

from tether.common.errors import ConfigError

log = logging.getLogger(__name__)

KEY = "model.attn_implementation"
CHOICES = ("sdpa", "eager", "flash_attention_2", "flex_attention")
#: The class attribute by which a transformers model declares each implementation (eager: all do).
_SUPPORT_FLAGS = {"sdpa": "_supports_sdpa", "flash_attention_2": "_supports_flash_attn",
                  "flex_attention": "_supports_flex_attn"}


def flex_attention_available() -> bool:
    """This torch has ``torch.nn.attention.flex_attention`` (torch >= 2.5)."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def package_installed(package: str) -> bool:
    """``package`` can be imported here (found without importing it)."""
    return importlib.util.find_spec(package) is not None


def check_installed(name: str, key: str = KEY) -> None:
    """The package ``name`` runs on is importable: ``flash_attn`` for flash_attention_2, a torch
    with flex_attention for flex_attention (sdpa and eager need nothing beyond torch)."""
    if name == "flash_attention_2" and not package_installed("flash_attn"):
        raise ConfigError(
            f"Config key '{key}' = 'flash_attention_2', but the flash_attn package is not installed in this "
            "environment. Install it on a CUDA machine (pip install flash-attn --no-build-isolation), or choose "
            f"{key}=sdpa (the default, also fast on GPUs) or eager."
        )
    if name == "flex_attention" and not flex_attention_available():
        import torch

        raise ConfigError(
            f"Config key '{key}' = 'flex_attention', but this torch ({torch.__version__}) has no "
            "torch.nn.attention.flex_attention (it needs torch 2.5 or newer). Upgrade torch, or choose "
            f"{key}=sdpa (the default) or eager."
        )


@functools.lru_cache(maxsize=None)
def flex_backward_missing(device_type: str) -> str | None:
    """torch's own words when FlexAttention has no backward on ``device_type``, else None. Asked
    of torch with one tiny backward, on a CPU only (milliseconds there; a GPU's kernels are compiled
    on first use, and CUDA has the backward)."""
    if device_type != "cpu" or not flex_attention_available():
        return None
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.zeros(1, 1, 16, 16, requires_grad=True)
    try:
        flex_attention(q, q, q).sum().backward()
    except NotImplementedError as err:
        return str(err)
    return None


def _flash_off_cuda(device) -> str | None:
    return "flash-attention runs on CUDA GPUs only" if device.type != "cuda" else None


def _flex_no_backward(device) -> str | None:
    import torch

    missing = flex_backward_missing(device.type)
    return None if missing is None else (
        f"this torch ({torch.__version__}) has no FlexAttention backward on a {device.type.upper()} "
        f"(torch: {missing.rstrip('.')}), and a run trains its model")


#: Where a choice cannot run although model classes declare it, one row per gap:
#: (implementation, whether only a trained model hits it, the gap on a device: its reason or None).
#: sdpa and eager have a forward and a backward on every device torch runs on: no row.
DEVICE_GAPS = (
    ("flash_attention_2", False, _flash_off_cuda),
    ("flex_attention", True, _flex_no_backward),
)


def check_device(name: str, device, trained: bool = True, key: str = KEY) -> None:
    """``name`` has the kernels ``device`` needs (:data:`DEVICE_GAPS`); ``trained``: a model of the
    stage is updated, so its backward must run there too."""
    for implementation, backward_only, gap in DEVICE_GAPS:
        if implementation != name or (backward_only and not trained):
            continue
        reason = gap(device)
        if reason:
            raise ConfigError(
                f"Config key '{key}' = {name!r} with the stage on {device} (run.device): {reason}. Run on a "
                f"GPU (run.device=cuda), or choose {key}=sdpa (the default) or eager."
            )


def check_attention(name: str, device, dtype: str = "float32", precision: str = "fp32", key: str = KEY,
                    trained: bool = True) -> None:
    """``name`` can run here: its package is installed (:func:`check_installed`), ``device`` has its
    kernels (:func:`check_device`; ``trained``: the backward's too) and, for flash_attention_2, the
    stage runs in half precision (flash-attention computes in fp16/bf16 only: ``model.dtype``
    bfloat16/float16 or ``run.precision`` bf16/fp16). ``device``: the stage's resolved ``torch.device``."""
    if name not in CHOICES:
        raise ConfigError(f"Config key '{key}' = {name!r}: expected one of {', '.join(CHOICES)}.")
    check_installed(name, key)
    check_device(name, device, trained, key)
    if name != "flash_attention_2":
        return
    if dtype == "float32" and precision == "fp32":
        raise ConfigError(
            f"Config key '{key}' = 'flash_attention_2' with model.dtype = float32 and run.precision = fp32: "
            "flash-attention computes in fp16/bf16 only. Set run.precision=bf16 (fp32 master weights, "
            f"bf16 autocast) or model.dtype=bfloat16, or choose {key}=sdpa."
        )


def supported(model_class) -> list[str]:
    """The implementations (of :data:`CHOICES`) ``model_class`` declares, eager first."""
    return ["eager", *(name for name, flag in _SUPPORT_FLAGS.items() if getattr(model_class, flag, False))]


def model_class(auto_class, config):
    """The class ``auto_class`` (``AutoModelForCausalLM``, ...) builds for ``config``, or None
    when it is not in transformers' table (custom code: known only once its code is imported)."""
    try:
        return auto_class._model_mapping[type(config)]
    except (KeyError, AttributeError):
        return None


def resolve(name: str, cls, named: str, key: str = KEY) -> str | None:
    """The implementation to pass to ``from_pretrained`` for a model of class ``cls``: ``name``
    when the class declares it; one it does not is a ConfigError naming ``key``, the model
    (``named``) and what the class supports. sdpa, the default, is the exception: a class
    without it runs eager, as transformers' own default does, said on stderr. ``cls`` None (a
    class known only once custom code is imported): ``name`` as asked, transformers checking it
    at load, and None for sdpa (transformers' default: sdpa, else eager)."""
    check_installed(name, key)
    if cls is None:  # custom code: transformers checks at load (sdpa: None, its default, eager without it)
        return None if name == "sdpa" else name
    have = supported(cls)
    if name in have:
        return name
    if name == "sdpa":
        log.warning("%s has no sdpa attention (%s): it runs eager attention.", named, cls.__name__)
        return "eager"
    raise unsupported(name, named, cls.__name__, have, key)


def unsupported(name: str, named: str, class_name: str | None, have: list[str] | None, key: str = KEY,
                reason: str = "") -> ConfigError:
    """The error for ``name`` on a model whose class does not support it (``have``: what the
    class supports, when known; ``reason``: transformers' own words, when the class is not)."""
    what = f", a {class_name}," if class_name else ""
    options = f"; it supports {', '.join(have)}. Set {key} to one of those" if have else \
        f"{f' (transformers: {reason})' if reason else ''}. Set {key} to another (sdpa or eager)"
    return ConfigError(
        f"Config key '{key}' = {name!r}: the model {named}{what} does not support this attention "
        f"implementation{options}."
    )


def load_error(err: Exception, name: str, named: str, cls, key: str = KEY) -> ConfigError | None:
    """``err`` from ``from_pretrained`` reworded when it is about the attention implementation
    (transformers raises a ValueError or an ImportError naming it), else None."""
    from tether.common.errors import one_line

    text = str(err)
    if name == "sdpa":  # the default never fails at load for its attention (a class without it runs eager)
        return None
    if not isinstance(err, (ValueError, ImportError)) or not ("attention" in text.lower() or "attn_" in text):
        return None
    if cls is not None:
        return unsupported(name, named, cls.__name__, supported(cls), key)
    return unsupported(name, named, None, None, key, one_line(text, 300).rstrip("."))
